"""Shared pieces of the pycudadrv benchmarks.

* :func:`build_c_floor` compiles ``bench/c_floor.c`` with the system C compiler
  into a temporary shared library and loads it with ctypes (:class:`CFloor`).
* :class:`ParamArray` is a C ``void* kernelParams[]`` over ctypes values.
* :class:`KernelSeq` (with :func:`param_array_from_bytes`) describes a sequence of
  kernels for the C floor's ``floor_graph_capture_seq`` / ``floor_launch_seq_loop``.
* :class:`Row` and :func:`run_interleaved` run every row of a benchmark in
  turn, round after round, with the C floor first and last in each round, and
  keep each round's figures so that only same-round ratios are taken.
* :func:`setup` does what every benchmark does first (CUDA present, the C floor
  built and initialised, device 0 current, the host described) and
  :func:`launch_hook` warns about a profiling hook; :func:`setup_peers` sets up
  the optional peer libraries and :func:`sync_all_streams` waits for every stream.
* :func:`summarize`, :func:`environment`, :meth:`Bench.report_header`,
  :func:`print_skipped` and :func:`write_report` (JSON, and a PNG through
  :func:`pyplot` / :func:`save_figure`) produce the report.
"""
from __future__ import annotations

import argparse
import atexit
import ctypes
import datetime as _dt
import glob
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Callable

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
C_FLOOR_SOURCE = BENCH_DIR / "c_floor.c"


class BenchSetupError(RuntimeError):
    """Something the benchmark cannot run without (CUDA, a C compiler, cuda.h)."""


class PeerSkipped(Exception):
    """An optional peer library is missing or unusable: its rows are skipped."""


def log(msg: str) -> None:
    print(msg, flush=True)


# The tiny kernel of launch_overhead.py and graph_replay.py: launched with n = 0
# (no thread touches memory), grid 1, block 32.
KERNEL_NAME = "bench_kernel"
KERNEL_SRC = r"""
extern "C" __global__ void bench_kernel(float* a, const float* b, int n, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = s * b[i] + a[i];
}
"""
GRID, BLOCK = 1, 32
N_ELEMS = 32                 # elements in the a/b buffers (the kernel reads none with n = 0)


# --------------------------------------------------------------------------- C floor

def find_cuda_include() -> str:
    """The directory holding ``cuda.h``: $CUDA_HOME/include, $CUDA_PATH/include,
    /usr/local/cuda/include, /usr/local/cuda-*/include, the nvidia-* wheels,
    then /usr/include (the same search as pycudadrv's setup.py, plus a few)."""
    cands: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            cands.append(os.path.join(root, "include"))
    cands.append("/usr/local/cuda/include")
    cands += sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True)
    try:
        import nvidia  # namespace package of the nvidia-* wheels

        for base in list(nvidia.__path__):
            cands += sorted(glob.glob(os.path.join(base, "*", "include")))
    except ImportError:
        pass
    cands.append("/usr/include")
    for inc in cands:
        if os.path.isfile(os.path.join(inc, "cuda.h")):
            return inc
    raise BenchSetupError("cuda.h not found (needed to compile the C floor); looked in: " + ", ".join(cands)
                          + ". Set CUDA_HOME or `pip install nvidia-cuda-runtime`.")


def find_compiler() -> str:
    """$CC, else the first of cc, gcc, clang on PATH."""
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand.split()[0]):
            return cand
    raise BenchSetupError("no C compiler found ($CC, cc, gcc, clang); the C floor needs one")


class ParamArray:
    """A C ``void* kernelParams[N]`` whose entries point at ctypes values.

    ``ParamArray(ctypes.c_void_p(ptr), ctypes.c_int(0), ctypes.c_float(1.0))``
    keeps the values alive; :attr:`address` is the ``void**`` as an int and
    :attr:`array` the ctypes array itself (pass either to a C function)."""

    def __init__(self, *values):
        self.values = tuple(values)
        self.array = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)

    def __len__(self):
        return len(self.values)


class CFloor:
    """The compiled ``c_floor.c``: loops of driver calls timed in C."""

    def __init__(self, lib: ctypes.CDLL, path: str, compiler: str, compiler_version: str, include_dir: str):
        self.lib = lib
        self.path = path
        self.compiler = compiler
        self.compiler_version = compiler_version
        self.include_dir = include_dir
        P, U, I, D = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_double
        lib.floor_init.argtypes, lib.floor_init.restype = [ctypes.c_char_p], I
        lib.floor_init_error.argtypes, lib.floor_init_error.restype = [], ctypes.c_char_p
        lib.floor_launch_kernel_fn.argtypes, lib.floor_launch_kernel_fn.restype = [], P
        lib.floor_error_name.argtypes, lib.floor_error_name.restype = [I], ctypes.c_char_p
        lib.floor_launch_loop.argtypes, lib.floor_launch_loop.restype = [P, P, P, I], D
        lib.floor_launch_loop_dims.argtypes = [P, U, U, U, P, P, I]
        lib.floor_launch_loop_dims.restype = D
        lib.floor_graph_launch_loop.argtypes, lib.floor_graph_launch_loop.restype = [P, P, I], D
        # Graph building in C and synchronizing loops (graph_replay.py); bound only
        # when the compiled source has them.
        self.has_graph_capture = hasattr(lib, "floor_graph_capture")
        if self.has_graph_capture:
            lib.floor_graph_capture.argtypes = [P, U, U, U, U, U, U, U, P, P, I, ctypes.POINTER(P),
                                                ctypes.POINTER(I)]
            lib.floor_graph_capture.restype = I
            lib.floor_graph_launch_loop_sync.argtypes = [P, P, I]
            lib.floor_graph_launch_loop_sync.restype = D
            for name in ("floor_graph_upload",):
                getattr(lib, name).argtypes, getattr(lib, name).restype = [P, P], I
            for name in ("floor_graph_exec_destroy", "floor_stream_synchronize"):
                getattr(lib, name).argtypes, getattr(lib, name).restype = [P], I

    def init(self, libcuda_path: str | None = None) -> None:
        """Resolve cuLaunchKernel / cuGraphLaunch from the libcuda already loaded
        (call after pycudadrv has initialised the driver)."""
        path = libcuda_path or os.environ.get("PYCUDADRV_LIBCUDA", "libcuda.so.1")
        rc = self.lib.floor_init(path.encode())
        if rc != 0:
            raise BenchSetupError(f"C floor: floor_init({path!r}) = {rc}: "
                                  f"{self.lib.floor_init_error().decode(errors='replace')}")

    def error_name(self, code: int) -> str:
        """The CUresult's name (``cuGetErrorName``), or "?"."""
        return self.lib.floor_error_name(code).decode(errors="replace")

    def _check(self, seconds: float, what: str) -> int:
        """Seconds from a C loop -> nanoseconds; a negative value is -(CUresult)."""
        if seconds < 0:
            code = int(round(-seconds))
            raise RuntimeError(f"C floor: {what} failed: {self.error_name(code)} ({code})")
        return int(round(seconds * 1e9))

    def launch_loop(self, func: int, stream: int, params: ParamArray | None, iters: int) -> int:
        """``iters`` x ``cuLaunchKernel(func, grid 1, block 32, 0, stream, params, NULL)``;
        returns the elapsed nanoseconds measured in C."""
        p = None if params is None else params.address
        return self._check(self.lib.floor_launch_loop(func, stream, p, iters), "cuLaunchKernel loop")

    def timed_launch_loop(self, func: int, stream: int, params: ParamArray, start_events: list,
                          end_events: list, iters: int) -> int:
        """ns for ``iters`` x (event record, launch, event record) in C, cycling over the event pairs."""
        n = len(start_events)
        starts = (ctypes.c_void_p * n)(*start_events)
        ends = (ctypes.c_void_p * n)(*end_events)
        fn = self.lib.floor_timed_launch_loop
        fn.restype = ctypes.c_double
        fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_int]
        return self._check(fn(func, stream, params.address, ctypes.addressof(starts), ctypes.addressof(ends),
                              n, iters), "floor_timed_launch_loop")

    def launch_loop_dims(self, func: int, grid_x: int, block_x: int, shared_mem_bytes: int, stream: int,
                         params: ParamArray | None, iters: int) -> int:
        p = None if params is None else params.address
        return self._check(self.lib.floor_launch_loop_dims(func, grid_x, block_x, shared_mem_bytes, stream, p,
                                                           iters), "cuLaunchKernel loop")

    def graph_launch_loop(self, graph_exec: int, stream: int, iters: int) -> int:
        """``iters`` x ``cuGraphLaunch(graph_exec, stream)``; elapsed nanoseconds."""
        return self._check(self.lib.floor_graph_launch_loop(graph_exec, stream, iters), "cuGraphLaunch loop")

    # -- graphs built in C (graph_replay.py) -------------------------------------------------

    def _need_graph(self) -> None:
        if not self.has_graph_capture:
            raise BenchSetupError(f"{self.path}: built from a c_floor.c without floor_graph_capture")

    def _rc(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"C floor: {what} failed: {self.error_name(rc)} ({rc})")

    def graph_capture(self, func: int, grid, block, shared_mem_bytes: int, stream: int,
                      params: ParamArray | None, count: int) -> tuple[int, int]:
        """Capture ``count`` x ``cuLaunchKernel(func, grid, block, shared, stream, params)``
        on ``stream`` in C and instantiate the graph; returns ``(CUgraphExec as int,
        number of nodes or -1)``. Free it with :meth:`graph_exec_destroy`."""
        self._need_graph()
        g = _dims3(grid, "grid")
        b = _dims3(block, "block")
        out = ctypes.c_void_p(None)
        nodes = ctypes.c_int(-1)
        p = None if params is None else params.address
        rc = self.lib.floor_graph_capture(func, *g, *b, shared_mem_bytes, stream, p, count, ctypes.byref(out),
                                          ctypes.byref(nodes))
        self._rc(rc, f"capturing {count} launches into a graph")
        if not out.value:
            raise RuntimeError("C floor: floor_graph_capture returned no graph")
        return int(out.value), int(nodes.value)

    def graph_upload(self, graph_exec: int, stream: int) -> None:
        self._need_graph()
        self._rc(self.lib.floor_graph_upload(graph_exec, stream), "cuGraphUpload")

    def graph_exec_destroy(self, graph_exec: int) -> None:
        self._need_graph()
        self._rc(self.lib.floor_graph_exec_destroy(graph_exec), "cuGraphExecDestroy")

    def stream_synchronize(self, stream: int) -> None:
        self._need_graph()
        self._rc(self.lib.floor_stream_synchronize(stream), "cuStreamSynchronize")

    def graph_launch_loop_sync(self, graph_exec: int, stream: int, iters: int) -> int:
        """``iters`` x ``cuGraphLaunch(graph_exec, stream)`` then ``cuStreamSynchronize(stream)``,
        all timed in C; elapsed nanoseconds."""
        self._need_graph()
        return self._check(self.lib.floor_graph_launch_loop_sync(graph_exec, stream, iters),
                           "cuGraphLaunch loop + cuStreamSynchronize")

    # -- sequences of kernels (step_loop.py) ---------------------------------------------------

    @property
    def has_seq(self) -> bool:
        """Whether the compiled source has floor_graph_capture_seq / floor_launch_seq_loop."""
        return hasattr(self.lib, "floor_graph_capture_seq") and hasattr(self.lib, "floor_launch_seq_loop")

    def _need_seq(self) -> None:
        if not self.has_seq:
            raise BenchSetupError(f"{self.path}: built from a c_floor.c without floor_graph_capture_seq")
        lib = self.lib
        if getattr(self, "_seq_bound", False):
            return
        P, I = ctypes.c_void_p, ctypes.c_int
        lib.floor_graph_capture_seq.argtypes = [I, P, P, P, P, P, I, ctypes.POINTER(P), ctypes.POINTER(I)]
        lib.floor_graph_capture_seq.restype = I
        lib.floor_launch_seq_loop.argtypes = [I, P, P, P, P, P, I, I]
        lib.floor_launch_seq_loop.restype = ctypes.c_double
        self._seq_bound = True

    def graph_capture_seq(self, seq: "KernelSeq", stream: int, repeats: int) -> tuple[int, int]:
        """Capture ``repeats`` x the kernels of ``seq`` (in order) on ``stream`` in C and
        instantiate the graph; returns ``(CUgraphExec as int, number of nodes or -1)``.
        Replay with :meth:`graph_launch_loop` / :meth:`graph_launch_loop_sync`; free with
        :meth:`graph_exec_destroy`."""
        self._need_seq()
        out = ctypes.c_void_p(None)
        nodes = ctypes.c_int(-1)
        rc = self.lib.floor_graph_capture_seq(seq.n, seq.funcs_address, seq.dims_address, seq.shared_address,
                                              seq.params_address, stream, repeats, ctypes.byref(out),
                                              ctypes.byref(nodes))
        self._rc(rc, f"capturing {repeats} x {seq.n} launches into a graph")
        if not out.value:
            raise RuntimeError("C floor: floor_graph_capture_seq returned no graph")
        return int(out.value), int(nodes.value)

    def launch_seq_loop(self, seq: "KernelSeq", stream: int, repeats: int, synchronize: bool = True) -> int:
        """``repeats`` x the kernels of ``seq`` as plain ``cuLaunchKernel`` calls, then (with
        ``synchronize``) ``cuStreamSynchronize(stream)``, all timed in C; elapsed nanoseconds."""
        self._need_seq()
        return self._check(self.lib.floor_launch_seq_loop(seq.n, seq.funcs_address, seq.dims_address,
                                                          seq.shared_address, seq.params_address, stream,
                                                          repeats, 1 if synchronize else 0),
                           "cuLaunchKernel sequence loop" + (" + cuStreamSynchronize" if synchronize else ""))


def _dims3(v, what: str) -> tuple[int, int, int]:
    """An int or a tuple of 1-3 ints -> (x, y, z)."""
    t = (int(v),) if isinstance(v, int) else tuple(int(x) for x in v)
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise ValueError(f"{what} must be a positive int or 1-3 positive ints, got {v!r}")
    return t + (1,) * (3 - len(t))


def kernel_params(a_ptr: int, b_ptr: int, n: int, s: float) -> ParamArray:
    """The C ``void* params[]`` of ``bench_kernel(a, b, n, s)``."""
    return ParamArray(ctypes.c_void_p(a_ptr), ctypes.c_void_p(b_ptr), ctypes.c_int(n), ctypes.c_float(s))


def param_array_from_bytes(params) -> ParamArray:
    """A :class:`ParamArray` holding copies of already-marshalled parameter bytes (e.g.
    ``PreparedLaunch.param_bytes()``), so C launches receive exactly the bits pycudadrv
    passes. 1-, 2-, 4- and 8-byte values get an integer of that width (naturally aligned);
    other sizes a byte array."""
    widths = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}
    vals = []
    for raw in params:
        raw = bytes(raw)
        t = widths.get(len(raw), ctypes.c_uint8 * max(len(raw), 1))
        vals.append(t.from_buffer_copy(raw.ljust(ctypes.sizeof(t), b"\0")))
    return ParamArray(*vals)


class KernelSeq:
    """The kernels of one step for the C floor's sequence functions.

    ``KernelSeq([(func, grid, block, shared_mem_bytes, params), ...])`` with ``func`` a
    CUfunction as int, ``grid``/``block`` ints or 1-3 tuples and ``params`` a
    :class:`ParamArray` (or None for a kernel without parameters). Holds the C arrays
    ``CUfunction funcs[n]``, ``unsigned dims[6n]`` (grid x/y/z, block x/y/z per kernel),
    ``unsigned shared[n]`` and ``void** params[n]``, and keeps the parameters alive."""

    def __init__(self, kernels):
        ks = list(kernels)
        if not ks:
            raise ValueError("KernelSeq needs at least one kernel")
        self.n = len(ks)
        self.param_arrays = [k[4] for k in ks]
        self.funcs = (ctypes.c_void_p * self.n)(*[int(k[0]) for k in ks])
        dims = []
        for k in ks:
            dims += [*_dims3(k[1], "grid"), *_dims3(k[2], "block")]
        self.dims = (ctypes.c_uint * (6 * self.n))(*dims)
        self.shared = (ctypes.c_uint * self.n)(*[int(k[3]) for k in ks])
        self.params = (ctypes.c_void_p * self.n)(*[None if p is None else p.address for p in self.param_arrays])

    @property
    def funcs_address(self) -> int:
        return ctypes.addressof(self.funcs)

    @property
    def dims_address(self) -> int:
        return ctypes.addressof(self.dims)

    @property
    def shared_address(self) -> int:
        return ctypes.addressof(self.shared)

    @property
    def params_address(self) -> int:
        return ctypes.addressof(self.params)


def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run(cc.split() + ["--version"], capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).splitlines()[0].strip()
    except Exception as e:  # noqa: BLE001 -- informational only
        return f"unknown ({e})"


def build_c_floor(source: Path = C_FLOOR_SOURCE) -> CFloor:
    """Compile ``source`` into a temporary shared library and load it (not yet
    initialised: call :meth:`CFloor.init` once pycudadrv has loaded the driver).
    Raises BenchSetupError when the compiler or cuda.h is missing or the
    compile fails (with the compiler's output)."""
    cc = find_compiler()
    inc = find_cuda_include()
    tmp = tempfile.mkdtemp(prefix="pycudadrv-bench-")
    atexit.register(shutil.rmtree, tmp, True)
    out = os.path.join(tmp, "c_floor.so")
    cmd = cc.split() + ["-O2", "-shared", "-fPIC", f"-I{inc}", str(source), "-o", out, "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchSetupError(f"compiling the C floor failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return CFloor(ctypes.CDLL(out), out, " ".join(cmd), _compiler_version(cc), inc)


# --------------------------------------------------------------------------- set-up

@dataclass
class Bench:
    """What :func:`setup` found: pycudadrv (``cd``), the initialised C floor, device 0
    (current), the driver version, the host (:func:`environment`) and the run's title."""

    name: str
    cd: object
    floor: CFloor
    pdev: object
    driver_version: tuple
    env: dict
    title: str

    def report_header(self) -> dict:
        """The first keys of the JSON report: the benchmark, the host, the device,
        driver / pycudadrv / NVRTC versions and how the C floor was built."""
        cd, pdev, floor, dv = self.cd, self.pdev, self.floor, self.driver_version
        cc = pdev.compute_capability
        try:
            nvrtc = ".".join(map(str, cd.nvrtc_version()))
        except Exception:  # noqa: BLE001
            nvrtc = None
        return {
            "benchmark": self.name,
            **self.env,
            "device": {"name": pdev.name, "ordinal": pdev.ordinal, "compute_capability": list(cc), "arch": pdev.arch},
            "driver_version": f"{dv[0]}.{dv[1]}",
            "pycudadrv_version": cd.__version__,
            "nvrtc_version": nvrtc,
            "c_floor": {"compile": floor.compiler, "compiler": floor.compiler_version,
                        "cuda_include": floor.include_dir},
        }


def setup(name: str, title_suffix: str, *, title_prefix: str = "",
          check_built: Callable[[CFloor], str | None] | None = None,
          check_ready: Callable[[CFloor], str | None] | None = None) -> Bench | None:
    """Everything a benchmark needs before its own work: CUDA available, the C floor
    compiled (then ``check_built(floor)``), device 0's primary context current, the C
    floor initialised (then ``check_ready(floor)``), the host described; logs
    ``<name>: <title>`` and the CPU / compiler line. The title is ``<title_prefix><device>,
    driver CUDA x.y, pycudadrv v; <title_suffix>``. A check returns an error message or
    None. Returns None, after printing ``<name>: <why>`` to stderr, when something is
    missing (the benchmark then exits 2)."""
    import pycudadrv as cd

    def fail(msg):
        print(f"{name}: {msg}", file=sys.stderr)

    if not cd.is_available():
        try:
            cd.require()
            why = "is_available() is False"
        except Exception as e:  # noqa: BLE001 -- the reason, for the message
            why = f"{type(e).__name__}: {e}"
        fail(f"CUDA is not available, nothing to measure ({why})")
        return None
    try:
        floor = build_c_floor()
    except BenchSetupError as e:
        fail(e)
        return None
    msg = check_built(floor) if check_built is not None else None
    if msg:
        fail(msg)
        return None
    pdev = cd.Device(0)
    pdev.set_current()
    try:
        floor.init()
    except BenchSetupError as e:
        fail(e)
        return None
    msg = check_ready(floor) if check_ready is not None else None
    if msg:
        fail(msg)
        return None
    dv = cd.driver_version()
    env = environment()
    title = f"{title_prefix}{pdev.name}, driver CUDA {dv[0]}.{dv[1]}, pycudadrv {cd.__version__}; {title_suffix}"
    log(f"{name}: {title}")
    log(f"  CPU {env['cpu']}; C floor built with: {floor.compiler_version}")
    return Bench(name, cd, floor, pdev, dv, env, title)


def launch_hook():
    """The pycudadrv launch hook, or None; logs a warning when there is one
    (profiling/tracing, PYCUDADRV_PROFILE / PYCUDADRV_TRACE, would add its cost
    to every pycudadrv row)."""
    try:
        from pycudadrv._launch import get_launch_hook
        hook = get_launch_hook()
    except ImportError:
        hook = None
    if hook is not None:
        log(f"WARNING: a pycudadrv launch hook is installed ({hook!r}); the pycudadrv rows include its cost")
    return hook


def setup_peers(makers, enabled: bool, pdev, detail: Callable[[dict], str] | None = None):
    """Set up the optional peer libraries: ``makers`` is ``[(name, make), ...]`` with
    ``make()`` returning ``(payload, meta)`` or raising (PeerSkipped, or anything: the
    peer is then skipped with the reason). ``pdev`` is made current after each (the
    peers share its primary context). With ``detail``, logs ``  <name>: <status>`` after
    each attempted peer, followed by ``detail(info)`` when it is ok. Returns
    ``({name: payload} of the peers that are ok, {name: info})``, info's "status"
    being "ok" (with meta) or "skipped: <why>"."""
    payloads, info = {}, {}
    for name, make in makers:
        if not enabled:
            info[name] = {"status": "skipped: --no-peers"}
            continue
        try:
            payload, meta = make()
        except PeerSkipped as e:
            info[name] = {"status": f"skipped: {e}"}
        except Exception as e:  # noqa: BLE001 -- any failure of an optional peer only skips it
            info[name] = {"status": f"skipped: {type(e).__name__}: {e}"}
        else:
            payloads[name] = payload
            info[name] = {"status": "ok", **meta}
        finally:
            pdev.set_current()  # the peers share the primary context; be sure it is current
        if detail is not None:
            st = info[name]
            log(f"  {name}: {st['status']}{detail(st) if st['status'] == 'ok' else ''}")
    return payloads, info


def cupy_bench_kernel():
    """CuPy's set-up of the benchmarks' kernel: a namespace with ``cupy``, ``kernel`` (a
    RawKernel of bench_kernel), ``stream`` (non-blocking), ``a`` = 0 and ``b`` = 1 (N_ELEMS
    float32), ``grid``, ``block`` and ``args`` (n = 0, s = 1); the kernel launched once on the
    stream (compiling and loading it, outside any capture) and synchronised. Raises
    PeerSkipped when CuPy is not installed."""
    import numpy as np

    try:
        import cupy
    except ImportError as e:
        raise PeerSkipped(f"not installed ({e})") from None
    kernel = cupy.RawKernel(KERNEL_SRC, KERNEL_NAME)
    st = cupy.cuda.Stream(non_blocking=True)
    a = cupy.zeros(N_ELEMS, dtype=cupy.float32)
    b = cupy.ones(N_ELEMS, dtype=cupy.float32)
    cupy.cuda.Device(0).synchronize()
    grid, block = (GRID,), (BLOCK,)
    args = (a, b, np.int32(0), np.float32(1.0))
    with st:
        kernel(grid, block, args)  # probe: compiles and loads the kernel outside any capture
    st.synchronize()
    return SimpleNamespace(cupy=cupy, kernel=kernel, stream=st, a=a, b=b, grid=grid, block=block, args=args)


def cuda_core_peer(pdev):
    """cuda.core (``cuda.core``, else ``cuda.core.experimental``): a namespace with its
    ``Device``, ``LaunchConfig``, ``Program``, ``ProgramOptions`` and ``launch``, the
    ``module`` they came from, the package ``version``, its ``device`` for ``pdev`` (made
    current) and a new ``stream`` of it. Raises PeerSkipped when cuda.core is not installed."""
    try:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
            modname = "cuda.core"
        except ImportError:
            from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
            modname = "cuda.core.experimental"
        import cuda.core as cc_pkg
        version = getattr(cc_pkg, "__version__", "?")
    except ImportError as e:
        raise PeerSkipped(f"not installed ({e})") from None
    dev = Device(pdev.ordinal)
    dev.set_current()
    stream = dev.create_stream()
    return SimpleNamespace(Device=Device, LaunchConfig=LaunchConfig, Program=Program, ProgramOptions=ProgramOptions,
                           launch=launch, module=modname, version=version, device=dev, stream=stream)


def sync_all_streams(syncs, pdev) -> Callable[[], None]:
    """A function that calls every one of ``syncs`` (stream synchronize methods; each
    stream once, in order), then makes ``pdev``'s context current again."""
    unique, seen = [], set()
    for f in syncs:
        key = id(getattr(f, "__self__", f))
        if key not in seen:
            seen.add(key)
            unique.append(f)

    def sync_all():
        for f in unique:
            f()
        pdev.set_current()
    return sync_all


# --------------------------------------------------------------------------- interleaved rounds

@dataclass
class Row:
    """One line of a benchmark table.

    ``run(n)`` makes ``n`` launches and returns the nanoseconds they took (its
    own timing region covers the launches only); ``sync()`` waits for the
    row's stream. A row that is not ``essential`` (a peer library) is dropped,
    with the reason kept, if it raises; an essential one stops the benchmark."""

    name: str
    run: Callable[[int], int]
    sync: Callable[[], None]
    essential: bool = True
    target: float | None = None
    keep: object = None   # objects the row's closures need alive (a peer's kernel, stream, buffers)


@dataclass
class Interleaved:
    """Per-round figures of one interleaved benchmark (nanoseconds per round)."""

    launches: int
    floor_first_ns: list
    floor_last_ns: list
    rows: dict          # name -> list of ns per round
    drain_ns: dict      # name -> list of ns the row's stream took to drain after its launches
    dropped: dict       # name -> reason

    @property
    def floor_ns(self) -> list:
        return [(a + b) / 2 for a, b in zip(self.floor_first_ns, self.floor_last_ns)]

    def ratios(self, name: str) -> list:
        return [t / f for t, f in zip(self.rows[name], self.floor_ns)]

    def per_launch_us(self, values_ns) -> list:
        return [v / self.launches / 1e3 for v in values_ns]


def loop_call0(f):
    """A row's run(n): n x f(), timed (the launches only)."""
    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            f()
        return perf_counter_ns() - t0
    return run


def _time_row(row: Row, n: int) -> tuple[int, int]:
    """(launch ns, drain ns): the row's launches, then its stream's synchronize
    (timed apart), so the next row starts with nothing queued."""
    elapsed = row.run(n)
    t0 = perf_counter_ns()
    row.sync()
    return elapsed, perf_counter_ns() - t0


def run_interleaved(floor: Row, rows: list[Row], *, rounds: int, launches: int, warmup_rounds: int = 1,
                    rotate: bool = True, sync_all: Callable[[], None] | None = None,
                    label: str = "", log: Callable[[str], None] = print) -> Interleaved:
    """Run ``warmup_rounds`` uncounted rounds, then ``rounds`` rounds. Each round
    times ``floor``, every row in turn (their order rotated by one each round
    when ``rotate``, so no row always follows the floor), then ``floor`` again;
    the round's floor is the mean of its two floor measurements. ``sync_all``
    ends each round (every stream idle)."""
    rows = list(rows)
    res = Interleaved(launches, [], [], {r.name: [] for r in rows}, {r.name: [] for r in rows}, {})
    res.drain_ns[floor.name] = []
    total = warmup_rounds + rounds
    for k in range(total):
        counted = k >= warmup_rounds
        shift = (k % len(rows)) if (rotate and rows) else 0
        order = rows[shift:] + rows[:shift]
        first, d0 = _time_row(floor, launches)
        for row in order:
            if row.name in res.dropped:
                continue
            try:
                t, d = _time_row(row, launches)
            except Exception as e:  # noqa: BLE001 -- a peer failing must not stop the benchmark
                if row.essential:
                    raise
                res.dropped[row.name] = f"{type(e).__name__}: {e}"
                log(f"  [{label}] {row.name}: dropped ({res.dropped[row.name]})")
                try:
                    row.sync()
                except Exception:  # noqa: BLE001
                    pass
                continue
            if counted:
                res.rows[row.name].append(t)
                res.drain_ns[row.name].append(d)
        last, d1 = _time_row(floor, launches)
        if sync_all is not None:
            sync_all()
        if counted:
            res.floor_first_ns.append(first)
            res.floor_last_ns.append(last)
            res.drain_ns[floor.name].append((d0 + d1) / 2)
            fl = (first + last) / 2
            log(f"  [{label}] round {k - warmup_rounds + 1}/{rounds}: floor "
                f"{fl / launches / 1e3:.3f} us/launch")
        else:
            log(f"  [{label}] warm-up round {k + 1}/{warmup_rounds} done")
    for name in list(res.dropped):
        res.rows.pop(name, None)
        res.drain_ns.pop(name, None)
    return res


def median_or_nan(values) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(values: list) -> dict:
    """median, quartiles (p25, p75), min, max, mean and count of a list of numbers."""
    if not values:
        return {"n": 0}
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return {"median": statistics.median(values), "p25": q1, "p75": q3, "min": min(values), "max": max(values),
            "mean": statistics.fmean(values), "n": len(values)}


# --------------------------------------------------------------------------- environment and output

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict:
    """Host facts worth keeping next to the figures."""
    import numpy as np

    env = {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
    }
    try:
        env["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    return env


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def print_skipped(peers: dict, *dropped: dict) -> None:
    """One line per peer that is not ok, then one per row dropped during a run."""
    for name, info in peers.items():
        if info["status"] != "ok":
            print(f"{name}: {info['status']}")
    for rows in dropped:
        for name, why in rows.items():
            print(f"{name}: dropped during the run ({why})")


def write_report(results_dir: Path, name: str, data: dict, plot: Callable[[Path], None] | None) -> None:
    """Write ``<results_dir>/<name>.json``; then, unless ``plot`` is None (--no-plot),
    ``plot(<results_dir>/<name>.png)`` when matplotlib is installed. Says what it wrote."""
    out_json = results_dir / f"{name}.json"
    write_json(out_json, data)
    print(f"\nwrote {out_json}")
    if plot is None:
        return
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        print("matplotlib not installed: no PNG")
        return
    out_png = results_dir / f"{name}.png"
    plot(out_png)
    print(f"wrote {out_png}")


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, title: str, fontsize: int = 11) -> None:
    """Title, lay out and save ``fig`` as ``path`` (120 dpi), then close it."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=fontsize)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- command line

def new_parser(doc: str) -> argparse.ArgumentParser:
    """The benchmark's parser; its description is the first paragraph of ``doc``."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_output_args(ap: argparse.ArgumentParser) -> None:
    """--no-plot, --results-dir and --strict (the last options of every benchmark)."""
    ap.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help=f"default {RESULTS_DIR}")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
