"""The accuracy corpus of issue 25: workloads, the remedies applied to them by hand, the causes they target.

Every workload is a command run twice over: once under ``gpudoctor diagnose`` (the
prediction) and plainly, with and without each remedy, under benchmarks/corpus/steprate.py
(the realized gain). Half of them at least are unmodified public scripts; they are not in
this repository: each names its repository, the files it needs and a pinned commit, and
benchmarks/corpus/fetch.py materialises them from local git mirrors into
benchmarks/corpus/.public/ (ignored by git), then generates the synthetic data they read.
The others are this project's synthetic workloads, one or more for each cause GD101-GD402
covers (benchmarks/corpus/synthetic.py and tests/workloads/gpu/).

A remedy is applied by hand: another command line (a script's own flag: more workers, a
bigger batch, ``--torchcompile``), an environment (``PYTORCH_CUDA_ALLOC_CONF``), or a
source-level fix that a user would add at the top of the script and that
benchmarks/corpus/handfix.py applies from outside for scripts that have no flag for it
(TF32, a fused optimizer, pinned loader memory, loader workers). It never goes through
gpudoctor (not ``--try``): the realized gain is measured without gpudoctor.

Placeholders in commands and working directories (filled by ``expand``):
``{public}`` the materialised public sources, ``{data}`` the generated data beside them,
``{corpus}`` this folder, ``{gpu}`` tests/workloads/gpu, ``{tmp}`` a fresh scratch folder per run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parent
ROOT = CORPUS.parent.parent
PUBLIC = CORPUS / ".public"

# every cause gpudoctor's checks GD101-GD402 cover; the corpus holds at least one workload for each
CAUSES = ("GD101", "GD102", "GD103", "GD104", "GD105", "GD201", "GD202", "GD203",
          "GD301", "GD302", "GD303", "GD304", "GD305", "GD306", "GD401", "GD402")


@dataclass(frozen=True)
class Source:
    """Where an unmodified public script comes from (materialised by fetch.py, never committed)."""

    repo: str  # "owner/name" on GitHub
    commit: str  # the pinned commit (40 hex digits)
    paths: tuple[str, ...]  # files or folders of the repository the workload needs, the script first
    license: str  # the repository's licence, for the record

    @property
    def folder(self) -> str:
        """The folder under benchmarks/corpus/.public/ that holds this repository's files."""
        return self.repo.replace("/", "+")


@dataclass(frozen=True)
class Remedy:
    """One change applied by hand, measured plainly against the baseline."""

    name: str  # short label: "workers=12", "bf16 autocast"
    targets: tuple[str, ...]  # the findings (check IDs) whose predicted gain this remedy realizes; () = a control
    args: tuple[str, ...] | None = None  # the variant's script arguments (None: the baseline's)
    env: Mapping[str, str] = field(default_factory=dict)  # added to the baseline's environment
    handfix: tuple[str, ...] = ()  # source-level fixes that handfix.py applies (tf32, fused-optimizer, ...)
    step_scale: float = 1.0  # samples per step of the variant over the baseline's (a bigger batch: its ratio)
    workers: int | None = None  # the num_workers the variant sets (a worker remedy: read at that count)
    # the finding's evidence that holds this remedy's own number, where the finding's gain is another
    # remedy's (GD301's gain is for CUDA graphs; its "compiled_gain" for plain torch.compile)
    evidence: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Workload:
    """A command, the causes it exhibits, and the remedies to measure on it."""

    name: str
    script: str  # the script (placeholders allowed)
    args: tuple[str, ...]  # the baseline's arguments
    causes: tuple[str, ...]  # check IDs the workload exhibits (what a correct diagnosis names)
    remedies: tuple[Remedy, ...]
    source: Source | None = None  # None: a synthetic workload of this repository
    cwd: str = "{tmp}"  # the working directory (relative paths of the script resolve there)
    env: Mapping[str, str] = field(default_factory=dict)
    torchrun: int = 0  # ranks under torchrun --standalone (0: plain python)
    forward_steps: bool = False  # no optimizer: a step is an outermost module forward (STEPRATE_FORWARD)
    max_steps: int = 300  # a plain run stops after this many steps ...
    max_seconds: float = 40.0  # ... or this many seconds after its first step; diagnose gets the same bounds
    needs: tuple[str, ...] = ("torch",)  # Python packages it imports beyond the standard library
    data: tuple[str, ...] = ()  # generated data sets fetch.py must write (fetch.GENERATORS)
    scratch: tuple[str, ...] = ()  # globs of files the script leaves in a shared cwd, removed before each run
    note: str = ""


def expand(text: str, *, public: Path, tmp: Path) -> str:
    """Fill a command's placeholders."""
    return text.format(public=public, data=public / "_data", corpus=CORPUS, gpu=ROOT / "tests" / "workloads" / "gpu",
                       tmp=tmp)


def _replace(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """The arguments with FLAG's value replaced (``flag value`` or ``flag=value``), or added."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == flag and i + 1 < len(out):
            out[i + 1] = value
            return tuple(out)
        if arg.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return tuple(out)
    return (*out, flag, value)


def _with(args: tuple[str, ...], *extra: str) -> tuple[str, ...]:
    return (*args, *extra)


# pinned commits of the public repositories (fetch.py reads them from local mirrors)
EXAMPLES = "77f55b912142e11fcfdf5b530231fb9c52f181e8"  # pytorch/examples, 2025-08-25
NANOGPT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"  # karpathy/nanoGPT, 2025-11-12
TIMM = "aa4b5850c1543fa488abf260f18390eda46cf85d"  # huggingface/pytorch-image-models, 2026-08-08
LIGHTNING = "7f0c3436cd3f6ad3753125672024fc415cbcb414"  # Lightning-AI/pytorch-lightning, 2026-07-20
ACCELERATE = "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83"  # huggingface/accelerate, 2026-07-24


def _examples(*paths: str) -> Source:
    return Source("pytorch/examples", EXAMPLES, paths, "BSD-3-Clause")


def _nanogpt(*paths: str) -> Source:
    return Source("karpathy/nanoGPT", NANOGPT, (*paths, "model.py", "configurator.py"), "MIT")


def _timm(script: str) -> Source:
    # the script imports timm from its own checkout (the script's folder comes first on sys.path)
    return Source("huggingface/pytorch-image-models", TIMM, (script, "timm"), "Apache-2.0")


def _lightning(*paths: str) -> Source:
    return Source("Lightning-AI/pytorch-lightning", LIGHTNING, paths, "Apache-2.0")


def _accelerate(*paths: str) -> Source:
    return Source("huggingface/accelerate", ACCELERATE, paths, "Apache-2.0")


EX = "{public}/pytorch+examples"
WLM = ("word_language_model/main.py", "word_language_model/data.py", "word_language_model/model.py")
NG = "{public}/karpathy+nanoGPT"
TM = "{public}/huggingface+pytorch-image-models"
LT = "{public}/Lightning-AI+pytorch-lightning"
AC = "{public}/huggingface+accelerate"
SYN = "{corpus}/synthetic.py"
# timm's scripts import the checkout's timm, which needs what an installed timm brings along but
# huggingface_hub (imported in a try: needed only to download weights, which no workload does)
TIMM_NEEDS = ("torch", "torchvision", "safetensors", "pyyaml")

TF32 = Remedy("TF32 matmuls", ("GD304",), handfix=("tf32",))  # set_float32_matmul_precision("high")
COMPILED = "compiled_gain"  # GD301's prediction for plain torch.compile (its gain is for CUDA graphs)


def _compiled(args: tuple[str, ...]) -> Remedy:
    """Plain torch.compile (default mode), scored against the number for it that GD301 (a launch-bound
    window) or GD306 (a busy GPU's unfused elementwise kernels) gives."""
    return Remedy("torch.compile", ("GD301", "GD306"), args, evidence=COMPILED)


# a fused optimizer realizes GD305's what-if (optimizer.step()'s launches as one chain) and nothing of
# GD301's, whose replay leaves optimizer.step() as measured (what compiling the model buys); where the
# step is already a few multi-tensor kernels (torch's foreach default on CUDA) no finding names it
FUSED_SGD = Remedy("fused SGD", ("GD305",), handfix=("fused-optimizer",))
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def _public() -> list[Workload]:
    imagenet_j0 = ("--dummy", "-a", "resnet50", "-j", "0", "-b", "256", "--epochs", "1", "--gpu", "0", "-p", "100000")
    imagenet_j4 = ("--dummy", "-a", "resnet18", "-j", "4", "-b", "256", "--epochs", "1", "--gpu", "0", "-p", "100000")
    dcgan = ("--dataset", "fake", "--accel", "--niter", "200", "--workers", "2", "--outf", "{tmp}")
    wlm = ("--data", "{data}/text", "--accel", "--epochs", "1", "--save", "{tmp}/model.pt", "--log-interval", "100000")
    mnist = ("--epochs", "3", "--log-interval", "100000")
    ddp = ("100", "1000", "--batch_size", "32")
    nanogpt = ("config/train_shakespeare_char.py", "--device=cuda", "--compile=False", "--eval_iters=20",
               "--eval_interval=100000", "--log_interval=100000", "--max_iters=5000", "--out_dir={tmp}/out")
    timm_train = ("--bench", "train", "--model", "resnet50", "-b", "64", "--num-bench-iter", "400")
    timm_infer = ("--bench", "inference", "--model", "vit_small_patch16_224", "-b", "8", "--num-bench-iter", "2000")
    pets = ("--data_dir", "{data}/pets/images")
    timm_folder = ("--data-dir", "{data}/imagefolder", "--model", "resnet50", "-b", "128", "-j", "4", "--epochs",
                   "100", "--output", "{tmp}", "--log-interval", "100000", "--val-split", "val")
    return [
        Workload(
            "examples_imagenet_dummy_j0", f"{EX}/imagenet/main.py", imagenet_j0, ("GD101", "GD102"),
            (Remedy("12 workers", ("GD101", "GD102"), _replace(imagenet_j0, "-j", "12"), workers=12),
             TF32),
            _examples("imagenet/main.py"), cwd="{tmp}", needs=("torch", "torchvision"),
            note="FakeData + ToTensor built in the main process (issue 25's first row: 6.4x realized with 12 workers)"),
        Workload(
            "examples_imagenet_dummy_resnet18_j4", f"{EX}/imagenet/main.py", imagenet_j4, ("GD101", "GD102", "GD103"),
            (Remedy("14 workers", ("GD101", "GD102"), _replace(imagenet_j4, "-j", "14"), workers=14),
             Remedy("batch 512", ("GD202",), _replace(imagenet_j4, "-b", "512"), step_scale=2.0)),
            _examples("imagenet/main.py"), needs=("torch", "torchvision")),
        Workload(
            "examples_dcgan_fake", f"{EX}/dcgan/main.py", dcgan, ("GD301", "GD102"),
            (Remedy("batch 256", ("GD202", "GD301"), _replace(dcgan, "--batchSize", "256"), step_scale=4.0),
             Remedy("8 workers", ("GD101", "GD102"), _replace(dcgan, "--workers", "8"), workers=8)),
            _examples("dcgan/main.py"), needs=("torch", "torchvision"),
            note="two optimizer steps per iteration (D and G): both variants count alike"),
        Workload(
            "examples_word_language_model_lstm", f"{EX}/word_language_model/main.py", wlm, ("GD301", "GD202"),
            (Remedy("batch 80", ("GD202", "GD301"), _replace(wlm, "--batch_size", "80"), step_scale=4.0),
             TF32),
            _examples(*WLM), forward_steps=True, data=("text",),
            note="manual SGD update (no optimizer): steps are model forwards; generated text in wikitext-2's layout"),
        Workload(
            "examples_word_language_model_transformer", f"{EX}/word_language_model/main.py",
            ("--model", "Transformer", *wlm), ("GD301", "GD304"),
            (Remedy("batch 80", ("GD202", "GD301"), ("--model", "Transformer", *_replace(wlm, "--batch_size", "80")),
                    step_scale=4.0),
             TF32),
            _examples(*WLM), forward_steps=True, data=("text",)),
        Workload(
            "examples_mnist", f"{EX}/mnist/main.py", mnist, ("GD301", "GD202", "GD102"),
            (Remedy("batch 512", ("GD202", "GD301"), _replace(mnist, "--batch-size", "512"), step_scale=8.0),
             Remedy("4 workers", ("GD101", "GD102"), handfix=("workers=4",), workers=4)),
            _examples("mnist/main.py"), cwd=f"{EX}/mnist", needs=("torch", "torchvision"), data=("mnist",),
            note="reads ../data/MNIST/raw: fetch.py writes generated (random) MNIST files there"),
        Workload(
            "examples_vae", f"{EX}/vae/main.py", ("--epochs", "3", "--log-interval", "100000"), ("GD301", "GD202"),
            (Remedy("batch 1024", ("GD202", "GD301"), ("--epochs", "3", "--log-interval", "100000", "--batch-size",
                                                      "1024"), step_scale=8.0),
             Remedy("4 workers", ("GD101", "GD102"), handfix=("workers=4",), workers=4)),
            _examples("vae/main.py", "vae/results/.gitignore"), cwd=f"{EX}/vae", needs=("torch", "torchvision"),
            data=("mnist",), scratch=("results/*.png",)),
        Workload(
            "examples_mnist_rnn", f"{EX}/mnist_rnn/main.py", ("--accel", "--epochs", "3", "--log-interval", "100000"),
            ("GD301", "GD202"),
            (Remedy("batch 512", ("GD202", "GD301"),
                    ("--accel", "--epochs", "3", "--log-interval", "100000", "--batch-size", "512"), step_scale=8.0),
             TF32),
            _examples("mnist_rnn/main.py"), cwd=f"{EX}/mnist_rnn", needs=("torch", "torchvision"), data=("mnist",)),
        Workload(
            "examples_siamese_network", f"{EX}/siamese_network/main.py", ("--epochs", "3", "--log-interval", "100000"),
            ("GD101", "GD102", "GD301"),
            (Remedy("4 workers, pinned", ("GD101", "GD102", "GD105"), handfix=("workers=4", "pin-memory"), workers=4),
             Remedy("batch 512", ("GD202", "GD301"),
                    ("--epochs", "3", "--log-interval", "100000", "--batch-size", "512"), step_scale=8.0)),
            _examples("siamese_network/main.py"), cwd=f"{EX}/siamese_network", needs=("torch", "torchvision"),
            data=("mnist",), note="pairs of MNIST images built per item in the main process"),
        Workload(
            "examples_ddp_tutorial_torchrun", f"{EX}/distributed/ddp-tutorial-series/multigpu_torchrun.py", ddp,
            ("GD301", "GD202", "GD102"),
            (Remedy("batch 1024", ("GD202", "GD301"), _replace(ddp, "--batch_size", "1024"), step_scale=32.0),
             Remedy("2 workers", ("GD101", "GD102"), handfix=("workers=2",), workers=2)),
            _examples("distributed/ddp-tutorial-series/multigpu_torchrun.py",
                      "distributed/ddp-tutorial-series/datautils.py"),
            torchrun=1,
            note="Linear(20, 1) under DDP on one rank (issue 25: headlined input-bound, launch-bound by 1.7-1.8x)"),
        Workload(
            "examples_ddp_tutorial_single_gpu", f"{EX}/distributed/ddp-tutorial-series/single_gpu.py", ddp,
            ("GD301", "GD202"),
            (Remedy("batch 1024", ("GD202", "GD301"), _replace(ddp, "--batch_size", "1024"), step_scale=32.0),
             FUSED_SGD),
            _examples("distributed/ddp-tutorial-series/single_gpu.py", "distributed/ddp-tutorial-series/datautils.py")),
        Workload(
            "nanogpt_train_char", f"{NG}/train.py", nanogpt, ("GD301",),
            (_compiled(_replace(nanogpt, "--compile", "True")),
             Remedy("batch 256", ("GD202",), _with(nanogpt, "--batch_size=256"), step_scale=4.0)),
            _nanogpt("train.py", "config/train_shakespeare_char.py"), cwd=NG, data=("nanogpt",),
            needs=("torch", "numpy"), max_seconds=60.0,
            note="an LLM-style decoder loop (6 layers, 384 wide, bf16 autocast) on generated character tokens"),
        Workload(
            "nanogpt_train_char_fp32", f"{NG}/train.py", _with(nanogpt, "--dtype=float32"), ("GD304",),
            (Remedy("bf16 autocast", ("GD304",), _with(nanogpt, "--dtype=bfloat16")),),
            _nanogpt("train.py", "config/train_shakespeare_char.py"), cwd=NG, data=("nanogpt",),
            needs=("torch", "numpy"), note="train.py sets TF32 itself: fp32 here means TF32 matmuls"),
        Workload(
            "nanogpt_bench_gpt2", f"{NG}/bench.py", ("--real_data=False", "--compile=False", "--batch_size=8"),
            ("GD301",),
            (_compiled(("--real_data=False", "--compile=True", "--batch_size=8")),),
            _nanogpt("bench.py"), cwd=NG, needs=("torch", "numpy"), max_seconds=90.0,
            note="GPT-2 124M on random tokens; the script runs 30 steps (10 burn-in, 20 timed) and stops"),
        Workload(
            "timm_benchmark_train_resnet50", f"{TM}/benchmark.py", timm_train, ("GD306", "GD304", "GD202"),
            (Remedy("bf16 autocast", ("GD304",), _with(timm_train, "--amp", "--amp-dtype", "bfloat16")),
             _compiled(_with(timm_train, "--torchcompile")),
             Remedy("batch 256", ("GD202",), _replace(timm_train, "-b", "256"), step_scale=4.0)),
            _timm("benchmark.py"), cwd=TM, needs=TIMM_NEEDS,
            max_seconds=90.0, note="timm's own benchmark: a synthetic batch trained in a loop"),
        Workload(
            "timm_benchmark_infer_vit", f"{TM}/benchmark.py", timm_infer, ("GD301", "GD202"),
            (Remedy("batch 128", ("GD202", "GD301"), _replace(timm_infer, "-b", "128"), step_scale=16.0),
             _compiled(_with(timm_infer, "--torchcompile"))),
            _timm("benchmark.py"), cwd=TM, forward_steps=True,
            needs=TIMM_NEEDS, max_seconds=90.0,
            note="batch-8 ViT-S inference"),
        Workload(
            "timm_train_imagefolder_jpeg", f"{TM}/train.py", timm_folder, ("GD101", "GD102", "GD103"),
            (Remedy("14 workers", ("GD101", "GD102"), _replace(timm_folder, "-j", "14"), workers=14),
             Remedy("bf16 autocast", ("GD304",), _with(timm_folder, "--amp", "--amp-dtype", "bfloat16")),
             Remedy("pinned loader memory", ("GD105",), _with(timm_folder, "--pin-mem"))),
            _timm("train.py"), cwd=TM, needs=TIMM_NEEDS, data=("imagefolder",),
            max_seconds=60.0,
            note="JPEG ImageFolder + RandomResizedCrop, ResNet-50, 4 workers (issue 25: 1.45x predicted, 2.05x)"),
        Workload(
            "lightning_fabric_language_model", f"{LT}/examples/fabric/language_model/train.py", (),
            ("GD301", "GD304"),
            (TF32, FUSED_SGD),
            _lightning("examples/fabric/language_model/train.py"), cwd=f"{LT}/examples/fabric/language_model",
            needs=("torch", "lightning", "requests"), data=("wikitext-lightning",),
            note="lightning.pytorch.demos Transformer on generated text placed where the demo would download "
                 "wikitext-2 (the installed lightning's demo; it imports requests before it looks for the file)"),
        Workload(
            "lightning_fabric_image_classifier", f"{LT}/examples/fabric/image_classifier/train_fabric.py",
            ("--epochs", "3"), ("GD301", "GD202"),
            (Remedy("batch 512", ("GD202", "GD301"), ("--epochs", "3", "--batch-size", "512"), step_scale=8.0),
             Remedy("4 workers", ("GD101", "GD102"), handfix=("workers=4",), workers=4)),
            _lightning("examples/fabric/image_classifier/train_fabric.py"),
            cwd=f"{LT}/examples/fabric/image_classifier", needs=("torch", "torchvision", "lightning", "torchmetrics"),
            data=("mnist-lightning",)),
        Workload(
            "accelerate_cv_example", f"{AC}/examples/cv_example.py", pets, ("GD101", "GD102", "GD304"),
            (Remedy("12 workers", ("GD101", "GD102"), handfix=("workers=12",), workers=12),
             Remedy("bf16 mixed precision", ("GD304",), _with(pets, "--mixed_precision", "bf16"))),
            _accelerate("examples/cv_example.py"), cwd="{tmp}",
            env={"HF_HOME": "{data}/hf", "HF_HUB_OFFLINE": "1"},
            needs=("torch", "torchvision", "timm", "accelerate", "numpy", "pillow"), data=("pets",),
            note="Accelerate's example: a pretrained resnet50d (random weights in an offline hub cache), frozen "
                 "but its head, on Oxford-IIIT Pet's layout of 7,400 generated JPEGs; 4 workers decode and "
                 "RandomResizedCrop each image, batch 64, an evaluation each epoch"),
    ]


def _synthetic() -> list[Workload]:
    loader0 = ("loader", "--workers", "0", "--item-us", "300", "--batch", "64")
    loader2 = ("loader", "--workers", "2", "--item-us", "600", "--batch", "64")
    storage = ("storage", "--workers", "2", "--batch", "32")
    pageable = ("copies", "--mb", "256")
    tiny = ("copies", "--tiny", "400")
    small = ("mlp", "--batch", "32", "--width", "1024", "--layers", "4")
    launch = ("mlp", "--batch", "64", "--width", "256", "--layers", "24")
    infer = ("mlp", "--batch", "1", "--width", "512", "--layers", "12", "--infer")
    adam = ("mlp", "--batch", "256", "--width", "512", "--layers", "32", "--optimizer", "adamw-forloop")
    fp32 = ("matmul", "--size", "8192", "--dtype", "fp32")
    bf16 = ("matmul", "--size", "8192", "--dtype", "bf16")
    oom = ("mlp", "--batch", "262144", "--width", "4096", "--layers", "4", "--memory-fraction", "0.1")  # ~36 GiB
    return [
        Workload("syn_loader_main_process", SYN, loader0, ("GD101", "GD102"),
                 (Remedy("12 workers", ("GD101", "GD102"), _replace(loader0, "--workers", "12"), workers=12),),
                 note="num_workers=0: batch production in series with the step"),
        Workload("syn_loader_two_workers", SYN, loader2, ("GD101", "GD102", "GD103"),
                 (Remedy("14 workers", ("GD101", "GD102"), _replace(loader2, "--workers", "14"), workers=14),
                  Remedy("6 workers", ("GD101", "GD102"), _replace(loader2, "--workers", "6"), workers=6)),
                 note="CPU-heavy per-sample work in 2 workers (issue 25: 33.9x and 7.5x predicted, 5.2x realized)"),
        Workload("syn_loader_overlapped", "{gpu}/loader_overlap.py", ("--model", "big", "--steps", "600"),
                 ("GD102",),
                 (Remedy("8 workers", ("GD101", "GD102"), ("--model", "big", "--steps", "600", "--workers", "8"),
                         workers=8),),
                 note="data wait hidden by queued GPU work: more workers should buy little (issue 19)"),
        Workload("syn_loader_overlap_tiny_model", "{gpu}/loader_overlap.py", ("--model", "tiny", "--steps", "600"),
                 ("GD101", "GD102"),
                 (Remedy("12 workers", ("GD101", "GD102"), ("--model", "tiny", "--steps", "600", "--workers", "12"),
                         workers=12),)),
        Workload("syn_storage_reads", SYN, storage, ("GD104", "GD102"),
                 (Remedy("16 workers", ("GD101", "GD102", "GD104"), _replace(storage, "--workers", "16"), workers=16),),
                 note="each item read from a file whose page cache is dropped first (waits on storage, not CPU)"),
        Workload("syn_pageable_copies", SYN, pageable, ("GD105", "GD303"),
                 (Remedy("pinned buffers", ("GD105", "GD303"), _with(pageable, "--pinned")),),
                 note="256 MiB pageable host-to-device copy per step (issue 25: 3.26x predicted, 6.4x realized)"),
        Workload("syn_tiny_copies", SYN, tiny, ("GD303", "GD301"),
                 (Remedy("one stacked copy", ("GD303", "GD301"), _with(tiny, "--stacked")),),
                 note="400 tiny host tensors copied one by one per step (issue 25: 1.03x predicted, 31.9x realized)"),
        Workload("syn_small_batch", SYN, small, ("GD201", "GD202"),
                 (Remedy("batch 2048", ("GD202", "GD201"), _replace(small, "--batch", "2048"), step_scale=64.0),)),
        Workload("syn_power_capped_bf16", SYN, bf16, ("GD203",),
                 (Remedy("fused AdamW", (), _with(bf16, "--fused")),
                  Remedy("TF32", ("GD304",), handfix=("tf32",)),
                  _compiled(_with(bf16, "--compile", "default"))),
                 note="saturated bf16 matmuls at the power limit: nothing a hand remedy can buy (controls)"),
        Workload("syn_launch_bound", SYN, launch, ("GD301", "GD201"),
                 (_compiled(_with(launch, "--compile", "default")),
                  Remedy("CUDA graphs (compile reduce-overhead)", ("GD301",), _with(launch, "--compile",
                                                                                    "reduce-overhead")),
                  Remedy("batch 1024", ("GD202", "GD201"), _replace(launch, "--batch", "1024"), step_scale=16.0))),
        Workload("syn_launch_bound_infer", SYN, infer, ("GD301", "GD201"),
                 (Remedy("CUDA graphs (compile reduce-overhead)", ("GD301",), _with(infer, "--compile",
                                                                                    "reduce-overhead")),
                  Remedy("batch 32", ("GD202", "GD201"), _replace(infer, "--batch", "32"), step_scale=32.0)),
                 forward_steps=True),
        Workload("syn_forloop_adamw", SYN, adam, ("GD305", "GD301"),
                 (Remedy("fused AdamW", ("GD305",), _replace(adam, "--optimizer", "adamw-fused")),),
                 note="per-parameter AdamW (foreach=False): the optimizer's launches one parameter at a time"),
        Workload("syn_item_per_layer", "{gpu}/item_per_layer.py", ("--steps", "300"), ("GD302",),
                 (Remedy("values kept on the GPU", ("GD302",), ("--steps", "300", "--no-item")),),
                 note="issue 25: 1.18x predicted, 1.05x realized"),
        Workload("syn_item_per_step", SYN, ("mlp", "--batch", "512", "--width", "2048", "--layers", "6", "--items",
                                            "8"), ("GD302",),
                 (Remedy("no .item() in the loop", ("GD302",), ("mlp", "--batch", "512", "--width", "2048",
                                                                 "--layers", "6")),)),
        Workload("syn_fp32_matmul", SYN, fp32, ("GD304",),
                 (Remedy("TF32 (set_float32_matmul_precision)", ("GD304",), _replace(fp32, "--dtype", "tf32")),
                  Remedy("bf16 autocast", ("GD304",), _replace(fp32, "--dtype", "bf16")))),
        Workload("syn_fp32_matmul_tests", "{gpu}/fp32_matmul.py", (), ("GD304",),
                 (Remedy("TF32 (the script's line)", ("GD304",), ("--tf32",)),),
                 note="the script sets allow_tf32 = False itself, after any set-up a remedy could make: the "
                      "remedy edits that line"),
        Workload("syn_fragmentation", "{gpu}/fragmentation.py", ("--cap-gib", "10"), ("GD401",),
                 (Remedy("expandable_segments", ("GD401",), env=EXPANDABLE),),
                 note="capped at 10 GiB: at the test's 5% of an H200 (7 GiB) both variants ran out of memory"),
        Workload("syn_oom", SYN, oom, ("GD402",),
                 (Remedy("batch 32768", ("GD402",), _replace(oom, "--batch", "32768"), step_scale=0.125),),
                 note="the baseline runs out of memory: a realized gain cannot be a ratio there (reported as such)"),
    ]


WORKLOADS: tuple[Workload, ...] = (*_public(), *_synthetic())


def by_name(workloads: tuple[Workload, ...] = WORKLOADS) -> dict[str, Workload]:
    return {w.name: w for w in workloads}
