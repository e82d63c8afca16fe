# cython: language_level=3
"""What ran where, for :class:`pycudadrv.Queue` (the queue itself is
pycudadrv._queue; which bytes each submission touched, pycudadrv._tracker):
the :class:`Submission` handle, the lanes (a stream the queue issues on, with
its work in flight and, per mode, eager or capture, what it already waited
for), the event pool, the allocation streams outside the pool, the completion
check (which submissions are seen done, and when to ask next), the fault
report naming the kernel that most likely faulted, and the event and stream
calls all of these make, in C for pycudadrv's own Streams and Events and
through their Python methods for anything else (the CPU tests' pretend GPU)."""
cimport cython
from libc.stdint cimport uint64_t
from libc.stdlib cimport realloc, free
from libc.string cimport memset
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check
from pycudadrv._stream cimport Stream, captures_active, order_after
from pycudadrv._event cimport Event, query_now
from pycudadrv._launch cimport Function
from cpython.ref cimport PyObject

from pycudadrv._errors import ArgumentTypeError, CaptureError, CudaError, StateError
from pycudadrv._uninit import missing

__all__ = ["Submission"]


def not_made(what, name, how):
    """The StateError of an object made by ``what.__new__`` without its constructor."""
    return StateError(f"{what}: this {what} was made by {what}.__new__ without __init__, so it holds nothing "
                      f"(.{name} was asked for); make one with {how}")


# -- the Submission handle ----------------------------------------------------------------------

# Not tracked by the garbage collector (one object less to link per submission): the queue's lanes hold
# Submissions and Submissions the lanes, a cycle QueueCore breaks when it goes (its __dealloc__ and close).
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.no_gc
@cython.freelist(64)        # one made per submission: reused memory instead of an allocation each
@cython.auto_pickle(False)
cdef class Submission:
    """One piece of work submitted to a :class:`Queue`: a kernel launch, a
    copy, a fill, a dispatch, a graph launch or a cuDNN plan execution, with
    the event recorded after it on its stream.

    ``await sub`` (in an asyncio task) resumes once the GPU has finished it
    (see :mod:`pycudadrv.aio`); :meth:`query` asks without blocking and
    :meth:`synchronize` blocks. ``label`` names it in error messages; ``seq``
    is its place in the queue's issue order; ``done`` is True once it was
    seen complete."""

    def _uninit(self, name):
        if self._lanes is None:
            raise not_made("Submission", name, "Queue.launch(...) and the other Queue methods")

    @property
    def label(self) -> str:
        """What it is, as error messages name it: ``"kernel 'name'"``, ``"copy of 4096 bytes"``, ..."""
        self._uninit("label")
        if self._kind == K_LAUNCH:
            return f"kernel '{self._name}'"
        if self._kind == K_PREPARED:
            return f"kernel '{self._name}' (prepared)"
        return self._name

    @property
    def is_kernel(self) -> bool:
        """Whether it runs kernels (a launch, a dispatch, a graph launch, a cuDNN plan), not a copy, fill,
        read or allocation."""
        self._uninit("is_kernel")
        return self._kernel

    @property
    def stream(self):
        """The Stream it was issued on."""
        self._uninit("stream")
        return self.lane.stream

    @property
    def event(self):
        """The Event (``timing=False``) recorded after it on its stream; from
        now on the queue never reuses it for another submission.

        Raises StateError for work captured into a graph (its event belongs to
        the graph), or once the queue dropped the event after completion
        without anyone having asked for it."""
        self._uninit("event")
        if self._captured:
            raise StateError(f"{self.label} was captured into a graph, not run: it has no event to wait for; "
                             "launch the graph and wait for its stream")
        if self._event is None:
            raise StateError(f"{self.label} has completed and its event was reused; test sub.done instead")
        self._exposed = True
        return self._event

    @property
    def timed(self) -> bool:
        """Whether it was submitted with ``timed=True`` (its GPU time is readable with :meth:`elapsed_ms`)."""
        self._uninit("timed")
        return self._start is not None

    def elapsed_ms(self) -> float:
        """Its GPU time in milliseconds, between the two timing events recorded
        around it on its stream (``cuEventElapsedTime``; blocks until it is
        done; resolution about 0.5 us). Raises StateError unless it was
        submitted with ``timed=True``; CudaError for a fault, as
        :meth:`synchronize`."""
        self._uninit("elapsed_ms")
        if self._start is None:
            raise StateError(f"{self.label} was not submitted with timed=True: it has no timing events")
        self.synchronize()
        return self._start.elapsed_ms(self._start, self._event)

    def query(self) -> bool:
        """True once the GPU has finished it; never blocks (``cuEventQuery``).
        Raises CudaError (naming the earliest unfinished kernel) for a fault of
        the queue's work."""
        self._uninit("query")
        if self.done:
            return True
        if self._captured:
            raise StateError(f"{self.label} was captured into a graph; it is never run by itself")
        try:
            if self._event.query():
                self.done = True
        except CudaError as err:
            raise fault_error(pending_of(self._lanes), err, f"querying {self.label}") from err
        return self.done

    def synchronize(self) -> None:
        """Block until the GPU has finished it (``cuEventSynchronize``).
        Raises CudaError for a fault, naming the earliest unfinished kernel."""
        self._uninit("synchronize")
        if self.done:
            return
        if self._captured:
            raise StateError(f"{self.label} was captured into a graph; it is never run by itself")
        try:
            self._event.synchronize()
        except CudaError as err:
            raise fault_error(pending_of(self._lanes), err, f"waiting for {self.label}") from err
        self.done = True

    def __await__(self):
        self._uninit("__await__")
        from pycudadrv import aio
        return aio.wait(self).__await__()

    def __getattr__(self, name):
        if self._lanes is None and not name.startswith("__"):
            raise not_made("Submission", name, "Queue.launch(...) and the other Queue methods")
        raise missing(self, name, "seq", "Queue.launch(...)")

    def __repr__(self):
        if self._lanes is None:
            return "<Submission not initialised (made by Submission.__new__)>"
        state = "captured" if self._captured else ("done" if self.done else "pending")
        return f"<Submission #{self.seq} {self.label} on stream {self.lane.index}, {state}>"


# -- lanes ----------------------------------------------------------------------------------------

@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.auto_pickle(False)
cdef class LaneMode:
    """A lane's ordering state in one mode of its queue (internal)."""

    def __dealloc__(self):
        free(self.seen)

    cdef int reset(self) except -1:
        self.tail = None
        self.load = 0
        self.joined = False
        if self.nseen:
            memset(self.seen, 0, self.nseen * sizeof(long long))
        return 0


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.auto_pickle(False)
cdef class _Lane:
    """A stream the queue issues on (internal)."""

    def __repr__(self):
        return f"<lane {self.index} {self.stream!r}>"


cdef _Lane new_lane(int index, object stream, bint owned):
    cdef _Lane lane = _Lane.__new__(_Lane)
    lane.index = index
    lane.stream = stream
    lane.owned = owned
    lane.inflight = []
    lane.kw = {"stream": stream}
    lane.eager = LaneMode.__new__(LaneMode)
    lane.capture = LaneMode.__new__(LaneMode)
    return lane


cdef int add_dep(DepList* deps, long long gen, Submission d) except -1:
    """Note that the submission being collected (number ``gen``) depends on ``d``: the latest of each
    lane counts, and each lane with one is listed once in ``deps`` (borrowed: the queue holds its lanes)."""
    cdef _Lane lane = d.lane
    cdef void** p
    if lane.dep_gen != gen:
        lane.dep_gen = gen
        lane.dep = d
        if deps.n == deps.cap:
            p = <void**>realloc(deps.lanes, max(8, 2 * deps.cap) * sizeof(void*))
            if p == NULL:
                raise MemoryError("Queue dependency list")
            deps.lanes = p
            deps.cap = max(8, 2 * deps.cap)
        deps.lanes[deps.n] = <void*>lane
        deps.n += 1
    elif lane.dep.seq < d.seq:
        lane.dep = d
    return 0


cdef list pending_of(list lanes):
    cdef _Lane lane
    out = []
    for lane in lanes:
        out.extend(lane.inflight[lane.head:])
    out.sort(key=lambda s: s.seq)
    return out


cdef extern from "Python.h":
    int _list_cut "PyList_SetSlice"(object lst, Py_ssize_t lo, Py_ssize_t hi, PyObject* items) except -1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int retire_to(_Lane lane, Submission sub, _EventPool events) except -1:
    cdef list dq = lane.inflight
    cdef Py_ssize_t h = lane.head
    cdef Submission d
    while h < len(dq):              # h in [0, len(dq)): the checks off are safe
        d = <Submission>dq[h]
        if d.seq > sub.seq:
            break
        dq[h] = None
        h += 1
        d.done = True
        if not d._exposed and d._start is None:
            pool_push(events, d._event)
            d._event = None
    if h == len(dq):
        if h:
            _list_cut(dq, 0, h, NULL)     # del dq[:], without a slice object
        h = 0
    elif h > 64 and 2 * h > len(dq):
        _list_cut(dq, 0, h, NULL)         # del dq[:h]
        h = 0
    lane.head = h
    return 0


cdef inline int _probe(list lanes, _Lane lane, Py_ssize_t k) except -2:
    """Whether the submission at ``lane.inflight[k]`` completed (1) or not (0) (``cuEventQuery``); -1
    while a capture on this thread forbids the query. A fault raises CudaError naming its kernel."""
    try:
        return 1 if event_done((<Submission>lane.inflight[k])._event) else 0
    except CaptureError:
        return -1
    except CudaError as err:
        raise fault_error(pending_of(lanes), err, "checking which submissions completed") from err


cdef Py_ssize_t retire_fronts(list lanes, _EventPool events, bint tail_first=True) except -1:
    """Mark the submissions the GPU has finished, recycling their events into ``events``; returns how
    many. A lane's submissions complete in issue order: with ``tail_first`` (the GPU seen keeping up)
    its tail is asked first (done: all of it, one query), then its front; else its front first (not
    done: the GPU is still behind, one query), then its tail; then halves between. One query per
    stream in either regime: a query that finds its event done is the expensive one (1.36 us on the
    H200, about 0.3 us for one still pending: tools/probe_event_costs.py). Nothing while a capture
    forbids queries; a fault raises CudaError naming the kernel that most likely caused it."""
    cdef _Lane lane
    cdef Py_ssize_t h, n, lo, hi, mid, retired = 0
    cdef int r
    cdef bint activated = False
    for lane in lanes:
        h = lane.head
        n = len(lane.inflight)
        if h == n:
            continue
        if not activated and type((<Submission>lane.inflight[h])._event) is Event:
            (<Event>(<Submission>lane.inflight[h])._event).device.activate()
            activated = True
        hi = n - 1
        if tail_first:
            r = _probe(lanes, lane, hi)         # the GPU keeping up: all of it done, one query
            if r < 0:
                return retired
            if r:
                lo = hi
            else:
                if hi == h:
                    continue
                r = _probe(lanes, lane, h)
                if r < 0:
                    return retired
                if not r:
                    continue                    # the GPU is behind: nothing of this stream done
                lo = h
        else:
            r = _probe(lanes, lane, h)          # the GPU behind: nothing done, one query
            if r < 0:
                return retired
            if not r:
                continue
            lo = h
            if hi > h:
                r = _probe(lanes, lane, hi)
                if r < 0:
                    return retired
                if r:
                    lo = hi
        while hi - lo > 1:                      # lo done, hi not
            mid = (lo + hi) >> 1
            r = _probe(lanes, lane, mid)
            if r < 0:
                break
            if r:
                lo = mid
            else:
                hi = mid
        retired += lo - h + 1
        retire_to(lane, <Submission>lane.inflight[lo], events)
    return retired


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.auto_pickle(False)
cdef class _EventPool:
    """A queue's recycled events (internal)."""

    def __cinit__(self):
        self.items = []


cdef int pool_push(_EventPool p, object ev) except -1:
    if p.n < len(p.items):
        p.items[p.n] = ev
    else:
        p.items.append(ev)
    p.n += 1
    return 0


cdef object pool_pop(_EventPool p):
    if p.n == 0:
        return None
    p.n -= 1
    ev = p.items[p.n]
    p.items[p.n] = None
    return ev


# -- allocation streams outside the pool ------------------------------------------------------

@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.auto_pickle(False)
cdef class _AllocStream:
    """An allocation stream outside a queue's pool (internal)."""

    def __dealloc__(self):
        free(self.upto)


cdef bint alloc_ordered(_AllocStream r, int lane):
    if r.unknown:
        return False
    return r.want <= r.idle_upto or (lane < r.nupto and r.want <= r.upto[lane])


cdef int set_alloc_ordered(_AllocStream r, int lane) except -1:
    cdef Py_ssize_t want
    cdef unsigned long long* p
    if lane >= r.nupto:
        want = max(lane + 1, 2 * r.nupto, 8)
        p = <unsigned long long*>realloc(r.upto, want * sizeof(unsigned long long))
        if p == NULL:
            raise MemoryError("Queue allocation-stream table")
        memset(p + r.nupto, 0, (want - r.nupto) * sizeof(unsigned long long))
        r.upto = p
        r.nupto = want
    if r.want > r.upto[lane]:
        r.upto[lane] = r.want
    return 0


cdef int set_seen(LaneMode lm, int producer, long long seq) except -1:
    cdef Py_ssize_t want
    cdef long long* p
    if producer >= lm.nseen:
        want = max(producer + 1, 2 * lm.nseen, 8)
        p = <long long*>realloc(lm.seen, want * sizeof(long long))
        if p == NULL:
            raise MemoryError("Queue ordering table")
        memset(p + lm.nseen, 0, (want - lm.nseen) * sizeof(long long))
        lm.seen = p
        lm.nseen = want
    lm.seen[producer] = seq
    return 0


# -- the driver calls, C for pycudadrv's own objects --------------------------------------------

cdef int wait_event(object s, object ev) except -1:
    """``s`` waits for ``ev`` (``cuStreamWaitEvent``)."""
    cdef Stream cs
    cdef Event ce
    if type(s) is Stream and type(ev) is Event:
        cs = <Stream>s
        ce = <Event>ev
        if cs._closed or ce._closed or not ce._recorded:
            s.wait(ev)          # raises what Stream.wait raises
            return 0
        cs.device.activate()
        check(driver().p_cuStreamWaitEvent(cs._handle, ce._handle, 0), "cuStreamWaitEvent")
        return 0
    s.wait(ev)
    return 0


cdef int record_event(object ev, object s, object launched=None) except -1:
    """``cuEventRecord`` of ``ev`` on ``s``; ``launched``: a Function just launched (its launch made its device
    current: the same device as the event's needs no second check)."""
    if type(ev) is Event and type(s) is Stream:
        (<Event>ev)._record_on(<Stream>s, type(launched) is not Function
                               or (<Function>launched).device._context != (<Event>ev).device._context)
    else:
        ev.record(s)
    return 0


cdef bint event_done(object ev) except -1:
    """``cuEventQuery``: True once complete; raises CaptureError where a capture forbids the query."""
    cdef CUresult r
    cdef int k = query_now(ev, False, &r)
    if k >= 0:
        return k
    check(r, "cuEventQuery")          # (a failed query; else not asked here: ev.query() says why)
    return bool(ev.query())


cdef bint stream_idle(object st) except -1:
    """``cuStreamQuery``: True when everything queued on ``st`` is done."""
    cdef Stream cs
    cdef CUresult r
    if type(st) is Stream and not captures_active():
        cs = <Stream>st
        cs.device.activate()
        r = driver().p_cuStreamQuery(cs._handle)
        if r == CUDA_ERROR_NOT_READY:
            return False
        check(r, "cuStreamQuery")
        return True
    return bool(st.query())


cdef int wait_stream(object s, object st) except -1:
    if type(s) is Stream and type(st) is Stream:
        order_after(<Stream>s, <Stream>st)
    else:
        s.wait_stream(st)
    return 0


cdef bint stream_closed(object st) except -1:
    if type(st) is Stream:
        return (<Stream>st)._closed
    return bool(st.closed)


cdef int retire_every(list lanes, _EventPool events, RetireClock* clock) except -1:
    """The periodic completion check of a Queue: retire what completed on every stream with work in flight
    (:func:`retire_fronts`), then set ``clock.every``, the submissions until the next check. The base is
    RETIRE_EVERY per stream asked (``clock.base``), counting at most the pool's streams: one query per 16
    submissions whatever the size of the pool, while work on streams given with ``stream=`` (lanes beyond
    the pool, one per stream) is still seen complete, and every stream's count of work in flight is as
    fresh as every other's (the least loaded choice compares them).

    A check that found some work done and some still running sets the base. One that found all of it done
    (the GPU keeping up) doubles the interval, up to 4 times the base: the next would find it all done
    again, and each query that finds its event done costs 1.36 us on the H200 (2.9 us on a slower host of
    the same card: one query per 16 submissions was 3.5% of hand-placed events there,
    tools/probe_queue_events.py). One that found nothing done (the GPU far behind) doubles it too, up to
    16 times the base. One with nothing in flight (right after a synchronize) asks nothing and changes
    nothing."""
    cdef _Lane lane
    cdef int asked = 0, base, every = clock.every
    for lane in lanes:
        if in_flight(lane):
            asked += 1
    if asked == 0:          # nothing in flight (right after a synchronize): nothing learnt, nothing changes
        return 0
    clock.found = retire_fronts(lanes, events, clock.found) > 0     # the last check found work done: tail first
    if clock.found:
        base = RETIRE_EVERY * max(min(asked, clock.pool), 1)
        clock.base = base
        for lane in lanes:
            if in_flight(lane):
                clock.every = base          # some still running: the base again
                return 0
        clock.every = max(base, min(2 * every, 4 * base))
        return 0
    if every < 16 * clock.base:     # nothing retired: the streams asked still have work
        clock.every = 2 * every
    return 0


cdef int let_go(list lanes) except -1:
    """Drop the lanes' references to Submissions: Submissions (not tracked by the garbage collector) reference
    the lanes, so a queue breaks that cycle itself when it closes or goes."""
    cdef _Lane lane
    for lane in lanes:
        del lane.inflight[:]
        lane.head = 0
        lane.eager.tail = lane.capture.tail = lane.dep = None
    return 0


def fault_error(list pending, err, str where):
    """A CudaError like ``err`` (an asynchronous fault found while ``where``) whose message names the
    kernel that most likely caused it: the earliest kernel submission of ``pending`` (the submissions
    not seen complete, in issue order; a fault is a kernel's, and belongs to one still unfinished),
    then the others in flight. Uploads, fills, copies and reads before it are listed as such, never
    named as the culprit."""
    cdef Submission first, k
    kernels = [s for s in pending if (<Submission>s)._kernel]
    if pending:
        first = pending[0]
        if kernels and kernels[0] is not first:
            k = kernels[0]
            before = [s for s in pending if s.seq < k.seq]
            ctx = (f"asynchronous error found while {where}: the earliest kernel not seen complete is {k.label} "
                   f"(#{k.seq}, stream {k.lane.index} of the queue); before it, not seen complete (not kernels): "
                   + ", ".join(f"{s.label} (#{s.seq})" for s in before[:5]) + (", ..." if len(before) > 5 else ""))
            rest = [s for s in pending if s.seq > k.seq]
        else:
            ctx = (f"asynchronous error found while {where}: the earliest submission not seen complete is "
                   f"{first.label} (#{first.seq}, stream {first.lane.index} of the queue)")
            rest = pending[1:]
        if rest:
            more = ", ".join(f"{s.label} (#{s.seq})" for s in rest[:5])
            ctx += f"; also unfinished: {more}{', ...' if len(rest) > 5 else ''}"
    else:
        ctx = f"asynchronous error found while {where} (every queue submission had completed)"
    if err.context:
        ctx += "\n" + err.context
    return CudaError(err.code, err.name, err.description, err.call, ctx)
