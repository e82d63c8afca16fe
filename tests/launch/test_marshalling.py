"""The argument arena and the value -> bytes rules, without a GPU
(``pycudadrv.pack_arguments`` runs exactly the launch path's marshalling)."""
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pycudadrv as cd
from pycudadrv import _signature as sig


def pack(layout, *args):
    return cd.pack_arguments(layout, list(args))[0]


@pytest.mark.parametrize("value, ctype, expected", [
    (np.bool_(True), "bool", b"\x01"),
    (np.int8(-2), "int8_t", b"\xfe"),
    (np.uint8(250), "uint8_t", b"\xfa"),
    (np.int16(-2), "short", struct.pack("<h", -2)),
    (np.uint16(65000), "unsigned short", struct.pack("<H", 65000)),
    (np.int32(-123456), "int", struct.pack("<i", -123456)),
    (np.uint32(4000000000), "unsigned int", struct.pack("<I", 4000000000)),
    (np.int64(-(2**40)), "long long", struct.pack("<q", -(2**40))),
    (np.uint64(2**63 + 5), "unsigned long long", struct.pack("<Q", 2**63 + 5)),
    (np.float16(1.5), "half", b"\x00\x3e"),
    (np.float32(0.1), "float", struct.pack("<f", 0.1)),
    (np.float64(0.1), "double", struct.pack("<d", 0.1)),
    (np.complex64(1 + 2j), "complex64", struct.pack("<ff", 1, 2)),
    (np.complex128(1 + 2j), "complex128", struct.pack("<dd", 1, 2)),
])
def test_numpy_scalars_are_copied_bit_for_bit(value, ctype, expected):
    assert pack(ctype, value) == [expected]


@pytest.mark.parametrize("ctype, value, expected", [
    ("float", 2.0, struct.pack("<f", 2.0)),
    ("double", 2.0, struct.pack("<d", 2.0)),
    ("half", 1.5, b"\x00\x3e"),
    ("char", 7, b"\x07"),
    ("char", -1, b"\xff"),
    ("short", -3, struct.pack("<h", -3)),
    ("unsigned int", 4294967295, b"\xff\xff\xff\xff"),
    ("long long", -5, struct.pack("<q", -5)),
    ("unsigned long long", 2**64 - 1, b"\xff" * 8),
    ("float", 3, struct.pack("<f", 3.0)),   # int into a float parameter converts, as in C
    ("int", True, struct.pack("<i", 1)),
    ("complex64", 1.5 - 2j, struct.pack("<ff", 1.5, -2)),
    ("float*", None, b"\x00" * 8),
    ("float*", 0x7f00_0000_1000, struct.pack("<Q", 0x7f00_0000_1000)),
])
def test_python_values_take_their_parameters_width(ctype, value, expected):
    assert pack(ctype, value) == [expected]


def test_issue_example_float_and_char_are_never_zero():
    out = pack("float*, char*, float, char", None, None, 2.0, 7)
    assert out[2] == struct.pack("<f", 2.0) and out[3] == b"\x07"


def test_pointers_above_2_63_are_valid_addresses():
    assert pack("float*", 2**63 + 16) == [struct.pack("<Q", 2**63 + 16)]


def test_numpy_scalars_of_the_right_width_go_bit_for_bit_into_size_only_parameters():
    any4 = [sig.Param(sig.ANY, 4, 4, 0)]
    assert pack(any4, np.float32(1.5)) == [struct.pack("<f", 1.5)]
    assert pack(any4, np.int32(-3)) == [struct.pack("<i", -3)]


def test_bool_is_not_taken_for_a_64_bit_int():
    assert pack("bool", True) == [b"\x01"]
    assert pack("unsigned char", False) == [b"\x00"]


def test_struct_parameter_from_structured_scalar_and_bytes():
    pair = np.dtype([("a", np.int8), ("b", np.float64)], align=True)
    v = np.zeros((), dtype=pair)
    v["a"], v["b"] = 3, 2.5
    out = pack([pair], v[()])
    assert len(out[0]) == 16 and out[0][0] == 3 and out[0][8:] == struct.pack("<d", 2.5)
    assert pack([pair], bytes(range(16))) == [bytes(range(16))]


def test_every_slot_is_16_byte_aligned_and_values_do_not_overlap():
    pair = np.dtype([("a", np.int8), ("b", np.float64), ("c", np.int32)], align=True)  # 24 bytes
    out, addrs, spilled = cd.pack_arguments(["char", pair, "double", "char"],
                                            [1, bytes(24), 2.0, 3])
    assert all(a % 16 == 0 for a in addrs)
    assert addrs[1] - addrs[0] == 16 and addrs[2] - addrs[1] == 32 and addrs[3] - addrs[2] == 16
    assert not spilled


def test_arena_spills_to_the_heap_beyond_inline_capacity_and_keeps_every_value():
    n = 100  # inline room is 64 slots / 64 parameters
    values = [np.int64(i * 1_000_003) for i in range(n)]
    out, addrs, spilled = cd.pack_arguments(["long long"] * n, values)
    assert spilled
    assert [struct.unpack("<q", b)[0] for b in out] == [i * 1_000_003 for i in range(n)]
    assert all(a % 16 == 0 for a in addrs)


def test_arena_inline_holds_32_scalar_arguments_without_spilling():
    _, _, spilled = cd.pack_arguments(["float"] * 32, [1.0] * 32)
    assert not spilled


@pytest.mark.parametrize("ctype, value, match", [
    ("float*", 2.0, "pointer-sized parameter"),
    ("unsigned long long", 2.0, "pointer-sized parameter"),
    ("int", 2.5, "non-floating-point"),
    ("char", 128, "out of range for a 8-bit signed integer"),
    ("unsigned char", -1, "out of range for a 8-bit unsigned integer"),
    ("int", 2**31, "out of range"),
    ("long long", 2**63, "out of range"),
    ("float", np.float64(1.0), "expected exactly 4 bytes, the value has 8"),
    ("double", np.float32(1.0), "expected exactly 8 bytes, the value has 4"),
    ("int", np.int64(1), "expected exactly 4 bytes"),
    ("float*", np.zeros(2), "host numpy array"),
    ("float*", -8, "must be >= 0"),
    ("float", "1.0", "unsupported argument type"),
    ("int", np.float32(1.0), "numpy floating-point scalar given to an integer"),
    ("float*", np.float64(1.0), "numpy floating-point scalar given to an integer or pointer"),
    ("float", np.int32(1), "numpy integer scalar given to a floating-point parameter"),
    ("unsigned long long", 2**64, "out of range for a 64-bit unsigned integer"),
    ("float", object(), "unsupported argument type"),
])
def test_wrong_values_raise_type_error_naming_kernel_parameter_size_and_value(ctype, value, match):
    with pytest.raises(TypeError, match=match) as ei:
        cd.pack_arguments(["int", ctype], [1, value], name="my_kernel")
    msg = str(ei.value)
    assert "kernel 'my_kernel', parameter #1" in msg
    assert "-byte" in msg


def test_wrong_argument_count_is_a_type_error():
    with pytest.raises(TypeError, match="takes 2 arguments, 3 given"):
        cd.pack_arguments("float*, int", [None, 1, 2])


def test_parameter_space_over_the_limit_lists_offsets_and_sizes():
    with pytest.raises(ValueError) as ei:
        cd.pack_arguments(["complex128"] * 2100, [0j] * 2100)
    msg = str(ei.value)
    assert "exceed the driver's limit of 32764 bytes" in msg and "#0: offset 0 size 16" in msg


_scalar_types = ["char", "unsigned char", "short", "int", "unsigned int", "long long", "float", "double",
                 "half", "float*", "bool"]
_values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True), st.booleans(), st.none(),
    st.complex_numbers(), st.binary(max_size=40), st.sampled_from([np.int8(1), np.float32(2), np.int64(-3),
                                                                    np.float16(0.5), np.uint32(7)]),
    st.text(max_size=3), st.lists(st.integers(), max_size=3))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_scalar_types), _values), max_size=80))
def test_marshalling_never_crashes_and_either_packs_exact_sizes_or_raises(pairs):
    layout = sig.parse_signature([t for t, _ in pairs])
    try:
        out, addrs, _ = cd.pack_arguments(layout, [v for _, v in pairs])
    except cd.Error:
        return
    assert [len(b) for b in out] == [p.size for p in layout]
    assert all(a % 16 == 0 for a in addrs)


class _FakeCAI:
    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


_SHAPED = {"shape": (4,), "typestr": "<f4", "version": 3}
BOGUS_CAI = [({"data": (), **_SHAPED}, cd.ArgumentValueError), ({"data": [], **_SHAPED}, cd.ArgumentValueError),
             ({}, cd.ArgumentValueError), ("abc", cd.ArgumentTypeError), ({"data": "123"}, cd.ArgumentValueError),
             ({"data": ("1", False)}, cd.ArgumentValueError), ({"data": (1.9, False)}, cd.ArgumentValueError),
             ({"data": (True, False)}, cd.ArgumentValueError), ({"data": (-1, False)}, cd.ArgumentValueError),
             ({"data": (2**64, False)}, cd.ArgumentValueError), ({"data": (None, False)}, cd.ArgumentValueError),
             ({"data": (0x1000, False)}, cd.ArgumentValueError)]       # no shape: not an array interface


@pytest.mark.parametrize("cai, error", BOGUS_CAI)
def test_a_bogus_cuda_array_interface_is_refused_naming_the_parameter_not_a_crash(cai, error):
    """A dict with a wrong entry is an ArgumentValueError, an interface that is no dict an
    ArgumentTypeError, the same through every reader."""
    with pytest.raises(error, match="parameter #0"):
        cd.pack_arguments("float*", [_FakeCAI(cai)])


@pytest.mark.parametrize("cai, error", BOGUS_CAI)
def test_asbuffer_refuses_a_bogus_cuda_array_interface_before_any_driver_call(cai, error):
    with pytest.raises(error, match="asbuffer: _FakeCAI"):
        cd.asbuffer(_FakeCAI(cai))


def test_a_valid_cuda_array_interface_gives_its_pointer():
    assert pack("float*", _FakeCAI({"data": (0x1000, False), **_SHAPED})) == [struct.pack("<Q", 0x1000)]


@pytest.mark.parametrize("kind", [9, 50, -1, 100000])
def test_invalid_layout_kinds_are_rejected(kind):
    with pytest.raises(ValueError, match="parameter #0 of the layout: kind .* is not a ParamKind"):
        cd.pack_arguments([sig.Param(kind, 4, 4, 0)], [5])


@pytest.mark.parametrize("ctype, value", [
    ("float*", np.int64(-1)), ("float*", np.datetime64(5, "s")), ("float*", True), ("float*", b"12345678"),
    ("double", np.complex64(1)), ("int", np.str_("a")), ("int64_t", None), ("half", 70000.0), ("float", 1e300),
    ("double", 10**400), ("float*", np.bool_(True)),
])
def test_values_of_the_wrong_kind_are_refused(ctype, value):
    with pytest.raises(TypeError, match="parameter #0"):
        cd.pack_arguments(ctype, [value])


def test_handle_objects_cannot_be_built_directly():
    for make in (cd.Function, cd.Buffer, cd.Module, lambda: cd.HostBuffer(16)):
        with pytest.raises(TypeError):
            make()
    p = cd.PreparedLaunch.__new__(cd.PreparedLaunch)
    assert "not initialised" in repr(p)
    with pytest.raises(TypeError, match="not initialised"):
        p()


@pytest.mark.parametrize("text, expected", [
    ("const int", (sig.INT, 4)), ("const double x", (sig.FLOAT, 8)), ("signed int", (sig.INT, 4)),
    ("short int x", (sig.INT, 2)), ("unsigned long int n", (sig.UINT, 8)),
    ("const float* const p", (sig.POINTER, 8)), ("float3 v", (sig.BYTES, 12)), ("half2", (sig.BYTES, 4)),
    ("CUdeviceptr p", (sig.POINTER, 8)),
])
def test_c_spellings_of_parameter_types(text, expected):
    (p,) = sig.parse_signature(text)
    assert (p.kind, p.size) == expected


@pytest.mark.parametrize("bad", ["void", "7)", "04", [None], [b"int"]])
def test_bad_signatures_are_value_errors(bad):
    with pytest.raises(ValueError):
        sig.parse_signature(bad)


def test_ptx_comments_never_hide_or_invent_parameters():
    e = sig.ptx_entries(".entry k(.param .u64 a // (x)\n, .param .u32 b) // .entry fake(.param .u32 z)")
    assert list(e) == ["k"] and [p.size for p in e["k"]] == [8, 4]
    with pytest.raises(ValueError):
        sig.ptx_entries(".entry k(.param .b0 a)")


# --- values at the edge of their type ------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (3.4028235e38, "ffff7f7f"),                    # the literal rounds to FLT_MAX: finite
    (float(np.float32(3.4028235e38)), "ffff7f7f"),
    (-3.4028235e38, "ffff7fff"),
    (float(np.nextafter(2.0**128 - 2.0**103, 0)), "ffff7f7f"),   # just below the rounding boundary
    (float("inf"), "0000807f"),
])
def test_a_float32_parameter_takes_every_value_that_stays_finite(value, expected):
    assert pack("float", value)[0].hex() == expected


@pytest.mark.parametrize("value", [2.0**128 - 2.0**103, -(2.0**128 - 2.0**103), 1e39, 2**128])
def test_a_float32_parameter_refuses_only_what_would_become_inf(value):
    with pytest.raises(cd.ArgumentTypeError, match="out of range for a 32-bit float"):
        pack("float", value)


@pytest.mark.parametrize("ctype, value", [("complex64", 1e300 + 0j), ("float2", 1e39 + 1e39j),
                                          ("complex64", complex(0, -1e39))])
def test_a_complex_part_that_would_become_inf_is_refused_like_a_float(ctype, value):
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #0 \(8-byte struct/bytes parameter\): value out of "
                                                   r"range for two 32-bit floats"):
        pack(ctype, value)


def test_complex_nan_inf_and_float32_max_parts_pass_through():
    assert pack("complex64", complex(float("nan"), float("inf")))[0] == struct.pack("<ff", float("nan"),
                                                                                    float("inf"))
    assert pack("complex64", complex(3.4028235e38, -1))[0].hex() == "ffff7f7f000080bf"


_LONG_DOUBLE = np.dtype(np.longdouble).itemsize > 8


@pytest.mark.skipif(not _LONG_DOUBLE, reason="numpy's long double is a double on this platform")
@pytest.mark.parametrize("layout", ["float4", "float", "double", [sig.Param(sig.ANY, 16, 16, 0)],
                                    [sig.Param(sig.BYTES, 16, 16, 0)]])
@pytest.mark.parametrize("value", [np.longdouble(1), np.clongdouble(1)])
def test_numpy_long_double_scalars_are_refused_naming_the_parameter(layout, value):
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #0 .*scalar \(long double\) has no CUDA equivalent"):
        pack(layout, value)
