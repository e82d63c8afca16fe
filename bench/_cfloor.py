"""The C floor of the benchmarks: ``bench/c_floor.c`` compiled with the system C
compiler into a temporary shared library and driven through ctypes
(:class:`CFloor`), with :class:`ParamArray` (a C ``void* kernelParams[]``) and
:class:`KernelSeq` (the kernels of one step)."""
from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pycudadrv._kernel import dims3

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
C_FLOOR_SOURCE = BENCH_DIR / "c_floor.c"



class BenchSetupError(RuntimeError):
    """Something the benchmark cannot run without (CUDA, a C compiler, cuda.h)."""


class PeerSkipped(Exception):
    """An optional peer library is missing or unusable: its rows are skipped."""



def relpath(path) -> str:
    """``path`` relative to the repository when it lies inside it (logs never name the checkout)."""
    p = os.path.abspath(str(path))
    return os.path.relpath(p, REPO_DIR) if p.startswith(str(REPO_DIR) + os.sep) else str(path)


def find_cuda_include() -> str:
    """The directory holding ``cuda.h``: pycudadrv's own search (pycudadrv/_paths.py:
    $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, the nvidia-* wheels)."""
    from pycudadrv._paths import find_cuda_include as _find

    try:
        return _find(require=("cuda.h",))
    except FileNotFoundError as e:
        raise BenchSetupError(f"{e} (the C floor includes cuda.h)") from None


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
        self.has_ctx_launch_loop = hasattr(lib, "floor_ctx_launch_loop")
        if self.has_ctx_launch_loop:
            lib.floor_ctx_launch_loop.argtypes, lib.floor_ctx_launch_loop.restype = [P, P, P, I], D
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

    def ctx_launch_loop(self, func: int, stream: int, params: ParamArray | None, iters: int) -> int:
        """As :meth:`launch_loop`, with a ``cuCtxGetCurrent`` before each launch (the driver call
        pycudadrv's context check makes per launch); nanoseconds measured in C."""
        p = None if params is None else params.address
        return self._check(self.lib.floor_ctx_launch_loop(func, stream, p, iters), "cuCtxGetCurrent+launch loop")

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
        g = dims3(grid, "grid")
        b = dims3(block, "block")
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

    # -- PDL graphs and device-side loops (graph_loops.py) ----------------------------------

    @property
    def has_loops(self) -> bool:
        """Whether the compiled source has floor_graph_capture_seq_pdl / floor_while_graph_seq."""
        return hasattr(self.lib, "floor_while_graph_seq") and hasattr(self.lib, "floor_graph_capture_seq_pdl")

    def graph_capture_seq_pdl(self, seq: "KernelSeq", stream: int, repeats: int) -> int:
        """As :meth:`graph_capture_seq`, every launch with programmatic stream serialization
        (cuLaunchKernelEx), so consecutive kernels are joined by programmatic edges;
        returns the CUgraphExec as int."""
        self._need_seq()
        P, I = ctypes.c_void_p, ctypes.c_int
        fn = self.lib.floor_graph_capture_seq_pdl
        fn.argtypes = [I, P, P, P, P, P, I, ctypes.POINTER(P), ctypes.POINTER(I)]
        fn.restype = I
        out, nodes = ctypes.c_void_p(None), ctypes.c_int(-1)
        self._rc(fn(seq.n, seq.funcs_address, seq.dims_address, seq.shared_address, seq.params_address, stream,
                    repeats, ctypes.byref(out), ctypes.byref(nodes)), f"capturing {repeats} PDL steps")
        return int(out.value)

    def while_graph_seq(self, seq: "KernelSeq", stream: int, steps_per_iteration: int, pdl: bool,
                        cond_func: int, state_ptr: int, iterations: int) -> int:
        """A graph of one WHILE node whose body is ``steps_per_iteration`` steps of ``seq``
        and then ``cond_func(handle, state, iterations)`` (pycudadrv's own condition
        kernel), built in C; returns the CUgraphExec as int."""
        self._need_seq()
        P, I, U = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        fn = self.lib.floor_while_graph_seq
        fn.argtypes = [I, P, P, P, P, P, I, I, P, P, U, ctypes.POINTER(P)]
        fn.restype = I
        out = ctypes.c_void_p(None)
        self._rc(fn(seq.n, seq.funcs_address, seq.dims_address, seq.shared_address, seq.params_address, stream,
                    steps_per_iteration, 1 if pdl else 0, cond_func, state_ptr, iterations, ctypes.byref(out)),
                 f"building a WHILE loop of {iterations} x {steps_per_iteration} steps")
        return int(out.value)

    @property
    def has_indirect(self) -> bool:
        """Whether the compiled source has floor_indirect_graph."""
        return hasattr(self.lib, "floor_indirect_graph")

    def indirect_graph(self, update_func: int, dispatch_func: int, block_x: int, params: ParamArray,
                       counts_ptr: int, max_x: int, dispatches: int, pdl: bool, stream: int) -> int:
        """The C twin of ``dispatches`` GPU-driven indirect dispatches captured in a graph:
        each is pycudadrv's update kernel ``update_func(node, counts, max_x)`` and then a
        device-updatable node of ``dispatch_func`` (grid 1, ``block_x`` threads, ``params``)
        whose grid the update kernel sets; with ``pdl`` the node is the update kernel's
        programmatic dependent and each update kernel but the first the previous node's.
        Returns the uploaded CUgraphExec as int (replay with
        :meth:`graph_launch_loop`, free with :meth:`graph_exec_destroy`)."""
        if not self.has_indirect:
            raise BenchSetupError(f"{self.path}: built from a c_floor.c without floor_indirect_graph")
        P, I, U = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        fn = self.lib.floor_indirect_graph
        fn.argtypes = [P, P, U, P, P, U, I, I, P, ctypes.POINTER(P)]
        fn.restype = I
        out = ctypes.c_void_p(None)
        self._rc(fn(update_func, dispatch_func, block_x, params.address, counts_ptr, max_x, dispatches,
                    1 if pdl else 0, stream, ctypes.byref(out)),
                 f"capturing {dispatches} GPU-driven indirect dispatches")
        return int(out.value)

    def launch_seq_loop(self, seq: "KernelSeq", stream: int, repeats: int, synchronize: bool = True) -> int:
        """``repeats`` x the kernels of ``seq`` as plain ``cuLaunchKernel`` calls, then (with
        ``synchronize``) ``cuStreamSynchronize(stream)``, all timed in C; elapsed nanoseconds."""
        self._need_seq()
        return self._check(self.lib.floor_launch_seq_loop(seq.n, seq.funcs_address, seq.dims_address,
                                                          seq.shared_address, seq.params_address, stream,
                                                          repeats, 1 if synchronize else 0),
                           "cuLaunchKernel sequence loop" + (" + cuStreamSynchronize" if synchronize else ""))


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
            dims += [*dims3(k[1], "grid"), *dims3(k[2], "block")]
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


def compile_shared(source: Path, out_name: str, flags: list[str] | tuple[str, ...] = (),
                   libs: list[str] | tuple[str, ...] = ()) -> tuple[str, list[str], str, subprocess.CompletedProcess]:
    """``cc -O2 -shared -fPIC FLAGS SOURCE -o TMP/OUT_NAME LIBS`` into a temporary
    directory removed at exit. Returns (output path, command, compiler, the
    finished process): the caller says what a failed compile means. Raises
    BenchSetupError when no compiler is found."""
    cc = find_compiler()
    tmp = tempfile.mkdtemp(prefix="pycudadrv-bench-")
    atexit.register(shutil.rmtree, tmp, True)
    out = os.path.join(tmp, out_name)
    cmd = cc.split() + ["-O2", "-shared", "-fPIC", *flags, str(source), "-o", out, *libs]
    return out, cmd, cc, subprocess.run(cmd, capture_output=True, text=True)


def shown_command(cmd: list[str]) -> str:
    """``cmd`` as logs show it: absolute paths relative to the repository."""
    return " ".join(relpath(c) if os.path.isabs(c) else c for c in cmd)


def build_c_floor(source: Path = C_FLOOR_SOURCE) -> CFloor:
    """Compile ``source`` into a temporary shared library and load it (not yet
    initialised: call :meth:`CFloor.init` once pycudadrv has loaded the driver).
    Raises BenchSetupError when the compiler or cuda.h is missing or the
    compile fails (with the compiler's output)."""
    inc = find_cuda_include()
    out, cmd, cc, proc = compile_shared(source, "c_floor.so", [f"-I{inc}"], ["-ldl"])
    if proc.returncode != 0:
        raise BenchSetupError(f"compiling the C floor failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return CFloor(ctypes.CDLL(out), out, shown_command(cmd), _compiler_version(cc), inc)


CALL_FLOOR_SOURCE = Path(__file__).resolve().parent / "call_floor.c"


def build_call_floor(source: Path = CALL_FLOOR_SOURCE):
    """Compile ``bench/call_floor.c`` (a CPython extension whose ``noop``
    accepts any arguments and does nothing) into a temporary directory and
    import it: the cost of the Python call alone, for a row beside a launch
    API called the same way. Raises BenchSetupError when it cannot be built."""
    import importlib.util
    import sysconfig

    out, cmd, _cc, proc = compile_shared(source, "call_floor" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"),
                                         [f"-I{sysconfig.get_paths()['include']}"])
    if proc.returncode != 0:
        raise BenchSetupError(f"compiling the Python-call floor failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    spec = importlib.util.spec_from_file_location("call_floor", out)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

