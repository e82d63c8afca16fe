# cython: language_level=3
"""The core of :class:`pycudadrv.Queue` (pycudadrv/queue.py is the public
class, built on :class:`QueueCore`): the access list of each submission, the
stream choice, the ``cuStreamWaitEvent`` of each hazard, one pooled event
recorded per submission and the :class:`Submission` handle -- the one Python
object a submission makes (what ran where is kept by pycudadrv._lanes).

The queue works with the Stream, Event and Buffer types its module names at
creation (pycudadrv's own; the CPU tests put pretend ones there): pycudadrv's
own objects take the C paths (fields read directly, one driver call each),
anything else is driven through its Python methods."""
cimport cython
from libc.stdint cimport uint64_t
from libc.stdlib cimport realloc, free
from cpython.object cimport PyObject
from cpython.pythread cimport PyThread_get_thread_ident
from pycudadrv._event cimport Event
from pycudadrv._memory cimport Buffer
from pycudadrv._launch cimport Function, launch_items, vec_tuple, flag_arg
from pycudadrv._prepared cimport PreparedLaunch
from pycudadrv._marshal cimport ParamLayout, POINTER
from pycudadrv._stream cimport Stream
from pycudadrv._tracker cimport _Tracker
from pycudadrv._lanes cimport (Submission, _Lane, _AllocStream, _EventPool, pool_push, pool_pop,
                               K_LAUNCH, K_PREPARED, K_OTHER, K_OTHER_KERNEL, want_serial, known_done,
                               new_lane, in_flight, pending_of, retire_to, seen, set_seen,
                               alloc_ordered, set_alloc_ordered, wait_event, record_event,
                               stream_idle, wait_stream, stream_closed,
                               RETIRE_EVERY, retire_every, let_go)

cdef extern from *:
    PyObject** _list_items "PySequence_Fast_ITEMS"(object seq)     # a list's or tuple's items (borrowed)
    void* _type_of "Py_TYPE"(PyObject* o)

import numpy as np
from pycudadrv._errors import ArgumentTypeError, CaptureError, ClosedError, CudaError, StateError
from pycudadrv._lanes import fault_error, not_made
from pycudadrv._interop import span as _span

__all__ = ["QueueCore", "ASYNC_ERROR_CODES"]

cdef enum:
    FOREIGN_KEPT = 16   # lanes of streams given with stream= kept while idle (more: idle ones let go)

# Sticky errors of a kernel that already ran: the next driver call reports them, whatever it is.
ASYNC_ERROR_CODES = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})
_SCALARS = (int, float, bool, complex, np.generic, bytes, bytearray, memoryview, type(None), str)


# -- the queue's launch -------------------------------------------------------------------------

cdef object param_modes(object params):
    """Per parameter a byte: 2 written (``T*``, or constness unknown), 1 read (``const T*``), 0 not a
    pointer; None for an unknown layout (None)."""
    if params is None:
        return None
    return bytes([(1 if p.const is True else 2) if p.kind == POINTER else 0 for p in params])


cdef int call_launch(object fn, object grid, object block, PyObject** items, Py_ssize_t n, object s, dict kw,
                     dict lane_kw) except -1:
    """``fn.launch(grid, block, *items[0:n], stream=s, **kw)``: for a Function and no other keyword, the
    C entry of Function.launch over the caller's array (no argument tuple, no keyword dict)."""
    if type(fn) is Function and not kw:
        launch_items(<Function>fn, grid, block, items, n, 0, s, None)
        return 0
    if kw:
        kw = dict(kw)
        kw["stream"] = s
    else:
        kw = lane_kw
    fn.launch(grid, block, *vec_tuple(items, n), **kw)
    return 0


# -- the queue's core ---------------------------------------------------------------------------

@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.auto_pickle(False)
cdef class QueueMode:
    """What a queue orders by in one mode (internal): its tracker, and the capture's graph, fork event and
    joined lanes."""


cdef QueueMode _new_mode(bint capturing):
    cdef QueueMode m = QueueMode.__new__(QueueMode)
    m.capturing = capturing
    m.tracker = _Tracker()
    m.joined = []
    return m


cdef inline LaneMode _lane_mode(_Lane lane, QueueMode m):
    """The lane's state in the queue's mode ``m``."""
    return lane.capture if m.capturing else lane.eager


cdef inline long long _load(_Lane lane, QueueMode m) noexcept:
    """What the greedy choice compares: work not seen complete (eager), or issued during the capture."""
    return lane.capture.load if m.capturing else in_flight(lane)


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.auto_pickle(False)
@cython.no_gc_clear         # __dealloc__ reads the lanes (_let_go)
cdef class QueueCore:
    """What every :class:`pycudadrv.Queue` submission goes through (see pycudadrv/queue.py for the class
    users make)."""

    def __cinit__(self, *args, **kwargs):
        self._eager = self._mode = _new_mode(False)
        self._capture = _new_mode(True)
        self._closed = True

    def __dealloc__(self):
        free(self._acc)
        free(self._deps.lanes)
        self._let_go()

    cdef int _let_go(self) except -1:
        if self._lanes is not None:
            let_go(self._lanes)
        return 0

    def _setup(self, device, list pool, bint round_robin, stream_type, event_type, buffer_type):
        """Take over the pool's streams (made by the caller) and the types to work with."""
        cdef int k
        self._device = device
        self._lanes = [new_lane(k, pool[k], True) for k in range(len(pool))]
        self._pool = len(pool)
        self._round_robin = round_robin
        self._foreign = {}
        self._free_index = []
        self._next_index = len(pool)
        self._pool_ids = {id(s) for s in pool}
        self._events = _EventPool()
        self._layouts = {}
        self._fresh = []
        self._alloc_streams = {}
        self._clock.every = self._clock.base = self._countdown = RETIRE_EVERY
        self._clock.pool = len(pool)
        self._clock.found = True
        self._Stream = stream_type
        self._Event = event_type
        self._Buffer = buffer_type
        self._closed = False
        self._ready = True

    cdef int _check(self, str name) except -1:
        if not self._ready:
            raise not_made("Queue", name, "Queue(device, streams=4)")
        if self._closed:
            raise ClosedError("Queue is closed")
        return 0

    @property
    def streams(self) -> tuple:
        """The pool's Streams."""
        if not self._ready:
            raise not_made("Queue", "streams", "Queue(device, streams=4)")
        return tuple((<_Lane>self._lanes[k]).stream for k in range(self._pool))

    @property
    def _capturing(self):
        return self._mode.capturing

    @property
    def _closed_now(self):
        return self._closed or not self._ready

    # -- accesses of the submission being built --------------------------------------------------
    cdef int _add(self, uint64_t lo, uint64_t hi, bint write, bint override) except -1:
        """Add ``[lo, hi)``; the same range again: ``override`` sets its mode, else a write wins."""
        cdef Py_ssize_t k
        cdef QueueAccess* p
        for k in range(self._nacc):
            if self._acc[k].lo == lo and self._acc[k].hi == hi:
                self._acc[k].write = write if override else (self._acc[k].write or write)
                return 0
        if self._nacc == self._cacc:
            p = <QueueAccess*>realloc(self._acc, max(8, 2 * self._cacc) * sizeof(QueueAccess))
            if p == NULL:
                raise MemoryError("Queue access list")
            self._acc = p
            self._cacc = max(8, 2 * self._cacc)
        self._acc[self._nacc].lo = lo
        self._acc[self._nacc].hi = hi
        self._acc[self._nacc].write = write
        self._nacc += 1
        return 0

    cdef int _add_span(self, object sp, bint write, bint override) except -1:
        if sp is not None:
            lo, hi = sp
            self._add(<uint64_t>lo, <uint64_t>min(hi, 0xFFFFFFFFFFFFFFFF), write, override)
        return 0

    cdef int _begin(self) except -1:
        cdef Py_ssize_t k
        if self._building:      # another would reset its access list: its kernel would wait for nothing
            raise StateError("Queue: a submission made while another submission to this Queue is being built "
                             "(from an argument's __cuda_array_interface__/__dlpack__, a launch hook, or another "
                             "thread meanwhile); a Queue takes one at a time: submit after that call returns, or "
                             "give each thread a Queue of its own")
        self._builder = PyThread_get_thread_ident()
        self._begins += 1
        self._nacc = 0
        for k in range(self._nfresh):
            self._fresh[k] = None
        self._nfresh = 0
        return 0

    cdef int _sight(self, object st, unsigned long long serial) except -1:
        """Note memory allocated on ``st`` (Allocation.serial ``serial``, 0: unknown): outside the pool,
        the work queued there for it (the allocation, an upload by from_numpy) must come first."""
        cdef _AllocStream r
        cdef Py_ssize_t k
        if st is None:
            return 0
        if st is self._memo_stream:
            r = self._memo_rec
        else:
            if id(st) in self._pool_ids:
                r = None
            else:
                r = self._alloc_streams.get(id(st))   # it holds `st`: the id is not reused meanwhile
                if r is None:
                    if len(self._alloc_streams) >= 64:
                        self._alloc_streams.clear()   # forgets what was seen: only more queries
                    r = _AllocStream.__new__(_AllocStream)
                    r.stream = st
                    self._alloc_streams[id(st)] = r
            self._memo_stream = st
            self._memo_rec = r
        if r is None:
            return 0
        for k in range(self._nfresh):
            if self._fresh[k] is r:
                break
        else:
            if serial and serial <= r.idle_upto:
                return 0          # made before the queue saw the stream idle: nothing to check
            if self._nfresh < len(self._fresh):
                self._fresh[self._nfresh] = r
            else:
                self._fresh.append(r)
            self._nfresh += 1
            r.want = 0
            r.unknown = False
        return want_serial(r, serial)

    cdef int _sight_buffer(self, object buf) except -1:
        if type(buf) is Buffer:
            return self._sight((<Buffer>buf)._alloc.stream, (<Buffer>buf)._alloc.serial)
        return self._sight(buf.stream, 0)

    cdef object _param_access(self, object fn):
        """Per parameter a byte: 2 written (``T*``, or constness unknown), 1 read (``const T*``), 0 not a
        pointer; None when the layout is unknown (every Buffer argument is read and written)."""
        cdef ParamLayout lay
        if type(fn) is Function:
            lay = (<Function>fn).layout
            params = lay.params
            if fn is self._last_fn and params is self._last_params:
                return self._last_acc
            hit = self._layouts.get(fn)
            if hit is None or hit[0] is not params:
                hit = self._layouts[fn] = (params, param_modes(params))
            self._last_fn = fn
            self._last_params = params
            self._last_acc = hit[1]
            return hit[1]
        src = fn.layout_source
        hit = self._layouts.get(fn)
        if hit is not None and hit[0] == src:
            return hit[1]
        acc = param_modes(fn.param_layout)
        self._layouts[fn] = (src, acc)
        return acc

    def _param_modes(self, fn):
        """Per parameter of ``fn``: 2 written, 1 read, 0 not a pointer (bytes); None when unknown."""
        return self._param_access(fn)

    cdef int _args_access(self, object fn, PyObject** args, Py_ssize_t nargs, str verb, str name) except -1:
        """The accesses of a launch of ``fn`` (kernel ``name``) with ``args[0:nargs]`` (borrowed: the caller
        holds them); ``verb`` (``"launch"`` or ``"submit"``) names the method in messages."""
        cdef object per = self._param_access(fn)
        cdef const unsigned char* pc = NULL
        cdef Py_ssize_t k, n = -1
        cdef int mode
        cdef object a, sp
        cdef Buffer b
        cdef void* t
        cdef object buffer_type = self._Buffer
        if per is not None:
            pc = <bytes>per
            n = len(<bytes>per)
        for k in range(nargs):
            t = _type_of(args[k])       # compared as pointers: no reference taken for a scalar
            mode = 2 if n < 0 else (pc[k] if k < n else 0)     # unknown layout: read and written
            if t == <void*>Buffer:
                b = <Buffer>args[k]
                if b._nbytes == 0:
                    continue
                if b._closed or b._alloc.freed:
                    b.ensure_open()             # raises ClosedError
                if b._alloc.stream is not self._memo_stream or not known_done(self._memo_rec, b._alloc.serial):
                    self._sight(b._alloc.stream, b._alloc.serial)     # (else a pool stream's, or known done)
                if mode:
                    self._add(b._ptr, b._ptr + b._nbytes, mode == 2, False)
                continue
            if t == <void*>int or t == <void*>float or t == <void*>bool:
                continue
            a = <object>args[k]
            if isinstance(a, _SCALARS):
                continue
            if t == <void*>buffer_type:
                m = a.nbytes
                if m == 0:
                    continue
                lo = a.ptr
                sp = (lo, lo + m)
                self._sight(a.stream, 0)
            else:
                try:
                    sp = _span(a, f"Queue.{verb} of kernel '{name}', argument #{k}")
                except ArgumentTypeError:
                    if isinstance(getattr(a, "__cuda_array_interface__", None), dict):
                        raise     # a malformed array interface: the queue cannot tell which bytes it covers
                    continue      # not memory the queue can see; the launch itself judges the value
            if mode:
                self._add_span(sp, mode == 2, False)
        return 0

    cdef int _explicit_c(self, object reads, object writes, str what) except -1:
        cdef Py_ssize_t k
        for label, items, w in (("reads", reads, False), ("writes", writes, True)):
            if items is None:
                continue
            if isinstance(items, (self._Buffer, Buffer, str, bytes)) or not hasattr(items, "__iter__"):
                items = (items,)
            for k, b in enumerate(items):
                sp = _span(b, f"{what}, {label}[{k}]")
                if sp is not None:
                    self._add_span(sp, w, True)     # writes come second: named in both, it is a write
                    if isinstance(b, (self._Buffer, Buffer)):
                        self._sight_buffer(b)
        return 0

    def _access_of(self, list access, list fresh, reads=None, writes=None, what="Queue"):
        """Start a submission's access list from Python: ``access`` of ``((lo, hi), is_write)`` (the same
        range twice: a write wins), ``fresh`` the Buffers whose allocation streams to check, then ``reads=`` /
        ``writes=`` (they override). Returns the token :meth:`_issue_call` takes: the count of submissions
        begun, which any other submission begun meanwhile (this thread's or another's) changes."""
        cdef long long token
        self._check("submit")
        self._begin()
        token = self._begins
        for sp, w in access:
            self._add_span(sp, w, False)
        for x in fresh:           # Buffers (or allocation streams)
            self._sight(x, 0) if isinstance(x, (self._Stream, Stream)) else self._sight_buffer(x)
        if reads is not None or writes is not None:
            self._building += 1
            try:
                self._explicit_c(reads, writes, what)
            finally:
                self._building -= 1
        return token

    def _note_buffer(self, buf, bint write, str what):
        """Add Buffer ``buf`` to the access list being built (ArgumentTypeError for anything else)."""
        if not isinstance(buf, (self._Buffer, Buffer)):
            raise ArgumentTypeError(f"{what}: expected a pycudadrv Buffer, got {type(buf).__name__}")
        self._add_span(_span(buf, what), write, False)
        self._sight_buffer(buf)

    def _note_whole(self):
        """The whole address space, written: a barrier."""
        self._add(0, <uint64_t>0xFFFFFFFFFFFFFFFF, True, False)

    # -- stream choice ----------------------------------------------------------------------------
    cdef _Lane _lane_of(self, object stream):
        cdef _Lane lane
        cdef int k
        if not isinstance(stream, (self._Stream, Stream)):
            raise ArgumentTypeError(f"stream= must be a pycudadrv Stream, got {type(stream).__name__}")
        for k in range(self._pool):
            lane = <_Lane>self._lanes[k]
            if lane.stream is stream:
                return lane
        handle = stream.handle
        lane = self._foreign.get(handle)
        if lane is None or lane.stream is not stream:
            if stream_closed(stream):
                raise ClosedError(f"stream= {stream!r} is closed")
            if self._free_index:
                lane = new_lane(self._free_index.pop(), stream, False)
            else:
                lane = new_lane(self._next_index, stream, False)
                self._next_index += 1
            self._lanes.append(lane)
            self._foreign[handle] = lane
        return lane

    cdef _Lane _choose(self, Submission first):
        cdef _Lane lane, best
        cdef int k
        cdef long long load, least
        if self._round_robin or self._pool == 1:
            k = self._rr
            self._rr = (k + 1) % self._pool
            return <_Lane>self._lanes[k]
        if first is not None:
            lane = first.lane
            if lane.owned and _lane_mode(lane, self._mode).tail is first:
                return lane       # right behind its input: no wait, nothing unrelated in between
        if not self._mode.capturing:
            for k in range(self._pool):     # a stream with nothing in flight is least loaded, without asking
                lane = <_Lane>self._lanes[k]
                if in_flight(lane) == 0:
                    return lane
            # Else the counts of work not seen complete as the last completion check left them: asking
            # here (every pool-size submissions) cost a query per stream per choice -- a query that finds
            # its event done is 1.36 us on the H200 -- and undid the check's back-off while the GPU is behind.
        best = <_Lane>self._lanes[0]
        least = _load(best, self._mode)
        for k in range(1, self._pool):
            lane = <_Lane>self._lanes[k]
            load = _load(lane, self._mode)
            if load < least:
                best, least = lane, load
        return best

    # -- completion ----------------------------------------------------------------------------
    cdef int _retire(self) except -1:
        """Mark the submissions the GPU has finished (``cuEventQuery``); see retire_every."""
        retire_every(self._lanes, self._events, &self._clock)
        self._countdown = self._clock.every
        if len(self._lanes) > self._pool and not self._mode.capturing:
            self._drop_idle_lanes()
        return 0

    cdef int _drop_idle_lanes(self) except -1:
        """Let go of the lanes of streams given with ``stream=`` that have nothing in flight: every such
        lane once more than FOREIGN_KEPT are kept, else those whose stream is closed. A lane holds its
        Stream and a table per producer lane; kept for the queue's life, a new Stream per submission grew
        memory with the square of the streams (1.6 GB at 20,000) and kept every Stream from being
        destroyed. A stream given again later gets a lane afresh (at worst a wait more). A dropped lane's
        index is reused: what other lanes waited for of the old lane (``seen``) is below every seq the
        new one will issue, so it hides no wait; what the old lane waited for of an allocation stream
        (``_AllocStream.upto``) is forgotten here (a submission that failed after its wait leaves such
        a wait behind no completed work)."""
        cdef _Lane lane
        cdef _AllocStream r
        cdef Py_ssize_t k, n = len(self._lanes)
        cdef bint crowded = n - self._pool > FOREIGN_KEPT
        cdef list kept = None
        cdef set gone = None
        for k in range(self._pool, n):
            lane = <_Lane>self._lanes[k]
            if in_flight(lane) == 0 and (crowded or stream_closed(lane.stream)):
                if kept is None:
                    kept = self._lanes[:k]
                    gone = set()
                gone.add(lane)
                let_go([lane])          # (its Submissions reference it: the cycle through its tail)
                self._free_index.append(lane.index)
            elif kept is not None:
                kept.append(lane)
        if kept is None:
            return 0
        self._lanes[:] = kept           # in place: each Submission's fault report reads this list
        self._foreign = {h: l for h, l in self._foreign.items() if l not in gone}
        # (the memo, and records this submission sighted, may be out of the table: it is cleared at 64)
        for r in [*self._alloc_streams.values(), self._memo_rec, *self._fresh[:self._nfresh]]:
            if r is not None:
                for lane in gone:
                    if lane.index < r.nupto:
                        r.upto[lane.index] = 0
        return 0

    def _retire_now(self):
        self._retire()

    # -- the one submission path ------------------------------------------------------------------
    cdef Submission _issue(self, int kind, object name, object stream, object target, PyObject** args,
                           Py_ssize_t nargs, object grid, object block, dict kw, tuple keep, bint timed):
        """Order, issue and record one submission over the access list built (``self._acc``) and the
        allocation streams noted (``self._fresh``). ``kind`` says how to run it: K_LAUNCH
        ``target.launch(grid, block, *args[0:nargs], stream=s, **kw)`` (``args`` borrowed: the caller
        holds them), K_PREPARED ``target.launch_on(s)``, else ``target(s)``."""
        cdef QueueMode mode = self._mode
        cdef bint capturing = mode.capturing
        cdef _Tracker tracker = mode.tracker
        cdef Submission me, first = None, f, dep
        cdef _Lane lane, dl
        cdef LaneMode lm
        cdef Py_ssize_t a, k
        cdef object s, ev, start = None, st
        cdef _AllocStream r
        if self._closed:
            raise ClosedError("Queue is closed")
        if timed and capturing:
            raise CaptureError("timed=True during Queue.capture(): captured work is not run by itself; time the "
                               "graph launch instead (Queue.launch_graph(graph, timed=True))")
        if not capturing:
            self._countdown -= 1
            if self._countdown <= 0:
                self._retire()
        self._seq += 1
        self._gen += 1
        me = Submission.__new__(Submission)
        me._lanes = self._lanes
        me.seq = self._seq
        me._kind = kind
        me._name = name
        me._kernel = kind != K_OTHER
        me._captured = capturing
        self._deps.n = 0
        for a in range(self._nacc):
            f = tracker.collect(self._acc[a].lo, self._acc[a].hi, self._acc[a].write, me, &self._deps, self._gen,
                                &self._acc[a].hint)
            if first is None:
                first = f
        lane = self._lane_of(stream) if stream is not None else self._choose(first)
        s = lane.stream
        lm = _lane_mode(lane, mode)
        if capturing and not lm.joined:
            wait_event(s, mode.fork)                  # the stream joins the capture
            lm.joined = True
            mode.joined.append(lane)
        try:
            for k in range(0 if capturing else self._nfresh):
                # Memory made on a stream outside the pool: its allocation work first, checked once.
                r = <_AllocStream>self._fresh[k]
                st = r.stream
                if st is s or alloc_ordered(r, lane.index) or stream_closed(st):
                    continue
                try:
                    if stream_idle(st):
                        if r.want > r.idle_upto:
                            r.idle_upto = r.want
                        continue
                except CaptureError:          # another capture on this thread forbids the query
                    pass
                wait_stream(s, st)
                set_alloc_ordered(r, lane.index)
                self.waits += 1
            for k in range(self._deps.n):
                dl = <_Lane>self._deps.lanes[k]
                dep = dl.dep
                # Seen done (by a completion check): no wait. Not seen done: a wait, never a query
                # first -- on the H200 cuEventQuery of a finished event costs 1.36 us, a satisfied
                # cuStreamWaitEvent 0.15 us (tools/probe_event_costs.py): asking costs more than
                # the wait it might save.
                if dl is lane or dep.done or seen(lm, dl.index) >= dep.seq:
                    continue
                wait_event(s, dep._event)
                set_seen(lm, dl.index, dep.seq)
                self.waits += 1
        except CudaError as err:
            if err.code in ASYNC_ERROR_CODES:
                raise self._async_error(err, f"ordering {me.label}", me) from err
            raise
        me.lane = lane
        if timed:
            ev = self._Event(timing=True, device=self._device)
            start = self._Event(timing=True, device=self._device)
        else:
            ev = None if capturing else pool_pop(self._events)    # a captured event is never queried or reused
            if ev is None:
                ev = self._Event(timing=False, device=self._device)
        try:
            if start is not None:
                record_event(start, s)
            if kind == K_LAUNCH:
                call_launch(target, grid, block, args, nargs, s, kw, lane.kw)
            elif kind == K_PREPARED:
                target.launch_on(s)
            else:
                target(s)
            record_event(ev, s, target if kind == K_LAUNCH else None)
        except CudaError as err:
            if not capturing and not timed:
                pool_push(self._events, ev)
            if err.code in ASYNC_ERROR_CODES:
                raise self._async_error(err, f"issuing {me.label}", me) from err
            raise
        except BaseException:
            if not capturing and not timed:
                pool_push(self._events, ev)
            raise
        if capturing:
            lm.load += 1
            if kind == K_LAUNCH:
                if nargs:                     # launches on joined streams are not seen by the capture itself
                    mode.graph.hold(*vec_tuple(args, nargs))
            elif kind == K_PREPARED:
                mode.graph.hold(target, *target.args)
            elif keep:
                mode.graph.hold(*keep)
        me._event = ev
        me._start = start
        lm.tail = me
        for a in range(self._nacc):
            tracker.commit(self._acc[a].lo, self._acc[a].hi, self._acc[a].write, me, &self._acc[a].hint)
        if not capturing:
            lane.inflight.append(me)
        self.submissions += 1
        return me

    def _issue_call(self, long long token, str label, stream, run, tuple keep, bint kernel=False, timed=False):
        """Issue ``run(stream)`` over the access list built with :meth:`_access_of` (which gave ``token``) /
        :meth:`_note_buffer`; ``keep`` is what a graph capturing it must keep alive; ``timed`` as the
        caller's user gave it."""
        cdef bint is_timed = flag_arg(timed, "timed", f"Queue: {label}")
        self._check("submit")
        if token != self._begins or self._builder != PyThread_get_thread_ident():
            # Another submission began after this one's _access_of (on another thread, or from code run
            # meanwhile on this one: a finalizer, a signal handler; issued or not): it reset the access
            # list, and issuing now would order this work by the other's accesses (lost waits).
            raise StateError(f"Queue: {label}: another submission was made to this Queue (from another thread, or "
                             "from code run meanwhile) while this one was being built; a Queue takes one "
                             "submission at a time: give each thread a Queue of its own")
        self._building += 1
        try:
            return self._issue(K_OTHER_KERNEL if kernel else K_OTHER, label, stream, run, NULL, 0, None, None, None,
                               keep, is_timed)
        finally:
            self._building -= 1

    cdef Submission _submit_kernel(self, int kind, object fn, str name, PyObject** args, Py_ssize_t nargs,
                                   str verb, object reads, object writes, object stream, object target, object grid,
                                   object block, dict kw, bint timed):
        """A kernel submission (Queue.launch, Queue.submit): its access list from the arguments ``args[0:nargs]``
        and ``reads`` / ``writes``, then issued; marked as being built throughout (see _begin)."""
        self._begin()
        self._building += 1
        try:
            self._args_access(fn, args, nargs, verb, name)
            if reads is not None or writes is not None:
                self._explicit_c(reads, writes, f"Queue.{verb} of kernel '{name}'")
            return self._issue(kind, name, stream, target, args if kind == K_LAUNCH else NULL,
                               nargs if kind == K_LAUNCH else 0, grid, block, kw, None, timed)
        finally:
            self._building -= 1

    def _note_write(self, Submission sub, sp):
        """Record that ``sub`` wrote ``sp`` = ``(lo, hi)`` (an allocation made by it)."""
        if sp is not None:
            self._mode.tracker.commit(<uint64_t>sp[0], <uint64_t>sp[1], True, sub, NULL)

    # -- submitting kernels ----------------------------------------------------------------------
    @cython.embedsignature.format("clinic")     # a method descriptor: inspect.signature reads its text signature
    def launch(self, fn, grid, block, *args, reads=None, writes=None, stream=None, timed=False, **launch_kw):
        """Launch ``fn`` (as :meth:`Function.launch`, which takes ``launch_kw``: ``shared_mem_bytes``,
        ``cooperative``, ``cluster``, ...) on a stream of the pool, after the work it depends on; returns
        its :class:`Submission`.

        ``reads`` / ``writes``: Buffers, views or CAI objects (or one of them) that the kernel reads /
        writes; they override what the parameter layout says about the same memory and add memory the
        arguments do not show. ``timed=True`` records a timing event before and after it
        (:meth:`Submission.elapsed_ms`). Raises TypeError without ``fn``, ``grid`` and ``block``,
        and what :meth:`Function.launch` raises; a CudaError of an earlier kernel's fault names the
        earliest unfinished kernel."""
        cdef bint is_timed
        cdef str name
        is_timed = flag_arg(timed, "timed", "Queue.launch")
        self._check("launch")
        if type(fn) is Function:
            name = (<Function>fn).name
        else:
            if isinstance(fn, PreparedLaunch):
                raise ArgumentTypeError("Queue.launch takes a Function and its arguments; submit a "
                                        "PreparedLaunch with Queue.submit(p)")
            if not callable(getattr(fn, "launch", None)) or not isinstance(getattr(fn, "name", None), str):
                raise ArgumentTypeError(f"Queue.launch takes a Function (module.function(name)) and its "
                                        f"arguments, got {type(fn).__name__} {fn!r:.40}")
            name = fn.name
        return self._submit_kernel(K_LAUNCH, fn, name, _list_items(args), len(args), "launch", reads, writes,
                                   stream, fn, grid, block, launch_kw or None, is_timed)

    def submit(self, prepared, *, reads=None, writes=None, stream=None, timed=False):
        """Launch a :class:`PreparedLaunch` (with its bound arguments) on a
        stream of the pool (``PreparedLaunch.launch_on``); reads, writes and
        ``timed`` as :meth:`launch`."""
        cdef PreparedLaunch p
        cdef bint is_timed = flag_arg(timed, "timed", "Queue.submit")
        self._check("submit")
        if not isinstance(prepared, PreparedLaunch):
            raise ArgumentTypeError(f"Queue.submit takes a PreparedLaunch (fn.bind(...)), got "
                                    f"{type(prepared).__name__}; launch a Function with Queue.launch")
        p = <PreparedLaunch>prepared
        if p.fn is None:
            raise ArgumentTypeError("Queue.submit: the PreparedLaunch is not initialised: make one with "
                                    "Function.bind(...)")
        if p._held is None:
            raise ArgumentTypeError(f"Queue.submit: kernel '{p.fn.name}' has no arguments bound yet; call p(*args) "
                                    "or bind them with fn.bind(grid, block, *args)")
        held = p._held            # held here: a rebind during the accesses (a CAI property) replaces p._held
        return self._submit_kernel(K_PREPARED, p.fn, p.fn.name, _list_items(held), len(held), "submit", reads, writes,
                                   stream, prepared, None, None, None, is_timed)

    # -- sync points ----------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for every submission (``cuStreamSynchronize`` of each stream
        used) and forget what they touched.

        Raises CudaError for a fault in the queue's work, naming the earliest
        unfinished kernel; CaptureError during ``capture()``."""
        cdef _Lane lane
        if self._closed or not self._ready:     # closed, or never initialised
            return
        if self._mode.capturing:
            raise CaptureError("Queue.synchronize() during Queue.capture(): end the `with` block first")
        for lane in self._lanes:
            if in_flight(lane):
                try:
                    # A stream given with stream= and closed since: its queued work still runs to the
                    # end (Stream.close), waited for through the lane's last event.
                    if stream_closed(lane.stream):
                        (<Submission>lane.inflight[len(lane.inflight) - 1])._event.synchronize()
                    else:
                        lane.stream.synchronize()
                except CudaError as err:
                    raise self._async_error(err, "Queue.synchronize()") from err
        for lane in self._lanes:
            if in_flight(lane):         # all of it is done: retire up to the last (events recycled)
                retire_to(lane, <Submission>lane.inflight[-1], self._events)
            lane.eager.reset()
        self._eager.tracker.reset()

    def _lanes_kept(self):
        """How many streams the queue keeps a lane for: the pool's and those given with stream= kept."""
        return len(self._lanes)

    def _pending(self):
        """The submissions not seen complete, in issue order."""
        return pending_of(self._lanes)

    def _async_error(self, err, where, current=None):
        """A CudaError like ``err`` naming the kernel that most likely faulted (pycudadrv._lanes.fault_error);
        ``current`` is a submission being issued."""
        pending = self._pending()
        if current is not None:
            pending.append(current)
        return fault_error(pending, err, where)

    # -- graph capture (driven by pycudadrv.queue's capture object) ------------------------------
    def _capture_begin(self, graph, fork):
        cdef _Lane lane
        self._check("capture")
        if self._mode.capturing:
            raise CaptureError("Queue.capture(): this queue is already capturing")
        cdef QueueMode c = self._capture
        c.tracker.reset()
        for lane in self._lanes:
            lane.capture.reset()
        origin = <_Lane>self._lanes[0]
        origin.capture.joined = True
        c.joined = [origin]
        c.graph = graph
        c.fork = fork
        self._mode = c

    def _capture_joined(self):
        """The streams other than the origin that joined the capture."""
        return [(<_Lane>lane).stream for lane in self._capture.joined[1:]]

    def _capture_end(self):
        cdef _Lane lane
        cdef QueueMode c = self._capture
        for lane in c.joined:
            lane.capture.reset()
        c.joined = []
        c.graph = None
        c.fork = None
        c.tracker.reset()
        self._mode = self._eager

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy the pool's streams (``cuStreamDestroy``; queued work still
        completes, and frees of memory it used still wait for it). A second
        close is a no-op. Raises StateError during ``capture()``."""
        cdef _Lane lane
        cdef int k
        if self._closed or not self._ready:     # closed, or never initialised
            return
        if self._mode.capturing:
            raise StateError("Queue.close() during Queue.capture(): end the `with` block first")
        self._closed = True
        for k in range(self._pool):
            (<_Lane>self._lanes[k]).stream.close()
        self._let_go()
        self._events = _EventPool()
        self._eager.tracker = _Tracker()

    def stats(self) -> dict:
        """``{"submissions", "waits", "in_flight": [per pool stream], "tracked_ranges"}``:
        submissions made, event waits inserted, submissions not yet seen
        complete per stream, byte ranges being tracked."""
        if not self._ready:
            raise not_made("Queue", "stats", "Queue(device, streams=4)")
        return {"submissions": self.submissions, "waits": self.waits,
                "in_flight": [in_flight(<_Lane>self._lanes[k]) for k in range(self._pool)],
                "tracked_ranges": len(self._mode.tracker.segs)}

    def _tracker_dump(self):
        return self._mode.tracker._dump()

    def __repr__(self):
        cdef _Lane lane
        if not self._ready:
            return "<Queue not initialised (made by Queue.__new__)>"
        if self._closed:
            return "<Queue closed>"
        busy = sum(in_flight(lane) for lane in self._lanes)
        cap = ", capturing" if self._mode.capturing else ""
        policy = "round_robin" if self._round_robin else "greedy"
        return (f"<Queue on device {self._device.ordinal}, {self._pool} streams, policy={policy!r}, "
                f"{busy} submission(s) in flight{cap}>")


