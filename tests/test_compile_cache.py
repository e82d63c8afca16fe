"""The on-disk NVRTC compile cache (needs NVRTC, no GPU)."""
import os
import subprocess
import sys
import textwrap

import pytest

import pycudadrv as cd
from pycudadrv import nvrtc

SRC = 'extern "C" __global__ void k(float* a, float v) { a[threadIdx.x] = v; }'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYCUDADRV_CACHE", raising=False)
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
