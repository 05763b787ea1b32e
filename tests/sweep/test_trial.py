"""One trial, for real, on a tiny model on CPU; failure classification; the child process."""

from __future__ import annotations

import importlib.util
import stat
import sys
from pathlib import Path

import pytest

from gpudoctor.sweep import records
from gpudoctor.sweep.gpu_sampler import GpuWindowSampler
from gpudoctor.sweep.records import TrialResult, TrialSpec
from gpudoctor.sweep.runner import SubprocessRunner
from gpudoctor.sweep.trial import classify, run_trial

HERE = Path(__file__).parent
TINY = HERE / "tiny_model.py"
EXAMPLES = HERE.parent.parent / "examples" / "sweep_targets.py"
FAST = {"device": "cpu", "warmup_min_s": 0.02, "min_time_s": 0.05, "max_time_s": 2.0}


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a busy 2-core CI machine OpenMP's spinning threads turn a
    microsecond matmul into milliseconds and the stability rule then runs to its cap."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def trial(target: str, mode: str = "infer", batch_size: int = 4, **options: object) -> TrialResult:
    return run_trial(TrialSpec(target=target, mode=mode, batch_size=batch_size, **{**FAST, **options}))


def test_an_inference_trial_measures_throughput_latency_and_memory() -> None:
    result = trial(f"{TINY}:build")
    assert result.status == records.OK, result.message
    timing = result.timing
    assert timing.timer == "perf_counter" and timing.iterations >= 20 and timing.warmup_iterations >= 3
    assert timing.latency_p50_s <= timing.latency_p90_s <= timing.latency_p99_s
    assert timing.samples_per_s > 0 and timing.stop_reason
    assert result.memory.peak_rss_bytes > 0 and result.memory.capacity_bytes > 0
    assert result.memory.peak_allocated_bytes is None and "CPU run" in result.memory.unavailable["peak_allocated_bytes"]
    assert result.gpu is None and result.gpu_unavailable == "CPU run"
    assert result.device["type"] == "cpu" and result.environment["torch"]


def test_a_training_trial_with_the_dict_contract_and_default_optimizer() -> None:
    result = trial(f"{TINY}:build_dict", mode="train")
    assert result.status == records.OK, result.message
    assert any("SGD(lr=0)" in note for note in result.environment["notes"])


@pytest.mark.parametrize("name", ["tiny_resnet", "tiny_transformer"])
@pytest.mark.parametrize("mode", ["infer", "train"])
def test_the_example_targets_run_on_cpu(name: str, mode: str) -> None:
    result = trial(f"{EXAMPLES}:{name}", mode=mode, batch_size=2, min_iters=5, max_time_s=0.5)
    assert result.status == records.OK, result.message


def test_a_plain_module_with_an_input_shape() -> None:
    assert trial(f"{TINY}:TinyNet", input_shape=(16,)).status == records.OK
    assert trial(f"{TINY}:just_a_module", input_shape=(16,)).status == records.OK


def test_simulated_oom_and_sticky_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_OOM_ABOVE", "2")
    result = trial(f"{TINY}:build")
    assert (result.status, result.phase) == (records.OOM, "build")
    assert result.message.startswith("OutOfMemoryError: CUDA out of memory")
    monkeypatch.setenv("TINY_STICKY_AT", "1")
    assert trial(f"{TINY}:build", batch_size=1).status == records.CUDA_ERROR


@pytest.mark.parametrize(
    ("attribute", "options", "category", "words"),
    [
        ("wrong_return", {}, "bad_data", "returned int"),
        ("just_a_module", {}, "usage", "--input-shape"),
        ("TinyNet", {}, "usage", "--input-shape"),
        ("build", {"input_shape": (16,)}, "usage", "plain nn.Module"),
        ("NOT_CALLABLE", {}, "bad_data", "not a function"),
        ("missing", {}, "not_found", "no attribute"),
    ],
)
def test_bad_targets(attribute: str, options: dict, category: str, words: str) -> None:
    result = trial(f"{TINY}:{attribute}", **options)
    assert result.status == records.BAD_TARGET
    assert result.error_code == category and words in result.message


def test_an_exception_in_build_is_an_error_not_a_crash() -> None:
    result = trial(f"{TINY}:broken_build")
    assert (result.status, result.phase) == (records.ERROR, "build")
    assert result.message == "ValueError: the config file is missing"


def test_cuda_requested_without_a_gpu_is_a_usage_problem() -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = trial(f"{TINY}:build", device="cuda")
    assert (result.status, result.error_code) == (records.BAD_TARGET, "usage")


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), records.OOM),
        (RuntimeError("CUDA error: out of memory"), records.OOM),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes"), records.OOM),
        (MemoryError(), records.OOM),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), records.CUDA_ERROR),
        (RuntimeError("CUDA error: device-side assert triggered"), records.CUDA_ERROR),
        (RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx"), records.CUDA_ERROR),
        (ValueError("Expected more than 1 value per channel when training"), records.ERROR),
    ],
)
def test_classify(error: BaseException, status: str) -> None:
    assert classify(error) == status


def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.integration
def test_runner_reports_a_child_that_dies_without_answer(tmp_path: Path) -> None:
    spec = TrialSpec(target="x.py:build", mode="infer", batch_size=1, device="cuda")
    runner = SubprocessRunner(spec, tmp_path, timeout_s=30, python=_fake_python(tmp_path, "echo boom >&2; exit 3"))
    result = runner(8)
    assert (result.batch_size, result.status) == (8, records.CRASHED)
    assert "exited with status 3" in result.message and "boom" in result.message


@pytest.mark.integration
def test_runner_treats_sigkill_on_cpu_as_host_oom(tmp_path: Path) -> None:
    spec = TrialSpec(target="x.py:build", mode="infer", batch_size=1, device="cpu")
    runner = SubprocessRunner(spec, tmp_path, timeout_s=30, python=_fake_python(tmp_path, "kill -9 $$"))
    result = runner(64)
    assert result.status == records.OOM and "SIGKILL" in result.message


@pytest.mark.integration
def test_runner_ends_a_child_past_its_timeout(tmp_path: Path) -> None:
    spec = TrialSpec(target="x.py:build", mode="infer", batch_size=1)
    runner = SubprocessRunner(spec, tmp_path, timeout_s=0.5, python=_fake_python(tmp_path, "sleep 30"))
    result = runner(2)
    assert result.status == records.TIMEOUT and "0.5 s" in result.message


def _fake_pynvml():
    path = HERE.parent / "collectors" / "fake_pynvml.py"
    spec = importlib.util.spec_from_file_location("fake_pynvml", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fake_pynvml", module)
    spec.loader.exec_module(module)
    return module


def test_gpu_window_sampler_summarises_the_trials_gpu() -> None:
    fake = _fake_pynvml()
    clock = fake.FakeClock()
    gpus = [fake.FakeGpu(uuid="GPU-00000000-aaaa"), fake.FakeGpu(uuid="GPU-11111111-bbbb", power_mw=100_000)]
    sampler = GpuWindowSampler("11111111-bbbb", nvml=fake.FakeNvml(gpus, clock=clock), clock=clock, background=False)
    sampler.start()
    for _ in range(5):
        clock.advance(0.1)
        sampler.sampler.poll()
    activity = sampler.stop()
    assert activity.samples == 5
    assert activity.power_w_mean == 100.0 and activity.power_limit_w == 700.0  # the second GPU, by UUID
    assert activity.power_fraction == pytest.approx(100 / 700)
    assert activity.sm_activity_percent == 96.0 and activity.tensor_activity_percent == 93.0
    assert activity.util_percent_mean == 100.0 and activity.clock_event_reasons == ["SwPowerCap"]


def test_gpu_window_sampler_without_nvml_says_why() -> None:
    fake = _fake_pynvml()
    nv = fake.FakeNvml([], init_error=12)  # NVML_ERROR_LIBRARY_NOT_FOUND
    activity = GpuWindowSampler("abc", nvml=nv, background=False)
    activity.start()
    result = activity.stop()
    assert result.sm_activity_percent is None and "NVML" in result.unavailable["nvml"]


COUNTING_TARGET = """
import os
import torch
from torch import nn


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x):
        with open(os.environ["STEP_LOG"], "a") as log:
            log.write("step\\n")
        return self.linear(x)


def build(batch_size=None):
    return Counting(), lambda n: torch.randn(n, 4)
"""


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_a_fit_check_runs_three_steps_and_no_timed_window(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "counting.py"
    target.write_text(COUNTING_TARGET)
    log = tmp_path / "steps.log"
    monkeypatch.setenv("STEP_LOG", str(log))
    # settings that would hold a timed size for seconds: a fit check ignores them
    result = trial(f"{target}:build", mode=mode, warmup_min_s=5.0, min_time_s=5.0, min_iters=50,
                   fit_check_steps=3, fit_check_cudnn_benchmark=False)
    assert result.status == records.OK, result.message
    assert log.read_text().count("step") == 3  # the first step and two more, nothing else
    timing = result.timing
    assert timing is not None and timing.iterations == 2 and timing.warmup_iterations == 1
    assert not timing.stable and timing.stop_reason.startswith("fit check: 3 steps")
    assert timing.warmup_stop_reason.startswith("fit check: no warm-up")
    assert result.fit_check is not None and result.fit_check.steps == 3
    assert result.fit_check.cudnn_benchmark is None  # CPU: no cuDNN to set
    assert "fit_check" in result.phase_s and "warmup" not in result.phase_s and "measure" not in result.phase_s
    assert result.gpu is None and result.gpu_unavailable == "fit check: no timed window"
    assert result.memory.peak_rss_bytes and result.memory.peak_rss_bytes > 0
    assert TrialResult.from_dict(result.to_dict()) == result


class _FakeCudnn:
    def __init__(self, benchmark: bool) -> None:
        self.benchmark = benchmark

    @staticmethod
    def is_available() -> bool:
        return True


@pytest.mark.parametrize("target_set", [True, False])
def test_a_fit_check_turns_cudnn_autotuning_off_and_back(target_set: bool) -> None:
    from types import SimpleNamespace

    from gpudoctor.sweep.trial import _cudnn_benchmark

    cudnn = _FakeCudnn(target_set)
    fake_torch = SimpleNamespace(backends=SimpleNamespace(cudnn=cudnn))
    gpu = SimpleNamespace(type="cuda")
    with _cudnn_benchmark(fake_torch, gpu, False) as (running, before):
        assert (running, before, cudnn.benchmark) == (False, target_set, False)
    assert cudnn.benchmark is target_set  # the target's setting again, for the sizes timed after it
    with pytest.raises(RuntimeError), _cudnn_benchmark(fake_torch, gpu, False):
        raise RuntimeError("CUDA out of memory (the check failed)")
    assert cudnn.benchmark is target_set
    with _cudnn_benchmark(fake_torch, gpu, None) as (running, before):  # None: as the target set it
        assert running is before is target_set and cudnn.benchmark is target_set
