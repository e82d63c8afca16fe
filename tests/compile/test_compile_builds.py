"""Builds beyond one CUBIN: multi-architecture fatbins (nvFatbin), LTO-IR linked
with nvJitLink, compile() options and errors, the disk cache's limits, and
Ctrl-C during a compile. CPU tests need NVRTC (and nvFatbin / nvJitLink where
marked); the GPU tests at the end load and run what was built."""
import os
import shutil
import signal
import subprocess
import threading
import warnings

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import link, nvrtc
from pycudadrv._signature import FLOAT, POINTER, UINT


def _available(what):
    try:
        link._load(what)
        return True
    except cd.LinkerUnavailableError:
        return False


needs_nvfatbin = pytest.mark.skipif(not _available("nvfatbin"), reason="nvFatbin not installed "
                                    "(pip install nvidia-nvfatbin)")
needs_nvjitlink = pytest.mark.skipif(not _available("nvjitlink"), reason="nvJitLink not installed "
                                     "(pip install nvidia-nvjitlink)")


def _lto_compatible():
    # LTO-IR from an NVRTC newer than nvJitLink cannot be linked (NVJITLINK_ERROR_OUTDATED_LIBRARY).
    return _available("nvjitlink") and link.nvjitlink_version() >= cd.nvrtc_version()


needs_lto = pytest.mark.skipif(not _lto_compatible(), reason="needs an nvJitLink at least as new as NVRTC")

SAXPY = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
# Two translation units for LTO: the kernel calls a device function defined in the other one.
LTO_KERNEL = r"""
extern "C" __device__ float poly(float x);
extern "C" __global__ void apply_poly(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = poly(x[i]);
}
"""
LTO_POLY = 'extern "C" __device__ float poly(float x) { return 3.0f * x * x - 2.0f * x + 0.5f; }'
# Dynamic parallelism: needs the device runtime library at link time.
CDP = r"""
extern "C" __global__ void child(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 2.0f * p[i] + 1.0f;
}
extern "C" __global__ void parent(float* p, int n) {
    if (threadIdx.x == 0 && blockIdx.x == 0) child<<<(n + 255) / 256, 256>>>(p, n);
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYCUDADRV_CACHE", raising=False)
    monkeypatch.delenv("PYCUDADRV_CACHE_MAX_BYTES", raising=False)
    return tmp_path / "cache"


def entries(cache):
    return sorted(p for p in cache.iterdir() if p.suffix == ".nvrtc") if cache.exists() else []


# --- multi-architecture fatbins -----------------------------------------------------------------

@needs_nvfatbin
def test_arch_list_gives_a_fatbin_with_a_cubin_per_arch_and_the_newest_ptx(cache):
    obj = cd.compile(SAXPY, arch=["sm_90", "sm_80"])
    assert obj.target == "fatbin" and obj.image[:4] == b"\x50\xed\x55\xba" and cd.image_kind(obj.image) == "fatbin"
    assert obj.archs == ("sm_80", "sm_90") and obj.arch == "sm_90"
    assert link.fatbin_entries(obj.image) == [("cubin", "sm_80"), ("cubin", "sm_90"), ("ptx", "sm_90")]
    assert ".target sm_90" in obj.ptx and ".entry saxpy" in obj.ptx


@needs_nvfatbin
def test_fatbin_contents_as_cuobjdump_lists_them(cache):
    tool = shutil.which("cuobjdump")
    try:
        import triton  # ships a cuobjdump
        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        tool = tool or (bundled if os.path.exists(bundled) else None)
    except ImportError:
        pass
    if tool is None:
        pytest.skip("no cuobjdump (a CUDA toolkit or Triton's) to cross-check the fatbin")
    obj = cd.compile(SAXPY, arch=["sm_80", "sm_86", "sm_90"], name="saxpy.cu")
    path = cache.parent / "saxpy.fatbin"
    path.write_bytes(obj.image)
    out = subprocess.run([tool, "-lelf", "-lptx", str(path)], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:4] == ["ELF file    1: saxpy.sm_80.cubin", "ELF file    2: saxpy.sm_86.cubin",
                                   "ELF file    3: saxpy.sm_90.cubin", "PTX file    1: saxpy.sm_90.ptx"]


@needs_nvfatbin
def test_each_architecture_is_its_own_cache_entry_shared_with_single_arch_builds(cache):
    single = cd.compile(SAXPY, arch="sm_90")
    multi = cd.compile(SAXPY, arch=["sm_80", "sm_90"])
    assert not single.from_cache and not multi.from_cache       # sm_80 was new
    assert len(entries(cache)) == 2                              # sm_90 compiled once
    again = cd.compile(SAXPY, arch=["sm_90", "sm_80", "sm_90"])  # order and repeats do not matter
    assert again.from_cache and again.image == multi.image


def test_arch_lists_that_cannot_make_a_fatbin_are_refused():
    with pytest.raises(cd.ArgumentValueError, match="fatbin"):
        cd.compile(SAXPY, arch=["sm_80", "sm_90"], target="cubin")
    with pytest.raises(cd.ArgumentValueError, match="fatbin"):
        cd.compile(SAXPY, arch=["sm_80", "sm_90"], target="ptx")
    with pytest.raises(cd.ArgumentValueError, match="real architectures"):
        cd.compile(SAXPY, arch=["sm_80", "compute_90"])
    with pytest.raises(cd.ArgumentValueError, match="no architecture"):
        cd.compile(SAXPY, arch=[])


def test_a_virtual_architecture_gives_ptx_for_that_virtual_architecture():
    obj = cd.compile(SAXPY, arch="compute_80")
    assert (obj.target, obj.arch, obj.options[0]) == ("ptx", "compute_80", "-arch=compute_80")
    assert cd.image_kind(obj.image) == "ptx" and obj.image == obj.ptx.encode()
    assert ".target sm_80\n" in obj.ptx and ".entry saxpy(" in obj.ptx
    assert obj.image == cd.compile(SAXPY, arch="compute_80", target="ptx").image


def test_a_cubin_for_a_virtual_architecture_is_refused_naming_the_real_one():
    with pytest.raises(cd.ArgumentValueError) as ei:
        cd.compile(SAXPY, arch="compute_90", target="cubin")
    assert str(ei.value) == ("compile: arch='compute_90' is a virtual architecture, which has no machine code: a "
                             "CUBIN needs a real one (arch='sm_90'); for PTX of compute_90 leave target out or give "
                             "target='ptx'")


def test_a_real_architecture_still_gives_a_cubin_by_default():
    obj = cd.compile(SAXPY, arch="sm_80")
    assert (obj.target, obj.arch, cd.image_kind(obj.image)) == ("cubin", "sm_80", "cubin")


NO_KERNEL_WARNING = (r"compile: {name} defines no kernel \(no __global__ function: its PTX has no \.entry\), so its "
                     r"module has nothing to launch")


@pytest.mark.parametrize("target, arch", [("cubin", "sm_90"), ("ptx", "sm_90"), (None, "compute_90"),
                                          pytest.param("fatbin", ["sm_80", "sm_90"], marks=needs_nvfatbin)])
def test_a_compile_that_defines_no_kernel_warns_naming_the_file(target, arch):
    with pytest.warns(RuntimeWarning, match=NO_KERNEL_WARNING.format(name=r"empty\.cu")):
        obj = cd.compile("", arch=arch, target=target, name="empty.cu")
    assert ".entry" not in obj.ptx


def test_a_template_kernel_without_name_expressions_warns_that_it_was_not_emitted():
    src = "template <typename T> __global__ void fill(T* p, T v) { p[threadIdx.x] = v; }"
    with pytest.warns(RuntimeWarning, match=NO_KERNEL_WARNING.format(name=r"fill\.cu") + r".*name_expressions"):
        cd.compile(src, arch="sm_90", name="fill.cu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cd.compile(src, arch="sm_90", name="fill.cu", name_expressions=("fill<float>",))


@pytest.mark.parametrize("how", [dict(target="ltoir"), dict(options=["-rdc=true"]), dict(options=["-dc"])])
def test_device_functions_compiled_for_linking_do_not_warn(how):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        obj = cd.compile(LTO_POLY, arch="sm_90", name="poly.cu", **how)
    assert obj.target == how.get("target", "cubin")


def test_a_cache_hit_without_a_kernel_warns_again(cache):
    with pytest.warns(RuntimeWarning, match=NO_KERNEL_WARNING.format(name=r"kernel\.cu")):
        cd.compile(LTO_POLY, arch="sm_90")
    with pytest.warns(RuntimeWarning, match=NO_KERNEL_WARNING.format(name=r"kernel\.cu")):
        assert cd.compile(LTO_POLY, arch="sm_90").from_cache


def test_an_architecture_nvrtc_cannot_compile_for_lists_the_supported_ones():
    supported = cd.nvrtc.nvrtc_supported_archs()
    assert "sm_90" in supported and supported == sorted(supported, key=lambda a: int(a[3:]))
    with pytest.raises(cd.ArgumentValueError, match=r"cannot compile for sm_60; it supports .*sm_90"):
        cd.compile(SAXPY, arch="sm_60")        # a real architecture CUDA 13's NVRTC has dropped


# --- LTO-IR and the linker --------------------------------------------------------------------------

def test_ltoir_target_gives_nvvm_ir_that_cannot_be_loaded_unlinked(cache):
    obj = cd.compile(LTO_POLY, arch="sm_90", target="ltoir")
    assert obj.target == "ltoir" and obj.image[:4] == b"\xedCN\x7f" and obj.ptx is None
    assert "-dlto" in obj.options
    with pytest.raises(cd.ArgumentValueError, match="link it first"):
        obj.load()


@needs_lto
def test_two_ltoir_pieces_link_into_one_cubin_that_keeps_the_declared_types(cache):
    a = cd.compile(LTO_KERNEL, arch="sm_90", target="ltoir", name="kernel.cu")
    b = cd.compile(LTO_POLY, arch="sm_90", target="ltoir", name="poly.cu")
    out = cd.Linker(arch="sm_90").add(a).add(b).link()
    assert out.target == "cubin" and out.image[:4] == b"\x7fELF" and out.arch == "sm_90"
    assert b"apply_poly" in out.image and out.linker_version == link.nvjitlink_version()
    assert "-lto" in out.options and "-arch=sm_90" in out.options
    assert out.source_decls["apply_poly"] == [(POINTER, 8, 8, False), (POINTER, 8, 8, True), (cd._signature.INT, 4,
                                                                                           4, None)]


@needs_lto
def test_a_link_result_comes_from_the_disk_cache_the_second_time(cache):
    a = cd.compile(LTO_KERNEL, arch="sm_90", target="ltoir")
    b = cd.compile(LTO_POLY, arch="sm_90", target="ltoir")
    first = cd.Linker(a, b).link()            # arch from the inputs
    second = cd.Linker(a, b).link()
    other = cd.Linker(a, b, options="-O0").link()
    assert not first.from_cache and second.from_cache and second.image == first.image
    assert not other.from_cache and second.source_decls == first.source_decls


@needs_lto
def test_an_unresolved_function_is_a_link_error_with_the_linker_log(cache):
    a = cd.compile(LTO_KERNEL, arch="sm_90", target="ltoir")
    with pytest.raises(cd.LinkError) as ei:
        cd.Linker(arch="sm_90").add(a).link()
    assert "poly" in ei.value.log and "NVJITLINK_ERROR" in str(ei.value)
    assert ei.value.code == 4  # NVJITLINK_ERROR_PTX_COMPILE


@needs_lto
def test_dynamic_parallelism_needs_the_device_runtime_and_the_error_says_so(cache):
    parent = cd.compile(CDP, arch="sm_90", target="ltoir")
    with pytest.raises(cd.LinkError, match="device_runtime=True"):
        cd.Linker(parent, arch="sm_90").link()
    out = cd.Linker(parent, arch="sm_90", device_runtime=True).link()
    assert out.image[:4] == b"\x7fELF" and b"parent" in out.image
    assert os.path.basename(link.device_runtime_library()) == "libcudadevrt.a"


@needs_nvjitlink
def test_linker_inputs_are_told_apart_by_their_bytes_and_bad_ones_refused(cache):
    ptx = cd.compile(SAXPY, arch="sm_90", target="ptx")
    out = cd.Linker(arch="sm_90").add(bytes(ptx.image)).link()   # raw PTX bytes: kind from the text
    assert out.image[:4] == b"\x7fELF"
    with pytest.raises(cd.ArgumentValueError, match="cannot tell"):
        cd.Linker(arch="sm_90").add(b"\x01\x02\x03\x04garbage")
    with pytest.raises(cd.ArgumentValueError, match="kind must be one of"):
        cd.Linker(arch="sm_90").add(ptx.image, kind="sass")
    with pytest.raises(cd.ArgumentValueError, match="arch="):
        cd.Linker(options=["-arch=sm_80"])
    with pytest.raises(cd.ArgumentValueError, match="no inputs"):
        cd.Linker(arch="sm_90").link()
    assert cd.Linker(options="-O3 -lineinfo").options == ("-O3", "-lineinfo")


# --- compile() options and errors ------------------------------------------------------------

def test_an_options_string_is_split_as_a_shell_would():
    obj = cd.compile(SAXPY, arch="sm_90", target="ptx", options='-DA=1 -DB="2 3"  --use_fast_math')
    assert obj.options[-3:] == ("-DA=1", "-DB=2 3", "--use_fast_math")


def test_options_that_cannot_be_split_or_are_a_dict_are_refused():
    with pytest.raises(cd.ArgumentValueError, match="split like a shell"):
        cd.compile(SAXPY, arch="sm_90", options='-DA="unbalanced')
    with pytest.raises(cd.ArgumentTypeError, match="not a dict"):
        cd.compile(SAXPY, arch="sm_90", options={"-DA": "1"})
    with pytest.raises(cd.ArgumentTypeError, match="not a set"):
        cd.compile(SAXPY, arch="sm_90", options={"-DA=1"})
    with pytest.raises(cd.ArgumentValueError, match="arch="):
        cd.compile(SAXPY, arch="sm_90", options="-DX=1 --gpu-architecture=sm_80")
    with pytest.raises(cd.ArgumentValueError, match="target='ltoir'"):
        cd.compile(SAXPY, arch="sm_90", options="-dlto")


def test_no_arch_and_no_gpu_says_to_pass_arch(monkeypatch):
    def no_gpu():
        raise cd.CudaUnavailableError("CUDA driver library not found")
    monkeypatch.setattr(nvrtc, "_default_arch", no_gpu)
    with pytest.raises(cd.CudaUnavailableError, match=r"no arch= given.*arch='sm_90'.*sm_90") as ei:
        cd.compile(SAXPY)
    assert isinstance(ei.value.__cause__, cd.CudaUnavailableError)


def test_source_declarations_are_recorded_and_survive_the_cache(cache):
    first = cd.compile(SAXPY, arch="sm_90")
    second = cd.compile(SAXPY, arch="sm_90")
    want = {"saxpy": [(POINTER, 8, 8, False), (POINTER, 8, 8, True), (FLOAT, 4, 4, None), (UINT, 4, 4, None)]}
    assert first.source_decls == want and second.from_cache and second.source_decls == want
    assert all(type(d[0]) is type(POINTER) for d in second.source_decls["saxpy"])


# --- the disk cache -----------------------------------------------------------------------------

def test_the_key_covers_the_nvrtc_library_file_not_just_its_version(cache, monkeypatch):
    ident = nvrtc._nvrtc_identity()
    path = os.path.realpath(nvrtc.nvrtc_path()) if os.path.isabs(nvrtc.nvrtc_path()) else ident[2]
    assert ident[:2] == list(cd.nvrtc_version()) and ident[2] == path
    assert ident[3] == os.stat(path).st_size and ident[4] == os.stat(path).st_mtime_ns
    cd.compile(SAXPY, arch="sm_90")
    assert cd.compile(SAXPY, arch="sm_90").from_cache
    monkeypatch.setattr(nvrtc, "_nvrtc_identity", lambda: ident[:2] + [path, ident[3] + 1, ident[4]])
    assert not cd.compile(SAXPY, arch="sm_90").from_cache      # another build of the same version


def test_the_cache_keeps_the_most_recently_used_entries_within_its_limit(cache, monkeypatch):
    srcs = [SAXPY.replace("a * x[i]", f"a * x[i] + {k}.0f") for k in range(3)]
    cd.compile(srcs[0], arch="sm_90")
    (e0,) = entries(cache)
    cd.compile(srcs[1], arch="sm_90")
    (e1,) = set(entries(cache)) - {e0}
    os.utime(e0, (1_000_000, os.stat(e0).st_mtime))   # both long unused, entry 0 the older
    os.utime(e1, (2_000_000, os.stat(e1).st_mtime))
    assert cd.compile(srcs[0], arch="sm_90").from_cache  # entry 0 used now: entry 1 is the least recent
    size = max(e0.stat().st_size, e1.stat().st_size)
    monkeypatch.setenv("PYCUDADRV_CACHE_MAX_BYTES", str(int(2.5 * size)))
    cd.compile(srcs[2], arch="sm_90")
    left = entries(cache)
    assert len(left) == 2 and e0 in left and e1 not in left
    assert cd.compile(srcs[0], arch="sm_90").from_cache and not cd.compile(srcs[1], arch="sm_90").from_cache
    assert cd.nvrtc.cache_size()[0] == 2


def test_an_unusable_cache_directory_warns_once_and_compiles_anyway(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PYCUDADRV_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("PYCUDADRV_CACHE", raising=False)
    with pytest.warns(RuntimeWarning, match=r"not usable: cannot create it.*PYCUDADRV_CACHE_DIR"):
        obj = cd.compile(SAXPY.replace("y[i] =", "y[i] = 1.0f +"), arch="sm_90")
    assert obj.image[:4] == b"\x7fELF" and not obj.from_cache
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # a second compile does not warn again
        cd.compile(SAXPY.replace("y[i] =", "y[i] = 2.0f +"), arch="sm_90")


def test_a_cache_limit_of_zero_keeps_nothing(cache, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CACHE_MAX_BYTES", "0")
    cd.compile(SAXPY, arch="sm_90")
    assert entries(cache) == [] and not cd.compile(SAXPY, arch="sm_90").from_cache


# --- Ctrl-C ---------------------------------------------------------------------------------

def test_ctrl_c_during_a_long_compile_returns_while_nvrtc_still_runs(monkeypatch):
    started, release, returned = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def slow_compile(lib, prog, opts, cancel):      # stands in for nvrtcCompileProgram taking minutes
        started.set()
        release.wait(60)
        seen["cancel requested"] = cancel.is_set()
        returned.set()
        return 0

    monkeypatch.setattr(nvrtc, "_nvrtc_compile_program", slow_compile)
    main = threading.main_thread().ident

    def interrupt():
        started.wait(60)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        cd.compile(SAXPY.replace("a *", "a * 1.5f *"), arch="sm_90", use_cache=False)
    assert not returned.is_set()     # compile() came back while "NVRTC" was still working
    release.set()
    assert returned.wait(60) and seen["cancel requested"]


def test_a_cancelled_nvrtc_compile_stops_with_keyboard_interrupt():
    lib = nvrtc._load()
    if not hasattr(lib, "nvrtcSetFlowCallback"):
        pytest.skip("this NVRTC has no nvrtcSetFlowCallback (12.8+)")
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(KeyboardInterrupt, match="cancelled"):
        nvrtc._compile(lib, SAXPY.encode(), "k.cu", {}, ["-arch=sm_90"], (), "cubin", "sm_90", cancel)


# --- on the GPU -------------------------------------------------------------------------------

@pytest.mark.gpu
@needs_nvfatbin
def test_a_multi_arch_fatbin_loads_and_runs_with_exact_parameter_types(rng, cache):
    dev = cd.Device(0)
    archs = sorted({"sm_75", "sm_80", dev.arch} & set(cd.nvrtc.nvrtc_supported_archs()) | {dev.arch})
    mod = cd.compile(SAXPY, arch=archs).load()
    assert mod.kind == "fatbin"
    fn = mod.function("saxpy")
    assert fn.layout_source == "source+ptx"          # unsigned n, const x: from the source declaration
    n = 10_000
    x = rng.standard_normal(n).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)
    y = cd.Buffer.from_numpy(y0)
    fn.launch((n + 255) // 256, 256, y, cd.Buffer.from_numpy(x), 1.75, n)
    np.testing.assert_allclose(y.to_numpy(), 1.75 * x.astype(np.float64) + y0, rtol=1e-6, atol=1e-6)
    with pytest.raises(cd.ArgumentTypeError, match="out of range for a 32-bit unsigned integer"):
        fn.launch(1, 32, y, y, 1.0, -1)              # n is unsigned: -1 is refused


@pytest.mark.gpu
@pytest.mark.skipif(not _lto_compatible(), reason="needs an nvJitLink at least as new as NVRTC")
def test_a_linked_lto_module_computes_what_numpy_does(rng, cache):
    arch = cd.Device(0).arch
    a = cd.compile(LTO_KERNEL, arch=arch, target="ltoir")
    b = cd.compile(LTO_POLY, arch=arch, target="ltoir")
    mod = cd.Linker(a, b).link().load()
    n = 5000
    x = rng.standard_normal(n).astype(np.float32)
    out = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    mod.function("apply_poly").launch((n + 127) // 128, 128, out, cd.Buffer.from_numpy(x), n)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out.to_numpy(), 3 * x64 * x64 - 2 * x64 + 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not _lto_compatible(), reason="needs an nvJitLink at least as new as NVRTC")
def test_a_kernel_launching_a_kernel_runs_when_linked_with_the_device_runtime(rng, cache):
    mod = cd.Linker(cd.compile(CDP, arch=cd.Device(0).arch, target="ltoir"), device_runtime=True).link().load()
    n = 3000
    x = rng.standard_normal(n).astype(np.float32)
    p = cd.Buffer.from_numpy(x)
    mod.function("parent").launch(1, 32, p, n)
    np.testing.assert_allclose(p.to_numpy(), 2 * x.astype(np.float64) + 1, rtol=1e-6, atol=1e-6)
