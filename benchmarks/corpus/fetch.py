"""Materialise the corpus's public scripts from local git mirrors, and generate the data they read.

    python benchmarks/corpus/fetch.py --mirrors DIR          # sources, then data
    python benchmarks/corpus/fetch.py --mirrors DIR --no-data  # sources only (small: carry them)
    python benchmarks/corpus/fetch.py --data-only              # data only (where the sources already are)

DIR holds one git repository (bare or not) per public repository of the manifest, found as
``DIR/owner+name/repo``, ``DIR/owner+name``, ``DIR/owner+name.git``, ``DIR/owner/name`` or
``DIR/name``; no network is used. Each workload's files are taken at its pinned commit
(``git archive``) into ``benchmarks/corpus/.public/owner+name/`` (ignored by git; ``--out``
to put them elsewhere), with ``.source.json`` saying which commit. The data are generated,
never downloaded: random MNIST files in the layout torchvision reads, a JPEG ImageFolder,
nanoGPT's token files, and text in wikitext-2's layout (word_language_model reads it with
``--data``; the Lightning demo finds it where it would have downloaded wikitext-2).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from manifest import PUBLIC, WORKLOADS, Source


def find_mirror(mirrors: Path, repo: str) -> Path | None:
    owner, name = repo.split("/")
    for candidate in (mirrors / f"{owner}+{name}" / "repo", mirrors / f"{owner}+{name}",
                      mirrors / f"{owner}+{name}.git", mirrors / owner / name, mirrors / name):
        if candidate.is_dir() and _git(candidate, "rev-parse", "--git-dir").returncode == 0:
            return candidate
    return None


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True)


def materialise(source: Source, mirror: Path, out: Path) -> list[str]:
    """The source's paths at its commit, extracted under OUT/<folder>/; the paths that were missing."""
    target = out / source.folder
    target.mkdir(parents=True, exist_ok=True)
    missing = []
    for path in source.paths:
        archive = _git(mirror, "archive", "--format=tar", source.commit, "--", path)
        if archive.returncode != 0:
            missing.append(f"{path}: {archive.stderr.decode(errors='replace').strip()}")
            continue
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            try:
                tar.extractall(target, filter="data")
            except TypeError:  # a Python without extraction filters (before 3.10.12): git's own archive
                tar.extractall(target)
    record = target / ".source.json"
    known = json.loads(record.read_text()) if record.exists() else {"repo": source.repo, "commit": source.commit,
                                                                    "paths": []}
    known["paths"] = sorted(set(known["paths"]) | set(source.paths))
    record.write_text(json.dumps(known, indent=1))
    return missing


def _mnist(raw: Path) -> None:
    import numpy as np

    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, count in (("train", 60000), ("t10k", 10000)):
        images, labels = raw / f"{prefix}-images-idx3-ubyte", raw / f"{prefix}-labels-idx1-ubyte"
        if images.exists() and labels.exists():
            continue
        images.write_bytes(struct.pack(">IIII", 2051, count, 28, 28) +
                           rng.integers(0, 256, (count, 28, 28), dtype=np.uint8).tobytes())
        labels.write_bytes(struct.pack(">II", 2049, count) + rng.integers(0, 10, count, dtype=np.uint8).tobytes())


def mnist(public: Path) -> None:
    _mnist(public / "pytorch+examples" / "data" / "MNIST" / "raw")  # the examples read ../data


def mnist_lightning(public: Path) -> None:
    _mnist(public / "Lightning-AI+pytorch-lightning" / "Datasets" / "MNIST" / "raw")


def _jpegs(folder: Path, stem: str, count: int, rng: Any) -> list[Path]:
    """COUNT smooth random 500x375 JPEGs (a 24x32 noise image upscaled), FOLDER/STEM_i.jpg."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        small = rng.integers(0, 256, (24, 32, 3), dtype="uint8")
        path = folder / f"{stem}_{i}.jpg"
        Image.fromarray(small).resize((500, 375), Image.Resampling.BICUBIC).save(path, quality=90)
        paths.append(path)
    return paths


def _link(original: Path, link: Path) -> None:
    if not link.exists():
        try:
            os.link(original, link)
        except OSError:
            shutil.copy(original, link)


def imagefolder(public: Path, classes: int = 10, unique: int = 100, train: int = 1000, val: int = 20) -> None:
    """A JPEG ImageFolder (train/ and val/): smooth random 500x375 images; each unique one hard-linked many times."""
    import numpy as np

    root = public / "_data" / "imagefolder"
    if (root / "done").exists():
        return
    rng = np.random.default_rng(0)
    for k in range(classes):
        originals = _jpegs(root / "originals", f"class{k}", unique, rng)
        for split, count in (("train", train), ("val", val)):
            folder = root / split / f"class{k}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                _link(originals[i % unique], folder / f"img{i}.jpg")
    (root / "done").write_text("")


def pets(public: Path, labels: int = 37, per_label: int = 200, unique: int = 20) -> None:
    """Oxford-IIIT Pet's layout for accelerate's cv_example.py: one folder of LABEL_N.jpg (37 labels, 7,400
    images, as many as the real set), and, in a Hugging Face cache beside it, random weights where
    timm would download resnet50d's pretrained ones (the script asks for them; the machine is offline)."""
    import numpy as np

    root = public / "_data" / "pets"
    if not (root / "done").exists():
        rng = np.random.default_rng(0)
        originals = _jpegs(root / "originals", "original", unique, rng)
        (root / "images").mkdir(parents=True, exist_ok=True)
        for k in range(labels):
            for i in range(per_label):
                _link(originals[(k + i) % unique], root / "images" / f"breed{k}_{i}.jpg")
        (root / "done").write_text("")
    _timm_weights(public / "_data" / "hf", "resnet50d")


def _timm_weights(hf_home: Path, architecture: str) -> None:
    """An architecture's weights in the Hugging Face hub cache's layout (refs/main ->
    snapshots/REV/model.safetensors) under the hub id its default pretrained tag names, so that timm's
    `pretrained=True` finds them offline (HF_HUB_OFFLINE=1, HF_HOME=hf_home); the weights are the
    architecture's random initial ones: the corpus times steps, not accuracy."""
    import timm  # on the GPU machine (where the corpus runs); the CPU tests never build this
    from safetensors.torch import save_file

    model = timm.create_model(architecture, pretrained=False)
    repo = (getattr(model, "pretrained_cfg", None) or {}).get("hf_hub_id") or f"timm/{architecture}"
    owner, name = repo.split("/")
    cache = hf_home / "hub" / f"models--{owner}--{name}"
    revision = "0" * 40
    target = cache / "snapshots" / revision / "model.safetensors"
    ref = cache / "refs" / "main"
    if target.exists() and ref.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(partial))
    partial.replace(target)  # whole or absent: an interrupted run writes it again
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(revision)


def nanogpt(public: Path, tokens: int = 2_000_000) -> None:
    import numpy as np

    folder = public / "karpathy+nanoGPT" / "data" / "shakespeare_char"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, count in (("train.bin", tokens), ("val.bin", tokens // 10)):
        if not (folder / name).exists():
            rng.integers(0, 65, count, dtype=np.uint16).tofile(folder / name)
    chars = [chr(32 + i) for i in range(65)]
    with open(folder / "meta.pkl", "wb") as fh:
        pickle.dump({"vocab_size": 65, "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}},
                    fh)


def text(public: Path, tokens: int = 2_000_000, vocabulary: int = 30000) -> None:
    """Generated text in the layout of wikitext-2 (train.txt, valid.txt, test.txt): Zipf-distributed random words."""
    import numpy as np

    folder = public / "_data" / "text"
    if (folder / "test.txt").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, int(n))) for n in rng.integers(2, 10, vocabulary)]
    for name, count in (("train.txt", tokens), ("valid.txt", tokens // 10), ("test.txt", tokens // 10)):
        ids = np.minimum(rng.zipf(1.2, count), vocabulary) - 1
        lines = [" ".join(words[i] for i in ids[start:start + 20]) for start in range(0, count, 20)]
        (folder / name).write_text("\n".join(lines) + "\n")


def wikitext_lightning(public: Path) -> None:
    """The generated text where lightning.pytorch.demos.WikiText2 would download wikitext-2 (./data)."""
    text(public)
    target = public / "Lightning-AI+pytorch-lightning" / "examples" / "fabric" / "language_model" / "data"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(public / "_data" / "text" / "train.txt", target / "wikitext-2.txt")


GENERATORS: dict[str, Callable[[Path], None]] = {
    "mnist": mnist,
    "mnist-lightning": mnist_lightning,
    "imagefolder": imagefolder,
    "nanogpt": nanogpt,
    "pets": pets,
    "text": text,
    "wikitext-lightning": wikitext_lightning,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mirrors", type=Path, help="folder of local git mirrors of the public repositories")
    parser.add_argument("--out", type=Path, default=PUBLIC, help="where the sources go (default: %(default)s)")
    parser.add_argument("--only", help="comma-separated workload names (default: every public workload)")
    parser.add_argument("--no-data", action="store_true", help="sources only")
    parser.add_argument("--data-only", action="store_true", help="data only")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    workloads = [w for w in WORKLOADS if only is None or w.name in only]
    problems = []
    if not args.data_only:
        if args.mirrors is None:
            parser.error("--mirrors is required unless --data-only")
        for workload in workloads:
            if workload.source is None:
                continue
            mirror = find_mirror(args.mirrors, workload.source.repo)
            if mirror is None:
                problems.append(f"{workload.name}: no mirror of {workload.source.repo} under {args.mirrors}")
                continue
            problems += [f"{workload.name}: {m}" for m in materialise(workload.source, mirror, args.out)]
    if not args.no_data:
        for name in sorted({d for w in workloads for d in w.data}):
            try:
                GENERATORS[name](args.out)
            except (OSError, ImportError) as exc:
                problems.append(f"data {name}: {exc}")
    for problem in problems:
        print(f"fetch: {problem}", file=sys.stderr)
    print(f"fetch: {len(workloads)} workloads, sources and data under {args.out}; {len(problems)} problem(s)",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
