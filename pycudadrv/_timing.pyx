# cython: language_level=3
"""The hot half of :mod:`pycudadrv.timestamps`: entering and leaving a pass.

``with ts.measure(label):`` runs a pop from the event pool, an event record
and a little list bookkeeping on entry and on exit; done in Python those cost
more than the two ``cuEventRecord`` calls themselves, so they are here, in C.
The reading side (requests, results, reset) stays in Python, on the same
attributes."""
cimport cython

from pycudadrv._stream cimport Stream
from pycudadrv._event cimport Event

from pycudadrv import nvtx
from pycudadrv._errors import ArgumentTypeError, StateError

__all__ = ["TimestampsBase", "Pass", "PASS_CACHE_LIMIT"]

#: Pass objects cached per label (a loop reuses one); cleared beyond this many labels.
PASS_CACHE_LIMIT = 256


cdef class Pass

# pycudadrv.nvtx's globals: a pass reads nvtx.enabled from them (a dict look-up, not a module attribute walk).
cdef dict _nvtx_state = nvtx.__dict__


cdef Py_ssize_t _put(list pool, Py_ssize_t n, object items) except -1:
    """Store `items` in `pool` from index `n` on (overwriting what was taken), growing it only
    past its length; returns the new count."""
    for x in items:
        if n < len(pool):
            pool[n] = x
        else:
            pool.append(x)
        n += 1
    return n


cdef class TimestampsBase:
    """The state of a :class:`pycudadrv.Timestamps` and its pass entry/exit.

    Entries are ``[label, start Event, end Event or None while open]``. The event and entry
    pools and the stack of open passes are lists used up to a count: taking from them or
    putting back never resizes a list, so a steady loop allocates nothing."""
    cdef public object stream
    cdef public list _passes         # entries not yet requested, in order of start
    cdef list _open_stack            # the open passes, innermost last: the first _depth items
    cdef Py_ssize_t _depth
    cdef public list _nvtx_open      # those of them that opened an NVTX range (pycudadrv.nvtx on)
    cdef public list _requested      # closed entries whose results were asked for
    cdef public object _req_end      # the last end event among them (one stream: it finishes last)
    cdef public object _last_end
    cdef list _pool                  # recorded-and-read events, reused: the first _pool_n items
    cdef Py_ssize_t _pool_n
    cdef public dict _labels         # label -> Pass
    cdef list _entry_pool            # entries whose results were taken, reused: the first _entry_n items
    cdef Py_ssize_t _entry_n
    cdef object _last_label          # the label of the last measure() call and its pass (a loop repeats it)
    cdef Pass _last_pass

    def __cinit__(self, *args, **kwargs):
        self._passes = []
        self._open_stack = []
        self._depth = 0
        self._nvtx_open = []
        self._requested = []
        self._pool = []
        self._pool_n = 0
        self._labels = {}
        self._entry_pool = []
        self._entry_n = 0

    @property
    def _open(self):
        """The open passes' entries, innermost last (a new list)."""
        return self._open_stack[:self._depth]

    def _give_back(self, events, entries):
        """Put ``events`` (read, or dropped unread) back in the event pool and ``entries``
        (whose results were taken) in the entry pool."""
        self._pool_n = _put(self._pool, self._pool_n, events)
        self._entry_n = _put(self._entry_pool, self._entry_n, entries)

    cdef object _event(self):
        if self._pool_n:
            self._pool_n -= 1
            return self._pool[self._pool_n]      # the list keeps its reference: it never shrinks
        return self._new_event()     # the subclass's: a timing event on the stream's device

    cdef int _record(self, ev) except -1:
        s = self.stream
        if type(ev) is Event and type(s) is Stream and (<Event>ev).device is (<Stream>s).device:
            (<Event>ev)._record_on(<Stream>s)          # Event.record(s) without the Python call
        else:
            ev.record(s)
        return 0

    cdef int _begin(self, str label) except -1:
        cdef list entry
        ev = self._event()
        self._record(ev)
        if self._entry_n:
            self._entry_n -= 1
            entry = <list>self._entry_pool[self._entry_n]
            entry[0] = label
            entry[1] = ev
            entry[2] = None
        else:
            entry = [label, ev, None]
        self._passes.append(entry)
        if self._depth < len(self._open_stack):
            self._open_stack[self._depth] = entry
        else:
            self._open_stack.append(entry)
        self._depth += 1
        if _nvtx_state["enabled"] and nvtx.push(label):
            self._nvtx_open.append(entry)
        return 0

    cdef int _end(self) except -1:
        if self._depth <= 0:         # an __exit__ twice, or without __enter__: no open pass to close
            raise StateError("Timestamps: a pass was left that is not open (its __exit__ called twice, or "
                             "without __enter__); nothing was recorded")
        ev = self._event()
        self._record(ev)
        self._depth -= 1
        cdef list entry = <list>self._open_stack[self._depth]
        entry[2] = ev
        self._last_end = ev
        cdef list nv = self._nvtx_open
        if nv and nv[len(nv) - 1] is entry:
            nv.pop()
            nvtx.pop()
        return 0

    def measure(self, label):
        """A pass: ``with ts.measure(label):`` records a start event, runs the
        block, records an end event (also when the block raises). Nested
        passes are allowed; results come back in order of their start. With
        NVTX on (:mod:`pycudadrv.nvtx`) the pass is also an NVTX range named ``label``.
        Leaving a pass that is not open (``__exit__`` twice, or without
        ``__enter__``) raises StateError and records nothing."""
        if label is self._last_label and self._last_pass is not None:
            return self._last_pass
        try:
            p = self._labels.get(label)
        except TypeError:           # an unhashable label: a pass of its own
            return Pass(self, str(label))
        if p is None:
            if len(self._labels) >= PASS_CACHE_LIMIT:
                self._labels.clear()
            p = self._labels[label] = Pass(self, str(label))
        if type(label) is str:
            self._last_label = label
            self._last_pass = <Pass>p
        return p


@cython.final
cdef class Pass:
    """``with ts.measure(label):`` -- one event recorded on entry, one on exit.
    Holds no state of its own, so one object serves every (nested) use of its label."""
    cdef TimestampsBase _ts
    cdef readonly str label

    def __cinit__(self, ts=None, label=None):
        if not isinstance(ts, TimestampsBase) or type(label) is not str:
            raise ArgumentTypeError("a pass comes from Timestamps.measure(label), got "
                                    f"Pass({type(ts).__name__}, {type(label).__name__})")
        self._ts = <TimestampsBase>ts
        self.label = label

    def __enter__(self):
        self._ts._begin(self.label)
        return self._ts

    def __exit__(self, exc_type, exc, tb):
        self._ts._end()
        return False

    def __repr__(self):
        return f"<Timestamps pass {self.label!r}>"
