"""The zyx backend's remaining behaviours: the startup debug log (driver load, cuInit, cuDNN), cuDNN's
search (PYCUDADRV_CUDNN_PATH, system paths), NVRTC's missing-header error and the FAST_MATH_OPTIONS preset,
and Device.info. CPU tests use small C stand-ins for libcuda/libcudnn built here (skipped without a C
compiler); the GPU tests check Device.info against the attributes."""
import dataclasses
import os
import pickle
import shutil
import subprocess
import sys

import pytest

import pycudadrv as cd
from pycudadrv import _capabilities, cudnn, nvrtc

# A libcuda stand-in: cuDriverGetVersion says 13.0, cuInit returns $SHIM_CUINIT, every other entry
# point resolves to a stub that fails (none is called when cuInit fails).
SHIM_LIBCUDA = r"""
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
static CUresult drv_version(int *v) { *v = 13000; return 0; }
static CUresult cu_init(unsigned flags) { const char *v = getenv("SHIM_CUINIT"); (void)flags; return v ? atoi(v) : 999; }
static CUresult err_name(CUresult r, const char **s) {
    *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : r == 3 ? "CUDA_ERROR_NOT_INITIALIZED" : "CUDA_ERROR_UNKNOWN"; return 0; }
static CUresult err_string(CUresult r, const char **s) { (void)r; *s = "shim error"; return 0; }
static CUresult stub(void) { return 999; }
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *status) {
    (void)ver; (void)flags;
    if (!strcmp(sym, "cuDriverGetVersion")) *pfn = (void *)drv_version;
    else if (!strcmp(sym, "cuInit")) *pfn = (void *)cu_init;
    else if (!strcmp(sym, "cuGetErrorName")) *pfn = (void *)err_name;
    else if (!strcmp(sym, "cuGetErrorString")) *pfn = (void *)err_string;
    else *pfn = (void *)stub;
    if (status) *status = 1;
    return 0;
}
CUresult cuDriverGetVersion(int *v) { return drv_version(v); }
"""

# A libcudnn stand-in: cuDNN 9.10.2 built for "CUDA 77", whose cuBLASLt cannot exist.
SHIM_LIBCUDNN = r"""
#include <stddef.h>
size_t cudnnGetVersion(void) { return 91002; }
size_t cudnnGetCudartVersion(void) { return 77000; }
"""


def _build(tmp_path, source, name):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler to build the stand-in library")
    src = tmp_path / (name + ".c")
    src.write_text(source)
    out = tmp_path / (name + ".so")
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", str(src), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return str(out)


def _child(code, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("PYCUDADRV_")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def _log_lines(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("[pycudadrv] ")]


# --------------------------------------------------------------------------- the startup log: the driver

def test_debug_log_reports_a_driver_library_that_is_missing_with_the_path_and_the_dlopen_error():
    r = _child("import pycudadrv as cd; print(cd.is_available())",
               PYCUDADRV_DEBUG="1", PYCUDADRV_LIBCUDA="/nonexistent/libcuda.so.1")
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
    lines = _log_lines(r.stderr)
    assert "[pycudadrv] driver: dlopen('/nonexistent/libcuda.so.1') (from PYCUDADRV_LIBCUDA)" in lines
    failed = [ln for ln in lines if ln.startswith("[pycudadrv] driver: unavailable: ")]
    assert len(failed) == 1 and "/nonexistent/libcuda.so.1" in failed[0]
    assert "cannot open shared object file" in failed[0]


def test_debug_log_reports_a_driver_path_that_is_not_a_library(tmp_path):
    bogus = tmp_path / "libcuda.so.1"
    bogus.write_text("not an ELF file\n" * 20)
    r = _child("import pycudadrv as cd; print(cd.is_available())", PYCUDADRV_DEBUG="1", PYCUDADRV_LIBCUDA=str(bogus))
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
    failed = [ln for ln in _log_lines(r.stderr) if ln.startswith("[pycudadrv] driver: unavailable: ")]
    assert len(failed) == 1 and str(bogus) in failed[0] and "invalid ELF header" in failed[0]


def test_debug_log_reports_a_library_without_the_driver_api():
    r = _child("import pycudadrv as cd; print(cd.is_available())", PYCUDADRV_DEBUG="1", PYCUDADRV_LIBCUDA="libm.so.6")
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
    assert any("is not a CUDA driver library" in ln and "libm.so.6" in ln for ln in _log_lines(r.stderr))


@pytest.mark.parametrize("code, name", [(999, "CUDA_ERROR_UNKNOWN"), (100, "CUDA_ERROR_NO_DEVICE")])
def test_debug_log_reports_a_failing_cuinit_by_its_cuda_result_name(tmp_path, code, name):
    lib = _build(tmp_path, SHIM_LIBCUDA, "libcuda_shim")
    r = _child("import pycudadrv as cd\nfor _ in range(2): print(cd.is_available())",
               PYCUDADRV_DEBUG="1", PYCUDADRV_LIBCUDA=lib, SHIM_CUINIT=str(code))
    assert r.returncode == 0 and r.stdout.split() == ["False", "False"], r.stderr
    lines = _log_lines(r.stderr)
    init = [ln for ln in lines if "cuInit(0) failed" in ln]
    assert init == [f"[pycudadrv] driver: cuInit(0) failed: {name} (CUresult {code}) from {lib!r}, CUDA 13.0"]
    # the second is_available() is answered from the remembered failure: logged once
    assert len([ln for ln in lines if ln.startswith("[pycudadrv] driver: unavailable: ")]) == 1


def test_debug_log_reports_a_successful_load_and_cuinit(tmp_path):
    lib = _build(tmp_path, SHIM_LIBCUDA, "libcuda_shim")
    r = _child("import pycudadrv as cd; cd.require()", PYCUDADRV_DEBUG="1", PYCUDADRV_LIBCUDA=lib, SHIM_CUINIT="0")
    assert r.returncode == 0, r.stderr
    assert (f"[pycudadrv] driver: loaded {lib!r} (from PYCUDADRV_LIBCUDA): CUDA 13.0, cuInit(0) succeeded"
            in _log_lines(r.stderr))


def test_without_the_debug_switch_nothing_is_logged(tmp_path):
    lib = _build(tmp_path, SHIM_LIBCUDA, "libcuda_shim")
    r = _child("import pycudadrv as cd; print(cd.is_available())", PYCUDADRV_LIBCUDA=lib, SHIM_CUINIT="999")
    assert r.returncode == 0 and r.stdout.strip() == "False"
    assert _log_lines(r.stderr) == []


# --------------------------------------------------------------------------- cuDNN: search and log

@pytest.fixture
def fresh_loader():
    cudnn._forget()
    yield
    cudnn._forget()


def test_cudnn_search_order_is_wheels_then_system_loader_then_fixed_paths(monkeypatch):
    monkeypatch.delenv("PYCUDADRV_CUDNN_PATH", raising=False)
    order = cudnn.search_order()
    i = order.index("libcudnn.so.9")
    assert order[i + 1:] == list(cudnn.SYSTEM_PATHS)
    assert "/usr/local/cuda/lib64/libcudnn.so.9" in cudnn.SYSTEM_PATHS
    assert all(os.path.isabs(p) for p in order[:i])      # wheel and PyTorch files come first, where present


def test_cudnn_path_variable_is_the_only_candidate_when_set(monkeypatch, tmp_path):
    monkeypatch.setenv("PYCUDADRV_CUDNN_PATH", str(tmp_path / "libcudnn.so.9"))
    assert cudnn.search_order() == [str(tmp_path / "libcudnn.so.9")]


def test_a_cudnn_path_that_does_not_load_is_named_and_nothing_else_is_tried(monkeypatch, fresh_loader):
    monkeypatch.setenv("PYCUDADRV_CUDNN_PATH", "/nonexistent/cudnn/libcudnn.so.9")
    with pytest.raises(cd.CudnnUnavailableError) as info:
        cudnn.require()
    msg = str(info.value)
    assert "PYCUDADRV_CUDNN_PATH='/nonexistent/cudnn/libcudnn.so.9' could not be loaded" in msg
    assert "nothing else is tried" in msg and "/usr/local/cuda/lib64" not in msg


def test_a_failed_cudnn_search_lists_every_place_tried(monkeypatch, fresh_loader):
    monkeypatch.delenv("PYCUDADRV_CUDNN_PATH", raising=False)
    monkeypatch.setattr(cudnn, "SYSTEM_PATHS", ("/nonexistent/a/libcudnn.so.9", "/nonexistent/b/libcudnn.so.9"))
    monkeypatch.setattr(cudnn, "_nvidia_dirs", lambda: [])
    monkeypatch.setattr(cudnn.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(cudnn.ctypes, "CDLL", lambda p: (_ for _ in ()).throw(OSError(f"{p}: no such file")))
    with pytest.raises(cd.CudnnUnavailableError) as info:
        cudnn.require()
    msg = str(info.value)
    for p in ("libcudnn.so.9 (libcudnn.so.9: no such file)", "/nonexistent/a/libcudnn.so.9 (",
              "/nonexistent/b/libcudnn.so.9 ("):
        assert p in msg
    assert msg.index("/nonexistent/a/") < msg.index("/nonexistent/b/")
    assert "PYCUDADRV_CUDNN_PATH" in msg and "pip install nvidia-cudnn-cu13" in msg


def test_cudnn_path_variable_loads_that_library(tmp_path):
    lib = _build(tmp_path, SHIM_LIBCUDNN, "libcudnn_shim")
    r = _child("from pycudadrv import cudnn; print(cudnn.unavailable_reason())",
               PYCUDADRV_CUDNN_PATH=lib, PYCUDADRV_DEBUG="1")
    assert r.returncode == 0, r.stderr
    # it was opened and read (version 9.10.2): what stops it is the stand-in's impossible cuBLASLt
    assert f"cuDNN 9.10.2 ({lib}) needs it" in r.stdout
    assert any(ln.startswith("[pycudadrv] cuDNN: unavailable: cuBLASLt (libcublasLt.so.77) not found")
               for ln in _log_lines(r.stderr))


def test_debug_log_reports_cudnn_loaded_with_its_path_and_version(monkeypatch, fresh_loader, capfd):
    monkeypatch.setenv("PYCUDADRV_DEBUG", "1")
    monkeypatch.setattr(cudnn, "_open", lambda: (object(), "/opt/x/libcudnn.so.9"))
    monkeypatch.setattr(cudnn, "_adopt", lambda lib, path: ((9, 10, 2), None))
    cudnn.set_enabled(True)
    try:
        cudnn.require()
    finally:
        cudnn.set_enabled(None)
    assert "[pycudadrv] cuDNN: loaded /opt/x/libcudnn.so.9 (cuDNN 9.10.2)" in capfd.readouterr().err


def test_debug_log_reports_cudnn_switched_off_once(monkeypatch, capfd):
    monkeypatch.setenv("PYCUDADRV_DEBUG", "1")
    monkeypatch.setattr(cudnn, "_off_logged", [])
    before = cudnn.set_enabled(False)
    try:
        assert cudnn.is_available() is False and cudnn.is_available() is False
    finally:
        cudnn.set_enabled(None if before else False)
        cudnn.set_enabled(None)
    err = capfd.readouterr().err
    assert err.count("[pycudadrv] cuDNN: not loaded: switched off") == 1


# --------------------------------------------------------------------------- NVRTC: headers and the preset

FP16 = '// half precision\n#include <cuda_fp16.h>\nextern "C" __global__ void k(__half* x) { x[0] = __float2half(1.0f); }\n'
NO_HEADERS = pytest.mark.skipif(not nvrtc.default_include_dirs(), reason="no CUDA device headers installed")


@pytest.fixture
def need_nvrtc():
    try:
        nvrtc.nvrtc_version()
    except cd.NvrtcUnavailableError as e:
        pytest.skip(str(e))


@pytest.fixture
def nvrtc_must_not_run(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("NVRTC ran: the missing header should have been reported before it")
    monkeypatch.setattr(nvrtc, "_nvrtc_compile_program", refuse)


def test_a_missing_cuda_fp16_h_is_reported_before_nvrtc_runs(need_nvrtc, monkeypatch, tmp_path, nvrtc_must_not_run):
    monkeypatch.setattr(nvrtc, "default_include_dirs", lambda: [])
    with pytest.raises(cd.HeaderNotFoundError) as info:
        nvrtc.compile(FP16, arch="sm_90", include_paths=[str(tmp_path)], use_cache=False)
    e = info.value
    assert isinstance(e, cd.NvrtcError)
    assert (e.header, e.line, e.searched) == ("cuda_fp16.h", 2, (str(tmp_path),))
    msg = str(e)
    assert "kernel.cu line 2 includes 'cuda_fp16.h'" in msg and f"searched, in order: {tmp_path}" in msg
    assert "2 | #include <cuda_fp16.h>" in msg and "nvidia-cuda-runtime" in msg


def test_the_missing_header_error_with_no_include_directory_at_all_says_so(need_nvrtc, monkeypatch,
                                                                           nvrtc_must_not_run):
    monkeypatch.setattr(nvrtc, "default_include_dirs", lambda: [])
    with pytest.raises(cd.HeaderNotFoundError, match="none: no directory with the CUDA headers was found"):
        nvrtc.compile(FP16, arch="sm_90", use_cache=False)


def test_include_directories_in_the_options_are_searched_too(need_nvrtc, monkeypatch, tmp_path, nvrtc_must_not_run):
    monkeypatch.setattr(nvrtc, "default_include_dirs", lambda: [])
    with pytest.raises(cd.HeaderNotFoundError) as info:
        nvrtc.compile(FP16, arch="sm_90", options=["-I", str(tmp_path / "a"), f"--include-path={tmp_path / 'b'}"],
                      use_cache=False)
    assert info.value.searched == (str(tmp_path / "a"), str(tmp_path / "b"))


def test_a_header_given_in_memory_or_in_an_include_path_is_not_missing(need_nvrtc, monkeypatch, tmp_path):
    monkeypatch.setattr(nvrtc, "default_include_dirs", lambda: [])
    half = "#pragma once\nstruct __half { unsigned short x; };\n__device__ __half __float2half(float f) { return {0}; }\n"
    src = FP16
    obj = nvrtc.compile(src, arch="sm_90", headers={"cuda_fp16.h": half}, use_cache=False)
    assert obj.ptx and ".entry k" in obj.ptx
    (tmp_path / "cuda_fp16.h").write_text(half)
    obj = nvrtc.compile(src, arch="sm_90", include_paths=[str(tmp_path)], use_cache=False)
    assert ".entry k" in obj.ptx


def test_includes_in_comments_or_under_an_if_are_not_checked_early(need_nvrtc, monkeypatch):
    monkeypatch.setattr(nvrtc, "default_include_dirs", lambda: [])
    src = ('// #include <cuda_fp16.h>\n/* #include <cuda_bf16.h>\n */\n#if 0\n#include <mma.h>\n#endif\n'
           'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n')
    assert ".entry k" in nvrtc.compile(src, arch="sm_90", use_cache=False).ptx


def test_any_other_header_nvrtc_cannot_open_is_named_with_its_line_and_the_log(need_nvrtc):
    src = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n#include "no_such_header_zyx.h"\n'
    with pytest.raises(cd.HeaderNotFoundError) as info:
        nvrtc.compile(src, arch="sm_90", use_cache=False)
    e = info.value
    assert (e.header, e.line) == ("no_such_header_zyx.h", 2)
    assert '2 | #include "no_such_header_zyx.h"' in str(e) and "cannot open source file" in e.log
    assert e.searched == tuple(nvrtc.default_include_dirs())


def test_the_missing_header_error_pickles_with_its_fields(need_nvrtc, monkeypatch, nvrtc_must_not_run):
    monkeypatch.setattr(nvrtc, "default_include_dirs", lambda: [])
    with pytest.raises(cd.HeaderNotFoundError) as info:
        nvrtc.compile(FP16, arch="sm_90", use_cache=False)
    e2 = pickle.loads(pickle.dumps(info.value))
    assert type(e2) is cd.HeaderNotFoundError and str(e2) == str(info.value)
    assert (e2.header, e2.line, e2.searched, e2.options) == (info.value.header, 2, (), info.value.options)


@NO_HEADERS
def test_cuda_fp16_h_compiles_with_the_default_include_path(need_nvrtc):
    for _ in range(2):
        assert ".entry k" in nvrtc.compile(FP16, arch="sm_90", target="ptx", use_cache=False).ptx


DIVIDE = 'extern "C" __global__ void k(float* x, const float* y) { x[threadIdx.x] = x[threadIdx.x] / y[threadIdx.x]; }\n'


def test_the_zyx_preset_is_fast_math_and_the_default_is_not(need_nvrtc):
    assert nvrtc.FAST_MATH_OPTIONS == ("--use_fast_math",)
    plain = nvrtc.compile(DIVIDE, arch="compute_90", use_cache=False)
    fast = nvrtc.compile(DIVIDE, arch="compute_90", options=nvrtc.FAST_MATH_OPTIONS, use_cache=False)
    assert "--use_fast_math" not in plain.options and "--use_fast_math" in fast.options
    assert "div.rn.f32" in plain.ptx                               # IEEE division by default
    assert "div.rn.f32" not in fast.ptx and "div.approx" in fast.ptx   # approximate under the preset


# --------------------------------------------------------------------------- Device.info: the rules (CPU)

H200 = {"warp_size": 32, "multiprocessor_count": 132, "max_threads_per_block": 1024,
        "max_threads_per_multiprocessor": 2048, "max_registers_per_block": 65536,
        "max_registers_per_multiprocessor": 65536, "max_shared_memory_per_block": 49152,
        "max_shared_memory_per_block_optin": 232448, "max_shared_memory_per_multiprocessor": 233472,
        "single_to_double_precision_perf_ratio": 2, "max_block_dim_x": 1024, "max_block_dim_y": 1024,
        "max_block_dim_z": 64, "max_grid_dim_x": 2**31 - 1, "max_grid_dim_y": 65535, "max_grid_dim_z": 65535}


def _derive(major, minor, **over):
    attrs = dict(H200, compute_capability_major=major, compute_capability_minor=minor, **over)
    assert sorted(attrs) == sorted(_capabilities.ATTRIBUTES)
    return _capabilities.derive(attrs.__getitem__)


@pytest.mark.parametrize("cc, tensor_cores, bf16, fp16", [
    ((5, 0), False, False, False), ((5, 3), False, False, True), ((6, 1), False, False, True),
    ((7, 0), True, False, True), ((7, 5), True, False, True), ((8, 0), True, True, True),
    ((8, 6), True, True, True), ((8, 9), True, True, True), ((9, 0), True, True, True),
    ((10, 0), True, True, True), ((12, 0), True, True, True),
])
def test_capabilities_follow_the_compute_capability(cc, tensor_cores, bf16, fp16):
    info = _derive(*cc)
    assert (info.tensor_cores, info.bf16, info.fp16) == (tensor_cores, bf16, fp16)
    assert info.compute_capability == cc and info.arch == f"sm_{cc[0]}{cc[1]}"


@pytest.mark.parametrize("ratio, rate", [(2, "full"), (3, "full"), (4, "reduced"), (16, "reduced"),
                                         (24, "minimal"), (32, "minimal"), (64, "minimal")])
def test_the_fp64_rate_class_follows_the_fp32_to_fp64_ratio(ratio, rate):
    info = _derive(8, 6, single_to_double_precision_perf_ratio=ratio)
    assert (info.fp64_ratio, info.fp64_rate) == (ratio, rate)


@pytest.mark.parametrize("cc, ratio", [((9, 0), 2), ((8, 0), 2), ((7, 0), 2), ((6, 0), 2), ((3, 7), 3),
                                       ((8, 6), 64), ((8, 9), 64), ((7, 5), 32), ((6, 1), 32)])
def test_an_unreported_fp64_ratio_comes_from_the_architecture(cc, ratio):
    assert _derive(*cc, single_to_double_precision_perf_ratio=0).fp64_ratio == ratio


def test_register_bytes_per_block_sm_and_thread():
    info = _derive(9, 0)
    assert (info.max_register_bytes_per_block, info.max_register_bytes_per_multiprocessor) == (262144, 262144)
    assert info.max_register_bytes_per_thread == 64 * 4                  # 65536 registers / 1024 threads
    small = _derive(9, 0, max_threads_per_block=128)
    assert small.max_register_bytes_per_thread == 255 * 4               # capped at 255 registers a thread
    assert (small.max_block, small.max_grid) == ((1024, 1024, 64), (2**31 - 1, 65535, 65535))


def test_device_info_is_frozen():
    info = _derive(9, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.bf16 = False  # type: ignore[misc]
    assert cd.DeviceInfo is _capabilities.DeviceInfo


# --------------------------------------------------------------------------- Device.info on the device

@pytest.mark.gpu
def test_device_info_matches_the_attributes():
    dev = cd.Device(0)
    info = dev.info
    a = dev.attribute
    major, minor = a("compute_capability_major"), a("compute_capability_minor")
    assert info.compute_capability == (major, minor) == dev.compute_capability and info.arch == dev.arch
    assert info.tensor_cores is (major >= 7) and info.bf16 is (major >= 8)
    assert info.max_register_bytes_per_block == 4 * a("max_registers_per_block")
    assert info.max_register_bytes_per_multiprocessor == 4 * a("max_registers_per_multiprocessor")
    assert info.max_register_bytes_per_thread == 4 * min(a("max_registers_per_block") // a("max_threads_per_block"),
                                                         255)
    assert info.warp_size == a("warp_size") and info.multiprocessor_count == dev.multiprocessor_count
    assert info.max_threads_per_block == a("max_threads_per_block") == dev.max_threads_per_block
    assert info.max_block == tuple(a(f"max_block_dim_{c}") for c in "xyz")
    assert info.max_grid == tuple(a(f"max_grid_dim_{c}") for c in "xyz")
    assert info.max_shared_bytes_per_block == a("max_shared_memory_per_block")
    assert info.max_shared_bytes_per_block_optin == a("max_shared_memory_per_block_optin")
    ratio = a("single_to_double_precision_perf_ratio")
    if ratio > 0:
        assert info.fp64_ratio == ratio
    assert info.fp64_rate == _capabilities.fp64_rate_class(info.fp64_ratio)
    assert cd.Device(0).info is info and dev.info is info              # read once per device


@pytest.mark.gpu
def test_device_info_of_an_sm90_device_has_tensor_cores_bf16_and_full_fp64():
    info = cd.Device(0).info
    if info.compute_capability != (9, 0):
        pytest.skip(f"not an sm_90 device ({info.arch})")
    assert info.tensor_cores and info.bf16 and info.fp16
    assert (info.fp64_ratio, info.fp64_rate) == (2, "full")
    assert info.max_register_bytes_per_block == 65536 * 4 and info.max_register_bytes_per_thread == 256


@pytest.mark.gpu
def test_debug_log_on_the_device_reports_the_load_cuinit_and_the_devices():
    env = {k: v for k, v in os.environ.items() if k in ("PYCUDADRV_LIBCUDA", "FAKECUDA_KERNELS")}
    r = _child("import pycudadrv as cd; cd.device_count(); print(cd.Device(0).info.arch)", PYCUDADRV_DEBUG="1",
               **env)
    assert r.returncode == 0, r.stderr
    lines = _log_lines(r.stderr)
    assert any(ln.startswith("[pycudadrv] driver: loaded ") and "cuInit(0) succeeded" in ln for ln in lines)
    assert any("device 0:" in ln and "sm_" in ln for ln in lines)
