"""Where a dataset reads from, when it says so (for the storage probe)."""

from __future__ import annotations

import os

_ROOT_ATTRS = ("root", "root_dir", "data_dir", "data_root", "dataset_dir", "path", "data_path",
               "img_dir", "image_dir", "images_dir", "directory", "folder")


def dataset_root(dataset: object, depth: int = 0) -> str | None:
    """Where a dataset reads from, when it says so in a plain attribute (never a property)."""
    if dataset is None or depth > 3:
        return None
    try:
        attrs = vars(dataset)
    except TypeError:
        return None
    for name in _ROOT_ATTRS:
        value = attrs.get(name)
        if isinstance(value, (str, os.PathLike)):
            path = os.fspath(value)
            if path and os.path.exists(path):
                return os.path.abspath(path)
    for name in ("files", "paths", "file_list", "samples", "imgs"):
        value = attrs.get(name)
        if isinstance(value, (list, tuple)) and value:
            first = value[0]
            if isinstance(first, (tuple, list)) and first:
                first = first[0]
            if isinstance(first, (str, os.PathLike)):
                path = os.fspath(first)
                if os.path.exists(path):
                    return os.path.dirname(os.path.abspath(path))
    for name in ("dataset", "datasets"):  # Subset, ConcatDataset, wrappers
        inner = attrs.get(name)
        if isinstance(inner, (list, tuple)):
            inner = inner[0] if inner else None
        root = dataset_root(inner, depth + 1)
        if root:
            return root
    return None
