"""Declared parameter types win over guesses from the value: a kernel's ``bool`` takes True/False
(0 and 1) and refuses 2 (packed, it would be a byte the kernel reads as neither); its
``__nv_bfloat16`` rounds a Python float to bfloat16 and refuses ``np.float16`` (its bits mean
another number: 1.5 would read as 0.125). The declaration comes from a signature string, a numpy
dtype, or the kernel's source (over the PTX's looser .u8 / .b8[2]). CPU: ``pack_arguments`` runs
the launch's marshalling; GPU: the kernel reads what was meant."""
import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import _signature as sig
from pycudadrv._marshal import ParamKind

SRC = r"""
#include <cuda_bf16.h>
extern "C" __global__ void take(float* out, bool flag, __nv_bfloat16 h, int n) {
    if (threadIdx.x == 0 && blockIdx.x == 0) { out[0] = flag ? 1.0f : 0.0f; out[1] = __bfloat162float(h); out[2] = n; }
}
"""


def bf16_bits(x):
    """bfloat16 bits of float64 values, rounded to nearest even through float32 (the reference)."""
    f = np.asarray(x, np.float64).astype(np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0) | ((u >> 16) & 0x8000).astype(np.uint16), r)


@pytest.mark.parametrize("declared", ["bool", np.bool_, np.dtype("?")])
def test_a_bool_parameter_takes_true_false_0_and_1_and_refuses_other_values(declared):
    layout = sig.parse_signature([declared])
    assert layout[0].kind == ParamKind.BOOL and layout[0].size == 1
    for v, byte in [(True, 1), (False, 0), (1, 1), (0, 0), (np.True_, 1), (np.uint8(1), 1), (np.int32(0), 0)]:
        assert cd.pack_arguments(layout, [v])[0] == [bytes([byte])], v
    for v in [2, -1, 256, np.int8(2), np.uint8(255)]:
        with pytest.raises(cd.ArgumentValueError, match="a bool parameter takes True or False"):
            cd.pack_arguments(layout, [v])
    for v in [1.0, np.float32(1.0), b"\x02"]:
        with pytest.raises(cd.ArgumentTypeError):
            cd.pack_arguments(layout, [v])


def test_a_bfloat16_parameter_rounds_floats_to_nearest_even_like_the_reference(rng):
    layout = sig.parse_signature("__nv_bfloat16")
    assert layout[0].kind == ParamKind.BFLOAT16
    xs = np.concatenate([rng.standard_normal(500) * 10.0 ** rng.integers(-30, 30, 500),
                         [0.0, -0.0, 1.5, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, float("inf"), -float("inf"), float("nan"),
                          3.3895313892515355e38]])
    want = bf16_bits(xs)
    got = np.array([np.frombuffer(cd.pack_arguments(layout, [float(x)])[0][0], np.uint16)[0] for x in xs])
    np.testing.assert_array_equal(got, want)
    assert cd.pack_arguments(layout, [3])[0] == [bf16_bits(3.0).tobytes()]        # an int is a number too
    assert cd.pack_arguments(layout, [b"\xc0\x3f"])[0] == [b"\xc0\x3f"]            # the raw bits, as given
    with pytest.raises(cd.ArgumentTypeError, match="out of range for a bfloat16"):
        cd.pack_arguments(layout, [1e39])


@pytest.mark.parametrize("value", [np.float16(1.5), np.float32(1.5), np.int16(3)])
def test_a_bfloat16_parameter_refuses_numpy_scalars_of_other_meaning(value):
    with pytest.raises(cd.ArgumentTypeError, match="__nv_bfloat16 parameter"):
        cd.pack_arguments("__nv_bfloat16", [value])


def test_ml_dtypes_bfloat16_goes_as_it_is():
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    v = ml.bfloat16(1.5)
    assert cd.pack_arguments("__nv_bfloat16", [v])[0] == [v.tobytes()]
    assert sig.parse_signature([np.dtype(ml.bfloat16)])[0].kind == ParamKind.BFLOAT16


def test_the_kernels_source_declaration_refines_the_ptx_layout():
    obj = cd.compile(SRC, arch="sm_90", target="ptx")
    ptx = sig.ptx_entries(obj.image.decode())["take"]
    assert [p.kind for p in ptx][1:3] != [ParamKind.BOOL, ParamKind.BFLOAT16]      # the PTX alone cannot say
    merged, used = sig.merge_layout(ptx, sig.source_params(SRC)["take"], "source")
    assert used and [p.kind for p in merged] == [ParamKind.POINTER, ParamKind.BOOL, ParamKind.BFLOAT16, ParamKind.INT]
    with pytest.raises(cd.ArgumentValueError, match="bool parameter"):
        cd.pack_arguments(merged, [None, 2, 1.5, 1])
    with pytest.raises(cd.ArgumentTypeError, match="numpy float16 given to a __nv_bfloat16"):
        cd.pack_arguments(merged, [None, True, np.float16(1.5), 1])


@pytest.mark.gpu
def test_the_kernel_reads_the_declared_values(rng):
    fn = cd.compile(SRC).load().function("take")
    for _ in range(2):
        out = cd.Buffer.from_numpy(np.full(3, np.nan, np.float32))
        h = float(rng.standard_normal())
        n = int(rng.integers(-1000, 1000))
        fn.launch(1, 1, out, True, h, n)
        got = out.to_numpy()
        want_h = np.frombuffer(np.uint32(int(bf16_bits(h)) << 16).tobytes(), np.float32)[0]
        assert got[0] == 1.0 and got[1] == want_h and got[2] == n
        with pytest.raises(cd.ArgumentValueError, match="bool parameter"):
            fn.launch(1, 1, out, 2, h, n)
        with pytest.raises(cd.ArgumentTypeError, match="numpy float16"):
            fn.launch(1, 1, out, False, np.float16(h), n)
        np.testing.assert_array_equal(out.to_numpy(), got)      # nothing ran for the refused launches


# --- typedefs of the kernel's source ---------------------------------------------------------------

TYPEDEFS = r"""
typedef unsigned int uint;
typedef uint count_t;                 // a typedef of a typedef
using real = float;
typedef float* fptr;
#if FANCY
typedef int flip;
#else
typedef long long flip;               // defined twice differently: left to the PTX
#endif
extern "C" __global__ void k(fptr y, const real* x, real a, count_t n, uint m, flip f) {}
"""


def test_typedefs_of_plain_c_types_in_the_source_are_resolved():
    decl = sig.source_params(TYPEDEFS)["k"]
    assert decl[0][0] == ParamKind.POINTER and decl[1] == (ParamKind.POINTER, 8, 8, True)
    assert decl[2][:2] == (ParamKind.FLOAT, 4)
    assert decl[3][:2] == (ParamKind.UINT, 4) and decl[4][:2] == (ParamKind.UINT, 4)
    assert decl[5] is None


def test_a_typedefd_unsigned_parameter_refuses_a_negative_value_the_ptx_alone_would_take():
    src = 'typedef unsigned int uint;\nextern "C" __global__ void k(float* y, uint n) { if (n) y[0] = 1.0f; }'
    obj = cd.compile(src, arch="sm_90", target="ptx")
    ptx = sig.ptx_entries(obj.image.decode())["k"]
    assert cd.pack_arguments(ptx, [None, -1])[0][1] == b"\xff\xff\xff\xff"      # the PTX's .u32 takes either sign
    merged, used = sig.merge_layout(ptx, obj.source_decls["k"], "source")
    assert used and merged[1].kind == ParamKind.UINT
    with pytest.raises(cd.ArgumentTypeError, match="out of range for a 32-bit unsigned integer"):
        cd.pack_arguments(merged, [None, -1])


def test_uint_in_a_signature_is_refused_as_ambiguous():
    with pytest.raises(cd.ArgumentValueError, match="'uint' is ambiguous"):
        sig.parse_signature("float*, uint")
    assert sig.parse_signature("unsigned int")[0][:2] == (ParamKind.UINT, 4)
    assert sig.parse_signature("uint32")[0][:2] == (ParamKind.UINT, 4)
