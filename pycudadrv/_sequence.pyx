# cython: language_level=3, boundscheck=False, wraparound=False
"""Launch sequences: prepared launches (and event records and stream waits)
issued by one Python call in one C loop; and the grid -> prepared-launch cache
Dispatch's fast path (a grid seen before goes straight to its prepared launch)."""
cimport cython
from libc.stdint cimport uintptr_t
from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._stream cimport Stream, resolve_stream, captures_active
from pycudadrv._event cimport Event
from pycudadrv._memory cimport Buffer
from pycudadrv._device cimport Device
from pycudadrv._launch cimport Function, LaunchConfig, get_launch_hook_c
from pycudadrv._prepared cimport PreparedLaunch

import numpy as np
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, ClosedError, StateError

__all__ = ["LaunchSequence"]

cdef enum:
    _LAUNCH = 0
    _RECORD = 1
    _WAIT = 2


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
cdef class LaunchSequence:
    """Prepared launches, event records and stream waits issued in order by
    one call, in one C loop: ``seq = LaunchSequence([p1, p2, p3])``, then
    ``seq()`` (or ``seq.launch(repeat=100)``) does what ``p1(); p2(); p3()``
    would, with one Python call. Each launch keeps every check of
    :meth:`PreparedLaunch.launch` (closed buffers, unloaded modules, closed
    streams); while a capture is active or a launch hook (profiling) is
    installed, the items are issued one by one through their own paths so
    the capture and the hook see each launch.

    Raises ArgumentTypeError for ``launches`` that is not an iterable, or an
    item that is not a PreparedLaunch made by ``Function.bind`` (the message
    gives its position and type; use :meth:`record` and :meth:`wait` for
    events).
    """
    cdef list _items          # (kind, obj, stream)
    cdef list _prepared       # the PreparedLaunch objects, for their checks
    cdef int _n
    cdef set _devices         # the devices of the items' launches, events and streams
    cdef object _device       # the only one of them (its context made current once per call), or None

    def __cinit__(self, *args, **kwargs):
        # Here, not in __init__: a LaunchSequence made by __new__ is a valid empty one.
        self._items = []
        self._prepared = []
        self._devices = set()

    def __init__(self, launches=()):
        try:
            items = iter(launches)
        except TypeError:
            raise ArgumentTypeError(f"LaunchSequence: launches must be an iterable of PreparedLaunch "
                                    f"(fn.bind(...)), got {type(launches).__name__}") from None
        for p in items:
            self.add(p)

    def add(self, p):
        """Append a prepared launch; returns self.

        Raises ArgumentTypeError, naming the position it would take and the
        type given, for anything but a PreparedLaunch made by
        ``Function.bind``."""
        if not isinstance(p, PreparedLaunch):
            raise ArgumentTypeError(f"LaunchSequence: item #{self._n} must be a PreparedLaunch (fn.bind(...)), got "
                                    f"{type(p).__name__}; use record() and wait() for events")
        if (<PreparedLaunch>p).fn is None:
            raise ArgumentTypeError(f"LaunchSequence: item #{self._n} is a PreparedLaunch that was not made by "
                                    "Function.bind(...)")
        self._items.append((_LAUNCH, p, (<PreparedLaunch>p)._stream))
        self._prepared.append(p)
        self._n += 1
        self._note_device((<PreparedLaunch>p).fn.device)
        return self

    cdef _note_device(self, dev):
        self._devices.add(dev)
        self._device = dev if len(self._devices) == 1 else None

    def record(self, event, stream=None):
        """Append an event record (``cuEventRecord``) on ``stream`` (the
        event's device's default stream if None); returns self. Raises
        ArgumentTypeError for an ``event`` that is not an Event."""
        if not isinstance(event, Event):
            raise ArgumentTypeError(f"LaunchSequence.record: item #{self._n}: event must be a pycudadrv Event, got "
                                    f"{type(event).__name__}")
        cdef Stream s = resolve_stream(stream, (<Event>event).device)
        self._items.append((_RECORD, event, s))
        self._n += 1
        self._note_device(event.device)
        self._note_device(s.device)
        return self

    def wait(self, stream, event):
        """Append a wait of ``stream`` for ``event`` (``cuStreamWaitEvent``);
        the event must have been recorded by then (an earlier item or before
        the call); returns self. Raises ArgumentTypeError for a ``stream``
        that is not a Stream or an ``event`` that is not an Event."""
        if not isinstance(stream, Stream):
            raise ArgumentTypeError(f"LaunchSequence.wait: item #{self._n}: stream must be a pycudadrv Stream, got "
                                    f"{type(stream).__name__}")
        if not isinstance(event, Event):
            raise ArgumentTypeError(f"LaunchSequence.wait: item #{self._n}: event must be a pycudadrv Event, got "
                                    f"{type(event).__name__}")
        self._items.append((_WAIT, event, stream))
        self._n += 1
        self._note_device(event.device)
        self._note_device(stream.device)
        return self

    def __len__(self):
        return self._n

    def __call__(self):
        """Issue every item once."""
        self._issue(1)

    def launch(self, repeat=1):
        """Issue the items ``repeat`` times, in order. Raises
        ArgumentTypeError for a ``repeat`` that is not an int,
        ArgumentValueError outside ``[0, 2**31)``."""
        if isinstance(repeat, bool) or not isinstance(repeat, (int, np.integer)):
            raise ArgumentTypeError(f"LaunchSequence.launch: repeat must be an int, got {type(repeat).__name__}")
        if not 0 <= repeat <= 0x7FFFFFFF:
            raise ArgumentValueError(f"LaunchSequence.launch: repeat must be in [0, 2**31), got {int(repeat)}")
        self._issue(<int>repeat)

    cdef int _issue(self, int repeat) except -1:
        cdef pycudadrv_driver_api* d = driver()
        cdef int r, k
        cdef tuple item
        cdef int kind
        cdef Event ev
        cdef Stream s
        cdef CUresult res
        cdef bint slow = captures_active() or get_launch_hook_c() is not None
        cdef bint one_device = self._device is not None and not slow
        if one_device:
            (<Device>self._device).activate()     # once: every item is on it, and none switches context
        for r in range(repeat):
            for k in range(self._n):
                item = <tuple>self._items[k]
                kind = <int>item[0]
                if kind == _LAUNCH:
                    (<PreparedLaunch>item[1])._launch(not one_device)
                elif kind == _RECORD:
                    ev = <Event>item[1]
                    s = <Stream>item[2]
                    if slow:
                        ev.record(s)
                        continue
                    if ev._closed or s._closed:
                        ev.record(s)        # raises the clear error
                    res = d.p_cuEventRecord(ev._handle, s._handle)
                    check(res, "cuEventRecord")
                    ev._recorded = True
                else:
                    ev = <Event>item[1]
                    s = <Stream>item[2]
                    s.wait(ev)
        return 0

    def __repr__(self):
        return f"<LaunchSequence of {self._n} items ({len(self._prepared)} launches)>"


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class DispatchBase:
    """The fast path of :class:`pycudadrv.dispatch.Dispatch`: a grid seen
    before (as the same hashable value) goes straight to its prepared launch
    in C; everything else goes to the subclass's ``_dispatch``."""
    cdef dict _by_grid

    def __cinit__(self, *args, **kwargs):
        self._by_grid = {}

    def dispatch(self, grid=None, *, threads=None, indirect=None):
        """Launch. Exactly one of:

        * ``grid=(x, y, z)`` workgroups (blocks);
        * ``threads=(x, y, z)``: the grid is the ceiling of threads / block;
        * ``indirect=buffer``: three u32 workgroup counts on the device (see
          :mod:`pycudadrv.dispatch` for how it runs).

        A zero-size grid or an empty indirect buffer is a no-op. Raises
        ArgumentValueError when none or several are given, or the indirect
        buffer is not 0 or at least 12 bytes."""
        cdef PyObject* p
        if threads is None and indirect is None:
            p = PyDict_GetItem(self._by_grid, grid)     # NULL for unhashable grids too
            if p != NULL:
                (<PreparedLaunch>p)._launch()
                return
        return self._dispatch(grid, threads, indirect)

    def _cache_grid(self, grid, PreparedLaunch p not None):
        """Remember ``p`` for ``grid`` (the value exactly as the caller passes it)."""
        self._by_grid[grid] = p

    def _clear_grid_cache(self):
        self._by_grid.clear()
