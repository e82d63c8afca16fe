"""What the Linker refuses before nvJitLink sees it: CUBINs that are not relocatable (their kernels would be
dropped without a word) and CUBINs for another architecture; and why every nvJitLink call runs on one
thread (CPU: NVRTC and nvJitLink, no GPU)."""
import re
import struct
import threading

import pytest

import pycudadrv as cd
from pycudadrv import link


def _available(what):
    try:
        link._load(what)
        return True
    except cd.LinkerUnavailableError:
        return False


# nvJitLink links what an NVRTC at most as new as itself made (NVJITLINK_ERROR_OUTDATED_LIBRARY otherwise).
needs_nvjitlink = pytest.mark.skipif(not (_available("nvjitlink") and link.nvjitlink_version() >= cd.nvrtc_version()),
                                     reason="needs nvJitLink (pip install nvidia-nvjitlink) at least as new as NVRTC")
needs_nvfatbin = pytest.mark.skipif(not _available("nvfatbin"), reason="nvFatbin not installed "
                                    "(pip install nvidia-nvfatbin)")

KERNEL = 'extern "C" __global__ void scale(float* y, float a) { y[threadIdx.x] *= a; }'
RDC = ["-rdc=true"]


@pytest.fixture(autouse=True)
def no_disk_cache(monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CACHE", "0")


def test_the_elf_header_tells_relocatable_from_whole_program_cubins_and_their_sm():
    whole = cd.compile(KERNEL, arch="sm_90")
    reloc = cd.compile(KERNEL, arch="sm_90", options=RDC)
    assert link.cubin_elf_info(whole.image) == (link.ET_EXEC, 90)
    assert link.cubin_elf_info(reloc.image) == (link.ET_REL, 90)
    assert link.cubin_elf_info(cd.compile(KERNEL, arch="sm_80", options=RDC).image) == (link.ET_REL, 80)
    assert link.cubin_elf_info(cd.compile(KERNEL, arch="sm_120", options=RDC).image) == (link.ET_REL, 120)
    assert link.cubin_elf_info(b"\x7fELF" + bytes(60)) is None      # not EM_CUDA
    assert link.cubin_elf_info(cd.compile(KERNEL, arch="compute_90", target="ptx").image) is None


def test_both_e_flags_layouts_give_the_sm():
    elf = bytearray(cd.compile(KERNEL, arch="sm_86", options=RDC).image)
    elf[8] = 8                                                    # ELF ABI 8 (CUDA 13): SM in bits 8..15
    struct.pack_into("<I", elf, 48, 0x06005604)
    assert link.cubin_elf_info(bytes(elf)) == (link.ET_REL, 86)
    elf[8] = 7                                                    # the layout before: EF_CUDA_SM, the low byte
    struct.pack_into("<I", elf, 48, 0x00560556)
    assert link.cubin_elf_info(bytes(elf)) == (link.ET_REL, 86)


def test_a_non_relocatable_cubin_is_refused_with_the_rdc_option_to_use():
    whole = cd.compile(KERNEL, arch="sm_90")
    with pytest.raises(cd.ArgumentValueError,
                       match=r"kernel.cu is a non-relocatable CUBIN \(ELF type ET_EXEC, sm_90\).*silently drop "
                             r"its kernels.*options=\['-rdc=true'\]"):
        cd.Linker(arch="sm_90").add(whole)
    with pytest.raises(cd.ArgumentValueError, match="non-relocatable CUBIN"):
        cd.Linker(whole.image, arch="sm_90")          # the same bytes without their ObjectCode


@needs_nvjitlink
def test_a_relocatable_cubin_links_and_keeps_its_kernel():
    out = cd.Linker(cd.compile(KERNEL, arch="sm_90", options=RDC), arch="sm_90").link()
    assert b"scale" in out.image and link.cubin_elf_info(out.image) == (link.ET_EXEC, 90)


@needs_nvjitlink
def test_a_cubin_links_into_a_newer_minor_of_its_major_architecture():
    out = cd.Linker(cd.compile(KERNEL, arch="sm_80", options=RDC), arch="sm_86").link()
    assert b"scale" in out.image and link.cubin_elf_info(out.image)[1] == 86


@pytest.mark.parametrize("cubin_arch, link_arch", [("sm_80", "sm_90"), ("sm_86", "sm_80"), ("sm_90", "sm_100")])
def test_a_cubin_for_another_architecture_is_refused_before_nvjitlink(cubin_arch, link_arch, monkeypatch):
    monkeypatch.setattr(link, "_nvjitlink", lambda *a: pytest.fail("nvJitLink was called"))
    linker = cd.Linker(cd.compile(KERNEL, arch=cubin_arch, options=RDC), arch=link_arch)
    with pytest.raises(cd.ArgumentValueError, match=rf"kernel.cu is a CUBIN for {cubin_arch}, which cannot be "
                                                    rf"linked for {link_arch}.*target='ltoir' or 'ptx'"):
        linker.link()


def test_an_architecture_specific_cubin_links_only_for_its_own_arch(monkeypatch):
    monkeypatch.setattr(link, "_nvjitlink", lambda *a: pytest.fail("nvJitLink was called"))
    linker = cd.Linker(cd.compile(KERNEL, arch="sm_90a", options=RDC), arch="sm_90")
    with pytest.raises(cd.ArgumentValueError, match=r"CUBIN for sm_90a .*only for arch='sm_90a', not sm_90"):
        linker.link()


@needs_nvfatbin
def test_a_fatbin_of_non_relocatable_cubins_is_refused_for_an_arch_it_has_a_cubin_for():
    fat = cd.compile(KERNEL, arch=["sm_80", "sm_90"])
    for arch, sm in (("sm_90", 90), ("sm_86", 80)):
        with pytest.raises(cd.ArgumentValueError, match=rf"fatbin whose CUBIN for {arch} \(sm_{sm}\) is not "
                                                        r"relocatable.*-rdc=true"):
            cd.Linker(fat, arch=arch).link()


@needs_nvjitlink
@needs_nvfatbin
def test_a_fatbin_of_relocatable_cubins_links_with_its_kernel():
    fat = cd.compile(KERNEL, arch=["sm_80", "sm_90"], options=RDC)
    for arch in ("sm_90", "sm_86", "sm_100"):       # sm_100 from the fatbin's PTX
        assert b"scale" in cd.Linker(fat, arch=arch).link().image


@needs_nvjitlink
def test_a_link_after_nvjitlink_refused_an_input_does_not_hang():
    # nvJitLink 13.5 keeps a lock held by the thread whose nvJitLinkAddData failed with INVALID_INPUT: a
    # link on any other thread afterwards waited forever. Every link now runs on one thread.
    bad = cd.compile(KERNEL, arch="sm_80", options=RDC).image
    good = cd.compile(KERNEL, arch="sm_90", options=RDC)
    linker = cd.Linker(arch="sm_90").add(bad, kind="cubin")
    linker._check_inputs = lambda arch: None       # let nvJitLink itself see the mismatch
    with pytest.raises(cd.LinkError, match="NVJITLINK_ERROR_"):   # INVALID_INPUT from nvJitLink 13.5
        linker.link()
    result = {}
    t = threading.Thread(target=lambda: result.update(out=cd.Linker(good, arch="sm_90").link()), daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the second link hung"
    assert b"scale" in result["out"].image


def test_every_link_runs_on_the_same_thread():
    seen = [link.run_on_linker_thread(threading.get_ident) for _ in range(3)]
    seen.append(link.run_on_linker_thread(threading.get_ident))
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()


def test_an_exception_on_the_linker_thread_reaches_the_caller():
    def fail():
        raise cd.LinkError("from the linker thread")

    with pytest.raises(cd.LinkError, match="from the linker thread"):
        link.run_on_linker_thread(fail)


@pytest.mark.parametrize("kw", ["use_cache", "device_runtime"])
@pytest.mark.parametrize("value", ["no", None, 2])
def test_linker_switches_must_be_bools(kw, value):
    with pytest.raises(cd.ArgumentTypeError, match=re.escape(f"Linker: {kw} must be True or False (or a numpy bool, 0 or 1), "
                                                            f"got {type(value).__name__} {value!r}")):
        cd.Linker(arch="sm_90", **{kw: value})


ONE_KERNEL = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }'


def test_build_fatbin_refuses_an_entry_labelled_for_another_architecture_than_its_code():
    cubin = cd.compile(ONE_KERNEL, arch="sm_90").image
    ptx90 = cd.compile(ONE_KERNEL, arch="compute_90", target="ptx").image
    with pytest.raises(cd.ArgumentValueError, match="entry #0 is a CUBIN labelled compute_90, a virtual architecture"):
        cd.build_fatbin([("cubin", cubin, "compute_90")])
    with pytest.raises(cd.ArgumentValueError, match="entry #1 is a CUBIN for sm_90 labelled sm_80"):
        cd.build_fatbin([("ptx", ptx90, "sm_90"), ("cubin", cubin, "sm_80")])
    with pytest.raises(cd.ArgumentValueError, match="entry #0 is PTX for .target sm_90 labelled sm_75"):
        cd.build_fatbin([("ptx", ptx90, "sm_75")])


def test_the_device_include_dirs_are_the_same_before_and_after_nvrtc_is_first_used():
    code = ("from pycudadrv import nvrtc\n"
            "before = nvrtc.default_include_dirs()\n"
            "nvrtc.compile('extern \"C\" __global__ void k() {}', arch='sm_90', use_cache=False)\n"
            "print(before == nvrtc.default_include_dirs())\n")
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stdout + out.stderr


def test_a_ptx_file_whose_path_holds_dot_version_is_read_as_a_path(tmp_path):
    folder = tmp_path / "ptx.version"
    folder.mkdir()
    f = folder / "k.ptx"
    f.write_bytes(cd.compile(ONE_KERNEL, arch="compute_90", target="ptx").image)
    linker = cd.Linker(arch="sm_90").add(str(f))
    assert "1 inputs" in repr(linker)
