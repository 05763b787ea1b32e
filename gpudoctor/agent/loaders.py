"""The DataLoaders the agent has seen: an id each, described once (a "loader" event).

A loader is registered when torch creates an iterator over it (the patched
``_BaseDataLoaderIter.__init__``), or adopted at the next batch of an iterator created
before the hooks were installed (a watch started after the loop's ``iter(loader)``:
Lightning's fetcher creates its iterator, and prefetches from it, before
``on_train_start``). An adopted iterator holds no reference to its DataLoader: it is
described from the settings it copied, and its batches count from there. Workers it
started earlier run without the hooks: their per-batch cost is not measured.
"""

from __future__ import annotations

import os
import types
import weakref

from .datasets import dataset_root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .protocol import LoaderDescription
    from .torch_hooks import TorchHooks


class LoaderRegistry:
    def __init__(self, hooks: TorchHooks) -> None:
        self.hooks = hooks
        self.ids: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()  # loader -> id
        # datasets of adopted iterators: a later iterator over the same dataset reuses the id
        self.adopted: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
        self.token = object()  # marks the iterators registered here (not an earlier watch's)
        self.next = 0

    def register(self, it: Any, loader: object) -> None:
        """An iterator torch just created over `loader`."""
        loader_id = self.ids.get(loader)
        if loader_id is None:
            loader_id = self._adopted_id(getattr(loader, "dataset", None))
            if loader_id is None:
                loader_id = self._new(loader)
            self.ids[loader] = loader_id
        self._mark(it, loader_id)

    def adopt(self, it: Any) -> None:
        """An iterator created before the hooks, at its next batch."""
        dataset = getattr(it, "_dataset", None)
        loader_id = self._adopted_id(dataset)
        if loader_id is None:
            sampler = getattr(it, "_index_sampler", None)
            settings = types.SimpleNamespace(
                dataset=dataset, num_workers=getattr(it, "_num_workers", None), batch_sampler=sampler,
                batch_size=getattr(sampler, "batch_size", None), pin_memory=getattr(it, "_pin_memory", None),
                persistent_workers=getattr(it, "_persistent_workers", None),
                prefetch_factor=getattr(it, "_prefetch_factor", None))
            loader_id = self._new(settings)
            try:
                if dataset is not None:
                    self.adopted[dataset] = loader_id
            except TypeError:  # a dataset without weak references: its next iterator is a new loader
                pass
        self._mark(it, loader_id)

    def send_workers(self, it: Any, loader_id: str) -> None:
        """Worker pids, sent at the first batch (the subclass starts workers after our hook)."""
        it._gpudoctor_workers_sent = True
        pids = [w.pid for w in getattr(it, "_workers", None) or () if getattr(w, "pid", None)]
        if pids:
            self.hooks.agent.emit("loader_workers", id=loader_id, pids=pids)

    def _adopted_id(self, dataset: object) -> str | None:
        try:
            return self.adopted.get(dataset) if dataset is not None else None
        except TypeError:  # not weakly referenceable: never adopted
            return None

    def _new(self, loader: object) -> str:
        loader_id = "%d:%d" % (os.getpid(), self.next)
        self.next += 1
        self.hooks.agent.emit("loader", id=loader_id, **describe(loader))
        return loader_id

    def _mark(self, it: Any, loader_id: str) -> None:
        it._gpudoctor_id = loader_id
        it._gpudoctor_owner = self.token
        it._gpudoctor_workers_sent = False
        epochs = self.hooks.loader_epochs
        epochs[loader_id] = epochs.get(loader_id, 0) + 1


def describe(loader: object) -> LoaderDescription:
    """What the "loader" event says of a DataLoader (or of the settings an iterator copied)."""
    dataset = getattr(loader, "dataset", None)
    info: LoaderDescription = {
        "num_workers": getattr(loader, "num_workers", None),
        "batch_size": getattr(loader, "batch_size", None),
        "pin_memory": getattr(loader, "pin_memory", None),
        "persistent_workers": getattr(loader, "persistent_workers", None),
        "prefetch_factor": getattr(loader, "prefetch_factor", None),
        "dataset_class": (type(dataset).__module__ + "." + type(dataset).__qualname__
                          if dataset is not None else None),
        "iterable": False,
        "dataset_len": None,
        "dataset_root": None,
    }
    try:
        from torch.utils.data import IterableDataset

        info["iterable"] = isinstance(dataset, IterableDataset)
    except Exception:  # noqa: BLE001 (a torch without it: not known if iterable)
        pass
    if info["batch_size"] is None:
        sampler = getattr(loader, "batch_sampler", None)
        info["batch_size"] = getattr(sampler, "batch_size", None)
    if not info["iterable"] and dataset is not None:  # len(None) would only raise, caught below
        try:
            info["dataset_len"] = len(dataset)
        except Exception:  # noqa: BLE001 (a dataset's __len__ is user code and may raise anything)
            pass
    info["dataset_root"] = dataset_root(dataset)
    return info
