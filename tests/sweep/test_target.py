"""Which build functions get `batch_size=` (issue 27, item 25), and the docs' sweep
examples as written: their options parse and their targets build."""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from gpudoctor.cli import build_parser
from gpudoctor.sweep import records
from gpudoctor.sweep.records import TrialSpec
from gpudoctor.sweep.steps import default_forward
from gpudoctor.sweep.target import call_build, load_target
from gpudoctor.sweep.trial import run_trial

ROOT = Path(__file__).resolve().parent.parent.parent


class Net(nn.Module):
    """A module whose constructor takes keyword options, as torchvision's ResNet does."""

    def __init__(self, num_classes: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(8, num_classes)


def factory(*, weights: Any = None, **kwargs: Any) -> Net:
    """torchvision's shape: `resnet50(*, weights=None, progress=True, **kwargs) -> ResNet`."""
    return Net(**kwargs)


def unannotated_factory(**kwargs: Any):  # type: ignore[no-untyped-def]
    return Net(**kwargs)


def build_with_kwargs(**kwargs: Any) -> tuple[nn.Module, Any]:
    return Net(), kwargs


def build_named(batch_size: int | None = None) -> tuple[nn.Module, Any]:
    return Net(), batch_size


def build_plain() -> tuple[nn.Module, Any]:
    return Net(), None


def test_a_module_factory_with_kwargs_gets_no_batch_size() -> None:
    assert isinstance(call_build(factory, 64, nn.Module), Net)


def test_an_unannotated_factory_that_refuses_batch_size_is_called_without_it() -> None:
    assert isinstance(call_build(unannotated_factory, 64, nn.Module), Net)


def test_a_build_function_gets_batch_size_by_name_or_through_kwargs() -> None:
    assert call_build(build_named, 64, nn.Module)[1] == 64
    assert call_build(build_with_kwargs, 64, nn.Module)[1] == {"batch_size": 64}
    assert call_build(build_plain, 64, nn.Module)[1] is None


def test_other_type_errors_of_a_build_function_still_surface() -> None:
    def broken(**kwargs: Any) -> Any:
        raise TypeError("unsupported operand")

    with pytest.raises(TypeError, match="unsupported operand"):
        call_build(broken, 64, nn.Module)


FAKE_TORCHVISION = '''
"""A stand-in for torchvision.models (not installed with the CPU torch here): its
factories have torchvision's signatures and hand **kwargs to the module's constructor."""
from typing import Any, Optional

from torch import nn


class ResNet(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 7, stride=16)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).flatten(1))


def resnet18(*, weights: Optional[Any] = None, progress: bool = True, **kwargs: Any) -> ResNet:
    return ResNet(**kwargs)


def resnet50(*, weights: Optional[Any] = None, progress: bool = True, **kwargs: Any) -> ResNet:
    return ResNet(**kwargs)
'''


@pytest.fixture
def fake_torchvision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "torchvision"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import models\n")
    (package / "models" / "__init__.py").write_text(textwrap.dedent(FAKE_TORCHVISION))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("torchvision", "torchvision.models"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)


def test_the_documented_torchvision_sweep_builds_at_every_size(fake_torchvision: None) -> None:
    """`gpudoctor sweep torchvision.models:resnet50 --input-shape 3,224,224` failed at every size."""
    for size in (1, 8, 64):
        target = load_target("torchvision.models:resnet50", size, (3, 224, 224), torch)
        assert type(target.model).__name__ == "ResNet"
        assert target.make_batch(2).shape == (2, 3, 224, 224)


def documented_sweeps() -> list[list[str]]:
    """Every `gpudoctor sweep ...` command line in the README and docs/sweep.md."""
    found = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "sweep.md"):
        for line in doc.read_text().splitlines():
            match = re.match(r"\s*gpudoctor (sweep \S+ .*?)(?:\s+#.*)?$", line)
            if match:
                found.append(shlex.split(match.group(1)))
    return found


def test_the_docs_have_sweep_examples() -> None:
    commands = documented_sweeps()
    assert len(commands) >= 5
    assert any(c[1].startswith("torchvision.models:") for c in commands)


MYMODELS = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 7, stride=16)

    def forward(self, x):
        return self.conv(x).mean((2, 3))


def build(batch_size=None):
    return Net(), lambda n: torch.randn(n, 3, 32, 32)
'''


@pytest.mark.parametrize("argv", documented_sweeps(), ids=lambda argv: " ".join(argv[1:4]))
def test_each_documented_sweep_parses_and_its_target_builds(
        argv: list[str], fake_torchvision: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's and docs' sweep commands as written: their options parse, their target
    builds at two sizes and runs one batch. The small targets are measured, like a trial;
    the examples sized for an H200 only build and run once here (CPU)."""
    (tmp_path / "mymodels.py").write_text(MYMODELS)
    monkeypatch.chdir(tmp_path)
    args = build_parser(["sweep"]).parse_args(argv)
    target = args.target.replace("examples/", str(ROOT / "examples") + "/")
    if target != args.target:
        for size in (1, 2):
            built = load_target(target, size, args.input_shape, torch)
        with torch.inference_mode():
            (built.forward or default_forward)(built.model.eval(), built.make_batch(1))
        return
    spec = TrialSpec(target=target, mode=args.mode, batch_size=2, input_shape=args.input_shape, device="cpu",
                     dtype=args.dtype, warmup_min_s=0.0, min_iters=3, min_time_s=0.01, max_time_s=0.3,
                     sample_gpu=False)
    result = run_trial(spec)
    assert result.status == records.OK, f"{' '.join(argv)}: {result.message}"
