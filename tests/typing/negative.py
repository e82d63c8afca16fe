"""Mistakes a user might type, each of which ``mypy --strict`` must reject.

Never run (it needs a GPU, and every marked line is wrong); tests/typing/test_negative.py
type-checks it against the package and requires exactly the errors written at the end of the lines,
``# expect: code`` (mypy's error code; several separated by commas): no fewer, so a stub or
annotation that turns into ``Any`` (``ObjectCode.load() -> Any`` once let all of these through) fails,
and no more, so the rest of the file stays what a correct program writes.
"""
from __future__ import annotations

import numpy as np

import pycudadrv as cd

SRC = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def mistakes(stream: cd.Stream, x: cd.Buffer, start: cd.Event, end: cd.Event) -> None:
    obj = cd.compile(SRC, arch="sm_90")
    mod = obj.load()
    fn = mod.function("saxpy")

    # compiling and loading
    cd.compile(SRC, arch=90.0)                        # expect: arg-type
    cd.compile(SRC, target="sass")                    # expect: arg-type
    obj.load(device="cuda:0")                         # expect: arg-type
    ptx: str = obj.ptx                                # expect: assignment
    mod.function(3)                                   # expect: arg-type
    mod.functon("saxpy")                              # expect: attr-defined

    # launching
    fn.launch(1, 32, x, shared_mem=3)                 # expect: call-arg
    fn.launch(1, 32, x, "2.0")                        # expect: arg-type
    fn.launch(1, 32, x, stream=start)                 # expect: arg-type
    cd.compile(SRC).load().function("saxpy").launch(1, 32, x, shared_mem=3)  # expect: call-arg
    nparams: int = fn.num_params                      # expect: assignment
    step = fn.bind(1, 32, x, x, 2.0, 4)
    step.set_arg("a", 1.0)                            # expect: arg-type
    step.launch(stream)                               # expect: call-arg

    # memory
    cd.Buffer(1024)                                   # expect: call-arg
    cd.Buffer.empty("x")                              # expect: arg-type
    x.to_numpy(out=[0.0])                             # expect: call-overload
    x.copy_to(np.zeros(4))                            # expect: arg-type

    # streams, events, graphs
    stream.wait(42)                                   # expect: arg-type
    elapsed_ns: int = end - start                     # expect: assignment
    maybe_ms: float = cd.Event.elapsed_ms(start, end, wait=False)  # expect: assignment
    with stream.capture() as graph:
        step.launch()
    graph.launch(stream=start)                        # expect: arg-type

    # dispatch
    enc = cd.Device(0).encoder(stream)
    enc.sumbit()                                      # expect: attr-defined
    print(ptx, nparams, elapsed_ns, maybe_ms)
