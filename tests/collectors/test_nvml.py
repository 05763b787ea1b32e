"""NvmlSampler against a fake pynvml (every failure mode), and once against a real GPU."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pynvml
import pytest

from gpudoctor.collectors.nvml import NvmlSampler
from gpudoctor.collectors.nvml_device import decode_reasons

_spec = importlib.util.spec_from_file_location("fake_pynvml", Path(__file__).with_name("fake_pynvml.py"))
assert _spec is not None and _spec.loader is not None
fake_pynvml = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("fake_pynvml", fake_pynvml)
_spec.loader.exec_module(fake_pynvml)
FakeGpu, FakeNvml, FakeClock, GIB = fake_pynvml.FakeGpu, fake_pynvml.FakeNvml, fake_pynvml.FakeClock, fake_pynvml.GIB

UUID0 = "GPU-00000000-aaaa-bbbb-cccc-000000000000"
UUID1 = "GPU-11111111-aaaa-bbbb-cccc-111111111111"


def make(gpus: list, environ: dict | None = None, **kwargs):
    clock = FakeClock()
    nv = FakeNvml(gpus, clock=clock, **kwargs)
    sampler = NvmlSampler(interval_s=0.5, nvml=nv, clock=clock, environ=environ or {})
    sampler.start(background=False)
    return sampler, nv, clock


def run_polls(sampler, clock, n: int, step: float = 0.5) -> None:
    for _ in range(n):
        clock.advance(step)
        sampler.poll()


# ---- the normal case ----------------------------------------------------------------
def test_samples_every_field_and_gpm_from_the_second_sample():
    sampler, nv, clock = make([FakeGpu(UUID0)])
    run_polls(sampler, clock, 3)
    result = sampler.stop()

    assert result.driver == "580.159.04"
    assert result.unavailable == {}
    [gpu] = result.gpus
    assert (gpu.index, gpu.uuid, gpu.name) == (0, UUID0, "NVIDIA H200")
    assert gpu.memory_total_bytes == 141 * GIB and gpu.power_limit_w == 700.0
    assert gpu.sm_clock_max_mhz == 1980 and gpu.gpm_supported is True and gpu.mig is False
    assert [s.t for s in result.samples] == [0.5, 1.0, 1.5]  # seconds since t0 (start)
    s = result.samples[-1]
    assert (s.util_percent, s.mem_util_percent, s.memory_used_bytes) == (100.0, 40.0, 10 * GIB)
    assert (s.power_w, s.sm_clock_mhz, s.temperature_c) == (692.0, 1980, 55.0)
    assert s.clock_event_reasons == ["SwPowerCap"]
    assert (s.sm_activity, s.sm_occupancy, s.tensor_activity, s.dram_bw_util) == (96.0, 14.0, 93.0, 40.0)
    assert s.pcie_rx_mb_s == pytest.approx(100 * 1.048576)  # GPM MiB/s -> MB/s
    assert nv.calls["nvmlDeviceGetPcieThroughput"] == 0  # GPM gives PCIe without the 20 ms counter
    assert result.interval_s == 0.5
    assert nv.shutdowns == 1
    assert nv.allocated and nv.allocated == nv.freed


def test_gpm_pairs_are_at_least_100_ms_apart():
    sampler, nv, clock = make([FakeGpu(UUID0)])
    run_polls(sampler, clock, 2, step=0.05)  # closer than GPM allows
    run_polls(sampler, clock, 2, step=0.5)
    result = sampler.stop()
    assert all(gap >= 0.1 for gap in nv.gpm_spacings)
    activity = [s.sm_activity for s in result.samples]
    assert activity[0] is None and activity[-1] == 96.0


def test_handful_of_nvml_calls_per_gpu_per_interval():
    sampler, nv, clock = make([FakeGpu(UUID0)])
    before = sum(nv.calls.values())
    run_polls(sampler, clock, 10)
    per_poll = (sum(nv.calls.values()) - before) / 10
    sampler.stop()
    assert per_poll <= 9


def test_clock_event_reasons_are_decoded_to_names():
    assert decode_reasons(0) == []
    assert decode_reasons(0x4 | 0x8 | 0x40) == ["SwPowerCap", "HwSlowdown", "HwThermalSlowdown"]
    assert decode_reasons(0x1 | 0x20 | 0x80 | 0x10) == [
        "Idle", "SyncBoost", "SwThermalSlowdown", "HwPowerBrakeSlowdown"]
    assert decode_reasons(0x4000) == ["0x4000"]  # a bit newer than this table stays visible


# ---- no library, no driver ------------------------------------------------------------
def test_nvidia_ml_py_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    sampler = NvmlSampler()
    sampler.start()
    result = sampler.stop()
    assert result.samples == [] and result.gpus == []
    assert "not installed" in result.unavailable["gpu"]
    assert result.unavailable["gpm"] == result.unavailable["gpu"]


@pytest.mark.parametrize("code, words", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
    (pynvml.NVML_ERROR_UNKNOWN, "failed to initialise"),
])
def test_nvml_init_failure_is_a_reason_not_an_exception(code, words):
    sampler, nv, _ = make([FakeGpu(UUID0)], init_error=code)
    result = sampler.stop()
    assert words in result.unavailable["gpu"]
    assert "gpm" in result.unavailable and "clock_events" in result.unavailable
    assert nv.shutdowns == 0  # nothing to shut down after a failed init


def test_no_gpu_at_all():
    sampler, _, clock = make([])
    run_polls(sampler, clock, 2)
    assert sampler.stop().unavailable["gpu"] == "no NVIDIA GPU found"


def test_stop_without_start_and_twice():
    sampler = NvmlSampler(nvml=FakeNvml([FakeGpu(UUID0)]))
    first = sampler.stop()
    assert "not started" in first.unavailable["gpu"]
    assert sampler.stop() is first


# ---- partial failures ----------------------------------------------------------------
def test_one_call_failing_costs_only_its_field():
    gpu = FakeGpu(UUID0, fail={"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_UNKNOWN})
    sampler, nv, clock = make([gpu])
    run_polls(sampler, clock, 3)
    result = sampler.stop()
    assert len(result.samples) == 3
    assert all(s.temperature_c is None and s.util_percent == 100.0 for s in result.samples)
    assert nv.calls["nvmlDeviceGetTemperature"] == 3  # a transient error is tried again
    assert any("temperature" in note for note in result.notes)


def test_unsupported_call_is_not_asked_again():
    gpu = FakeGpu(UUID0, fail={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED})
    sampler, nv, clock = make([gpu])
    run_polls(sampler, clock, 4)
    result = sampler.stop()
    assert nv.calls["nvmlDeviceGetPowerUsage"] == 1
    assert all(s.power_w is None for s in result.samples)


def test_gpm_unsupported_gpu_falls_back_to_pcie_counters():
    sampler, _, clock = make([FakeGpu(UUID0, name="NVIDIA A100", gpm=False)])
    run_polls(sampler, clock, 3)
    result = sampler.stop()
    assert result.gpus[0].gpm_supported is False
    assert "GPM unsupported on NVIDIA A100" in result.unavailable["gpm"]
    assert all(s.sm_activity is None for s in result.samples)
    assert result.samples[0].pcie_rx_mb_s == 3.0 and result.samples[0].pcie_tx_mb_s == 1.0
    assert "gpu" not in result.unavailable


def test_one_gpm_metric_failing_keeps_the_others():
    gpu = FakeGpu(UUID0, gpm_errors={pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: pynvml.NVML_ERROR_NOT_SUPPORTED,
                                     pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: pynvml.NVML_ERROR_NOT_SUPPORTED})
    sampler, _, clock = make([gpu])
    run_polls(sampler, clock, 3)
    result = sampler.stop()
    last = result.samples[-1]
    assert last.dram_bw_util is None and last.sm_activity == 96.0 and last.tensor_activity == 93.0
    assert last.pcie_rx_mb_s == 3.0  # PCIe switched to the counters once GPM said unsupported
    assert "gpm" not in result.unavailable


def test_gpm_failing_repeatedly_is_given_up_with_a_reason():
    gpu = FakeGpu(UUID0, fail={"nvmlGpmMetricsGet": pynvml.NVML_ERROR_UNKNOWN})
    sampler, nv, clock = make([gpu])
    run_polls(sampler, clock, 6)
    result = sampler.stop()
    assert nv.calls["nvmlGpmMetricsGet"] == 3
    assert "GPM failing" in result.unavailable["gpm"]
    assert all(s.util_percent == 100.0 for s in result.samples)


def test_clock_event_reasons_unreadable_is_a_fact():
    gpu = FakeGpu(UUID0, fail={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_NOT_SUPPORTED})
    sampler, _, clock = make([gpu])
    run_polls(sampler, clock, 2)
    assert "Not Supported" in sampler.stop().unavailable["clock_events"]


def test_gpu_lost_mid_run_stops_only_that_gpu():
    gpus = [FakeGpu(UUID0), FakeGpu(UUID1)]
    sampler, nv, clock = make(gpus)
    run_polls(sampler, clock, 2)
    gpus[1].lost = True
    run_polls(sampler, clock, 3)
    calls_after_loss = nv.calls["nvmlDeviceGetUtilizationRates"]
    run_polls(sampler, clock, 2)
    result = sampler.stop()
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == calls_after_loss + 2  # GPU 1 no longer asked
    assert sum(1 for s in result.samples if s.gpu_index == 1) == 2
    assert sum(1 for s in result.samples if s.gpu_index == 0) == 7
    assert any("GPU 1" in n and "stopped answering at t=1.5 s" in n and "GPU is lost" in n for n in result.notes)
    assert "gpu" not in result.unavailable


def test_gpu_that_answers_nothing_is_given_up():
    every = ["nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage",
             "nvmlDeviceGetClockInfo", "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperature",
             "nvmlGpmSampleGet", "nvmlDeviceGetPcieThroughput"]
    gpu = FakeGpu(UUID0, gpm=False, fail=dict.fromkeys(every, pynvml.NVML_ERROR_UNKNOWN))
    sampler, _, clock = make([gpu])
    run_polls(sampler, clock, 8)
    result = sampler.stop()
    assert result.samples == []
    assert "no value in 5 polls" in result.unavailable["gpu"]


def test_mig_mode():
    sampler, _, clock = make([FakeGpu(UUID0, mig=True)])
    run_polls(sampler, clock, 3)
    result = sampler.stop()
    assert result.gpus[0].mig is True
    assert "MIG" in result.unavailable["gpm"]
    s = result.samples[-1]
    assert s.util_percent is None  # NVML has no whole-GPU utilization in MIG mode
    assert s.memory_used_bytes == 10 * GIB and s.power_w == 692.0


# ---- which GPUs ------------------------------------------------------------------------
def test_select_maps_the_workloads_uuid_to_the_nvml_index():
    sampler, _, clock = make([FakeGpu(UUID0), FakeGpu(UUID1)])
    run_polls(sampler, clock, 2)  # before the workload reports: both GPUs
    sampler.select([UUID1])
    run_polls(sampler, clock, 2)
    result = sampler.stop()
    assert [g.index for g in result.gpus] == [1]
    assert {s.gpu_index for s in result.samples} == {1}
    assert len(result.samples) == 4  # its samples from before the report are kept


def test_select_resolves_a_mig_device_to_its_gpu():
    mig_uuid = "MIG-99999999-aaaa-bbbb-cccc-999999999999"
    sampler, _, clock = make([FakeGpu(UUID0), FakeGpu(UUID1, mig=True, mig_uuids=[mig_uuid])])
    sampler.select(["GPU-" + mig_uuid[4:]])  # how torch's UUID arrives through the agent
    run_polls(sampler, clock, 2)
    assert [g.index for g in sampler.stop().gpus] == [1]


def test_select_unknown_uuid_keeps_sampling_and_says_so():
    sampler, _, clock = make([FakeGpu(UUID0)])
    sampler.select(["GPU-deadbeef"])
    run_polls(sampler, clock, 2)
    result = sampler.stop()
    assert len(result.samples) == 2
    assert any("GPU-deadbeef" in n for n in result.notes)


def _wait_for_polls(nv: FakeNvml, gpu_polls: int) -> None:
    """Until the sampling thread has read the utilization of a GPU `gpu_polls` more times
    (counted by the fake, not timed: a loaded machine only makes it take longer)."""
    wanted = nv.calls["nvmlDeviceGetUtilizationRates"] + gpu_polls
    give_up = time.monotonic() + 120  # a hang guard, not a speed requirement
    while nv.calls["nvmlDeviceGetUtilizationRates"] < wanted:
        assert time.monotonic() < give_up, "the sampling thread stopped polling"
        time.sleep(0.01)


def test_select_from_another_thread_while_sampling():
    nv = FakeNvml([FakeGpu(UUID0), FakeGpu(UUID1)], clock=time.time)
    sampler = NvmlSampler(interval_s=0.1, nvml=nv, environ={})
    sampler.start()
    _wait_for_polls(nv, 2)
    sampler.select([UUID0])
    _wait_for_polls(nv, 3)  # a poll in flight reads both GPUs; the next one reads GPU 0 alone
    result = sampler.stop()
    assert [g.index for g in result.gpus] == [0]
    assert result.samples and sampler.latest_util() == 100.0


@pytest.mark.parametrize("visible, expected", [
    ("1", [1]),
    ("1,0", [1, 0]),
    ("GPU-1111", [1]),  # CUDA accepts a unique UUID prefix
    ("0,7,1", [0]),  # CUDA ignores everything after the first invalid entry
])
def test_cuda_visible_devices_before_the_workload_reports(visible, expected):
    sampler, _, clock = make([FakeGpu(UUID0), FakeGpu(UUID1)], environ={"CUDA_VISIBLE_DEVICES": visible})
    run_polls(sampler, clock, 1)
    result = sampler.stop()
    assert sorted({s.gpu_index for s in result.samples}) == sorted(expected)


def test_cuda_visible_devices_hiding_every_gpu():
    sampler, _, clock = make([FakeGpu(UUID0)], environ={"CUDA_VISIBLE_DEVICES": ""})
    run_polls(sampler, clock, 2)
    result = sampler.stop()
    assert result.samples == []
    assert "hides every GPU" in result.unavailable["gpu"]


# ---- long runs, threads ----------------------------------------------------------------------
def test_long_runs_stay_bounded():
    clock = FakeClock()
    nv = FakeNvml([FakeGpu(UUID0)], clock=clock)
    sampler = NvmlSampler(interval_s=0.5, nvml=nv, clock=clock, environ={}, max_samples_per_gpu=10)
    sampler.start(background=False)
    run_polls(sampler, clock, 100)
    result = sampler.stop()
    assert len(result.samples) <= 11
    assert result.interval_s == 0.5 * 16
    assert result.samples[-1].util_percent == 100.0
    assert result.samples[-1].clock_event_reasons == ["SwPowerCap"]
    times = [s.t for s in result.samples]
    assert times == sorted(times)


def test_background_thread_samples_and_survives_errors():
    gpu = FakeGpu(UUID0)
    nv = FakeNvml([gpu], clock=time.time)
    sampler = NvmlSampler(interval_s=0.1, nvml=nv, environ={})
    sampler.start()
    _wait_for_polls(nv, 3)
    gpu.fail["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_UNKNOWN
    _wait_for_polls(nv, 2)  # the poll in flight may have read the memory already; the next one cannot
    result = sampler.stop()
    assert len(result.samples) >= 3
    assert result.samples[-1].memory_used_bytes is None and result.samples[-1].util_percent == 100.0
    assert any(s.sm_activity == 96.0 for s in result.samples)


# ---- a real GPU ----------------------------------------------------------------------------
@pytest.fixture
def real_nvml():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA GPU: {exc}")
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            pytest.skip("no NVIDIA GPU")
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


@pytest.mark.gpu
def test_real_gpu_for_one_second(real_nvml):
    sampler = NvmlSampler(interval_s=0.2)
    sampler.start()
    time.sleep(1.0)
    result = sampler.stop()
    assert result.driver and result.gpus, result.unavailable
    assert "gpu" not in result.unavailable
    assert len(result.samples) >= 3
    for sample in result.samples:
        assert sample.memory_used_bytes is not None
        if sample.util_percent is not None:
            assert 0 <= sample.util_percent <= 100
    if all(g.gpm_supported and not g.mig for g in result.gpus):
        assert any(s.sm_activity is not None for s in result.samples), result.notes
        assert "gpm" not in result.unavailable
