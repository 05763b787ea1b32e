"""Synthetic Kineto traces with known answers, written the way a real trace reads.

A `Host` advances its own clock through what one thread does (Python, operators,
launches, syncs, DataLoader waits); the GPU side follows CUDA's rules as a real run
would have measured them: an operation starts once it is launched (+ latency) and
its stream is free; a sync returns when the stream has drained. Every number is
made up and every expected answer follows from them by hand.
"""

from __future__ import annotations

from typing import Any

LATENCY_US = 5.0  # launch call start -> kernel start on an idle stream
POST_US = 4.0  # GPU done -> sync returns


class Gpu:
    def __init__(self) -> None:
        self.tail: dict[int, float] = {}
        self.events: list[dict[str, Any]] = []

    def run(self, ready: float, dur: float, corr: int, *, stream: int = 7, kind: str = "kernel",
            name: str = "void tiny_kernel", nbytes: int = 0) -> float:
        start = max(ready, self.tail.get(stream, 0.0))
        end = start + dur
        self.tail[stream] = end
        cat, label = (kind, name)
        args: dict[str, Any] = {"correlation": corr, "stream": stream, "device": 0}
        if kind == "gpu_memcpy":
            args["bytes"] = nbytes
        self.events.append({"ph": "X", "cat": cat, "name": label, "pid": 0, "tid": stream, "ts": start,
                            "dur": dur, "args": args})
        return end


class Host:
    """One host thread; `t` is its clock in microseconds."""

    corr = 1000

    def __init__(self, gpu: Gpu, tid: int = 1, t: float = 0.0) -> None:
        self.gpu, self.tid, self.t = gpu, tid, t
        self.events: list[dict[str, Any]] = []

    def _x(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": self.tid, "ts": ts, "dur": dur,
                            "args": args})

    def python(self, us: float) -> None:
        self.t += us

    def data_wait(self, us: float) -> None:
        self._x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", self.t, us)
        self.t += us

    def launch(self, gpu_us: float, *, dispatch_us: float = 5.0, call_us: float = 5.0, stream: int = 7,
               kernel: str = "void tiny_kernel", sequence: int | None = None) -> float:
        """An operator that launches one kernel; returns when that kernel will end. `sequence`: its
        autograd sequence number (a forward operator's, recorded as Kineto does)."""
        start = self.t
        Host.corr += 1
        self.t += dispatch_us
        end = self.gpu.run(self.t + LATENCY_US, gpu_us, Host.corr, stream=stream, name=kernel)
        self._x("cuda_runtime", "cudaLaunchKernel", self.t, call_us, correlation=Host.corr)
        self.t += call_us
        self._x("cpu_op", "aten::mul", start, self.t - start,
                **({"Sequence number": sequence} if sequence is not None else {}))
        return end

    def backward_function(self, name: str, sequence: int, gpu_us: float, *, kernel: str = "void tiny_kernel") -> None:
        """Autograd's engine running one backward node (its ``evaluate_function`` range, with the
        sequence number of the forward operator it differentiates): one kernel launched inside."""
        start = self.t
        self.launch(gpu_us, kernel=kernel)
        self._x("cpu_op", f"autograd::engine::evaluate_function: {name}", start, self.t - start,
                **{"Sequence number": sequence})

    def copy_htod(self, nbytes: int, gpu_us: float, *, pageable: bool, call_us: float = 5.0) -> None:
        start = self.t
        Host.corr += 1
        kind = "Pageable" if pageable else "Pinned"
        end = self.gpu.run(self.t + LATENCY_US, gpu_us, Host.corr, kind="gpu_memcpy",
                           name=f"Memcpy HtoD ({kind} -> Device)", nbytes=nbytes)
        returns = end + POST_US if pageable else self.t + call_us  # a pageable copy blocks the host
        self._x("cuda_runtime", "cudaMemcpyAsync", self.t, returns - self.t, correlation=Host.corr)
        self.t = returns
        self._x("cpu_op", "aten::copy_", start, self.t - start)

    def to_device(self, nbytes: int, gpu_us: float, *, staging_us: float = 150.0, early_us: float = 12.0,
                  dispatch_us: float = 5.0) -> None:
        """``host_tensor.to("cuda")`` from pageable memory, as torch makes it (non_blocking=False):
        ``aten::copy_`` calls ``cudaMemcpyAsync``, which stages the bytes through the driver's pinned
        buffer and returns once the last chunk is staged, `early_us` before the GPU copy ends (its DMA
        began `staging_us` after the call, with the first chunk), then waits for the stream
        (``cudaStreamSynchronize``) before the operator returns."""
        start = self.t
        Host.corr += 1
        self.t += dispatch_us
        end = self.gpu.run(self.t + staging_us, gpu_us, Host.corr, kind="gpu_memcpy",
                           name="Memcpy HtoD (Pageable -> Device)", nbytes=nbytes)
        returns = max(self.t + 5.0, end - early_us)
        self._x("cuda_runtime", "cudaMemcpyAsync", self.t, returns - self.t, correlation=Host.corr)
        self.t = returns + 2.0
        self.sync()
        self.t += dispatch_us
        self._x("cpu_op", "aten::copy_", start, self.t - start)

    def item(self, *, dispatch_us: float = 5.0, call_us: float = 5.0, stream: int = 7) -> None:
        """``tensor.item()``: an operator that copies one value to pinned host memory after the
        stream's work (a device-to-host copy of 4 bytes), waits for it and returns the value."""
        start = self.t
        Host.corr += 1
        self.t += dispatch_us
        self.gpu.run(self.t + LATENCY_US, 1.0, Host.corr, stream=stream, kind="gpu_memcpy",
                     name="Memcpy DtoH (Device -> Pinned)", nbytes=4)
        self._x("cuda_runtime", "cudaMemcpyAsync", self.t, call_us, correlation=Host.corr)
        self.t += call_us
        self.sync(stream)
        self.t += dispatch_us
        self._x("cpu_op", "aten::item", start, self.t - start)

    def sync(self, stream: int = 7) -> None:
        done = max(self.t, self.gpu.tail.get(stream, 0.0) + POST_US)
        dur = max(2.0, done - self.t)
        self._x("cuda_runtime", "cudaStreamSynchronize", self.t, dur)
        self.t += dur


def trace(*hosts: Host) -> dict[str, Any]:
    gpu = hosts[0].gpu
    return {"traceEvents": [e for h in hosts for e in h.events] + gpu.events}
