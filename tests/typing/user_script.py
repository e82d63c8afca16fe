"""A user's script over pycudadrv's public API, type-checked with ``mypy --strict``.

It is never run by the tests (it needs a GPU); ``tests/typing/test_mypy.py`` and ``.ci/run``
type-check it against the installed package, so an unannotated public function, a stub that
disagrees with the code or a wrong return type fails CI. Every call is one a reader of the
tutorial would write.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

import pycudadrv as cd
from pycudadrv import nvtx, profile
from pycudadrv._attributes import DEVICE_ATTRIBUTES
from pycudadrv.bench import BenchResult, do_bench

SRC = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def compile_saxpy(arch: str | None = None) -> cd.Function:
    obj: cd.ObjectCode = cd.compile(SRC, arch=arch, options=["--use_fast_math"])
    image: bytes = obj.image
    assert image
    mod: cd.Module = obj.load()
    return mod.function("saxpy", signature="float*, const float*, float, int")


def run(n: int = 1 << 20) -> NDArray[np.float32]:
    dev = cd.Device(0)
    name: str = dev.name
    major, minor = dev.compute_capability
    print(name, major, minor, dev.arch, dev.total_memory, dev.multiprocessor_count)
    saxpy = compile_saxpy()
    stream = cd.Stream()
    least, greatest = cd.Stream.priority_range()
    urgent = cd.Stream(priority=greatest)
    priority: int = urgent.priority
    print(least, priority)
    x = cd.Buffer.from_numpy(np.random.rand(n).astype(np.float32), stream=stream)
    y = cd.Buffer.zeros(n, np.float32, stream=stream)
    grid = (n + 255) // 256
    saxpy.launch(grid, 256, y, x, 2.0, n, stream=stream)

    step: cd.PreparedLaunch = saxpy.bind(grid, 256, y, x, 0.5, n, stream=stream)
    step.set_arg(2, -1.0)
    step()
    gpu_ns: int = step.launch_timed()

    start = cd.Event().record(stream)
    step.launch()
    end = cd.Event().record(stream)
    elapsed: float = end - start
    maybe: float | None = cd.Event.elapsed_ms(start, end, wait=False)

    ts = cd.Timestamps(stream)
    with ts.measure("saxpy"):
        step.launch()
    passes: list[tuple[str, float]] = ts.read()

    with stream.capture() as graph:
        for _ in range(10):
            step.launch()
    graph.launch()
    kernels: int = graph.num_kernels

    bench: BenchResult = do_bench(step.launch, stream=stream)
    median_ms: float = bench.median

    profile.enable()
    step.launch()
    profile.disable()
    stats: dict[str, tuple[float, int]] = profile.stats()

    enc = dev.encoder(stream)
    with enc.pass_("copy") as p:
        d = p.dispatch(saxpy, block=(256, 1, 1))
        d.set_arg((0, 0), y)
        d.set_push_constants(np.array([1.0], np.float32))
    done: cd.Event = enc.submit()
    done.synchronize()

    pinned = cd.HostBuffer.empty(n, np.float32)
    y.read(out=pinned.array, stream=stream, synchronize=False)
    stream.synchronize()

    if nvtx.enabled:
        nvtx.push("report")
    with nvtx.range("report"):
        text: str = cd.show_config()
    if nvtx.enabled:
        nvtx.pop()

    version: str = cd.__version__
    attrs: dict[str, int] = DEVICE_ATTRIBUTES
    print(version, len(attrs), cd.nvtx.is_enabled(), cd.profile.report())
    print(gpu_ns, elapsed, maybe, passes, kernels, median_ms, stats, len(text))
    out: NDArray[np.float32] = y.to_numpy(out=np.empty(n, np.float32))
    return out


if __name__ == "__main__":
    print(run()[:4])
