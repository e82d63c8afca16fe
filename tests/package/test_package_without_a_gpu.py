"""Tests that need no GPU: they run in CI."""
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import _signature as sig


# --- FNV-1a -------------------------------------------------------------------

@pytest.mark.parametrize("data, expected", [
    (b"", 0xcbf29ce484222325),
    (b"a", 0xaf63dc4c8601ec8c),
    (b"foobar", 0x85944171f73967e8),
])
def test_fnv1a64_reference_vectors(data, expected):
    assert cd._driver.fnv1a64(data) == expected


def test_fnv1a64_accepts_any_bytes_like():
    assert cd._driver.fnv1a64(bytearray(b"foobar")) == 0x85944171f73967e8
    assert cd._driver.fnv1a64(memoryview(b"foobar")) == 0x85944171f73967e8
    assert cd._driver.fnv1a64(np.frombuffer(b"foobar", dtype=np.uint8)) == 0x85944171f73967e8


# --- image kinds ----------------------------------------------------------------

def test_image_kind_tells_elf_fatbin_and_ptx_apart():
    assert cd.image_kind(b"\x7fELF\x02\x01\x01" + bytes(57)) == "cubin"
    with pytest.raises(cd.ArgumentValueError, match="truncated ELF file \\(7 bytes"):
        cd.image_kind(b"\x7fELF\x02\x01\x01")
    assert cd.image_kind(b"\x50\xed\x55\xba\x01\x00") == "fatbin"
    assert cd.image_kind(b"//\n.version 8.0\n.target sm_90\n") == "ptx"


def test_image_kind_rejects_empty_and_binary_garbage():
    with pytest.raises(ValueError, match="empty"):
        cd.image_kind(b"")
    with pytest.raises(ValueError, match="neither PTX"):
        cd.image_kind(b"\x00\x01\x02\x03\xff\xfe")


# --- import and errors without a driver --------------------------------------------

def _run_without_driver(code):
    env = dict(os.environ, PYCUDADRV_LIBCUDA="/nonexistent/libcuda.so.1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


def test_import_works_without_a_driver_and_first_use_says_what_is_missing():
    r = _run_without_driver("""
        import pycudadrv as cd
        assert cd.is_available() is False
        try:
            cd.Device(0)
        except cd.CudaUnavailableError as e:
            print("MSG:", e)
        else:
            raise SystemExit("no error")
    """)
    assert r.returncode == 0, r.stderr
    assert "MSG: CUDA driver library not found" in r.stdout
    assert "/nonexistent/libcuda.so.1" in r.stdout


def test_main_job_without_a_driver_prints_one_line_and_fails():
    r = _run_without_driver("import sys, pycudadrv.__main__ as m; sys.exit(m.main([]))")
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("pycudadrv: CUDA unavailable: CUDA driver library not found")
    assert lines[0].endswith(" For what pycudadrv found (driver, devices, NVRTC, environment): "
                             "python -m pycudadrv --info")


def test_stream_arguments_are_checked_before_the_driver_is_needed():
    r = _run_without_driver("""
        import numpy as np
        import pycudadrv as cd
        calls = [lambda: cd.Stream(priority=True), lambda: cd.Stream(priority=np.True_),
                 lambda: cd.Stream(priority="high"), lambda: cd.Stream(priority=-1.0),
                 lambda: cd.Stream(priority=None), lambda: cd.Stream(prio=-1),
                 lambda: cd.Stream(prio=-1, flags=1), lambda: cd.Stream(0, True), lambda: cd.Stream(0, device=0),
                 lambda: cd.Stream(nonblocking="no")]
        for call in calls:
            try:
                call()
            except cd.ArgumentTypeError as e:
                print(e)
        try:
            cd.Stream(priority=-1)
        except cd.CudaUnavailableError:
            print("a valid priority reaches the driver")
    """)
    assert r.returncode == 0, r.stderr
    must_be_an_int = "Stream: priority must be an int (lower numbers are higher priority, 0 is the default), got"
    assert r.stdout.splitlines() == [
        f"{must_be_an_int} the bool True",
        f"{must_be_an_int} the bool {np.True_!r}",
        f"{must_be_an_int} str 'high'",
        f"{must_be_an_int} float -1.0",
        f"{must_be_an_int} NoneType None",
        "Stream() got an unexpected keyword argument 'prio'; it takes device, nonblocking= and priority=",
        "Stream() got an unexpected keyword arguments 'prio', 'flags'; it takes device, nonblocking= and priority=",
        "Stream() takes the device as its only positional argument (nonblocking= and priority= are keywords), "
        "got 2 positional arguments",
        "Stream() got the device twice: positionally and as device=",
        "Stream: nonblocking must be True or False (or a numpy bool, 0 or 1), got str 'no'",
        "a valid priority reaches the driver",
    ]
    assert "__cinit__" not in r.stdout + r.stderr


def test_event_arguments_are_checked_before_the_driver_is_needed():
    r = _run_without_driver("""
        import numpy as np
        import pycudadrv as cd
        for call in (lambda: cd.Event("x"), lambda: cd.Event(True, False), lambda: cd.Event(timing="yes"),
                     lambda: cd.Event(timing=2)):
            try:
                call()
            except cd.ArgumentTypeError as e:
                print(e)
        for timing in (False, np.False_, 0):
            try:
                cd.Event(timing=timing)
            except cd.CudaUnavailableError:
                print("a bool timing reaches the driver")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Event takes keywords only: Event(timing=True, device=None), got 1 positional argument ('x')",
        "Event takes keywords only: Event(timing=True, device=None), got 2 positional arguments (True)",
        "Event: timing must be True or False (or a numpy bool, 0 or 1), got str 'yes'",
        "Event: timing must be True or False (or a numpy bool, 0 or 1), got int 2",
        "a bool timing reaches the driver",
        "a bool timing reaches the driver",
        "a bool timing reaches the driver",
    ]
    assert "__cinit__" not in r.stdout + r.stderr


def test_cuda_error_carries_code_name_description_and_call_and_pickles():
    e = cd.CudaError(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuMemAlloc", "allocating 8 bytes")
    assert (e.code, e.name, e.call) == (1, "CUDA_ERROR_INVALID_VALUE", "cuMemAlloc")
    assert str(e).startswith("CUDA_ERROR_INVALID_VALUE (1): invalid argument [in cuMemAlloc]")
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.code, e2.name, e2.description, e2.call, e2.context) == (
        1, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuMemAlloc", "allocating 8 bytes")


def test_generated_tables_match_cuda_h():
    assert cd._attributes.DEVICE_ATTRIBUTES["CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"] == 1
    assert cd._attributes.DEVICE_ATTRIBUTES["CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"] == 16
    assert cd._attributes.FUNCTION_ATTRIBUTES["CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"] == 0
    assert cd._driver.MIN_DRIVER_VERSION == 12000


# --- NVRTC (needs no GPU) ------------------------------------------------------------

SAXPY = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def test_compile_to_ptx_gives_text_with_the_entry_signature():
    obj = cd.compile(SAXPY, target="ptx", arch="sm_90")
    assert obj.target == "ptx" and cd.image_kind(obj.image) == "ptx"
    layout = sig.ptx_entries(obj.image.decode())["saxpy"]
    assert [(p.kind, p.size, p.offset) for p in layout] == [
        (sig.INTEGER, 8, 0), (sig.INTEGER, 8, 8), (sig.FLOAT, 4, 16), (sig.INTEGER, 4, 20)]


def test_compile_to_cubin_gives_elf_for_the_arch_and_keeps_the_ptx():
    obj = cd.compile(SAXPY, arch="sm_90")
    assert obj.target == "cubin" and obj.image[:4] == b"\x7fELF" and obj.arch == "sm_90"
    assert ".entry saxpy" in obj.ptx


def test_compile_error_carries_log_with_line_numbers_options_and_version():
    with pytest.raises(cd.NvrtcError) as ei:
        cd.compile("extern \"C\" __global__ void k() {\n  undefined_thing = 1;\n}\n", arch="sm_90",
                   options=("-DFOO=1",), name="broken.cu")
    e = ei.value
    assert "broken.cu(2)" in e.log and "undefined_thing" in e.log
    assert "-DFOO=1" in e.options and "-arch=sm_90" in e.options
    assert e.nvrtc_version == cd.nvrtc_version()
    assert "broken.cu(2)" in str(e)


def test_compile_name_expressions_return_lowered_names():
    src = "template <typename T> __global__ void fill(T* p, T v) { p[threadIdx.x] = v; }"
    obj = cd.compile(src, arch="sm_90", name_expressions=("fill<float>", "fill<int>"))
    assert obj.lowered_names["fill<float>"].startswith("_Z") and obj.lowered_names["fill<float>"] != \
        obj.lowered_names["fill<int>"]


def test_compile_headers_dict_is_used():
    obj = cd.compile('#include "scale.h"\nextern "C" __global__ void k(float* p) { p[0] = SCALE; }',
                     arch="sm_90", headers={"scale.h": "#define SCALE 3.0f\n"}, target="ptx")
    assert b".entry k" in obj.image


def test_compile_rejects_bad_target_and_arch():
    with pytest.raises(ValueError, match="target"):
        cd.compile(SAXPY, target="sass", arch="sm_90")
    with pytest.raises(ValueError, match="arch"):
        cd.compile(SAXPY, arch="hopper")


# --- signatures ------------------------------------------------------------------------

def test_signature_string_gives_natural_offsets():
    layout = sig.parse_signature("float* out, char* out2, float f, char c, double d")
    assert [(p.kind, p.size, p.offset) for p in layout] == [
        (sig.POINTER, 8, 0), (sig.POINTER, 8, 8), (sig.FLOAT, 4, 16), (sig.INT, 1, 20), (sig.FLOAT, 8, 24)]


def test_signature_with_struct_dtype_is_padded_to_its_alignment():
    pair = np.dtype([("a", np.int8), ("b", np.float64)], align=True)
    layout = sig.parse_signature(["char", pair, "int"])
    assert [(p.size, p.align, p.offset) for p in layout] == [(1, 1, 0), (16, 8, 8), (4, 4, 24)]


def test_ptx_entries_parse_arrays_pointers_and_several_entries():
    ptx = """
    .visible .entry first(
        .param .u64 .ptr .global .align 4 first_param_0,
        .param .align 8 .b8 first_param_1[16],
        .param .u8 first_param_2
    )
    .visible .entry second()
    """
    e = sig.ptx_entries(ptx)
    assert [(p.kind, p.size, p.offset) for p in e["first"]] == [
        (sig.POINTER, 8, 0), (sig.BYTES, 16, 8), (sig.INTEGER, 1, 24)]
    assert e["second"] == []


def test_unknown_signature_type_is_an_error():
    with pytest.raises(ValueError, match="unknown parameter type"):
        sig.parse_signature("float*, quaternion")


def test_compile_finds_the_cuda_device_headers_by_itself():
    src = ("#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n"
           'extern "C" __global__ void k(__half* p) { cooperative_groups::this_thread_block().sync();'
           " p[0] = __float2half(1.5f); }")
    obj = cd.compile(src, arch="sm_90")
    assert obj.image[:4] == b"\x7fELF"
    assert any(o.startswith("-I") for o in obj.options)


@pytest.mark.parametrize("kwargs, error", [
    (dict(source=5), TypeError), (dict(source="x\0y"), ValueError), (dict(source=b"// \xff\n"), ValueError),
    (dict(source="k", options=["-arch=sm_80"]), ValueError), (dict(source="k", name=None), TypeError),
    (dict(source="k", headers={"a.h": None}), TypeError), (dict(source="k", options=[3]), TypeError),
])
def test_compile_rejects_malformed_input_before_nvrtc(kwargs, error):
    with pytest.raises(error):
        cd.compile(arch="sm_90", **kwargs)


def test_compile_takes_a_single_include_path_string(tmp_path):
    obj = cd.compile('extern "C" __global__ void k() {}', arch="sm_90", include_paths=str(tmp_path), target="ptx")
    assert f"-I{tmp_path}" in obj.options


def test_image_kind_rejects_zeros_and_truncated_elf():
    with pytest.raises(ValueError):
        cd.image_kind(bytes(16))
    with pytest.raises(ValueError):
        cd.image_kind(b"\x7fEL")
    assert cd.image_kind(".version 8.0\n") == "ptx"


def test_a_library_that_is_not_a_driver_is_named_as_such():
    env = dict(os.environ, PYCUDADRV_LIBCUDA="libc.so.6")
    r = subprocess.run([sys.executable, "-c", "import pycudadrv as cd\ntry:\n    cd.require()\n"
                        "except cd.CudaUnavailableError as e:\n    print(e)"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert "is not a CUDA driver library" in r.stdout, r.stdout + r.stderr
