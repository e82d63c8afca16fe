"""Domain-decomposed simulations over MPI (mpi4py) with pycudadrv buffers and streams.

Nothing here is imported by ``import pycudadrv``; mpi4py is imported when a
helper first needs it (:func:`require_mpi`), and a missing mpi4py is a
:class:`~pycudadrv.LibraryUnavailableError` naming the package
(``pip install "pycudadrv[mpi]"``).

* :func:`detect_cuda_aware`: can the MPI library read device memory? (Open MPI /
  MVAPICH2 ``MPIX_Query_cuda_support``, MPICH ``MPIX_GPU_query_support``, else
  ``ompi_info``), overridden by an argument or ``PYCUDADRV_MPI_CUDA_AWARE``.
* :func:`local_rank`, :func:`assign_device`, :func:`select_device`: one device per
  rank from its node-local rank (launcher variables or
  ``comm.Split_type(MPI.COMM_TYPE_SHARED)``), ``local_rank % device_count``, so
  several ranks may share one GPU.
* :func:`decompose_rows` / :class:`SlabDecomposition`: horizontal slabs of a
  ``ny x nx`` grid, one per rank, with ``halo`` rows above and below.
* :class:`HaloExchange`: swaps the halo rows with the neighbours, either straight
  from device memory (``__cuda_array_interface__``, CUDA-aware MPI) or through
  pinned :class:`~pycudadrv.HostBuffer` staging.
* :func:`fail`, :func:`abort_on_error`: a mistake on one rank is reported there
  (a pycudadrv error class and its message) and the communicator is aborted
  (``comm.Abort``), so no other rank is left waiting in a collective.
* :func:`mpirun_command`: the launcher command line for this machine.

Every helper that takes ``abort`` follows one rule: ``None`` (the default)
aborts the communicator when it has more than one process and raises the
error otherwise; ``True`` always aborts, ``False`` always raises.
See docs/mpi.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, ClosedError
from pycudadrv._mpi_setup import (ENV_CUDA_AWARE, LOCAL_RANK_VARIABLES, TRANSFERS, CudaAwareness, DeviceAssignment,
                                  LocalRank, _comm_or_world, _guard, abort_on_error, assign_device,
                                  detect_cuda_aware, device_ordinal_for, fail, local_rank, local_rank_from_env,
                                  mpirun_command, require_mpi, select_device)

__all__ = [
    "ENV_CUDA_AWARE", "LOCAL_RANK_VARIABLES", "TRANSFERS", "require_mpi", "CudaAwareness", "detect_cuda_aware",
    "LocalRank", "local_rank_from_env", "local_rank", "DeviceAssignment", "device_ordinal_for",
    "assign_device", "select_device", "SlabDecomposition", "decompose_rows", "HaloExchange", "fail",
    "abort_on_error", "mpirun_command",
]


# --------------------------------------------------------------------------- decomposition

#: How far from the requested communicator size :func:`decompose_rows` looks for sizes that would work.
_NEAR_WINDOW = 4096


def _nearby_divisors(n: int, size: int, each: int = 2) -> str:
    """Which communicator sizes near ``size`` divide ``n`` rows, as message text: up to ``each``
    on either side, found by trying at most ``_NEAR_WINDOW`` counts per side, so the cost never
    depends on ``n`` (a prime ``n`` of 2**61 - 1 costs the same as 512)."""
    lo, hi = max(1, size - _NEAR_WINDOW), min(n, size + _NEAR_WINDOW)
    below = _first_divisors(n, range(size - 1, lo - 1, -1), each)[::-1]
    above = _first_divisors(n, range(size + 1, hi + 1), each)
    parts = [f"near {size}: {', '.join(map(str, below + above))}"] if below or above else []
    if not below:
        parts.append(f"none of {lo}..{size - 1}")
    if not above and hi > size:
        parts.append(f"none of {size + 1}..{hi}")
    if not below:
        parts.append("1 always does")
    return "; ".join(parts)


def _first_divisors(n: int, candidates: range, each: int) -> list[int]:
    out = []
    for d in candidates:
        if n % d == 0:
            out.append(d)
            if len(out) == each:
                break
    return out


@dataclass(frozen=True)
class SlabDecomposition:
    """One rank's horizontal slab of a ``ny x nx`` grid (C order, rows of ``nx``).

    The rank owns ``rows`` global rows from ``row_start``; its local array has
    ``halo`` extra rows above and below (``local_shape = (rows + 2*halo, nx)``):
    local row ``halo + i`` is global row ``row_start + i``. ``up`` / ``down``
    are the neighbour ranks (None at the global top / bottom edge, which is a
    fixed boundary). Offsets are in elements of the local array."""

    ny: int
    nx: int
    size: int
    rank: int
    halo: int
    rows: int
    row_start: int
    up: int | None
    down: int | None

    @staticmethod
    def for_comm(comm: Any, ny: int, nx: int, halo: int = 1, *, abort: bool | None = None) -> SlabDecomposition:
        """:func:`decompose_rows` for ``comm``'s size and rank; errors abort ``comm``."""
        comm = _comm_or_world(comm)
        with _guard(comm, abort):
            return decompose_rows(ny, nx, comm.Get_size(), comm.Get_rank(), halo)

    @property
    def local_rows(self) -> int:
        return self.rows + 2 * self.halo

    @property
    def local_shape(self) -> tuple[int, int]:
        return (self.local_rows, self.nx)

    @property
    def halo_elements(self) -> int:
        """Elements in one side's halo (``halo * nx``)."""
        return self.halo * self.nx

    @property
    def own(self) -> slice:
        """Local rows this rank owns."""
        return slice(self.halo, self.halo + self.rows)

    @property
    def global_rows(self) -> slice:
        """Global rows this rank owns."""
        return slice(self.row_start, self.row_start + self.rows)

    @property
    def recv_up_offset(self) -> int:
        """Start of the upper halo (filled from ``up``)."""
        return 0

    @property
    def send_up_offset(self) -> int:
        """Start of the first own rows (sent to ``up``)."""
        return self.halo * self.nx

    @property
    def send_down_offset(self) -> int:
        """Start of the last own rows (sent to ``down``)."""
        return self.rows * self.nx

    @property
    def recv_down_offset(self) -> int:
        """Start of the lower halo (filled from ``down``)."""
        return (self.rows + self.halo) * self.nx

    def slab_of(self, grid: Any, fill: Any = None) -> np.ndarray:
        """This rank's local array cut from the global ``grid`` (``ny x nx``,
        any numeric array-like: ``np.asarray`` of it): own rows, the
        neighbours' rows in the halos, ``fill`` in the halo rows past the
        global top and bottom edge (rank 0's upper halo, the last rank's
        lower one). Same dtype as ``grid``, shape ``local_shape``.

        ``fill`` None (the default) is NaN for a floating-point or complex
        grid; an integer or bool grid has no NaN, so it needs an explicit
        ``fill`` of its own kind (an int within the dtype's range, True or
        False). A float ``fill`` must not overflow the dtype (to inf).

        Raises
        ------
        ArgumentTypeError
            A grid that is not numeric (bool, int, unsigned, float, complex),
            or a ``fill`` of another kind than the grid's (``"x"``, 1.5 for an
            int grid, 1 for a bool grid).
        ArgumentValueError
            A grid of another shape; no ``fill`` for an integer or bool grid;
            a ``fill`` outside the dtype's range.
        """
        try:
            arr = grid if isinstance(grid, np.ndarray) else np.asarray(grid)
        except (TypeError, ValueError) as err:     # ragged lists, objects numpy cannot read
            raise ArgumentTypeError(f"slab_of: the grid must be a numeric {self.ny} x {self.nx} array, got "
                                    f"{type(grid).__name__} ({err})") from err
        if arr.dtype.kind not in "biufc":
            raise ArgumentTypeError(f"slab_of: the grid must be a numeric array (bool, int, float or complex), got "
                                    f"{type(grid).__name__} of dtype {arr.dtype}")
        if arr.shape != (self.ny, self.nx):
            raise ArgumentValueError(f"slab_of: grid has shape {arr.shape}, the decomposition is of "
                                     f"{self.ny} x {self.nx}")
        out = np.full(self.local_shape, _fill_for(arr.dtype, fill), dtype=arr.dtype)
        lo, hi = self.row_start - self.halo, self.row_start + self.rows + self.halo
        a, b = max(lo, 0), min(hi, self.ny)
        out[a - lo:b - lo] = arr[a:b]
        return out


def _fill_for(dt: np.dtype, fill: Any) -> Any:
    """``fill`` checked against ``dt`` (see :meth:`SlabDecomposition.slab_of`): a value that
    ``np.full`` stores unchanged, with no warning."""
    kind = dt.kind
    is_bool = isinstance(fill, (bool, np.bool_))
    if fill is None:
        if kind in "fc":
            return np.nan
        example = "True or False" if kind == "b" else f"an int in [{np.iinfo(dt).min}, {np.iinfo(dt).max}]"
        raise ArgumentValueError(f"slab_of: the grid holds {dt}, which has no NaN for the halo rows past the "
                                 f"global edges; pass fill= ({example}), the value those rows get")
    if kind == "b":
        if not is_bool:
            raise ArgumentTypeError(f"slab_of: fill for a grid of bool must be True or False, got {_show(fill)}")
        return bool(fill)
    if kind in "iu":
        if is_bool or not isinstance(fill, (int, np.integer)):
            raise ArgumentTypeError(f"slab_of: fill for a grid of {dt} must be an int, got {_show(fill)}")
        info = np.iinfo(dt)
        if not info.min <= int(fill) <= info.max:
            raise ArgumentValueError(f"slab_of: fill {_show(fill)} is outside the range of {dt} "
                                     f"[{info.min}, {info.max}]")
        return int(fill)
    numbers = (int, float, np.integer, np.floating) + ((complex, np.complexfloating) if kind == "c" else ())
    if is_bool or not isinstance(fill, numbers):
        what = "a real or complex number" if kind == "c" else "a real number"
        raise ArgumentTypeError(f"slab_of: fill for a grid of {dt} must be {what}, got {_show(fill)}")
    try:
        num: Any = fill                  # a number of one of the kinds just checked
        value = complex(num) if kind == "c" else float(num)
    except OverflowError:
        value = None                     # an int beyond every float
    if value is not None:
        with np.errstate(over="ignore"):
            stored = dt.type(value)
        parts = ((value.real, stored.real), (value.imag, stored.imag)) if kind == "c" else ((value, stored),)
        if not any(np.isinf(b) and not np.isinf(a) for a, b in parts):
            return stored
    raise ArgumentValueError(f"slab_of: fill {_show(fill)} overflows {dt} (it would become inf)")


def _show(v: Any) -> str:
    """``repr(v)`` for a message, at most 60 characters (an int too long to print is described)."""
    try:
        text = repr(v)
    except ValueError:                   # an int beyond sys.get_int_max_str_digits()
        return f"an int of {int(v).bit_length()} bits"
    return text if len(text) <= 60 else text[:57] + "..."


def decompose_rows(ny: int, nx: int, size: int, rank: int, halo: int = 1) -> SlabDecomposition:
    """Split ``ny`` rows of width ``nx`` into ``size`` equal slabs; rank ``rank``'s. Pure.

    Raises
    ------
    ArgumentTypeError
        An argument that is not an int.
    ArgumentValueError
        ``size`` does not divide ``ny``; a slab thinner than ``halo`` rows;
        ``rank`` outside ``[0, size)``; a non-positive size, width or halo.
    """
    vals = {"ny": ny, "nx": nx, "size": size, "rank": rank, "halo": halo}
    for name, v in vals.items():
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise ArgumentTypeError(f"decompose_rows: {name} must be an int, got {v!r}")
    ny, nx, size, rank, halo = (int(vals[k]) for k in ("ny", "nx", "size", "rank", "halo"))
    for name, v in (("ny", ny), ("nx", nx), ("size", size), ("halo", halo)):
        if v < 1:
            raise ArgumentValueError(f"decompose_rows: {name} must be >= 1, got {v}")
    if not 0 <= rank < size:
        raise ArgumentValueError(f"decompose_rows: rank {rank} outside [0, {size})")
    if ny % size:
        raise ArgumentValueError(f"decompose_rows: the communicator size {size} does not divide the {ny} grid rows "
                                 f"(rank {rank}); run with a number of ranks that divides {ny} "
                                 f"({_nearby_divisors(ny, size)})")
    rows = ny // size
    if rows < halo:
        raise ArgumentValueError(f"decompose_rows: {size} slabs of {ny} rows are {rows} row(s) thick, thinner than "
                                 f"the halo of {halo} row(s); use fewer ranks or a taller grid")
    return SlabDecomposition(ny, nx, size, rank, halo, rows, rank * rows, rank - 1 if rank > 0 else None,
                             rank + 1 if rank < size - 1 else None)


# --------------------------------------------------------------------------- halo exchange

class _CudaRows:
    """Device rows as mpi4py sees them: ``__cuda_array_interface__`` only (mpi4py
    would take DLPack first when an object has both); keeps ``owner`` alive."""

    __slots__ = ("owner", "__cuda_array_interface__")

    def __init__(self, owner: Any, ptr: int, count: int, dtype: np.dtype):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": dtype.str, "data": (ptr, False),
                                         "strides": None, "version": 3}


def _cai_field(field: Any) -> tuple[int, np.dtype, int]:
    """``(pointer, dtype, element count)`` of a C-contiguous CAI object; a malformed interface is
    refused as a launch and the Queue refuse it (:func:`pycudadrv._interop.array_interface`)."""
    from pycudadrv._interop import array_interface

    ptr, lo, hi, contiguous, shape, strides, dt = array_interface(field, "HaloExchange.exchange: field")
    if not contiguous:
        raise ArgumentValueError(f"HaloExchange.exchange: field is not C-contiguous (shape {shape}, strides "
                                 f"{strides} in bytes)")
    return int(ptr), dt, int(np.prod(shape)) if shape else 1


class HaloExchange:
    """Swap the halo rows of a slab (:class:`SlabDecomposition`) with the neighbours.

    ``transfer`` picks the path: ``"device"`` hands device rows to MPI through
    ``__cuda_array_interface__`` (needs a CUDA-aware MPI), ``"staged"`` copies
    them through pinned :class:`~pycudadrv.HostBuffer` staging on this
    exchange's own stream (``cuMemcpyDtoHAsync``, the MPI calls on host memory,
    ``cuMemcpyHtoDAsync``); None decides with :func:`detect_cuda_aware` (kept in
    ``awareness``). Each exchange posts ``Irecv`` / ``Isend`` to both neighbours
    (``MPI.PROC_NULL`` at the global edges) and waits for all four. The
    constructor checks, collectively, that every rank describes the same grid
    and dtype; the rank that differs from the others is reported. Staging and
    the stream are made at the first device exchange (on the field's device),
    so :meth:`exchange_array` needs no GPU.

    ``seconds`` and ``count`` total the host time spent in, and the number of,
    exchanges. Errors are reported on the rank concerned and abort ``comm``
    (see :func:`fail`).
    """

    def __init__(self, comm: Any, decomposition: SlabDecomposition, dtype: Any = np.float32, *,
                 transfer: str | None = None, stream: Any = None, tag: int = 0x70C, abort: bool | None = None):
        self.comm = _comm_or_world(comm)
        self.abort = abort
        MPI = require_mpi()
        with _guard(self.comm, abort):
            if not isinstance(decomposition, SlabDecomposition):
                raise ArgumentTypeError(f"HaloExchange: decomposition must be a SlabDecomposition, got "
                                        f"{type(decomposition).__name__}")
            d = decomposition
            if (d.size, d.rank) != (self.comm.Get_size(), self.comm.Get_rank()):
                raise ArgumentValueError(f"HaloExchange: the decomposition is for rank {d.rank} of {d.size}, this "
                                         f"is rank {self.comm.Get_rank()} of {self.comm.Get_size()}")
            self.dtype = np.dtype(dtype)
            if self.dtype.kind not in "biufc":
                raise ArgumentTypeError(f"HaloExchange: dtype must be a numeric dtype, got {self.dtype}")
            if transfer not in (None, "auto", *TRANSFERS):
                raise ArgumentValueError(f"HaloExchange: transfer must be 'device', 'staged' or None (detect), "
                                         f"got {transfer!r}")
            self.awareness: CudaAwareness | None = None
            if transfer in (None, "auto"):
                self.awareness = detect_cuda_aware()
                transfer = self.awareness.transfer
            self.transfer: str = transfer
            self.decomposition = d
            self._up = MPI.PROC_NULL if d.up is None else d.up
            self._down = MPI.PROC_NULL if d.down is None else d.down
            self._tag_up, self._tag_down = int(tag), int(tag) + 1
        self._check_consistent()
        self._stream = stream
        self._staging: list[Any] | None = None
        self._staging_arrays: tuple[np.ndarray, ...] = ()
        self._ready: Any = None
        self._views: dict[int, tuple[Any, tuple[_CudaRows, ...]]] = {}
        self.count = 0
        self.seconds = 0.0

    def _check_consistent(self) -> None:
        d = self.decomposition
        mine = (d.ny, d.nx, d.halo, self.dtype.str)
        every = self.comm.allgather(mine)
        common = max(set(every), key=every.count)
        with _guard(self.comm, self.abort):
            if mine != common:
                others = sum(1 for e in every if e == common)
                raise ArgumentValueError(
                    f"HaloExchange: rank {d.rank} describes a {d.ny} x {d.nx} grid of {self.dtype} with halo "
                    f"{d.halo}, {others} other rank(s) a {common[0]} x {common[1]} grid of {np.dtype(common[3])} "
                    f"with halo {common[2]}")

    @property
    def lonely(self) -> bool:
        """No neighbour at all (one rank): an exchange only orders the ready event after ``after``."""
        return self.decomposition.up is None and self.decomposition.down is None

    @property
    def stream(self) -> Any:
        """The stream the staging copies (and the ready event) go on; None before the first device exchange."""
        return self._stream

    def _sendrecv(self, send_up: Any, send_down: Any, recv_up: Any, recv_down: Any) -> None:
        MPI = require_mpi()
        c = self.comm
        reqs = [c.Irecv(recv_up, self._up, self._tag_down), c.Irecv(recv_down, self._down, self._tag_up),
                c.Isend(send_up, self._up, self._tag_up), c.Isend(send_down, self._down, self._tag_down)]
        MPI.Request.Waitall(reqs)

    def exchange_array(self, array: np.ndarray) -> None:
        """Exchange the halos of a host numpy slab in place (``local_shape``,
        this exchange's dtype, C-contiguous). No GPU involved.

        Raises ArgumentTypeError / ArgumentValueError (on this rank, then abort)
        for an array of another type, dtype or shape."""
        d = self.decomposition
        with _guard(self.comm, self.abort):
            if not isinstance(array, np.ndarray):
                raise ArgumentTypeError(f"HaloExchange.exchange_array: expected a numpy array, got "
                                        f"{type(array).__name__}")
            self._check_layout("exchange_array", array.dtype, array.size, tuple(array.shape))
            if not array.flags.c_contiguous:
                raise ArgumentValueError("HaloExchange.exchange_array: the array is not C-contiguous")
        flat = array.reshape(-1)
        n = d.halo_elements
        t0 = time.perf_counter()
        self._sendrecv(flat[d.send_up_offset:d.send_up_offset + n], flat[d.send_down_offset:d.send_down_offset + n],
                       flat[d.recv_up_offset:d.recv_up_offset + n], flat[d.recv_down_offset:d.recv_down_offset + n])
        self.seconds += time.perf_counter() - t0
        self.count += 1

    def _check_layout(self, where: str, dtype: Any, count: int, shape: tuple | None) -> None:
        d = self.decomposition
        if dtype is None:
            raise ArgumentTypeError(f"HaloExchange.{where}: the field is a raw-bytes Buffer; it must hold "
                                    f"{self.dtype} elements (Buffer.empty(shape, np.{self.dtype}) or "
                                    f"buf.view(np.{self.dtype}))")
        if np.dtype(dtype) != self.dtype:
            raise ArgumentTypeError(f"HaloExchange.{where}: the field holds {np.dtype(dtype)}, the exchange was "
                                    f"set up for {self.dtype} (rank {d.rank})")
        need = d.local_rows * d.nx
        if count != need:
            raise ArgumentValueError(
                f"HaloExchange.{where}: the field has {count} elements (shape {shape}); rank {d.rank}'s slab with "
                f"halos is {d.local_rows} x {d.nx} = {need} ({d.rows} own rows + {d.halo} halo row(s) above "
                f"and below)")

    def _device_views(self, field: Any) -> tuple[_CudaRows, ...]:
        hit = self._views.get(id(field))
        if hit is not None and hit[0] is field:
            return hit[1]
        ptr, dt, count = _cai_field(field)
        self._check_layout("exchange", dt, count, tuple(field.__cuda_array_interface__.get("shape", ())))
        d, s = self.decomposition, dt.itemsize
        n = d.halo_elements
        views = tuple(_CudaRows(field, ptr + off * s, n, dt) for off in
                      (d.send_up_offset, d.send_down_offset, d.recv_up_offset, d.recv_down_offset))
        if len(self._views) >= 8:
            self._views.clear()
        self._views[id(field)] = (field, views)
        return views

    def _ensure_stream(self, device: Any) -> Any:
        import pycudadrv as cd

        if self._stream is None:
            self._stream = cd.Stream(device)
        if self._ready is None:
            self._ready = cd.Event(timing=False, device=self._stream.device)
        return self._stream

    def exchange(self, field: Any, *, after: Any = None) -> Any:
        """Exchange the halo rows of ``field`` (the local slab with halos, on
        the device) with the neighbours; blocks the host until the MPI
        transfers are done and returns an Event (recorded anew each call, on
        :attr:`stream`) that the compute stream waits on before reading the
        halos -- or None on the device path for a foreign array when the
        exchange has no stream (the halos are in place when it returns).

        ``field``: a :class:`~pycudadrv.Buffer` (or any C-contiguous object
        with ``__cuda_array_interface__``) of ``local_shape`` elements of this
        exchange's dtype. ``after``: an Event or Stream marking when the own
        rows that are sent are written; the staged path makes its stream wait
        for it (``cuStreamWaitEvent``), the device path waits on the host
        (MPI reads device memory outside any stream). None: the whole device
        is synchronised first (``cuCtxSynchronize``); foreign arrays must then
        be ready already.

        Raises (on this rank, then abort): ArgumentTypeError for a host array,
        a raw-bytes or wrong-dtype field; ArgumentValueError for a field of
        the wrong size; ClosedError for a closed Buffer."""
        t0 = time.perf_counter()
        with _guard(self.comm, self.abort):
            if isinstance(field, np.ndarray):
                raise ArgumentTypeError("HaloExchange.exchange: field is a host numpy array; use exchange_array() "
                                        "for host arrays, or pass the device Buffer")
            import pycudadrv as cd

            buf = field if isinstance(field, cd.Buffer) else None
            if buf is None and not hasattr(field, "__cuda_array_interface__"):
                raise ArgumentTypeError(f"HaloExchange.exchange: field must be a pycudadrv.Buffer or expose "
                                        f"__cuda_array_interface__, got {type(field).__name__}")
            if buf is not None and buf.closed:
                raise ClosedError("HaloExchange.exchange: the field Buffer is closed")
            if buf is not None and buf.dtype is None:
                self._check_layout("exchange", None, buf.size, None)
            ready = None
            if self.transfer == "device":
                views = self._device_views(field)
                if not self.lonely:
                    self._wait_host(after, buf)
                    self._sendrecv(*views)
                if buf is not None or self._stream is not None:
                    ready = self._ready_on(self._ensure_stream(buf.device if buf is not None else None))
            else:
                if buf is None:
                    buf = cd.asbuffer(field)
                self._check_layout("exchange", buf.dtype, buf.size, buf.shape)
                s = self._ensure_stream(buf.device)
                self._staged(buf, s, after)
                ready = self._ready_on(s)
        self.seconds += time.perf_counter() - t0
        self.count += 1
        return ready

    def _ready_on(self, s: Any) -> Any:
        self._ready.record(s)
        return self._ready

    def _wait_host(self, after: Any, buf: Any) -> None:
        import pycudadrv as cd

        if after is None:
            if buf is not None:
                buf.device.synchronize()
        elif isinstance(after, (cd.Event, cd.Stream)):
            after.synchronize()
        else:
            raise ArgumentTypeError(f"HaloExchange.exchange: after must be an Event, a Stream or None, got "
                                    f"{type(after).__name__}")

    def _staged(self, buf: Any, s: Any, after: Any) -> None:
        import pycudadrv as cd

        d = self.decomposition
        n, item = d.halo_elements, self.dtype.itemsize
        if self._staging is None:
            self._staging = [cd.HostBuffer.empty(n, self.dtype, device=buf.device) for _ in range(4)]
            self._staging_arrays = tuple(h.array for h in self._staging)
        send_up, send_down, recv_up, recv_down = self._staging_arrays
        if after is None:
            if not self.lonely:
                buf.device.synchronize()
        elif isinstance(after, cd.Event):
            s.wait(after)
        elif isinstance(after, cd.Stream):
            s.wait_stream(after)
        else:
            raise ArgumentTypeError(f"HaloExchange.exchange: after must be an Event, a Stream or None, got "
                                    f"{type(after).__name__}")
        if self.lonely:
            return
        nb = n * item
        if d.up is not None:
            buf.read(out=send_up, offset=d.send_up_offset * item, nbytes=nb, stream=s, synchronize=False)
        if d.down is not None:
            buf.read(out=send_down, offset=d.send_down_offset * item, nbytes=nb, stream=s, synchronize=False)
        s.synchronize()
        self._sendrecv(send_up, send_down, recv_up, recv_down)
        if d.up is not None:
            buf.write(recv_up, offset=d.recv_up_offset * item, stream=s)
        if d.down is not None:
            buf.write(recv_down, offset=d.recv_down_offset * item, stream=s)

    def close(self) -> None:
        """Free the pinned staging (``cuMemFreeHost``) once its copies are done."""
        if self._stream is not None and self._staging is not None:
            self._stream.synchronize()
        self._staging_arrays = ()             # the numpy views go first: HostBuffer.close() refuses while they live
        for h in self._staging or ():
            h.close()
        self._staging = None
        self._views.clear()

    def __repr__(self) -> str:
        d = self.decomposition
        return (f"<HaloExchange rank {d.rank} of {d.size}, {d.rows} x {d.nx} {self.dtype} + {d.halo} halo row(s), "
                f"transfer={self.transfer}, {self.count} exchanges>")
