"""Process setup of :mod:`pycudadrv.mpi` (import the names from there): mpi4py on demand,
reports and aborts, CUDA-aware detection, the device of each rank, the launcher line."""
from __future__ import annotations

import contextlib
import ctypes
import operator
import os
import re
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, CudaUnavailableError,
                               LibraryUnavailableError)

__all__ = [
    "ENV_CUDA_AWARE", "LOCAL_RANK_VARIABLES", "TRANSFERS", "require_mpi", "CudaAwareness", "detect_cuda_aware",
    "LocalRank", "local_rank_from_env", "local_rank", "DeviceAssignment", "device_ordinal_for",
    "assign_device", "select_device", "fail", "abort_on_error", "mpirun_command",
]

#: Environment variable that forces the CUDA-aware answer: 1/true/yes/on or 0/false/no/off.
ENV_CUDA_AWARE = "PYCUDADRV_MPI_CUDA_AWARE"
#: Launcher variables giving the node-local rank (and size), tried in this order.
LOCAL_RANK_VARIABLES: tuple[tuple[str, str | None], ...] = (
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),   # Open MPI
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),                         # MPICH (Hydra), Intel MPI
    ("MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"),     # MVAPICH2
    ("SLURM_LOCALID", None),                                        # srun (only when SLURM_PROCID is our rank)
)
#: Halo transfer paths: device memory handed to MPI, or pinned host staging.
TRANSFERS = ("device", "staged")
_TRUE = frozenset(("1", "true", "yes", "on"))
_FALSE = frozenset(("0", "false", "no", "off"))


# --------------------------------------------------------------------------- mpi4py, errors, aborts

def require_mpi() -> Any:
    """The ``mpi4py.MPI`` module (importing it initialises MPI).

    Raises LibraryUnavailableError, naming mpi4py and how to install it, when
    mpi4py (or the MPI library it loads) cannot be imported."""
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise LibraryUnavailableError(
            f"pycudadrv.mpi needs mpi4py, which could not be imported ({err}); install it with "
            "`pip install \"pycudadrv[mpi]\"` (or `pip install mpi4py`) next to an MPI library such as Open MPI "
            "(`apt-get install openmpi-bin libopenmpi-dev`) or MPICH") from err
    return MPI


def _comm_or_world(comm: Any) -> Any:
    return require_mpi().COMM_WORLD if comm is None else comm


def fail(comm: Any, err: BaseException, *, abort: bool | None = None, exit_code: int = 1,
         show_traceback: bool = False) -> None:
    """Report ``err`` on this rank and abort ``comm``, or raise ``err``.

    Prints ``pycudadrv.mpi: rank R of N: <ErrorClass>: <message>`` on stderr
    (flushed), then ``comm.Abort(exit_code)`` (``MPI_Abort``: every process of
    the job ends, none is left waiting for this one). ``abort=None`` aborts
    when ``comm`` has more than one process and raises ``err`` otherwise
    (``comm=None``: ``MPI.COMM_WORLD``)."""
    comm = _comm_or_world(comm)
    size, rank = comm.Get_size(), comm.Get_rank()
    if abort is None:
        abort = size > 1
    if not abort:
        raise err
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__)) if show_traceback else ""
    sys.stdout.flush()
    sys.stderr.write(f"{text}pycudadrv.mpi: rank {rank} of {size}: {type(err).__name__}: {err}\n"
                     f"pycudadrv.mpi: rank {rank} aborts the communicator (MPI_Abort, exit code {exit_code})\n")
    sys.stderr.flush()
    comm.Abort(exit_code)


@contextlib.contextmanager
def _guard(comm: Any, abort: bool | None) -> Iterator[None]:
    try:
        yield
    except Exception as err:   # noqa: BLE001 -- any failure on one rank must not leave the others waiting
        fail(comm, err, abort=abort)
        raise


@contextlib.contextmanager
def abort_on_error(comm: Any = None, *, abort: bool | None = None, exit_code: int = 1) -> Iterator[Any]:
    """``with abort_on_error(comm):`` -- an exception (or Ctrl-C) in the block
    prints its traceback and ``pycudadrv.mpi: rank R of N: ...`` on stderr and
    aborts ``comm`` (see :func:`fail`), so the other ranks do not hang in
    their next MPI call. ``SystemExit`` passes through. Yields ``comm``
    (``MPI.COMM_WORLD`` when None)."""
    comm = _comm_or_world(comm)
    try:
        yield comm
    except (Exception, KeyboardInterrupt) as err:   # noqa: BLE001
        fail(comm, err, abort=abort, exit_code=exit_code, show_traceback=True)
        raise


# --------------------------------------------------------------------------- CUDA-aware detection

@dataclass(frozen=True)
class CudaAwareness:
    """Whether the MPI library takes device pointers, and how that was decided.

    ``source`` names the call or setting that decided (``"MPIX_Query_cuda_support()"``,
    ``"PYCUDADRV_MPI_CUDA_AWARE=0"``, ...); ``library`` is the first line of
    ``MPI.Get_library_version()``."""

    cuda_aware: bool
    source: str
    library: str = ""

    @property
    def transfer(self) -> str:
        """The halo path this answer picks: ``"device"`` or ``"staged"``."""
        return "device" if self.cuda_aware else "staged"

    def __str__(self) -> str:
        return f"CUDA-aware: {'yes' if self.cuda_aware else 'no'} ({self.source})"


def _tristate(name: str, raw: str | None) -> bool | None:
    """None for unset/empty, else the switch value; anything else is an ArgumentValueError."""
    if raw is None or not raw.strip():
        return None
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ArgumentValueError(f"{name}={raw!r} is not a switch: use 1/0, true/false, yes/no or on/off "
                             "(or unset it to detect)")


def _parse_ompi_info(text: str) -> bool | None:
    """``ompi_info --parsable --all`` output -> built with CUDA support (None when not said)."""
    m = re.search(r"_built_with_cuda_support:value:(\w+)", text)
    return None if m is None else m.group(1).lower() in _TRUE


def _loaded_mpi_libraries() -> list[str]:
    """Paths of the MPI libraries mapped into this process (Linux /proc/self/maps)."""
    out: list[str] = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if re.match(r"lib(mpi|mpich)[._]", os.path.basename(path)) and path not in out:
                    out.append(path)
    except OSError:
        pass
    return out


def _query_library(lib: Any) -> tuple[bool, str] | None:
    """Ask an MPI library handle (ctypes) for CUDA support; None when it has no query."""
    f = getattr(lib, "MPIX_Query_cuda_support", None)
    if f is not None:
        f.restype = ctypes.c_int
        f.argtypes = []
        v = int(f())
        return v == 1, f"MPIX_Query_cuda_support() returned {v}"
    f = getattr(lib, "MPIX_GPU_query_support", None)
    if f is not None:
        out = ctypes.c_int(0)
        rc = int(f(0, ctypes.byref(out)))   # MPIX_GPU_SUPPORT_CUDA = 0
        if rc == 0:
            return out.value == 1, f"MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA) gave {out.value}"
    return None


def detect_cuda_aware(force: bool | None = None) -> CudaAwareness:
    """Whether the MPI library under mpi4py can send and receive device memory.

    In order: ``force`` (True/False), the ``PYCUDADRV_MPI_CUDA_AWARE`` switch,
    ``MPI.Query_cuda_support()`` where mpi4py has it, the library's own query
    (``MPIX_Query_cuda_support``: Open MPI, MVAPICH2, recent MPICH;
    ``MPIX_GPU_query_support``: MPICH 4), ``MPIR_CVAR_ENABLE_GPU=0`` for MPICH,
    ``ompi_info``'s ``*_built_with_cuda_support`` for an Open MPI without the
    query. Nothing conclusive means not CUDA-aware (the safe answer).

    Raises ArgumentTypeError for a ``force`` that is not a bool or None,
    ArgumentValueError for a ``PYCUDADRV_MPI_CUDA_AWARE`` that is not a switch,
    LibraryUnavailableError without mpi4py."""
    if force is not None and not isinstance(force, (bool, np.bool_)):
        raise ArgumentTypeError(f"detect_cuda_aware: force must be True, False or None, got {force!r}")
    MPI = require_mpi()
    library = MPI.Get_library_version().replace("\x00", "").strip().splitlines()
    library = library[0].strip() if library else "unknown MPI library"
    if force is not None:
        return CudaAwareness(bool(force), "forced by the caller", library)
    env = _tristate(ENV_CUDA_AWARE, os.environ.get(ENV_CUDA_AWARE))
    if env is not None:
        return CudaAwareness(env, f"{ENV_CUDA_AWARE}={os.environ[ENV_CUDA_AWARE].strip()}", library)
    query = getattr(MPI, "Query_cuda_support", None)
    if callable(query):
        v = bool(query())
        return CudaAwareness(v, f"mpi4py MPI.Query_cuda_support() returned {v}", library)
    if "MPICH" in library.upper() and _tristate("MPIR_CVAR_ENABLE_GPU",
                                                os.environ.get("MPIR_CVAR_ENABLE_GPU")) is False:
        return CudaAwareness(False, "MPIR_CVAR_ENABLE_GPU=0 turns MPICH's GPU support off", library)
    if MPI.Is_initialized() and not MPI.Is_finalized():
        handles: list[Any] = []
        with contextlib.suppress(OSError):
            handles.append(ctypes.CDLL(None))
        for path in _loaded_mpi_libraries():
            with contextlib.suppress(OSError, AttributeError):
                handles.append(ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY))
        for lib in handles:
            answer = _query_library(lib)
            if answer is not None:
                return CudaAwareness(answer[0], answer[1], library)
    if "OPEN MPI" in library.upper() and shutil.which("ompi_info"):
        try:
            text = subprocess.run(["ompi_info", "--parsable", "--all"], capture_output=True, text=True,
                                  timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            text = ""
        built = _parse_ompi_info(text)
        if built is not None:
            return CudaAwareness(built, f"ompi_info: built with CUDA support: {str(built).lower()}", library)
    return CudaAwareness(False, f"no CUDA-support query answered; assuming not CUDA-aware "
                                f"(set {ENV_CUDA_AWARE}=1 to force)", library)


# --------------------------------------------------------------------------- local rank and devices

class LocalRank(NamedTuple):
    """This process's rank among the ranks of its node: ``rank`` of ``size``
    (None when the launcher does not say), and where that came from."""

    rank: int
    size: int | None
    source: str


def _env_index(name: str, raw: str) -> int:
    try:
        v = int(raw.strip())
    except ValueError:
        raise ArgumentValueError(f"local_rank: {name}={raw!r} is not an integer") from None
    if v < 0:
        raise ArgumentValueError(f"local_rank: {name}={raw!r} is negative")
    return v


def local_rank_from_env(environ: Mapping[str, str] | None = None, world_rank: int | None = None) -> LocalRank | None:
    """The node-local rank the launcher put in the environment
    (:data:`LOCAL_RANK_VARIABLES`, first match), or None. ``SLURM_LOCALID`` counts
    only when ``SLURM_PROCID`` equals ``world_rank`` (under ``mpirun`` inside an
    allocation every rank inherits the launcher's). Pure; no MPI needed.

    Raises ArgumentTypeError for a value in ``environ`` that is not a str,
    ArgumentValueError for one that is not a non-negative integer, or a local
    rank not below its local size."""
    env = os.environ if environ is None else environ
    names = [n for pair in LOCAL_RANK_VARIABLES for n in pair if n is not None] + ["SLURM_PROCID"]
    for n in names:
        if env.get(n) is not None and not isinstance(env[n], str):
            raise ArgumentTypeError(f"local_rank: the environment's {n} must be a str, got "
                                    f"{type(env[n]).__name__}")
    for rank_var, size_var in LOCAL_RANK_VARIABLES:
        raw = env.get(rank_var)
        if raw is None or not raw.strip():
            continue
        if rank_var == "SLURM_LOCALID":
            procid = env.get("SLURM_PROCID")
            if world_rank is None or procid is None or procid.strip() != str(world_rank):
                continue
        lr = _env_index(rank_var, raw)
        size = None
        if size_var is not None and env.get(size_var, "").strip():
            size = _env_index(size_var, env[size_var])
            if lr >= size:
                raise ArgumentValueError(f"local_rank: {rank_var}={lr} is not below {size_var}={size}")
        return LocalRank(lr, size, rank_var)
    return None


def local_rank(comm: Any = None, *, method: str = "auto") -> LocalRank:
    """This rank's node-local rank within ``comm`` (default ``MPI.COMM_WORLD``).

    ``method``: ``"env"`` (the launcher variables; ``comm`` must be
    COMM_WORLD or congruent to it), ``"split"`` (collective:
    ``comm.Split_type(MPI.COMM_TYPE_SHARED)``, the rank in the node's
    sub-communicator), ``"auto"`` (env when it applies, else split; every
    rank of one launch decides alike, since the launcher sets the variables
    for all of them).

    Raises ArgumentValueError for an unknown method, or ``"env"`` without a
    launcher variable or on another communicator."""
    if method not in ("auto", "env", "split"):
        raise ArgumentValueError(f"local_rank: method must be 'auto', 'env' or 'split', got {method!r}")
    MPI = require_mpi()
    comm = _comm_or_world(comm)
    if method != "split":
        world = MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)
        found = local_rank_from_env(world_rank=MPI.COMM_WORLD.Get_rank()) if world else None
        if found is not None:
            return found
        if method == "env":
            why = ("no launcher variable (" + ", ".join(v for v, _ in LOCAL_RANK_VARIABLES) + ") is set") \
                if world else "the launcher variables describe MPI.COMM_WORLD, not this communicator"
            raise ArgumentValueError(f"local_rank(method='env'): {why}; use method='split'")
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return LocalRank(node.Get_rank(), node.Get_size(), "Split_type(COMM_TYPE_SHARED)")
    finally:
        node.Free()


def _is_int(v: Any) -> bool:
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, np.integer))


def _ordinal_list(ordinal: Any, where: str) -> list[int]:
    """Device ordinals from an int, a sequence of ints (list, tuple, range, 1-D numpy array) or a
    comma-separated string; refuses bools, floats and an empty list."""
    if isinstance(ordinal, str):
        try:
            seq: list[Any] = [int(p) for p in ordinal.split(",") if p.strip()]
        except ValueError:
            raise ArgumentValueError(f"{where}: expected comma-separated device ordinals, got {ordinal!r}") from None
    elif isinstance(ordinal, (list, tuple, range)) or (isinstance(ordinal, np.ndarray) and ordinal.ndim == 1):
        seq = list(ordinal)
    elif _is_int(ordinal):
        seq = [ordinal]
    else:
        raise ArgumentTypeError(f"{where}: expected a device ordinal (int), a list of them or a string such as "
                                f"'0,1', got {type(ordinal).__name__} {ordinal!r}")
    for o in seq:
        if not _is_int(o):
            raise ArgumentTypeError(f"{where}: device ordinals must be ints, got {o!r}")
    if not seq:
        raise ArgumentValueError(f"{where}: the list of device ordinals is empty")
    return [int(o) for o in seq]


def _pool(device_count: int, ordinal: Any, candidates: Any) -> list[int]:
    """The ordinals local ranks are dealt from: ``ordinal`` if given, else ``candidates``, else every device."""
    if ordinal is not None:
        return _ordinal_list(ordinal, "assign_device: ordinal")
    if candidates is not None:
        return _ordinal_list(candidates, "assign_device: candidates")
    return list(range(device_count))


def device_ordinal_for(local_rank: int, device_count: int, ordinal: Any = None, *, rank: int | None = None,
                       candidates: Sequence[int] | None = None) -> int:
    """The device ordinal of the rank with node-local rank ``local_rank``. Pure.

    ``ordinal`` None: ``candidates[local_rank % len(candidates)]`` (default
    candidates ``range(device_count)``), so with more ranks than devices
    several ranks share one; an int: that device; a sequence (or ``"0,1"``):
    ``ordinal[local_rank % len(ordinal)]``. ``candidates`` takes the same
    forms. ``rank`` only labels messages. Ints are Python or numpy integers,
    never bools.

    Raises
    ------
    CudaUnavailableError
        ``device_count`` is 0.
    ArgumentTypeError
        ``local_rank``, ``device_count``, ``rank`` or an ordinal (of
        ``ordinal`` or ``candidates``) that is not an int.
    ArgumentValueError
        A negative ``local_rank`` or ``device_count``; an empty ``ordinal``
        or ``candidates`` list; the chosen ordinal is outside
        ``[0, device_count)``.
    """
    for name, v in (("local_rank", local_rank), ("device_count", device_count)):
        if not _is_int(v):
            raise ArgumentTypeError(f"assign_device: {name} must be an int, got {type(v).__name__} {v!r}")
        if v < 0:
            raise ArgumentValueError(f"assign_device: {name} must be >= 0, got {v}")
    if rank is not None and not _is_int(rank):
        raise ArgumentTypeError(f"assign_device: rank must be an int or None, got {type(rank).__name__} {rank!r}")
    local_rank, device_count = int(local_rank), int(device_count)
    who = f"rank {rank} (local rank {local_rank})" if rank is not None else f"local rank {local_rank}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    vis = f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    if device_count == 0:
        raise CudaUnavailableError(f"assign_device: {who}: no CUDA device is visible{vis}")
    pool = _pool(device_count, ordinal, candidates)
    o = pool[local_rank % len(pool)]
    if not 0 <= o < device_count:
        raise ArgumentValueError(f"assign_device: {who} was given device {o}, which does not exist: "
                                 f"{device_count} CUDA device(s) visible (ordinals 0..{device_count - 1}){vis}")
    return o


@dataclass(frozen=True)
class DeviceAssignment:
    """Which device a rank uses: its ``rank`` of ``size`` in the communicator,
    its node-local rank (``local_rank`` of ``local_size``, from
    ``local_rank_source``), the device ``ordinal`` of ``device_count`` visible,
    and ``ranks_per_device``, the ranks of this node on that same device (None
    when the local size is unknown)."""

    rank: int
    size: int
    local_rank: int
    local_size: int | None
    local_rank_source: str
    ordinal: int
    device_count: int
    ranks_per_device: int | None

    @property
    def shared(self) -> bool:
        """Whether other ranks of this node use the same device."""
        return bool(self.ranks_per_device and self.ranks_per_device > 1)

    def use(self) -> Any:
        """Make the device current on this thread (``Device(ordinal).use()``) and return it."""
        import pycudadrv

        return pycudadrv.Device(self.ordinal).use()

    def __str__(self) -> str:
        share = f", shared by {self.ranks_per_device} ranks" if self.shared else ""
        size = f" of {self.local_size}" if self.local_size is not None else ""
        return (f"rank {self.rank} of {self.size}: local rank {self.local_rank}{size} ({self.local_rank_source}), "
                f"device {self.ordinal} of {self.device_count}{share}")


def assign_device(comm: Any = None, *, ordinal: Any = None, device_count: int | None = None, method: str = "auto",
                  abort: bool | None = None) -> DeviceAssignment:
    """Choose this rank's device from its node-local rank (:func:`local_rank`,
    collective when it splits the communicator) and
    :func:`device_ordinal_for`. ``device_count`` None asks the driver
    (``cuDeviceGetCount``); the ordinals ``PYCUDADRV_DEVICES`` selects are the
    candidates when it is set. Creates no context.

    Errors (no device, a device that does not exist, bad launcher variables)
    are reported on the rank concerned and abort ``comm`` (see :func:`fail`)."""
    comm = _comm_or_world(comm)
    with _guard(comm, abort):
        lr = local_rank(comm, method=method)
        candidates = None
        if device_count is None:
            import pycudadrv

            device_count = pycudadrv.device_count()
            spec = os.environ.get("PYCUDADRV_DEVICES")
            if ordinal is None and spec is not None:
                candidates = _ordinal_list(spec, "PYCUDADRV_DEVICES")
        if not _is_int(device_count):
            raise ArgumentTypeError(f"assign_device: device_count must be an int, got {device_count!r}")
        rank = comm.Get_rank()
        o = device_ordinal_for(lr.rank, int(device_count), ordinal, rank=rank, candidates=candidates)
        per = None
        if lr.size is not None:
            pool = _pool(int(device_count), ordinal, candidates)
            per = sum(1 for j in range(lr.size) if pool[j % len(pool)] == o)
        return DeviceAssignment(rank, comm.Get_size(), lr.rank, lr.size, lr.source, o, int(device_count), per)


def select_device(comm: Any = None, *, ordinal: Any = None, method: str = "auto", abort: bool | None = None) -> Any:
    """This rank's :class:`~pycudadrv.Device` (see :func:`assign_device`), made
    current on the calling thread (``Device.use()``, the primary context via
    ``cuCtxSetCurrent``). Errors abort ``comm`` as :func:`assign_device`'s do."""
    comm = _comm_or_world(comm)
    a = assign_device(comm, ordinal=ordinal, method=method, abort=abort)
    with _guard(comm, abort):
        return a.use()


# --------------------------------------------------------------------------- the launcher

_FLAVOURS: dict[str, tuple[str, tuple[int, ...]]] = {}


def _launcher_flavour(exe: str) -> tuple[str, tuple[int, ...]]:
    """``("openmpi" | "mpich" | "other", version)`` from ``exe --version`` (cached)."""
    if exe not in _FLAVOURS:
        try:
            text = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            text = ""
        m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
        ver = tuple(int(g) for g in m.groups() if g is not None) if m else ()
        if "Open MPI" in text or "OpenRTE" in text or "open-mpi" in text.lower():
            _FLAVOURS[exe] = ("openmpi", ver)
        elif "HYDRA" in text.upper() or "MPICH" in text.upper() or "Intel" in text:
            _FLAVOURS[exe] = ("mpich", ver)
        else:
            _FLAVOURS[exe] = ("other", ver)
    return _FLAVOURS[exe]


def mpirun_command(nprocs: int, *, mpirun: str | os.PathLike[str] | None = None) -> list[str]:
    """The command line that starts ``nprocs`` processes here: ``mpirun -n N``
    (``mpiexec`` when there is no ``mpirun``), plus for Open MPI
    ``--oversubscribe`` (more ranks than cores), ``--allow-run-as-root`` when
    running as root, and for Open MPI 4 and older
    ``--mca btl_vader_single_copy_mechanism none`` (containers often forbid the
    cross-memory attach it uses). Append ``[sys.executable, script, ...]``.

    ``nprocs``: a Python or numpy integer (not a bool). ``mpirun``: the
    launcher to use instead, a path or a command name on ``PATH``; it is
    checked (``shutil.which``: an existing executable file) and returned as
    given.

    Raises LibraryUnavailableError when no launcher is found,
    ArgumentTypeError for an ``nprocs`` that is not an integer or an
    ``mpirun`` that is not a str or path, ArgumentValueError for
    ``nprocs < 1`` or an ``mpirun`` that is not an executable file."""
    if isinstance(nprocs, (bool, np.bool_)):
        raise ArgumentTypeError(f"mpirun_command: nprocs must be an int >= 1, got {nprocs!r}")
    try:
        n = operator.index(nprocs)
    except TypeError:
        raise ArgumentTypeError(f"mpirun_command: nprocs must be an int >= 1, got {type(nprocs).__name__} "
                                f"{nprocs!r}") from None
    if n < 1:
        raise ArgumentValueError(f"mpirun_command: nprocs must be an int >= 1, got {n}")
    if mpirun is not None:
        if not isinstance(mpirun, (str, os.PathLike)):
            raise ArgumentTypeError(f"mpirun_command: mpirun must be a path or a command name (str), got "
                                    f"{type(mpirun).__name__}")
        exe = os.fspath(mpirun)
        if not exe.strip() or shutil.which(exe) is None:
            raise ArgumentValueError(f"mpirun_command: mpirun={exe!r} is not an executable file (nor a command on "
                                     "PATH)")
    else:
        exe = shutil.which("mpirun") or shutil.which("mpiexec") or ""
    if not exe:
        raise LibraryUnavailableError("mpirun_command: neither mpirun nor mpiexec is on PATH; install an MPI "
                                      "library (Open MPI: `apt-get install openmpi-bin libopenmpi-dev`, or MPICH)")
    flavour, ver = _launcher_flavour(exe)
    cmd = [exe, "-n", str(n)]
    if flavour == "openmpi":
        cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        if ver and ver[0] < 5:
            cmd += ["--mca", "btl_vader_single_copy_mechanism", "none"]
    return cmd
