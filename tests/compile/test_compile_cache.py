"""The on-disk NVRTC compile cache (needs NVRTC, no GPU)."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import pycudadrv as cd
from pycudadrv import nvrtc

SRC = 'extern "C" __global__ void k(float* a, float v) { a[threadIdx.x] = v; }'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYCUDADRV_CACHE", raising=False)
    monkeypatch.delenv("PYCUDADRV_CACHE_MAX_BYTES", raising=False)
    return tmp_path / "cache"


def entries(cache):
    return sorted(p for p in cache.iterdir() if p.suffix == ".nvrtc") if cache.exists() else []


def test_second_compile_comes_from_the_cache_with_the_same_image(cache):
    a = cd.compile(SRC, arch="sm_90")
    b = cd.compile(SRC, arch="sm_90")
    assert not a.from_cache and b.from_cache
    assert a.image == b.image and a.ptx == b.ptx and a.options == b.options
    assert len(entries(cache)) == 1


def test_every_input_that_changes_the_output_changes_the_key(cache):
    base = cd.compile(SRC, arch="sm_90")
    variants = [
        cd.compile(SRC.replace("= v", "= 2 * v"), arch="sm_90"),       # same entry name, other source
        cd.compile(SRC, arch="sm_80"),
        cd.compile(SRC, arch="sm_90", options=("-DX=1",)),
        cd.compile(SRC, arch="sm_90", target="ptx"),
        cd.compile('#include "h.h"\n' + SRC, arch="sm_90", headers={"h.h": "#define Y 1"}),
        cd.compile('#include "h.h"\n' + SRC, arch="sm_90", headers={"h.h": "#define Y 2"}),
    ]
    assert not any(v.from_cache for v in variants)
    assert len(entries(cache)) == 1 + len(variants)
    assert variants[0].image != base.image  # two sources sharing an entry-point name are never confused


def test_lowered_names_survive_the_cache(cache):
    src = "template <typename T> __global__ void fill(T* p, T v) { p[threadIdx.x] = v; }"
    a = cd.compile(src, arch="sm_90", name_expressions=("fill<float>",))
    b = cd.compile(src, arch="sm_90", name_expressions=("fill<float>",))
    assert b.from_cache and b.lowered_names == a.lowered_names


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupt_or_truncated_entries_are_recompiled_never_loaded(cache, damage):
    good = cd.compile(SRC, arch="sm_90")
    (path,) = entries(cache)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    else:
        path.write_bytes(b"not a cache file at all")
    again = cd.compile(SRC, arch="sm_90")
    assert not again.from_cache and again.image == good.image
    assert cd.compile(SRC, arch="sm_90").from_cache  # rewritten whole


def test_a_valid_entry_copied_under_another_keys_name_is_recompiled_never_loaded(cache):
    other_src = SRC.replace("= v", "= v * 4.0f")
    other = cd.compile(other_src, arch="sm_90")
    (other_entry,) = entries(cache)
    mine = cd.compile(SRC, arch="sm_90")
    (my_entry,) = set(entries(cache)) - {other_entry}
    my_entry.write_bytes(other_entry.read_bytes())      # intact, checksum and all, but the other key's result
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # ignored as quietly as a corrupt entry
        again = cd.compile(SRC, arch="sm_90")
    assert not again.from_cache and again.image == mine.image != other.image
    assert cd.compile(SRC, arch="sm_90").from_cache     # rewritten with its own key
    assert cd.compile(other_src, arch="sm_90").from_cache


def test_cache_can_be_disabled(cache, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CACHE", "0")
    assert nvrtc.cache_dir() is None
    cd.compile(SRC, arch="sm_90")
    assert not cd.compile(SRC, arch="sm_90").from_cache
    assert entries(cache) == []
    monkeypatch.delenv("PYCUDADRV_CACHE")
    assert not cd.compile(SRC, arch="sm_90", use_cache=False).from_cache
    assert entries(cache) == []


def test_concurrent_processes_compiling_the_same_kernel_never_see_half_a_file(cache):
    code = textwrap.dedent(f"""
        import pycudadrv as cd, hashlib
        src = {SRC!r}.replace("= v", "= v + 1.0f")
        for _ in range(5):
            o = cd.compile(src, arch="sm_90")
        print(hashlib.sha256(o.image).hexdigest())
    """)
    env = dict(os.environ, PYCUDADRV_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outs)) == 1
    assert len(entries(cache)) == 1 and not list(cache.glob(".tmp-*"))


def _fill(n):
    """n distinct entries, compiled under the default limit."""
    for i in range(n):
        cd.compile(SRC.replace("= v", f"= v + {i}.0f"), arch="sm_90")


def test_a_limit_of_zero_removes_the_entries_already_there_at_the_next_write(cache, monkeypatch):
    _fill(3)
    assert len(entries(cache)) == 3
    monkeypatch.setenv("PYCUDADRV_CACHE_MAX_BYTES", "0")
    obj = cd.compile(SRC.replace("= v", "= -v"), arch="sm_90")
    assert not obj.from_cache and entries(cache) == []


def test_a_limit_smaller_than_one_entry_keeps_no_entry(cache, monkeypatch):
    _fill(2)
    monkeypatch.setenv("PYCUDADRV_CACHE_MAX_BYTES", "16")
    cd.compile(SRC.replace("= v", "= 3 * v"), arch="sm_90")
    assert entries(cache) == [] and nvrtc.cache_size() == (0, 0)


def test_an_entry_over_a_lowered_limit_is_deleted_instead_of_read(cache, monkeypatch):
    cd.compile(SRC, arch="sm_90")
    (entry,) = entries(cache)
    monkeypatch.setenv("PYCUDADRV_CACHE_MAX_BYTES", str(entry.stat().st_size - 1))
    assert not cd.compile(SRC, arch="sm_90").from_cache
    assert entries(cache) == []          # deleted on the hit; the new result is too large to write


def test_a_limit_that_holds_one_entry_keeps_the_newest(cache, monkeypatch):
    _fill(2)
    size = max(p.stat().st_size for p in entries(cache))
    monkeypatch.setenv("PYCUDADRV_CACHE_MAX_BYTES", str(size + 100))
    newest = cd.compile(SRC.replace("= v", "= v * v"), arch="sm_90")
    assert len(entries(cache)) == 1 and cd.compile(SRC.replace("= v", "= v * v"), arch="sm_90").from_cache
    assert newest.image == cd.compile(SRC.replace("= v", "= v * v"), arch="sm_90").image


@pytest.mark.parametrize("raw, why", [("   ", "only blanks"),
                                      ("~pycudadrv-no-such-user/x", "'~pycudadrv-no-such-user' is not a user's home")])
def test_a_cache_dir_that_names_no_directory_warns_once_and_uses_the_default(raw, why, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PYCUDADRV_CACHE_DIR", raw)
    monkeypatch.delenv("PYCUDADRV_CACHE", raising=False)
    with pytest.warns(RuntimeWarning, match=rf"PYCUDADRV_CACHE_DIR={raw!r} is not a directory name \({why}.*"
                                            rf"using the default '{tmp_path / 'xdg' / 'pycudadrv'}'"):
        assert nvrtc.cache_dir() == str(tmp_path / "xdg" / "pycudadrv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cd.compile(SRC.replace("= v", "= v - 1.0f"), arch="sm_90")     # no second warning
    assert list(tmp_path.iterdir()) == [tmp_path / "xdg"]                # no "   " or "~user" directory made
    assert len(list((tmp_path / "xdg" / "pycudadrv").glob("*.nvrtc"))) == 1


def test_a_relative_cache_dir_is_resolved_once_and_warns_naming_the_absolute_directory(tmp_path, monkeypatch):
    from pycudadrv import _compile_cache

    monkeypatch.setattr(_compile_cache, "_relative_dirs", {})     # as in a fresh process
    (tmp_path / "first").mkdir()
    (tmp_path / "later").mkdir()
    monkeypatch.chdir(tmp_path / "first")
    monkeypatch.setenv("PYCUDADRV_CACHE_DIR", "rel/cache")
    monkeypatch.delenv("PYCUDADRV_CACHE", raising=False)
    used = tmp_path / "first" / "rel" / "cache"
    with pytest.warns(RuntimeWarning, match=rf"PYCUDADRV_CACHE_DIR='rel/cache' is a relative path: the compile "
                                            rf"cache uses '{used}' \(resolved against the working directory at "
                                            r"its first use"):
        assert not cd.compile(SRC, arch="sm_90").from_cache
    monkeypatch.chdir(tmp_path / "later")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                              # warned once
        assert nvrtc.cache_dir() == str(used)
        assert cd.compile(SRC, arch="sm_90").from_cache             # the same directory, not later/rel/cache
    assert len(entries(used)) == 1 and not (tmp_path / "later" / "rel").exists()


def test_a_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    monkeypatch.delenv("PYCUDADRV_CACHE_DIR", raising=False)
    monkeypatch.delenv("PYCUDADRV_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")
    assert nvrtc.cache_dir() == str(tmp_path / ".cache" / "pycudadrv")


def test_an_entry_path_taken_by_a_directory_warns_naming_that_entry(cache):
    src = SRC.replace("= v", "= v / 2.0f")
    cd.compile(src, arch="sm_90")
    (entry,) = entries(cache)
    entry.unlink()
    entry.mkdir()
    with pytest.warns(RuntimeWarning, match=rf"the compile cache entry '{entry}' is not a regular file, so this "
                                            r"result is not cached \(Is a directory\); the rest of the cache works"):
        assert not cd.compile(src, arch="sm_90").from_cache
    other = cd.compile(SRC.replace("= v", "= v / 3.0f"), arch="sm_90")
    assert not other.from_cache and cd.compile(SRC.replace("= v", "= v / 3.0f"), arch="sm_90").from_cache
    assert nvrtc.cache_size()[0] == 1        # the directory is no entry
