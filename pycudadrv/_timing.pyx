# cython: language_level=3
"""The hot half of :mod:`pycudadrv.timestamps`: entering and leaving a pass.

``with ts.measure(label):`` runs a pop from the event pool, an event record
(``cuEventRecord``, called from here) and a little list bookkeeping on entry and
on exit, through callables made once (no bound method, no argument tuple per
pass); done in Python those cost more than the two ``cuEventRecord`` calls
themselves, so they are here, in C.
The reading side (requests, results, reset) stays in Python, on the same
attributes."""
cimport cython
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF

from pycudadrv._stream cimport Stream
from pycudadrv._event cimport Event

from pycudadrv import nvtx
from pycudadrv._errors import ArgumentTypeError, StateError, short_repr

__all__ = ["TimestampsBase", "Pass", "PASS_CACHE_LIMIT"]

#: Pass objects cached per label (a loop reuses one); cleared beyond this many labels.
PASS_CACHE_LIMIT = 256


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class Pass
@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class _PassExit

# pycudadrv.nvtx.enabled, kept here by nvtx (it calls _nvtx_changed on every change): a pass reads a C flag.
cdef bint _nvtx_on = False


def _nvtx_changed(flag):
    """pycudadrv.nvtx's watcher: its ``enabled`` changed to ``flag``."""
    global _nvtx_on
    _nvtx_on = flag


nvtx._watch(_nvtx_changed)


cdef inline void _set(list items, Py_ssize_t i, object value) noexcept:
    """``items[i] = value`` for an index known to be in range (no checks, no call)."""
    cdef PyObject* old = PyList_GET_ITEM(items, i)
    Py_INCREF(value)
    PyList_SET_ITEM(items, i, value)
    Py_XDECREF(old)


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


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class TimestampsBase:
    """The state of a :class:`pycudadrv.Timestamps` and its pass entry/exit.

    Entries are ``[label, start Event, end Event or None while open]``. The event and entry
    pools and the stack of open passes are lists used up to a count: taking from them or
    putting back never resizes a list, so a steady loop allocates nothing."""
    cdef object _stream
    cdef Stream _cstream             # _stream when it is a pycudadrv Stream (events recorded from C), else None
    cdef bint _ctx_free              # _cstream has a real handle: a record on it needs no current context
    cdef public list _passes         # entries not yet requested, in order of start
    cdef list _open_stack            # the open passes, innermost last: the first _depth items
    cdef Py_ssize_t _depth
    cdef public list _nvtx_open      # those of them that opened an NVTX range (pycudadrv.nvtx on)
    cdef public list _requested      # closed entries whose results were asked for
    cdef public object _req_end      # the last end event among them (one stream: it finishes last)
    cdef public object _last_end
    cdef public dict _old_events     # id -> event recorded before the stream was changed, not seen complete
    cdef list _pool                  # recorded-and-read events, reused: the first _pool_n items
    cdef Py_ssize_t _pool_n
    cdef public dict _labels         # label -> Pass
    cdef list _entry_pool            # entries whose results were taken, reused: the first _entry_n items
    cdef Py_ssize_t _entry_n
    cdef object _last_label          # the label of the last measure() call and its pass (a loop repeats it)
    cdef Pass _last_pass
    cdef _PassExit _exit             # every pass's __exit__ (one object, made here)

    def __cinit__(self, *args, **kwargs):
        self._passes = []
        self._open_stack = []
        self._depth = 0
        self._nvtx_open = []
        self._requested = []
        self._old_events = {}
        self._pool = []
        self._pool_n = 0
        self._labels = {}
        self._entry_pool = []
        self._entry_n = 0
        self._exit = _new_exit(self)

    @property
    def stream(self):
        """The stream the passes are timed on. It may be changed, inside a pass too: results asked for
        then also wait for the events recorded before the change (``cuEventQuery`` of each until seen
        complete; ``read()`` synchronizes them)."""
        return self._stream

    @stream.setter
    def stream(self, value):
        cdef list entry
        if not isinstance(value, Stream) and not hasattr(value, "device"):    # what its events need
            raise ArgumentTypeError(f"Timestamps: stream must be a pycudadrv Stream, got "
                                    f"{type(value).__name__} {short_repr(value)}")
        # The last end recorded no longer finishes after every event recorded so far: those of the passes
        # not taken yet (open ones' starts too) are noted once each, and a request waits for those of its
        # passes until seen complete (timestamps.py _ready).
        for entry in self._passes + self._requested:
            self._old_events[id(entry[1])] = entry[1]
            if entry[2] is not None:
                self._old_events[id(entry[2])] = entry[2]
        self._stream = value
        self._cstream = <Stream>value if type(value) is Stream else None
        # a real handle (not NULL, CU_STREAM_LEGACY 1, CU_STREAM_PER_THREAD 2) names its context
        self._ctx_free = self._cstream is not None and <size_t>self._cstream._handle > 2

    @property
    def _open(self):
        """The open passes' entries, innermost last (a new list)."""
        return self._open_stack[:self._depth]

    def _give_back(self, events, entries):
        """Put ``events`` (read, or dropped unread) back in the event pool and ``entries``
        (whose results were taken) in the entry pool."""
        self._pool_n = _put(self._pool, self._pool_n, events)
        self._entry_n = _put(self._entry_pool, self._entry_n, entries)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef inline object _event(self):
        if self._pool_n:
            self._pool_n -= 1
            return self._pool[self._pool_n]      # the list keeps its reference: it never shrinks
        return self._new_event()     # the subclass's: a timing event on the stream's device

    cdef inline int _record(self, object ev, bint entering) except -1:
        """``ev.record(stream)``: for a pycudadrv Event and Stream of one device, Event's C-level
        record (``cuEventRecord``, no Python call), making the device current on entry only: the
        exit's record on a real stream handle needs no current context (a record takes the
        stream's; the NULL, legacy and per-thread handles keep the check). Anything else (another
        device, a stand-in) through its own methods."""
        cdef Stream s = self._cstream
        if s is not None and type(ev) is Event and (<Event>ev).device is s.device:
            (<Event>ev)._record_on(s, entering or not self._ctx_free)
            return 0
        ev.record(self._stream)
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int _begin(self, str label) except -1:
        cdef list entry
        ev = self._event()
        self._record(ev, True)
        if self._entry_n:
            self._entry_n -= 1
            entry = <list>self._entry_pool[self._entry_n]
            _set(entry, 0, label)
            _set(entry, 1, ev)
            _set(entry, 2, None)
        else:
            entry = [label, ev, None]
        self._passes.append(entry)
        if self._depth < len(self._open_stack):
            _set(self._open_stack, self._depth, entry)
        else:
            self._open_stack.append(entry)
        self._depth += 1
        if _nvtx_on and nvtx.push(label):
            self._nvtx_open.append(entry)
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int _end(self) except -1:
        if self._depth <= 0:         # an __exit__ twice, or without __enter__: no open pass to close
            raise StateError("Timestamps: a pass was left that is not open (its __exit__ called twice, or "
                             "without __enter__); nothing was recorded")
        ev = None
        try:
            ev = self._event()          # a new one can fail too (cuEventCreate after a fault)
            self._record(ev, False)
        except BaseException:
            self._drop_innermost(ev)
            raise
        cdef list entry = self._close_innermost()
        _set(entry, 2, ev)
        self._last_end = ev
        return 0

    cdef inline list _close_innermost(self):
        """Take the innermost open pass off the open stack (and its NVTX range, if it pushed one);
        returns its entry."""
        self._depth -= 1
        cdef list entry = <list>self._open_stack[self._depth]
        cdef list nv = self._nvtx_open
        if nv and nv[len(nv) - 1] is entry:
            nv.pop()
            nvtx.pop()
        return entry

    cdef int _drop_innermost(self, object ev) except -1:
        """The end record of the innermost open pass failed (its stream closed inside the block, say):
        close it without a result -- drop it from the passes, its start event and the unrecorded ``ev``
        (None: none could be made) back in the pool -- so that read() and reset() do not refuse forever."""
        cdef list passes = self._passes
        cdef Py_ssize_t k
        cdef list entry = self._close_innermost()
        for k in range(len(passes) - 1, -1, -1):
            if passes[k] is entry:
                del passes[k]
                break
        self._old_events.pop(id(entry[1]), None)      # (back in the pool: nothing to wait for)
        self._pool_n = _put(self._pool, self._pool_n, [entry[1]] if ev is None else [ev, entry[1]])
        return 0

    def measure(self, label):
        """A pass: ``with ts.measure(label):`` records a start event, runs the
        block, records an end event (also when the block raises). Nested
        passes are allowed; results come back in order of their start. With
        NVTX on (:mod:`pycudadrv.nvtx`) the pass is also an NVTX range named ``label``.
        Leaving a pass that is not open (``__exit__`` twice, or without
        ``__enter__``) raises StateError and records nothing. A pass whose
        end cannot be recorded (its stream closed inside the block:
        ClosedError) is dropped without a result and the error propagates."""
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


# `with p:` looks `__enter__` and `__exit__` up on type(p) and calls what the descriptor found there
# gives for p (_PyObject_LookupSpecial). For a method, that is a new bound-method object per lookup:
# two allocations and two deallocations per pass, more than the pass's own bookkeeping. Pass's
# `__enter__` and `__exit__` are descriptors instead that hand out callables made once per Pass
# (_PassEnter) and once per Timestamps (_PassExit): a pass allocates nothing.

from pycudadrv._vcall cimport pycudadrv_enable_vectorcall, pycudadrv_vectorcall_nargs


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
cdef class _PassEnter:
    """``Pass.__enter__`` bound to one pass: records the start event and returns the Timestamps."""
    cdef void* _vc                   # _enter_vc, its call (vcall.h: a vectorcall, no argument tuple)
    cdef TimestampsBase _ts
    cdef str _label

    def __repr__(self):
        return f"<bound __enter__ of the Timestamps pass {self._label!r}>"


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
cdef class _PassExit:
    """``Pass.__exit__`` of every pass of one Timestamps: records the end event of the innermost
    open pass (passes close innermost first), returns False (an exception propagates)."""
    cdef void* _vc                   # _exit_vc, its call
    cdef TimestampsBase _ts

    def __repr__(self):
        return "<bound __exit__ of a Timestamps pass>"


cdef object _enter_vc(object self, PyObject** args, size_t nargsf, PyObject* kwnames):
    if kwnames != NULL or pycudadrv_vectorcall_nargs(nargsf) != 0:
        raise ArgumentTypeError("Timestamps pass __enter__() takes no arguments")
    cdef _PassEnter e = <_PassEnter>self
    e._ts._begin(e._label)
    return e._ts


cdef object _exit_vc(object self, PyObject** args, size_t nargsf, PyObject* kwnames):
    if kwnames != NULL or pycudadrv_vectorcall_nargs(nargsf) != 3:
        raise ArgumentTypeError("Timestamps pass __exit__(exc_type, exc, tb) takes 3 positional arguments")
    (<_PassExit>self)._ts._end()
    return False


cdef _PassEnter _new_enter(TimestampsBase ts, str label):
    cdef _PassEnter e = _PassEnter.__new__(_PassEnter)
    e._vc = <void*>_enter_vc
    e._ts = ts
    e._label = label
    return e


cdef _PassExit _new_exit(TimestampsBase ts):
    cdef _PassExit x = _PassExit.__new__(_PassExit)
    x._vc = <void*>_exit_vc
    x._ts = ts
    return x


cdef int _enable_vectorcalls() except -1:
    cdef _PassEnter e = _PassEnter.__new__(_PassEnter)
    cdef _PassExit x = _PassExit.__new__(_PassExit)
    pycudadrv_enable_vectorcall(_PassEnter, e, &e._vc)
    pycudadrv_enable_vectorcall(_PassExit, x, &x._vc)
    return 0


_enable_vectorcalls()


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
cdef class _EnterSlot:
    """The ``__enter__`` descriptor of Pass."""
    def __get__(self, obj, objtype):
        if type(obj) is Pass:
            return (<Pass>obj)._enter
        return self if obj is None else _not_a_pass("__enter__", obj)


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
cdef class _ExitSlot:
    """The ``__exit__`` descriptor of Pass."""
    def __get__(self, obj, objtype):
        if type(obj) is Pass:
            return (<Pass>obj)._ts._exit
        return self if obj is None else _not_a_pass("__exit__", obj)


cdef object _not_a_pass(str name, object obj):
    raise ArgumentTypeError(f"Pass.{name} is a Timestamps pass's own (from ts.measure(label)), got "
                            f"{type(obj).__name__}")


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
cdef class Pass:
    """``with ts.measure(label):`` -- one event recorded on entry, one on exit.
    Holds no state of its own, so one object serves every (nested) use of its label.

    ``__enter__()`` records the start event (``cuEventRecord``) and returns the Timestamps;
    ``__exit__(exc_type, exc, tb)`` records the end event of the innermost open pass and returns
    False. Both are made once per pass object, so a ``with`` allocates nothing."""
    cdef TimestampsBase _ts
    cdef readonly str label
    cdef _PassEnter _enter

    def __cinit__(self, ts=None, label=None):
        if not isinstance(ts, TimestampsBase) or type(label) is not str:
            raise ArgumentTypeError("a pass comes from Timestamps.measure(label), got "
                                    f"Pass({type(ts).__name__}, {type(label).__name__})")
        self._ts = <TimestampsBase>ts
        self.label = label
        self._enter = _new_enter(self._ts, label)

    __enter__ = _EnterSlot()
    __exit__ = _ExitSlot()

    def __repr__(self):
        return f"<Timestamps pass {self.label!r}>"
