"""The seams that need no GPU: refused settings change nothing, the source
reader sees attributed kernels, compile() takes None for every optional
sequence, the foreign-memory switch is read as documented."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pycudadrv as cd
from pycudadrv import aio
from pycudadrv._signature import source_params


# --- 6. a refused call changes nothing ---------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(bad=st.one_of(st.sampled_from(["", "fast", "spin", "host_func", "poll", b"loop", None, 3, True]),
                     st.text(max_size=12).filter(lambda t: t.strip().lower() not in aio._MODES)))
def test_a_refused_set_completion_changes_nothing(bad):
    before = aio.get_completion()
    try:
        with pytest.raises(cd.ArgumentValueError, match="mode must be one of"):
            aio.set_completion(bad)
        assert aio.get_completion() == before
    finally:
        aio.set_completion(**before)


def test_other_process_wide_setters_refuse_without_changing_anything():
    from pycudadrv import cudnn

    was = cd.get_release_gil()
    with pytest.raises(cd.ArgumentTypeError):
        cd.set_release_gil("no")
    assert cd.get_release_gil() == was
    hook = cd.get_launch_hook()
    with pytest.raises(cd.ArgumentTypeError):
        cd.set_launch_hook(object())
    assert cd.get_launch_hook() is hook
    on = cudnn.enabled()
    with pytest.raises(cd.ArgumentTypeError):
        cudnn.set_enabled("off")
    assert cudnn.enabled() == on


# --- 8. NVIDIA samples: attributes between extern "C" and the kernel ------------------------------

@pytest.mark.parametrize("decl", [
    'extern "C" __launch_bounds__(128) __global__ void k(float* out, const float* in, float r, int n) {}',
    'extern "C" __global__ void __launch_bounds__(128) k(float* out, const float* in, float r, int n) {}',
    'extern "C" __global__ __launch_bounds__(256, 2) void k(float* out, const float* in, float r, int n) {}',
    'extern "C" __launch_bounds__(128, 4) __maxnreg__(64) __global__ void k(float* out, const float* in, float r, '
    'int n) {}',
    'extern "C" {\n__launch_bounds__(128) __global__ void k(float* out, const float* in, float r, int n) {}\n}',
])
def test_the_source_reader_sees_kernels_with_launch_bounds(decl):
    got = source_params(decl)
    assert list(got) == ["k"]
    from pycudadrv._signature import FLOAT, INT, POINTER
    assert [(p[0], p[1]) for p in got["k"]] == [(POINTER, 8), (POINTER, 8), (FLOAT, 4), (INT, 4)]
    assert [p[3] for p in got["k"][:2]] == [False, True]          # constness of the two pointers


def test_a_kernel_with_no_parameters_is_read_as_zero_parameters():
    assert source_params('extern "C" __global__ void binomialOptionsKernel() {}') == {"binomialOptionsKernel": []}
    assert source_params('extern "C" __global__ void k(void) {}') == {"k": []}


def test_compile_takes_none_for_every_optional_sequence():
    obj = cd.compile('extern "C" __global__ void k(int* x) { x[0] = 1; }', arch="sm_90", name_expressions=None,
                     headers=None, include_paths=None, options=None)
    assert obj.target == "cubin" and b"k" in obj.image


# --- 1. the foreign-memory switch --------------------------------------------------------------------

@pytest.mark.parametrize("value,on", [(None, True), ("1", True), ("0", False), ("false", False), ("off", False)])
def test_the_array_interface_sync_switch_is_read_like_the_other_switches(monkeypatch, value, on):
    from pycudadrv import _env

    # The switch is read once and kept: the value cached before this test comes back after it, or
    # every later test in the process would run with foreign ordering off.
    monkeypatch.setattr(_env, "_foreign_sync", _env._foreign_sync)
    if value is None:
        monkeypatch.delenv("PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC", raising=False)
    else:
        monkeypatch.setenv("PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC", value)
    assert _env.foreign_sync_enabled(refresh=True) is on
    assert "PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC" in _env.ENVIRONMENT_VARIABLES
