"""compile() refuses, before NVRTC runs, an architecture NVRTC cannot take, text UTF-8 cannot encode and
a use_cache that is not a bool (CPU: NVRTC, no GPU)."""
import re

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import nvrtc

SRC = 'extern "C" __global__ void k(float* y, int n) { if (n) y[0] = 1; }'


@pytest.fixture
def nvrtc_never_runs(monkeypatch):
    monkeypatch.setattr(nvrtc, "_compile", lambda *a, **k: pytest.fail("NVRTC ran"))
    monkeypatch.setenv("PYCUDADRV_CACHE", "0")


@pytest.mark.parametrize("arch", ["sm_²", "²", "sm_٩٠", "sm_90aa", "sm_90fa", "sm_90 a", "sm_", "gfx90a", "-90"])
def test_an_arch_of_another_form_is_refused_with_the_supported_list(arch, nvrtc_never_runs):
    with pytest.raises(cd.ArgumentValueError) as ei:
        cd.compile(SRC, arch=arch)
    msg = str(ei.value)
    assert msg.startswith(f"compile: arch must look like 'sm_90', 'sm_90a', 'sm_100f' or 'compute_90' (ASCII "
                          f"digits, at most one variant letter), got {arch!r}; NVRTC ")
    assert "supports sm_75, " in msg and "sm_90" in msg


@pytest.mark.parametrize("arch, variant, start", [("sm_75a", "a", 90), ("sm_89a", "a", 90), ("sm_90f", "f", 100),
                                                   ("compute_80a", "a", 90)])
def test_a_variant_the_architecture_does_not_have_is_refused(arch, variant, start, nvrtc_never_runs):
    with pytest.raises(cd.ArgumentValueError, match=rf"compile: {arch} does not exist: the '{variant}' .* variants "
                                                    rf"start at sm_{start} \(use {arch[:-1]} here\); NVRTC .* "
                                                    r"supports sm_75, "):
        cd.compile(SRC, arch=arch, target="ptx" if arch.startswith("compute") else None)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a", "sm_100f", "sm_120f", "90", 90, " sm_90 "])
def test_the_variants_that_exist_compile(arch, monkeypatch):
    if nvrtc._arch_number(nvrtc._parse_arch(arch)) not in {nvrtc._arch_number(a) for a in cd.nvrtc.nvrtc_supported_archs()}:
        pytest.skip(f"this NVRTC does not compile for {arch}")
    monkeypatch.setenv("PYCUDADRV_CACHE", "0")
    obj = cd.compile(SRC, arch=arch)
    assert obj.image[:4] == b"\x7fELF" and obj.arch == ("sm_90" if str(arch).strip() in ("90", "sm_90")
                                                         else arch)


@pytest.mark.parametrize("arch", ["sm_²", "sm_90aa", "sm_٩٠"])
def test_the_linker_checks_its_arch_the_same_way(arch):
    with pytest.raises(cd.ArgumentValueError, match=rf"^Linker: arch must look like 'sm_90', .*got {arch!r}"):
        cd.Linker(arch=arch)


def test_a_lone_surrogate_in_the_source_is_refused_naming_its_position(nvrtc_never_runs):
    with pytest.raises(cd.ArgumentValueError, match=r"compile: the source holds '\\ud800' at index 17 \(line 2, "
                                                    r"column 11\), a lone surrogate"):
        cd.compile("int x;\nint y; // \ud800 z", arch="sm_90")


@pytest.mark.parametrize("kw, value, what", [
    ("name", "k\udcff.cu", "name"),
    ("options", ["-DX=\ud800"], "options entry '-DX=\\\\ud800'"),
    ("include_paths", ["/tmp/\udc80"], "include_paths entry"),
    ("name_expressions", ["k<\ud801>"], "name_expressions entry"),
    ("headers", {"h.h": "int a; \ud800"}, "header 'h.h'"),
    ("headers", {"\ud800.h": "int a;"}, "a header name"),
])
def test_lone_surrogates_elsewhere_are_refused_too(kw, value, what, nvrtc_never_runs):
    with pytest.raises(cd.ArgumentValueError, match=rf"compile: {what}.* holds .* a lone surrogate"):
        cd.compile(SRC, arch="sm_90", **{kw: value})


RULE = "must be True or False (or a numpy bool, 0 or 1), got"   # pycudadrv._textargs.yes_no, every yes/no argument's rule


@pytest.mark.parametrize("value", ["no", "yes", 2, -1, None, [], "False"])
def test_use_cache_must_be_a_bool(value, nvrtc_never_runs):
    with pytest.raises(cd.ArgumentTypeError, match=re.escape(f"compile: use_cache {RULE} {type(value).__name__} {value!r}")):
        cd.compile(SRC, arch="sm_90", use_cache=value)


def test_numpy_bools_are_bools_for_use_cache(monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CACHE", "0")
    assert cd.compile(SRC, arch="sm_90", use_cache=np.bool_(False)).from_cache is False


# --- where a toolkit is looked for ----------------------------------------------------------------

def test_a_toolkit_is_looked_for_where_distributions_and_zyx_put_it(monkeypatch):
    from pycudadrv import _paths

    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    libs = _paths.library_dirs()
    target = _paths._target()
    for d in ("/usr/local/cuda/lib64", f"/usr/local/cuda/targets/{target}/lib", "/opt/cuda/lib64",
              f"/opt/cuda/targets/{target}/lib", "/usr/lib64", "/usr/lib"):
        assert d in libs
    incs = _paths.cuda_include_candidates()
    for d in ("/usr/local/cuda/include", f"/opt/cuda/targets/{target}/include", "/usr/include"):
        assert d in incs
    assert incs[-1] == "/usr/include"          # a distribution's headers come after every toolkit's and wheel's


def test_nvrtc_is_found_under_a_toolkits_targets_folder(monkeypatch, tmp_path):
    from pycudadrv import _paths

    lib = tmp_path / "targets" / _paths._target() / "lib"
    lib.mkdir(parents=True)
    (lib / "libnvrtc.so.13").write_bytes(b"")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    found = list(nvrtc._candidates())
    assert str(lib / "libnvrtc.so.13") in found
    # after the wheels, before the toolkits that no variable names
    assert found.index(str(lib / "libnvrtc.so.13")) < min(
        [i for i, f in enumerate(found) if f.startswith(("/usr/local/cuda", "/opt/cuda"))] or [len(found)])
