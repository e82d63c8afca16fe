# cython: language_level=3
"""The hazard bookkeeping of :class:`pycudadrv.Queue` (its core is
pycudadrv._queue): the :class:`Submission` handle, the lanes (a stream the
queue issues on, with its work in flight and what it already waited for), the
range tracker (per byte range of device memory: the last writer and, per
lane, the latest reader since; a sorted list of disjoint segments, the C twin
of pycudadrv._ranges.RangeTracker) and the driver calls a submission makes,
in C for pycudadrv's own Streams and Events and through their Python methods
for anything else (the CPU tests' pretend GPU)."""
cimport cython
from libc.stdint cimport uint64_t
from libc.stdlib cimport realloc, free
from libc.string cimport memset
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check
from pycudadrv._stream cimport Stream, captures_active, order_after
from pycudadrv._event cimport Event

from pycudadrv._errors import CaptureError, CudaError, StateError
from pycudadrv._uninit import missing

__all__ = ["Submission"]


def not_made(what, name, how):
    """The StateError of an object made by ``what.__new__`` without its constructor."""
    return StateError(f"{what}: this {what} was made by {what}.__new__ without __init__, so it holds nothing "
                      f"(.{name} was asked for); make one with {how}")


# -- the Submission handle ----------------------------------------------------------------------

# Not tracked by the garbage collector (one object less to link per submission): the queue's lanes hold
# Submissions and Submissions the lanes, a cycle QueueCore breaks when it goes (its __dealloc__ and close).
@cython.final
@cython.no_gc
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

@cython.final
@cython.auto_pickle(False)
cdef class _Lane:
    """A stream the queue issues on (internal)."""

    def __dealloc__(self):
        free(self.seen0)
        free(self.seen1)

    def __repr__(self):
        return f"<lane {self.index} {self.stream!r}>"


cdef _Lane new_lane(int index, object stream, bint owned):
    cdef _Lane lane = _Lane.__new__(_Lane)
    lane.index = index
    lane.stream = stream
    lane.owned = owned
    lane.inflight = []
    lane.kw = {"stream": stream}
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


cdef int retire_to(_Lane lane, Submission sub, list events) except -1:
    cdef list dq = lane.inflight
    cdef Py_ssize_t h = lane.head
    cdef Submission d
    while h < len(dq):
        d = <Submission>dq[h]
        if d.seq > sub.seq:
            break
        dq[h] = None
        h += 1
        d.done = True
        if not d._exposed and d._start is None:
            events.append(d._event)
            d._event = None
    if h == len(dq):
        if h:
            del dq[:]
        h = 0
    elif h > 64 and 2 * h > len(dq):
        del dq[:h]
        h = 0
    lane.head = h
    return 0


cdef int retire_fronts(list lanes, list events) except -1:
    """Mark the submissions the GPU has finished (``cuEventQuery``, front of each lane), recycling their
    events into ``events``. Nothing while a capture forbids queries; a fault raises CudaError naming the
    kernel that most likely caused it."""
    cdef _Lane lane
    cdef Submission sub
    cdef list dq
    cdef Py_ssize_t h
    cdef bint activated = False
    for lane in lanes:
        dq = lane.inflight
        h = lane.head
        while h < len(dq):
            sub = <Submission>dq[h]
            if not activated and type(sub._event) is Event:
                (<Event>sub._event).device.activate()
                activated = True
            try:
                if not event_done(sub._event):
                    break
            except CaptureError:      # another capture on this thread forbids queries: try later
                lane.head = h
                return 0
            except CudaError as err:
                lane.head = h
                raise fault_error(pending_of(lanes), err, "checking which submissions completed") from err
            h += 1
        if h > lane.head:
            retire_to(lane, <Submission>dq[h - 1], events)
    return 0


cdef Py_ssize_t in_flight(_Lane lane):
    return len(lane.inflight) - lane.head


cdef long long seen(_Lane lane, int m, int producer):
    if m == 0:
        return lane.seen0[producer] if producer < lane.nseen0 else 0
    return lane.seen1[producer] if producer < lane.nseen1 else 0


cdef int set_seen(_Lane lane, int m, int producer, long long seq) except -1:
    cdef long long** row = &lane.seen0 if m == 0 else &lane.seen1
    cdef Py_ssize_t* n = &lane.nseen0 if m == 0 else &lane.nseen1
    cdef Py_ssize_t want
    cdef long long* p
    if producer >= n[0]:
        want = max(producer + 1, 2 * n[0], 8)
        p = <long long*>realloc(row[0], want * sizeof(long long))
        if p == NULL:
            raise MemoryError("Queue ordering table")
        memset(p + n[0], 0, (want - n[0]) * sizeof(long long))
        row[0] = p
        n[0] = want
    row[0][producer] = seq
    return 0


cdef int forget_seen(_Lane lane, int m) except -1:
    if m == 0:
        if lane.nseen0:
            memset(lane.seen0, 0, lane.nseen0 * sizeof(long long))
    elif lane.nseen1:
        memset(lane.seen1, 0, lane.nseen1 * sizeof(long long))
    return 0


# -- the range tracker --------------------------------------------------------------------------

# Not tracked by the garbage collector: no cycle passes through a segment (Submissions do not reach the tracker).
@cython.final
@cython.no_gc
@cython.auto_pickle(False)
cdef class _Seg:
    pass


cdef inline _Seg _new_seg(uint64_t lo, uint64_t hi, Submission writer, Submission reader):
    cdef _Seg s = _Seg.__new__(_Seg)
    s.lo = lo
    s.hi = hi
    s.writer = writer
    s.r0 = reader
    return s


cdef inline _Seg _copy_seg(_Seg seg, uint64_t lo, uint64_t hi):
    cdef _Seg s = _new_seg(lo, hi, seg.writer, seg.r0)
    s.r1 = seg.r1
    if seg.rs is not None:
        s.rs = list(seg.rs)
    return s


cdef inline int _clear_readers(_Seg seg) except -1:
    seg.r0 = None
    seg.r1 = None
    seg.rs = None
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline Py_ssize_t _bisect(list segs, uint64_t x, bint at):
    """The number of segments that start before ``x`` (with ``at``: at or before it)."""
    cdef Py_ssize_t lo = 0, hi = len(segs), mid
    cdef uint64_t start
    while lo < hi:
        mid = (lo + hi) >> 1
        start = (<_Seg>segs[mid]).lo
        if start < x or (at and start == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int _add_reader(_Seg seg, Submission sub) except -1:
    """``sub`` reads the segment: it replaces the reader of its lane, or joins them."""
    cdef list rs
    cdef Py_ssize_t k
    cdef _Lane lane = sub.lane
    if seg.r0 is None or seg.r0.lane is lane:
        seg.r0 = sub
        return 0
    if seg.r1 is None or seg.r1.lane is lane:
        seg.r1 = sub
        return 0
    rs = seg.rs
    if rs is None:
        seg.rs = [sub]
        return 0
    for k in range(len(rs)):
        if (<Submission>rs[k]).lane is lane:
            rs[k] = sub
            return 0
    rs.append(sub)
    return 0


cdef inline int _reader_deps(Submission r, Submission me, DepList* deps, long long gen) except -1:
    if r is not None and not r.done and r is not me:
        add_dep(deps, gen, r)
    return 0


@cython.final
@cython.auto_pickle(False)
cdef class _Tracker:
    """Disjoint byte ranges ``[lo, hi)`` with the last writer and, per lane, the latest reader since
    (the C twin of pycudadrv._ranges.RangeTracker, its reference model)."""

    def __cinit__(self):
        self.segs = []
        self.limit = 1024

    def __len__(self):
        return len(self.segs)

    cdef Submission _deps_of(self, _Seg seg, bint write, Submission me, DepList* deps, long long gen):
        cdef Submission w = seg.writer
        cdef Submission found = None
        cdef object r
        if w is not None and not w.done and w is not me:
            add_dep(deps, gen, w)
            found = w
        if write:
            _reader_deps(seg.r0, me, deps, gen)
            _reader_deps(seg.r1, me, deps, gen)
            if seg.rs is not None:
                for r in seg.rs:
                    _reader_deps(<Submission>r, me, deps, gen)
        return found

    cdef Submission collect(self, uint64_t lo, uint64_t hi, bint write, Submission me, DepList* deps,
                            long long gen):
        """Hand :func:`add_dep` what an access of ``[lo, hi)`` must wait for; return the pending writer of
        its first overlapping segment that has one (or None). Changes nothing here."""
        cdef list segs = self.segs
        cdef Py_ssize_t i = _bisect(segs, lo, True) - 1, n = len(segs)
        cdef _Seg seg
        cdef Submission found = None, f
        if i >= 0:
            seg = <_Seg>segs[i]
            if seg.lo == lo and seg.hi == hi:
                return self._deps_of(seg, write, me, deps, gen)
        else:
            i = 0
        while i < n:
            seg = <_Seg>segs[i]
            if seg.lo >= hi:
                break
            if seg.hi > lo:
                f = self._deps_of(seg, write, me, deps, gen)
                if found is None:
                    found = f
            i += 1
        return found

    cdef int _split(self, uint64_t x) except -1:
        cdef list segs = self.segs
        cdef Py_ssize_t i = _bisect(segs, x, True) - 1
        cdef _Seg seg
        if i < 0:
            return 0
        seg = <_Seg>segs[i]
        if seg.lo == x or seg.hi <= x:
            return 0
        segs.insert(i + 1, _copy_seg(seg, x, seg.hi))
        seg.hi = x
        return 0

    cdef int commit(self, uint64_t lo, uint64_t hi, bint write, Submission sub) except -1:
        """Record that ``sub`` reads (or writes) ``[lo, hi)``."""
        cdef list segs = self.segs
        cdef Py_ssize_t n = len(segs), i = _bisect(segs, lo, True), j, k
        cdef _Seg seg
        cdef uint64_t pos
        cdef list new
        if i > 0:
            seg = <_Seg>segs[i - 1]
            if seg.lo == lo and seg.hi == hi:       # the same range again (a whole Buffer, mostly)
                if write:
                    seg.writer = sub
                    _clear_readers(seg)
                else:
                    _add_reader(seg, sub)
                return 0
        if (i == 0 or (<_Seg>segs[i - 1]).hi <= lo) and (i == n or (<_Seg>segs[i]).lo >= hi):
            # Overlaps nothing tracked: one new segment.
            segs.insert(i, _new_seg(lo, hi, sub, None) if write else _new_seg(lo, hi, None, sub))
        else:
            self._split(lo)
            self._split(hi)
            i = _bisect(segs, lo, False)
            j = _bisect(segs, hi, False)
            if write:
                segs[i:j] = [_new_seg(lo, hi, sub, None)]
            else:
                new = []
                pos = lo
                for k in range(i, j):
                    seg = <_Seg>segs[k]
                    if seg.lo > pos:
                        new.append(_new_seg(pos, seg.lo, None, sub))
                    _add_reader(seg, sub)
                    new.append(seg)
                    pos = seg.hi
                if pos < hi:
                    new.append(_new_seg(pos, hi, None, sub))
                segs[i:j] = new
        if len(segs) > self.limit:
            self.prune()
        return 0

    cdef int prune(self) except -1:
        """Drop what only finished submissions touched."""
        cdef list keep = []
        cdef _Seg seg
        cdef list live
        for seg in self.segs:
            if seg.r0 is not None:
                live = [r for r in [seg.r0, seg.r1, *(seg.rs or ())] if r is not None and not (<Submission>r).done]
                _clear_readers(seg)
                if live:
                    seg.r0 = live[0]
                    if len(live) > 1:
                        seg.r1 = live[1]
                    if len(live) > 2:
                        seg.rs = live[2:]
            if (seg.writer is None or seg.writer.done) and seg.r0 is None:
                continue
            keep.append(seg)
        self.segs = keep
        self.limit = max(1024, 2 * len(keep))
        return 0

    def _dump(self):
        """``[(lo, hi, writer seq or None, sorted reader seqs)]`` (tests compare it with the reference model)."""
        cdef _Seg seg
        return [(seg.lo, seg.hi, None if seg.writer is None else seg.writer.seq,
                 sorted(r.seq for r in [seg.r0, seg.r1, *(seg.rs or ())] if r is not None)) for seg in self.segs]


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


cdef int record_event(object ev, object s) except -1:
    if type(ev) is Event and type(s) is Stream:
        (<Event>ev)._record_on(<Stream>s)
    else:
        ev.record(s)
    return 0


cdef bint event_done(object ev) except -1:
    """``cuEventQuery``: True once complete; raises CaptureError where a capture forbids the query."""
    cdef Event ce
    cdef CUresult r
    if type(ev) is Event and not captures_active():
        ce = <Event>ev
        if not ce._closed and ce._recorded:
            r = driver().p_cuEventQuery(ce._handle)
            if r == CUDA_ERROR_NOT_READY:
                return False
            check(r, "cuEventQuery")
            return True
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
