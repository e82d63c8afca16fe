"""pycudadrv.mpi and examples/heat_mpi.py.

Three kinds of tests:

* in this process, no MPI: the decomposition, launcher variables, device
  choice, CUDA-aware answers and the launcher command line (pure functions);
* under ``mpirun`` (subprocesses, no GPU): halo exchanges of host slabs and of
  device-path rows, local ranks, detection, and the abort on a rank's mistake;
  skipped with the reason where mpi4py or mpirun is missing;
* GPU (``@pytest.mark.gpu``): ``mpirun -n 2`` and ``-n 4`` of the example on one
  device, both transfer paths, graphs, checked bit for bit against the
  single-process run and against NumPy float64.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import mpi

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "heat_mpi.py"


def _mpi_skip_reason():
    try:
        import mpi4py  # noqa: F401
    except ImportError as e:
        return f"mpi4py is not installed ({e}); pip install 'pycudadrv[mpi]'"
    try:
        mpi.mpirun_command(1)
    except cd.LibraryUnavailableError as e:
        return str(e)
    r = subprocess.run([sys.executable, "-c", "from mpi4py import MPI"], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        return f"mpi4py cannot load an MPI library: {r.stderr.strip()[-300:]}"
    return None


_MPI_SKIP = _mpi_skip_reason()
needs_mpirun = pytest.mark.skipif(_MPI_SKIP is not None, reason=str(_MPI_SKIP))


def _env(**extra):
    env = dict(os.environ)
    pkg_parent = str(Path(cd.__file__).resolve().parents[1])
    if "site-packages" not in pkg_parent and "dist-packages" not in pkg_parent:   # a source tree: make it importable
        env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    env.pop(mpi.ENV_CUDA_AWARE, None)
    env.update(extra)
    return env


def mpirun(n, args, *, timeout=120, **env):
    """Run ``python args...`` under mpirun with ``n`` ranks; ``(returncode, stdout, stderr, seconds)``."""
    cmd = mpi.mpirun_command(n) + [sys.executable, *map(str, args)]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(**env))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} hung for {timeout} s (a rank left waiting?)\nstdout:\n{e.stdout}\n"
                    f"stderr:\n{e.stderr}")
    return r.returncode, r.stdout, r.stderr, time.perf_counter() - t0


# --------------------------------------------------------------------------- no MPI needed

def test_import_pycudadrv_imports_neither_mpi4py_nor_pycudadrv_mpi():
    code = "import sys, pycudadrv; print('mpi4py' in sys.modules, 'pycudadrv.mpi' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_without_mpi4py_the_helpers_raise_library_unavailable_naming_the_package():
    code = textwrap.dedent("""
        import sys
        sys.modules["mpi4py"] = None          # as if it were not installed
        import pycudadrv.mpi as m             # importing the module needs no mpi4py
        print(m.decompose_rows(8, 8, 2, 1).rows)
        import pycudadrv
        try:
            m.require_mpi()
        except pycudadrv.LibraryUnavailableError as e:
            print("ERR", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "4"
    assert lines[1].startswith("ERR pycudadrv.mpi needs mpi4py")
    assert 'pip install "pycudadrv[mpi]"' in lines[1]


def test_decompose_rows_gives_each_rank_its_slab_neighbours_and_halo_offsets():
    d = [mpi.decompose_rows(512, 256, 4, r) for r in range(4)]
    assert [(s.rows, s.row_start, s.up, s.down) for s in d] == [
        (128, 0, None, 1), (128, 128, 0, 2), (128, 256, 1, 3), (128, 384, 2, None)]
    s = d[1]
    assert s.local_shape == (130, 256)
    assert (s.recv_up_offset, s.send_up_offset, s.send_down_offset, s.recv_down_offset) == (0, 256, 128 * 256,
                                                                                              129 * 256)
    assert s.own == slice(1, 129) and s.global_rows == slice(128, 256)
    wide = mpi.decompose_rows(12, 5, 2, 1, halo=2)
    assert (wide.rows, wide.local_shape, wide.halo_elements, wide.recv_down_offset) == (6, (10, 5), 10, 40)


def test_slab_of_cuts_own_rows_and_neighbour_halos_and_fills_the_edges(rng):
    grid = rng.random((8, 3))
    top, mid = mpi.decompose_rows(8, 3, 4, 0), mpi.decompose_rows(8, 3, 4, 2)
    t = top.slab_of(grid)
    assert np.isnan(t[0]).all()
    assert np.array_equal(t[1:], grid[0:3])
    assert np.array_equal(mid.slab_of(grid, fill=-1.0), grid[3:7])
    with pytest.raises(cd.ArgumentValueError, match=r"grid has shape \(3, 8\), the decomposition is of 8 x 3"):
        top.slab_of(grid.T)


def test_a_size_that_does_not_divide_the_rows_is_an_argument_value_error_naming_both():
    with pytest.raises(cd.ArgumentValueError, match=r"the communicator size 3 does not divide the 512 grid rows "
                                                    r"\(rank 2\).*1, 2, 4, 8"):
        mpi.decompose_rows(512, 512, 3, 2)


def test_the_sizes_suggested_for_a_size_that_does_not_divide_are_the_nearest_divisors():
    with pytest.raises(cd.ArgumentValueError, match=r"does not divide the 100000001 grid rows \(rank 0\); run with "
                                                    r"a number of ranks that divides 100000001 \(near 2: 1, 17\)$"):
        mpi.decompose_rows(100_000_001, 4, 2, 0)          # 100000001 = 17 * 5882353
    with pytest.raises(cd.ArgumentValueError, match=r"divides 1099511627777 \(near 2: 1, 257\)$"):
        mpi.decompose_rows(2**40 + 1, 4, 2, 0)            # 2**40 + 1 = 257 * 4278255361
    with pytest.raises(cd.ArgumentValueError, match=r"divides 8 \(near 1000: 4, 8\)$"):
        mpi.decompose_rows(8, 4, 1000, 0)


def test_sizes_are_searched_only_near_the_size_given_whatever_the_row_count():
    # 2**61 - 1 is prime; the search looks at 4096 counts either side of the size, never up to ny.
    with pytest.raises(cd.ArgumentValueError, match=r"divides 2305843009213693951 \(near 2: 1; none of 3..4098\)$"):
        mpi.decompose_rows(2**61 - 1, 4, 2, 1)
    with pytest.raises(cd.ArgumentValueError, match=r"\(none of 549755809792..549755813887; none of "
                                                    r"549755813889..549755817984; 1 always does\)$"):
        mpi.decompose_rows(2**40 + 1, 4, 2**39, 0)


def test_slab_of_an_integer_or_bool_grid_needs_a_fill_of_its_own_kind():
    d = mpi.decompose_rows(8, 4, 2, 0)
    grid = np.arange(32, dtype=np.int64).reshape(8, 4)
    with pytest.raises(cd.ArgumentValueError, match=r"slab_of: the grid holds int64, which has no NaN .*pass fill= "
                                                    r"\(an int in \[-9223372036854775808, 9223372036854775807\]\)"):
        d.slab_of(grid)
    s = d.slab_of(grid, fill=-7)
    assert s.dtype == np.int64
    assert s[0].tolist() == [-7, -7, -7, -7]
    assert s[1:].tolist() == grid[0:5].tolist()
    flags = np.array([[True, False, False, True]] * 8)
    with pytest.raises(cd.ArgumentValueError, match=r"pass fill= \(True or False\)"):
        d.slab_of(flags)
    assert d.slab_of(flags, fill=False)[0].tolist() == [False] * 4


@pytest.mark.parametrize("dtype, fill, error, text", [
    (np.int64, 1.5, cd.ArgumentTypeError, "fill for a grid of int64 must be an int, got 1.5"),
    (np.int64, True, cd.ArgumentTypeError, "fill for a grid of int64 must be an int, got True"),
    (np.uint8, -1, cd.ArgumentValueError, r"fill -1 is outside the range of uint8 \[0, 255\]"),
    pytest.param(np.int8, 10**10000, cd.ArgumentValueError, "fill an int of 33220 bits is outside the range of int8",
                 id="int8-10**10000"),
    (np.bool_, 1, cd.ArgumentTypeError, "fill for a grid of bool must be True or False, got 1"),
    (np.float64, "x", cd.ArgumentTypeError, "fill for a grid of float64 must be a real number, got 'x'"),
    (np.float64, 2j, cd.ArgumentTypeError, "fill for a grid of float64 must be a real number, got 2j"),
    (np.float32, 1e39, cd.ArgumentValueError, r"fill 1e\+39 overflows float32 \(it would become inf\)"),
    (np.complex64, 1e39j, cd.ArgumentValueError, r"fill 1e\+39j overflows complex64"),
])
def test_slab_of_refuses_a_fill_the_dtype_cannot_hold(dtype, fill, error, text):
    d = mpi.decompose_rows(8, 4, 2, 1)
    with pytest.raises(error, match=text):
        d.slab_of(np.ones((8, 4), dtype), fill=fill)


def test_slab_of_takes_a_nested_list_and_refuses_what_is_not_a_numeric_grid():
    d = mpi.decompose_rows(8, 4, 2, 1)
    rows = [[r + 0.5] * 4 for r in range(8)]
    s = d.slab_of(rows)
    assert s.dtype == np.float64 and s.shape == (6, 4)             # rows 4..7 with one halo row either side
    assert s[:5, 0].tolist() == [3.5, 4.5, 5.5, 6.5, 7.5] and np.isnan(s[5]).all()
    with pytest.raises(cd.ArgumentTypeError, match="slab_of: the grid must be a numeric array .*got object"):
        d.slab_of(object())
    with pytest.raises(cd.ArgumentTypeError, match="slab_of: the grid must be a numeric 8 x 4 array, got list"):
        d.slab_of([[0.0] * 4, [1.0]])


def test_slab_of_an_integer_grid_with_a_fill_gives_no_warning(recwarn):
    mpi.decompose_rows(8, 4, 4, 3).slab_of(np.arange(32, dtype=np.int32).reshape(8, 4), fill=0)
    assert [str(w.message) for w in recwarn] == []


def test_slabs_thinner_than_the_halo_and_bad_arguments_are_refused():
    with pytest.raises(cd.ArgumentValueError, match="1 row\\(s\\) thick, thinner than the halo of 2"):
        mpi.decompose_rows(4, 4, 4, 0, halo=2)
    with pytest.raises(cd.ArgumentValueError, match=r"rank 4 outside \[0, 4\)"):
        mpi.decompose_rows(8, 8, 4, 4)
    with pytest.raises(cd.ArgumentTypeError, match="ny must be an int, got 8.0"):
        mpi.decompose_rows(8.0, 8, 2, 0)
    with pytest.raises(cd.ArgumentTypeError, match="halo must be an int, got True"):
        mpi.decompose_rows(8, 8, 2, 0, halo=True)


@pytest.mark.parametrize("env, expected", [
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, (3, 4, "OMPI_COMM_WORLD_LOCAL_RANK")),
    ({"MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, (1, 2, "MPI_LOCALRANKID")),
    ({"MV2_COMM_WORLD_LOCAL_RANK": "5"}, (5, None, "MV2_COMM_WORLD_LOCAL_RANK")),
    ({"SLURM_LOCALID": "2", "SLURM_PROCID": "6"}, (2, None, "SLURM_LOCALID")),
])
def test_local_rank_from_env_reads_each_launchers_variables(env, expected):
    assert tuple(mpi.local_rank_from_env(env, world_rank=6)) == expected


def test_local_rank_from_env_prefers_open_mpi_and_ignores_an_inherited_slurm_id():
    both = {"SLURM_LOCALID": "0", "SLURM_PROCID": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}
    assert mpi.local_rank_from_env(both, world_rank=2).source == "OMPI_COMM_WORLD_LOCAL_RANK"
    assert mpi.local_rank_from_env({"SLURM_LOCALID": "0", "SLURM_PROCID": "0"}, world_rank=3) is None
    assert mpi.local_rank_from_env({}, world_rank=0) is None


def test_local_rank_from_env_refuses_values_that_are_not_ranks():
    with pytest.raises(cd.ArgumentValueError, match="OMPI_COMM_WORLD_LOCAL_RANK='x' is not an integer"):
        mpi.local_rank_from_env({"OMPI_COMM_WORLD_LOCAL_RANK": "x"})
    with pytest.raises(cd.ArgumentValueError, match="MPI_LOCALRANKID=2 is not below MPI_LOCALNRANKS=2"):
        mpi.local_rank_from_env({"MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "2"})
    with pytest.raises(cd.ArgumentTypeError, match="the environment's OMPI_COMM_WORLD_LOCAL_RANK must be a str, "
                                                   "got int"):
        mpi.local_rank_from_env({"OMPI_COMM_WORLD_LOCAL_RANK": 1})


def test_device_ordinal_is_local_rank_modulo_device_count_so_ranks_share_devices():
    assert [mpi.device_ordinal_for(lr, 1) for lr in range(4)] == [0, 0, 0, 0]
    assert [mpi.device_ordinal_for(lr, 2) for lr in range(4)] == [0, 1, 0, 1]
    assert [mpi.device_ordinal_for(lr, 8, candidates=[2, 3]) for lr in range(3)] == [2, 3, 2]
    assert [mpi.device_ordinal_for(lr, 4, "3,1") for lr in range(3)] == [3, 1, 3]
    assert mpi.device_ordinal_for(5, 2, 1) == 1


def test_a_device_that_does_not_exist_is_an_error_naming_rank_device_and_count(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(cd.ArgumentValueError, match=r"rank 1 \(local rank 1\) was given device 7, which does not "
                                                    r"exist: 1 CUDA device\(s\) visible \(ordinals 0..0\); "
                                                    r"CUDA_VISIBLE_DEVICES='0'"):
        mpi.device_ordinal_for(1, 1, [0, 7], rank=1)
    with pytest.raises(cd.CudaUnavailableError, match="local rank 0: no CUDA device is visible"):
        mpi.device_ordinal_for(0, 0)
    with pytest.raises(cd.ArgumentTypeError, match="device ordinals must be ints, got 1.0"):
        mpi.device_ordinal_for(0, 2, [1.0])


@pytest.mark.parametrize("call, error, text", [
    (lambda: mpi.device_ordinal_for("0", 2), cd.ArgumentTypeError, "local_rank must be an int, got str '0'"),
    (lambda: mpi.device_ordinal_for(True, 2), cd.ArgumentTypeError, "local_rank must be an int, got bool True"),
    (lambda: mpi.device_ordinal_for(-1, 2), cd.ArgumentValueError, "local_rank must be >= 0, got -1"),
    (lambda: mpi.device_ordinal_for(0, None), cd.ArgumentTypeError, "device_count must be an int, got NoneType"),
    (lambda: mpi.device_ordinal_for(0, 2.5), cd.ArgumentTypeError, "device_count must be an int, got float 2.5"),
    (lambda: mpi.device_ordinal_for(0, 2, candidates=[]), cd.ArgumentValueError,
     "candidates: the list of device ordinals is empty"),
    (lambda: mpi.device_ordinal_for(0, 2, candidates=[1.5]), cd.ArgumentTypeError,
     "candidates: device ordinals must be ints, got 1.5"),
    (lambda: mpi.device_ordinal_for(0, 2, candidates=[True]), cd.ArgumentTypeError,
     "candidates: device ordinals must be ints, got True"),
    (lambda: mpi.device_ordinal_for(0, 2, candidates={0, 1}), cd.ArgumentTypeError,
     "candidates: expected a device ordinal \\(int\\), a list of them or a string such as '0,1', got set"),
    (lambda: mpi.device_ordinal_for(0, 2, 1.0), cd.ArgumentTypeError, "ordinal: expected a device ordinal"),
    (lambda: mpi.device_ordinal_for(0, 2, " "), cd.ArgumentValueError, "ordinal: the list of device ordinals is empty"),
])
def test_device_ordinal_for_takes_only_int_ranks_counts_and_ordinals(call, error, text):
    with pytest.raises(error, match=text):
        call()


def test_device_ordinal_for_takes_numpy_integers_and_arrays_of_ordinals():
    assert mpi.device_ordinal_for(np.int32(3), np.int64(2)) == 1
    assert mpi.device_ordinal_for(1, 4, candidates=np.array([3, 2])) == 2
    assert type(mpi.device_ordinal_for(0, 4, candidates=np.array([3, 2]))) is int


def test_mpirun_command_takes_numpy_integers_and_checks_the_launcher_given(tmp_path):
    hydra = _fake_launcher(tmp_path, "HYDRA build details:\n    Version:  4.2.0")
    assert mpi.mpirun_command(np.int64(2), mpirun=hydra) == [hydra, "-n", "2"]
    assert mpi.mpirun_command(np.uint8(3), mpirun=Path(hydra)) == [hydra, "-n", "3"]
    with pytest.raises(cd.ArgumentTypeError, match="nprocs must be an int >= 1, got float 2.0"):
        mpi.mpirun_command(2.0, mpirun=hydra)
    with pytest.raises(cd.ArgumentTypeError, match="nprocs must be an int >= 1, got True"):
        mpi.mpirun_command(True, mpirun=hydra)
    missing = str(tmp_path / "no-such-mpirun")
    with pytest.raises(cd.ArgumentValueError, match=f"mpirun='{missing}' is not an executable file"):
        mpi.mpirun_command(2, mpirun=missing)
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(cd.ArgumentValueError, match="is not an executable file"):
        mpi.mpirun_command(2, mpirun=str(plain))
    with pytest.raises(cd.ArgumentTypeError, match="mpirun must be a path or a command name"):
        mpi.mpirun_command(2, mpirun=5)


def test_a_device_field_with_a_malformed_array_interface_is_refused_naming_the_fault():
    class Field:
        def __init__(self, **cai):
            self.__cuda_array_interface__ = {"data": (4096, False), "version": 3, **cai}
    assert mpi._cai_field(Field(shape=(4, 4), typestr="<f4")) == (4096, np.dtype(np.float32), 16)
    with pytest.raises(cd.ArgumentValueError, match=r"HaloExchange.exchange: field: Field: its __cuda_array_interface__ "
                                                    r"strides \(16,\) gives 1 stride\(s\) for the 2-dimensional"):
        mpi._cai_field(Field(shape=(4, 4), strides=(16,), typestr="<f4"))
    with pytest.raises(cd.ArgumentValueError, match="'typestr' must be a str"):
        mpi._cai_field(Field(shape=(4, 4), strides=(16, 4)))


def test_cuda_aware_switch_values_and_ompi_info_parsing():
    from pycudadrv import _mpi_setup as setup

    tri = setup._tristate
    assert [tri("V", v) for v in (None, "", "1", " ON ", "no", "False")] == [None, None, True, True, False, False]
    with pytest.raises(cd.ArgumentValueError, match="PYCUDADRV_MPI_CUDA_AWARE='maybe' is not a switch"):
        tri("PYCUDADRV_MPI_CUDA_AWARE", "maybe")
    text = "mca:opal:base:param:opal_built_with_cuda_support:value:true\n"
    assert setup._parse_ompi_info(text) is True
    assert setup._parse_ompi_info(text.replace("true", "false")) is False
    assert setup._parse_ompi_info("options:mpi_ext:affinity, cuda") is None


def test_cuda_aware_library_queries_open_mpi_style_then_mpich_style():
    import ctypes
    from types import SimpleNamespace

    from pycudadrv._mpi_setup import _query_library

    def open_mpi():
        return 1

    def mpich(kind, out):
        assert kind == 0 and isinstance(out, type(ctypes.byref(ctypes.c_int())))
        out._obj.value = 0
        return 0

    assert _query_library(SimpleNamespace(MPIX_Query_cuda_support=open_mpi)) == (
        True, "MPIX_Query_cuda_support() returned 1")
    assert _query_library(SimpleNamespace(MPIX_GPU_query_support=mpich)) == (
        False, "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA) gave 0")
    assert _query_library(SimpleNamespace()) is None


def _fake_launcher(tmp_path, version_text):
    exe = tmp_path / "mpirun"
    exe.write_text(f"#!/bin/sh\necho '{version_text}'\n")
    exe.chmod(0o755)
    return str(exe)


def test_mpirun_command_adds_open_mpi_flags_and_nothing_for_mpich(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    ompi = _fake_launcher(tmp_path, "mpirun (Open MPI) 4.1.4")
    assert mpi.mpirun_command(2, mpirun=ompi) == [ompi, "-n", "2", "--oversubscribe", "--allow-run-as-root",
                                                   "--mca", "btl_vader_single_copy_mechanism", "none"]
    (tmp_path / "h").mkdir()
    hydra = _fake_launcher(tmp_path / "h", "HYDRA build details:\n    Version:  4.2.0")
    assert mpi.mpirun_command(4, mpirun=hydra) == [hydra, "-n", "4"]
    with pytest.raises(cd.ArgumentValueError, match="nprocs must be an int >= 1, got 0"):
        mpi.mpirun_command(0)


# --------------------------------------------------------------------------- under mpirun, no GPU

CPU_SCRIPT = textwrap.dedent(r'''
    import os, sys, json
    import numpy as np
    from pycudadrv import mpi, heat

    MPI = mpi.require_mpi()
    comm = MPI.COMM_WORLD
    mode = sys.argv[1]
    rank, size = comm.Get_rank(), comm.Get_size()

    class FakeDeviceRows:
        """A 'device' array that is host memory: a non-CUDA-aware MPI reads it fine."""
        def __init__(self, a):
            self.a = a
            self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                             "data": (a.ctypes.data, False), "strides": None, "version": 3}

    if mode == "heat":          # slabs of the float64 heat run with host exchanges == the NumPy reference
        seed, n, steps = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        u0 = np.random.default_rng(seed).random((n, n))
        d = mpi.SlabDecomposition.for_comm(comm, n, n)
        hx = mpi.HaloExchange(comm, d, np.float64, transfer="staged")
        u = d.slab_of(u0)
        u[0] = u[-1] = np.nan                 # halos: poisoned until the exchange fills them
        v = np.full_like(u, np.nan)
        for _ in range(steps):
            hx.exchange_array(u)
            v[1:-1, 1:-1] = u[1:-1, 1:-1] + heat.ALPHA * (
                u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1])
            v[:, 0], v[:, -1] = u[:, 0], u[:, -1]
            if d.up is None:
                v[1] = u[1]
            if d.down is None:
                v[-2] = u[-2]
            u, v = v, u
        full = np.full((n, n), np.nan) if rank == 0 else None
        comm.Gather(np.ascontiguousarray(u[d.own]), full, root=0)
        if rank == 0:
            print("EQUAL", np.array_equal(full, heat.reference(u0, steps)), hx.count)
    elif mode == "device-path":  # the device path hands __cuda_array_interface__ rows to MPI
        n = 6
        d = mpi.SlabDecomposition.for_comm(comm, 4 * size, n)
        hx = mpi.HaloExchange(comm, d, np.float32, transfer="device")
        slab = np.full(d.local_shape, -1.0, np.float32)
        slab[d.own] = rank * 100 + np.arange(d.rows * n, dtype=np.float32).reshape(d.rows, n)
        ready = hx.exchange(FakeDeviceRows(slab), after=None)
        got_up = slab[0].tolist() if d.up is not None else None
        got_down = slab[-1].tolist() if d.down is not None else None
        every = comm.gather([got_up, got_down, ready is None], root=0)
        if rank == 0:                         # one writer: Open MPI may interleave the ranks' output
            print("ROWS", json.dumps(every))
    elif mode == "local-rank":
        fake = int(sys.argv[2])
        env, split = mpi.local_rank(comm), mpi.local_rank(comm, method="split")
        a = mpi.assign_device(comm, device_count=fake)
        sub = comm.Split(rank % 2, rank)
        s = mpi.local_rank(sub)
        every = comm.gather([env.rank, env.source, split.rank, split.size, a.ordinal, a.ranks_per_device,
                             a.shared, s.rank, s.size, s.source], root=0)
        if rank == 0:
            print("LR", json.dumps(every))
    elif mode == "detect":
        every = comm.gather(f"{mpi.detect_cuda_aware()} {mpi.detect_cuda_aware(force=True).cuda_aware}", root=0)
        if rank == 0:
            print("\n".join("AWARE " + line for line in every))
    elif mode == "halo-wrong-size":
        d = mpi.SlabDecomposition.for_comm(comm, 8, 8)
        hx = mpi.HaloExchange(comm, d, np.float32, transfer="staged")
        rows = d.local_rows - (1 if rank == 1 else 0)
        hx.exchange_array(np.zeros((rows, 8), np.float32))
        comm.Barrier()
        print("UNREACHED", rank)
    elif mode == "halo-wrong-dtype":
        d = mpi.SlabDecomposition.for_comm(comm, 8, 8)
        hx = mpi.HaloExchange(comm, d, np.float32, transfer="device")
        dt = np.float64 if rank == 1 else np.float32
        hx.exchange(FakeDeviceRows(np.zeros(d.local_shape, dt)))
        comm.Barrier()
        print("UNREACHED", rank)
    elif mode == "grid-mismatch":
        n = 16 if rank == size - 1 else 8
        hx = mpi.HaloExchange(comm, mpi.SlabDecomposition.for_comm(comm, 6, n), np.float32, transfer="staged")
        comm.Barrier()
        print("UNREACHED", rank)
    elif mode == "not-divisible":
        mpi.SlabDecomposition.for_comm(comm, 512, 512)
        print("UNREACHED", rank)
    elif mode == "no-such-device":
        mpi.assign_device(comm, ordinal=[0, 3], device_count=1)
        comm.Barrier()
        print("UNREACHED", rank)
    elif mode == "user-error":
        with mpi.abort_on_error(comm):
            if rank == 1:
                raise KeyError("boom on rank 1")
            comm.Barrier()
        print("UNREACHED", rank)
''')


@pytest.fixture
def cpu_script(tmp_path):
    p = tmp_path / "mpi_cpu_checks.py"
    p.write_text(CPU_SCRIPT)
    return p


@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 4])
def test_host_slabs_with_halo_exchanges_equal_the_numpy_reference_bit_for_bit(cpu_script, rng, ranks):
    seed = int(rng.integers(2**31))
    rc, out, err, _ = mpirun(ranks, [cpu_script, "heat", seed, 32, 25])
    assert rc == 0, err
    assert "EQUAL True 25" in out


@needs_mpirun
def test_the_device_path_gives_mpi_the_halo_rows_through_cuda_array_interface(cpu_script):
    rc, out, err, _ = mpirun(3, [cpu_script, "device-path"])
    assert rc == 0, err
    rows = dict(enumerate(json.loads(out.split("ROWS ", 1)[1])))
    first = [float(v) for v in range(6)]            # a rank's first own row: rank*100 + 0..5
    last = [float(v) for v in range(18, 24)]         # its last (4th) own row: rank*100 + 18..23
    assert rows[0] == [None, [100 + v for v in first], True]
    assert rows[1] == [[0 + v for v in last], [200 + v for v in first], True]
    assert rows[2] == [[100 + v for v in last], None, True]


@needs_mpirun
def test_local_rank_from_the_launcher_and_from_a_shared_memory_split_agree(cpu_script):
    rc, out, err, _ = mpirun(4, [cpu_script, "local-rank", 2])
    assert rc == 0, err
    got = dict(enumerate(json.loads(out.split("LR ", 1)[1])))
    assert len(got) == 4
    for r, (env_rank, source, split_rank, split_size, ordinal, per, shared, sub_rank, sub_size, sub_src) in got.items():
        assert env_rank == split_rank == r and split_size == 4
        assert source in [v for v, _ in mpi.LOCAL_RANK_VARIABLES]
        assert (ordinal, per, shared) == (r % 2, 2, True)
        assert (sub_rank, sub_size, sub_src) == (r // 2, 2, "Split_type(COMM_TYPE_SHARED)")


@needs_mpirun
def test_cuda_aware_detection_reports_its_source_and_honours_the_override(cpu_script):
    rc, out, err, _ = mpirun(2, [cpu_script, "detect"])
    assert rc == 0, err
    lines = sorted(ln for ln in out.splitlines() if ln.startswith("AWARE"))
    assert len(lines) == 2 and all(ln.endswith(" True") for ln in lines)
    assert all("CUDA-aware: " in ln and "(" in ln for ln in lines)
    rc, out, err, _ = mpirun(2, [cpu_script, "detect"], **{mpi.ENV_CUDA_AWARE: "1"})
    assert rc == 0, err
    assert out.count("CUDA-aware: yes (PYCUDADRV_MPI_CUDA_AWARE=1)") == 2
    rc, out, err, _ = mpirun(2, [cpu_script, "detect"], **{mpi.ENV_CUDA_AWARE: "off"})
    assert out.count("CUDA-aware: no (PYCUDADRV_MPI_CUDA_AWARE=off)") == 2


def _assert_aborted(rc, out, err, seconds, rank, size, error, message):
    assert rc != 0
    assert "UNREACHED" not in out
    assert f"pycudadrv.mpi: rank {rank} of {size}: {error}: " in err, err
    assert message in err, err
    assert f"pycudadrv.mpi: rank {rank} aborts the communicator" in err
    assert seconds < 60


@needs_mpirun
def test_a_halo_slab_of_the_wrong_size_aborts_from_the_rank_that_passed_it(cpu_script):
    _assert_aborted(*mpirun(2, [cpu_script, "halo-wrong-size"], timeout=60), 1, 2, "ArgumentValueError",
                    "HaloExchange.exchange_array: the field has 40 elements (shape (5, 8)); rank 1's slab with halos "
                    "is 6 x 8 = 48 (4 own rows + 1 halo row(s) above and below)")


@needs_mpirun
def test_a_halo_field_of_the_wrong_dtype_aborts_from_the_rank_that_passed_it(cpu_script):
    _assert_aborted(*mpirun(2, [cpu_script, "halo-wrong-dtype"], timeout=60), 1, 2, "ArgumentTypeError",
                    "the field holds float64, the exchange was set up for float32 (rank 1)")


@needs_mpirun
def test_a_rank_describing_another_grid_is_the_one_reported(cpu_script):
    _assert_aborted(*mpirun(3, [cpu_script, "grid-mismatch"], timeout=60), 2, 3, "ArgumentValueError",
                    "rank 2 describes a 6 x 16 grid of float32 with halo 1, 2 other rank(s) a 6 x 8 grid")


@needs_mpirun
def test_a_communicator_size_that_does_not_divide_the_grid_aborts_with_the_reason(cpu_script):
    rc, out, err, seconds = mpirun(3, [cpu_script, "not-divisible"], timeout=60)
    assert rc != 0 and "UNREACHED" not in out and seconds < 60
    assert "ArgumentValueError: decompose_rows: the communicator size 3 does not divide the 512 grid rows" in err


@needs_mpirun
def test_a_rank_given_a_device_that_does_not_exist_aborts_the_job(cpu_script):
    _assert_aborted(*mpirun(2, [cpu_script, "no-such-device"], timeout=60), 1, 2, "ArgumentValueError",
                    "rank 1 (local rank 1) was given device 3, which does not exist: 1 CUDA device(s) visible")


@needs_mpirun
def test_abort_on_error_turns_an_exception_on_one_rank_into_an_abort(cpu_script):
    rc, out, err, seconds = mpirun(2, [cpu_script, "user-error"], timeout=60)
    _assert_aborted(rc, out, err, seconds, 1, 2, "KeyError", "'boom on rank 1'")
    assert "Traceback (most recent call last)" in err


# --------------------------------------------------------------------------- GPU: the example under mpirun

def _example(tmp_path, ranks, *args, **env):
    if not EXAMPLE.exists():
        pytest.skip(f"{EXAMPLE} is not next to the tests (they run from a copy)")
    out_json = tmp_path / f"heat_mpi_{ranks}.json"
    rc, out, err, _ = mpirun(ranks, [EXAMPLE, *args, "--json", out_json], timeout=300, **env)
    assert rc == 0, f"rc={rc}\nstdout:\n{out}\nstderr:\n{err}"
    return out, json.loads(out_json.read_text())


def _assert_checks_passed(out, report, ranks):
    assert f"heat_mpi: {ranks} rank(s)" in out
    assert "check: gathered result bit-identical to the single-process run" in out and "): OK" in out
    assert "check vs NumPy float64: relative error" in out and "(limit 1e-05) OK" in out
    assert "all checks passed" in out
    assert report["ranks"] == ranks and report["matches_single"] is True
    assert report["rel_error"] < 1e-5
    assert out.count("CUDA-aware: ") == 1


@needs_mpirun
@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [2, 4])
def test_example_with_pinned_staging_matches_the_single_process_run(tmp_path, rng, ranks):
    out, report = _example(tmp_path, ranks, "--n", 256, "--steps", 120, "--seed", int(rng.integers(2**31)),
                           "--transfer", "staged")
    _assert_checks_passed(out, report, ranks)
    assert "transfer: staged (forced by --transfer); overlap: on; graph: off" in out
    assert 0.0 <= report["overlap_fraction"] <= 1.0


@needs_mpirun
@pytest.mark.gpu
def test_example_on_the_main_jobs_grid_equals_pycudadrv_heat_run(tmp_path):
    out, report = _example(tmp_path, 4, "--n", 512, "--steps", 100)
    _assert_checks_passed(out, report, 4)
    assert report["single_process"] == "pycudadrv.heat.run"
    assert "shared by 4 ranks" in out or cd.device_count() > 1


@needs_mpirun
@pytest.mark.gpu
@pytest.mark.parametrize("ranks, mode", [(2, ["--graph"]), (4, ["--graph", "--no-overlap"]), (2, ["--no-overlap"])])
def test_example_with_graphs_or_without_overlap_matches_too(tmp_path, rng, ranks, mode):
    out, report = _example(tmp_path, ranks, "--n", 128, "--ny", 256, "--steps", 101,
                           "--seed", int(rng.integers(2**31)), "--transfer", "staged", *mode)
    _assert_checks_passed(out, report, ranks)
    assert report["graph"] is ("--graph" in mode) and report["overlap"] is ("--no-overlap" not in mode)


def _detected_cuda_aware(tmp_path):
    code = "from pycudadrv import mpi; print(int(mpi.detect_cuda_aware().cuda_aware))"
    rc, out, err, _ = mpirun(1, ["-c", code])
    assert rc == 0, err
    return out.strip().endswith("1")


@needs_mpirun
@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [2, 4])
def test_example_with_device_buffers_handed_to_a_cuda_aware_mpi(tmp_path, rng, ranks):
    if not _detected_cuda_aware(tmp_path):
        pytest.skip("the MPI library is not CUDA-aware (pycudadrv.mpi.detect_cuda_aware); device pointers would "
                    "crash it, so the device path is only forced on a CUDA-aware MPI")
    out, report = _example(tmp_path, ranks, "--n", 256, "--steps", 120, "--seed", int(rng.integers(2**31)),
                           "--transfer", "device")
    _assert_checks_passed(out, report, ranks)
    assert "transfer: device (forced by --transfer)" in out


@needs_mpirun
@pytest.mark.gpu
def test_example_rank_given_a_device_that_does_not_exist_aborts_every_rank(tmp_path):
    if not EXAMPLE.exists():
        pytest.skip(f"{EXAMPLE} is not next to the tests (they run from a copy)")
    bad = cd.device_count() + 5
    rc, out, err, seconds = mpirun(2, [EXAMPLE, "--n", 64, "--steps", 4, "--devices", f"0,{bad}"], timeout=120)
    assert rc != 0 and "all checks passed" not in out and seconds < 120
    assert f"pycudadrv.mpi: rank 1 of 2: ArgumentValueError: assign_device: rank 1 (local rank 1) was given " \
           f"device {bad}, which does not exist" in err


GPU_BAD_HALO = textwrap.dedent(r'''
    import numpy as np, pycudadrv as cd
    from pycudadrv import mpi
    comm = mpi.require_mpi().COMM_WORLD
    mpi.select_device(comm)
    d = mpi.SlabDecomposition.for_comm(comm, 64, 64)
    hx = mpi.HaloExchange(comm, d, np.float32, transfer="staged")
    good = cd.Buffer.empty(d.local_shape, np.float32)
    good.fill(np.float32(1.5))
    hx.exchange(good)
    field = good if comm.Get_rank() == 0 else cd.Buffer.empty((d.local_rows - 1, 64), np.float32)
    hx.exchange(field)
    print("UNREACHED", comm.Get_rank())
''')


@needs_mpirun
@pytest.mark.gpu
def test_a_device_halo_buffer_of_the_wrong_size_aborts_from_that_rank(tmp_path):
    p = tmp_path / "bad_halo.py"
    p.write_text(GPU_BAD_HALO)
    _assert_aborted(*mpirun(2, [p], timeout=120), 1, 2, "ArgumentValueError",
                    "the field has 2112 elements (shape (33, 64)); rank 1's slab with halos is 34 x 64 = 2176")
