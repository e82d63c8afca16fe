"""One yes/no rule for every flag (pycudadrv._textargs.yes_no): True or False, a numpy bool, or the
ints 0 and 1; a string such as "no", None, 2, a float or an array is an ArgumentTypeError naming
the call, the parameter and the value -- never its truth value ("no" is truthy). The CPU part
drives calls whose flag is checked before the driver is needed; the GPU part the rest."""
import re

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import aio, cudnn

from _fakes import FakeKernel

RULE = "must be True or False (or a numpy bool, 0 or 1), got"
BAD = ["no", "False", None, 2, -1, 1.0, np.array([True]), [True]]
GOOD = [True, False, 0, 1, np.True_, np.False_]


def _value_text(v):
    return f"{type(v).__name__} {v!r}"[:40]


# (where, parameter, call with the flag's value): each checks the flag before any driver call
CPU_CALLS = [
    ("Buffer.empty", "async_alloc", lambda v: cd.Buffer.empty(16, async_alloc=v)),
    ("Buffer.zeros", "async_alloc", lambda v: cd.Buffer.zeros(16, async_alloc=v)),
    ("Buffer.from_numpy", "async_alloc", lambda v: cd.Buffer.from_numpy(np.zeros(4, np.float32), async_alloc=v)),
    ("Event.elapsed_ms", "wait", lambda v: cd.Event.elapsed_ms(object(), object(), wait=v)),
    ("data_pointer", "strided", lambda v: cd.data_pointer(object(), strided=v)),
    ("aio.launch", "lazy", lambda v: aio.launch(FakeKernel(), 1, 32, lazy=v)),
    ("aio.submit", "lazy", lambda v: aio.submit(object(), lazy=v)),
    ("matmul_plan", "autotune", lambda v: cudnn.matmul_plan((4, 4), (4, 4), "float32", autotune=v)),
    ("matmul_plan", "allow_tf32", lambda v: cudnn.matmul_plan((4, 4), (4, 4), "float32", allow_tf32=v)),
    ("Stream", "nonblocking", lambda v: cd.Stream(nonblocking=v)),
    ("Event", "timing", lambda v: cd.Event(timing=v)),
    ("Linker", "use_cache", lambda v: cd.Linker(arch="sm_90", use_cache=v)),
]


@pytest.mark.parametrize("where, name, call", CPU_CALLS, ids=[f"{w}-{n}" for w, n, _ in CPU_CALLS])
@pytest.mark.parametrize("value", BAD, ids=[_value_text(v) for v in BAD])
def test_a_flag_that_is_not_a_bool_is_refused_naming_the_call_the_parameter_and_the_value(where, name, call, value):
    with pytest.raises(cd.ArgumentTypeError) as ei:
        call(value)
    text = str(ei.value)
    assert text.startswith(f"{where}: {name} {RULE} {type(value).__name__} "), text


@pytest.mark.parametrize("where, name, call", CPU_CALLS, ids=[f"{w}-{n}" for w, n, _ in CPU_CALLS])
@pytest.mark.parametrize("value", GOOD, ids=[_value_text(v) for v in GOOD])
def test_a_bool_a_numpy_bool_0_and_1_pass_the_flag_check(where, name, call, value):
    try:
        call(value)
    except cd.Error as e:      # what comes after the flag (no driver here, an object that is no Event, ...)
        assert f"{name} must be True or False" not in str(e), str(e)


def test_the_rule_keeps_the_value_it_reads():
    from pycudadrv._textargs import yes_no

    assert [yes_no(v, "x", "t") for v in GOOD] == [True, False, False, True, True, False]
    assert all(type(yes_no(v, "x", "t")) is bool for v in GOOD)
    with pytest.raises(cd.ArgumentTypeError, match=re.escape("t: x " + RULE + " str 'no'")):
        yes_no("no", "x", "t")


# --- on the GPU: flags of objects only a GPU makes ---------------------------------------------

KERNEL = r"""
extern "C" __global__ void add1(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += 1.0f;
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("value", ["no", None, 2, np.array([True])], ids=_value_text)
def test_flags_of_gpu_objects_are_refused_before_anything_runs(value, rng, tmp_path):
    fn = cd.compile(KERNEL).load().function("add1")
    host = rng.standard_normal(64).astype(np.float32)
    y = cd.Buffer.from_numpy(host)
    s = cd.Stream()
    calls = [
        ("Buffer.read", "synchronize", lambda: y.read(synchronize=value)),
        ("kernel 'add1'", "cooperative", lambda: fn.launch(1, 64, y, 64, cooperative=value)),
        ("kernel 'add1'", "programmatic_dependent", lambda: fn.launch(1, 64, y, 64, programmatic_dependent=value)),
        ("stream.capture()", "pdl", lambda: s.capture(pdl=value)),
        ("stream.loop()", "pdl", lambda: s.loop(times=2, pdl=value)),
    ]
    for where, name, call in calls:
        with pytest.raises(cd.ArgumentTypeError, match=re.escape(f"{where}: {name} {RULE}")):
            call()
    with s.capture() as graph:
        fn.launch(1, 64, y, 64, stream=s)
    with pytest.raises(cd.ArgumentTypeError, match=re.escape(f"CapturedGraph.debug_dot: verbose {RULE}")):
        graph.debug_dot(tmp_path / "g.dot", verbose=value)
    assert not (tmp_path / "g.dot").exists()
    # Nothing ran but the one launch above, not yet replayed: y is as written.
    np.testing.assert_array_equal(y.to_numpy(), host)
    graph.launch(s)
    s.synchronize()
    np.testing.assert_allclose(y.to_numpy(), host.astype(np.float64) + 1.0, rtol=1e-6)
