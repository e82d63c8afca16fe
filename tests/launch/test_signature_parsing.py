"""Reading parameter types from CUDA C++ source, PTX and signatures: what is read, what is
distrusted, and that the readers stay linear in the length of their input. No GPU needed."""
import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import _signature as sig
from pycudadrv._signature import Param, INT, UINT, FLOAT, POINTER, BYTES, INTEGER

# --- linear time ------------------------------------------------------------------------------
# These inputs are 100,000 repetitions of what used to be read in quadratic time (8,000 of them
# took 5 to 47 seconds before, so 100,000 would take hours): each test asserts what is read, and
# would make the suite hang visibly if a reader went quadratic again. Linear, they take
# milliseconds.
N = 100_000


@pytest.mark.parametrize("text", [
    "/*" * N,                       # unterminated block comments
    "__global__ " * N,              # qualifier words never followed by void
    'extern "C" {' * N,             # nested extern "C" blocks, never closed
    '"\\' * N,                      # unterminated string literals
    "'" * N,                        # unterminated character literals
    'R"(' * N,                      # unterminated raw strings
    "__global__ void k(" * N,       # parameter lists never closed
    "#define X \\\n" * N,           # continued preprocessor lines
])
def test_source_params_reads_pathological_text_in_one_pass(text):
    assert sig.source_params(text) == {}


def test_source_params_with_many_blocks_and_kernels():
    text = 'extern "C" {' * N + "}" * N + "".join(f'extern "C" {{ __global__ void k{i}(int a) {{}} }}\n'
                                              for i in range(20_000))
    out = sig.source_params(text)
    assert len(out) == 20_000 and out["k19999"] == [(INT, 4, 4, None)]


def test_a_bracket_storm_in_a_parameter_is_read_in_one_pass():
    assert sig.source_params('extern "C" __global__ void k(int a' + "[" * N + ")") == {"k": [None]}


def test_ptx_entries_reads_pathological_text_in_one_pass():
    assert sig.ptx_entries(".entry k(" * N) == {}
    with pytest.raises(cd.ArgumentValueError, match="is not PTX text"):     # an unclosed comment, then text
        sig.ptx_entries("/*" * N)


# --- what the source reader reads and what it distrusts ------------------------------------------

IF_ELSE = '''
#if 1
extern "C" __global__ void k(unsigned int n, float* out) { if (n) out[0] = 1; }
#else
extern "C" __global__ void k(int n, float* out) { if (n) out[0] = 1; }
#endif
'''


def test_a_kernel_declared_twice_with_different_types_is_left_to_the_ptx():
    assert "k" not in sig.source_params(IF_ELSE)


def test_a_declaration_repeated_with_the_same_types_is_kept():
    src = ('extern "C" __global__ void k(int n, const float* __restrict__ x);\n'
           'extern "C" __global__ void k(int m, const float* y) {}\n')
    assert sig.source_params(src) == {"k": [(INT, 4, 4, None), (POINTER, 8, 8, True)]}


def test_with_the_declaration_distrusted_the_ptx_layout_decides():
    obj = cd.compile(IF_ELSE, arch="sm_90", target="ptx")
    assert "k" not in (obj.source_decls or {})
    ptx = sig.ptx_entries(obj.image.decode())["k"]
    layout, used = sig.merge_layout(ptx, (obj.source_decls or {}).get("k"), "source")
    assert not used and [(p.kind, p.size) for p in layout] == [(INTEGER, 4), (INTEGER, 8)]
    # INTEGER takes either signedness: the unsigned value the live branch declares is not refused
    assert cd.pack_arguments(layout, [3_000_000_000, None])[0][0] == (3_000_000_000).to_bytes(4, "little")


def test_comments_strings_and_macros_are_never_read_as_declarations():
    src = r'''
    // extern "C" __global__ void in_line_comment(int a) {}
    /* extern "C" __global__ void in_block_comment(int a) {} */
    const char* s = "extern \"C\" __global__ void in_string(int a) {}";
    const char* r = R"x(extern "C" __global__ void in_raw_string(int a) {})x";
    #define DECLARE(name) extern "C" __global__ void in_macro(int name) {}
    extern "C" __global__ void real(char c) {}
    '''
    assert sig.source_params(src) == {"real": [(INT, 1, 1, None)]}


def test_kernels_inside_extern_c_blocks_and_after_them():
    src = ('extern "C" { __global__ void inside(unsigned n) {} }\n'
           '__global__ void cpp_linkage(int n) {}\n'
           'extern "C" { namespace { } __global__ void __launch_bounds__(128) bounded(short s) {} }\n')
    assert sig.source_params(src) == {"inside": [(UINT, 4, 4, None)], "bounded": [(INT, 2, 2, None)]}


def test_array_parameters_are_pointers_and_int128_is_16_bytes_in_source():
    src = ('extern "C" __global__ void k(unsigned __int128 a, __int128 b, int x[4], const float v[2], '
           'float* p[3]) {}')
    assert sig.source_params(src) == {"k": [(UINT, 16, 16, None), (INT, 16, 16, None), (POINTER, 8, 8, False),
                                            (POINTER, 8, 8, True), (POINTER, 8, 8, False)]}


def test_int128_source_declarations_lay_over_the_ptx_bytes():
    src = 'extern "C" __global__ void k(unsigned __int128 a, int x[4], float c) {}'
    obj = cd.compile(src, arch="sm_90", target="ptx", options=["--device-int128"])
    ptx = sig.ptx_entries(obj.image.decode())["k"]
    assert [(p.kind, p.size) for p in ptx] == [(BYTES, 16), (INTEGER, 8), (FLOAT, 4)]
    layout, used = sig.merge_layout(ptx, obj.source_decls["k"], "source")
    assert used and [(p.kind, p.size, p.const) for p in layout] == [(UINT, 16, None), (POINTER, 8, False),
                                                                      (FLOAT, 4, None)]
    assert cd.pack_arguments(layout, [2**128 - 1, None, 1.0])[0][0] == b"\xff" * 16


# --- signatures ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("unsigned __int128", (UINT, 16)), ("__int128 x", (INT, 16)), ("__uint128_t", (UINT, 16)),
    ("int x[4]", (POINTER, 8)), ("int[4]", (POINTER, 8)), ("float4 v[2]", (POINTER, 8)), ("int* p[3]", (POINTER, 8)),
    ("long unsigned", (UINT, 8)), ("long unsigned n", (UINT, 8)), ("char unsigned", (UINT, 1)),
    ("unsigned n", (UINT, 4)),
])
def test_signature_spellings(text, expected):
    (p,) = sig.parse_signature(text)
    assert (p.kind, p.size) == expected


def test_a_const_array_parameter_is_a_const_pointer():
    assert sig.parse_signature("const float v[2]")[0].const is True


@pytest.mark.parametrize("t", ["longdouble", "float128", "f16", "g", "c32", "complex256", "clongdouble",
                               np.dtype(np.longdouble)])
def test_long_double_dtypes_are_refused_like_long_double(t):
    if np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("numpy's long double is a double on this platform")
    with pytest.raises(cd.ArgumentValueError, match="CUDA kernels have no long double"):
        sig.parse_signature([t])


@pytest.mark.parametrize("t, says", [("V0", "has 0 bytes"), ("U", "has 0 bytes"), ("O", "holds Python objects"),
                                     (np.dtype([("a", "i4"), ("b", "O")]), "holds Python objects"),
                                     (np.void, "has 0 bytes")])
def test_dtypes_with_no_bytes_or_with_objects_are_refused(t, says):
    with pytest.raises(cd.ArgumentValueError, match=says):
        sig.parse_signature([t])


def test_int128_packs_its_full_range_and_refuses_beyond():
    assert cd.pack_arguments("__int128", [-2**127])[0] == [(-2**127).to_bytes(16, "little", signed=True)]
    assert cd.pack_arguments("unsigned __int128", [2**128 - 1])[0] == [b"\xff" * 16]
    with pytest.raises(cd.ArgumentTypeError, match=r"out of range for a 128-bit unsigned integer \[0, "):
        cd.pack_arguments("unsigned __int128", [-1])
    with pytest.raises(cd.ArgumentTypeError, match="out of range for a 128-bit signed integer"):
        cd.pack_arguments("__int128", [2**127])


def test_ptx_widths_with_huge_digit_strings_are_value_errors():
    with pytest.raises(cd.ArgumentValueError, match="PTX parameter width 9999999"):
        sig.ptx_entries(".entry k(.param .u" + "9" * 5000 + " a)")
    with pytest.raises(cd.ArgumentValueError, match="PTX parameter array length"):
        sig.ptx_entries(".entry k(.param .b8 a[" + "9" * 5000 + "])")


def test_as_layout_and_check_layout_return_the_params_unchanged():
    layout = [Param(INT, 4, 4, 0), Param(POINTER, 8, 8, 8, True)]
    assert sig.as_layout(layout) == layout and sig.check_layout(tuple(layout), "k", 4096) == layout


@pytest.mark.parametrize("asked", ["reduce6<int,256,false>", "reduce6<int, 256, false>", " reduce6< int , 256 ,false > ",
                                   "reduce6<int,\t256,\nfalse>"])
def test_a_name_expression_matches_in_every_spelling_the_compiler_takes(asked):
    from pycudadrv._module import lowered_name

    lowered = {"reduce6<int, 256, false>": "_Z7reduce6IiLi256ELb0EEvPKT_PS0_j", "k<unsigned int>": "_Z1kIjEvv"}
    assert lowered_name(lowered, asked) == "_Z7reduce6IiLi256ELb0EEvPKT_PS0_j"
    assert lowered_name(lowered, "k<unsigned  int>") == "_Z1kIjEvv"      # the space inside a type name stays one
    assert lowered_name(lowered, "k<unsignedint>") == "k<unsignedint>"   # another name: given back as asked
    assert lowered_name(lowered, "reduce6<int, 256, true>") == "reduce6<int, 256, true>"
    assert lowered_name({}, "plain") == "plain"
