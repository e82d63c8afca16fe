"""A queue that orders its own streams (the zyx scheduler): kernels, copies,
fills and dispatches submitted to it are spread over a pool of streams, and
the event waits between them are placed from what each one reads and writes.

>>> q = Queue(streams=4)
>>> q.launch(fn_a, grid, block, y, x)      # y = f(x)   (float* y, const float* x)
>>> q.launch(fn_b, grid, block, u, y)      # waits for a: it reads y
>>> q.launch(fn_c, grid, block, v, y)      # beside b: both only read y
>>> q.launch(fn_d, grid, block, w, u, v)   # waits for b and c
>>> out = q.read(w)                        # drains what w needs, raises any GPU fault

Read after write, write after read and write after write on overlapping bytes
(a view counts as the bytes it views) each become one ``cuStreamWaitEvent``;
see docs/queue.md for the rules, the stream choice and graph capture.
"""
from __future__ import annotations

import sys
from itertools import count

import numpy as np

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, CaptureError, ClosedError, CudaError, StateError
from pycudadrv._launch import PreparedLaunch
from pycudadrv._memory import Buffer, _byte_arg, _host_array
from pycudadrv._ranges import RangeTracker, _Lane, _Mode, span as _span
from pycudadrv._signature import POINTER
from pycudadrv.dispatch import Dispatch
from pycudadrv._event import Event
from pycudadrv._stream import Stream
from pycudadrv._uninit import initialised, missing

__all__ = ["Queue", "Submission"]

_POLICIES = ("greedy", "round_robin")
_WHOLE = (0, 1 << 64)            # the whole (unified) address space: a barrier
# Sticky errors of a kernel that already ran: the next driver call reports them, whatever it is.
ASYNC_ERROR_CODES = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})
_SCALARS = (int, float, bool, complex, np.generic, bytes, bytearray, memoryview, type(None), str)


class Submission:
    """One piece of work submitted to a :class:`Queue`: a kernel launch, a
    copy, a fill, a dispatch or a graph launch, with the event recorded after
    it on its stream.

    ``await sub`` (in an asyncio task) resumes once the GPU has finished it
    (see :mod:`pycudadrv.aio`); :meth:`query` asks without blocking and
    :meth:`synchronize` blocks. ``label`` names it in error messages."""

    __slots__ = ("seq", "label", "lane", "done", "_event", "_exposed", "_captured", "_queue")

    def __init__(self, queue, seq, label, lane, event, captured):
        self._queue = queue
        self.seq = seq
        self.label = label
        self.lane = lane
        self._event = event
        self.done = False
        self._exposed = False
        self._captured = captured

    @property
    def stream(self) -> Stream:
        """The Stream it was issued on."""
        return self.lane.stream

    @property
    def event(self) -> Event:
        """The Event (``timing=False``) recorded after it on its stream; from
        now on the queue never reuses it for another submission.

        Raises StateError for work captured into a graph (its event belongs to
        the graph), or once the queue dropped the event after completion
        without anyone having asked for it."""
        if self._captured:
            raise StateError(f"{self.label} was captured into a graph, not run: it has no event to wait for; "
                             "launch the graph and wait for its stream")
        if self._event is None:
            raise StateError(f"{self.label} has completed and its event was reused; test sub.done instead")
        self._exposed = True
        return self._event

    def query(self) -> bool:
        """True once the GPU has finished it; never blocks (``cuEventQuery``).
        Raises CudaError (naming the earliest unfinished submission) for a
        fault of the queue's work."""
        if self.done:
            return True
        if self._captured:
            raise StateError(f"{self.label} was captured into a graph; it is never run by itself")
        try:
            if self._event.query():
                self.done = True
        except CudaError as err:
            raise self._queue._async_error(err, f"querying {self.label}") from err
        return self.done

    def synchronize(self) -> None:
        """Block until the GPU has finished it (``cuEventSynchronize``).
        Raises CudaError for a fault, naming the earliest unfinished submission."""
        if self.done:
            return
        if self._captured:
            raise StateError(f"{self.label} was captured into a graph; it is never run by itself")
        try:
            self._event.synchronize()
        except CudaError as err:
            raise self._queue._async_error(err, f"waiting for {self.label}") from err
        self.done = True

    def __await__(self):
        from pycudadrv import aio
        return aio.wait(self).__await__()

    def __getattr__(self, name):
        raise missing(self, name, "seq", "Queue.launch(...) and the other Queue methods")

    def __repr__(self):
        if not initialised(self, "seq"):
            return "<Submission not initialised (made by Submission.__new__)>"
        state = "captured" if self._captured else ("done" if self.done else "pending")
        return f"<Submission #{self.seq} {self.label} on stream {self.lane.index}, {state}>"


class Queue:
    """A pool of owned streams that orders the work submitted to it.

    Parameters
    ----------
    device : Device or int, optional
        The current device by default.
    streams : int
        Streams in the pool (``cuStreamCreate``, non-blocking), at least 1.
    policy : {"greedy", "round_robin"}
        How a submission's stream is chosen (see the module docs).

    Every submitting method returns a :class:`Submission` and accepts
    ``stream=`` (a pool stream or any other Stream) to place the work
    itself. Raises ArgumentTypeError / ArgumentValueError for a bad
    ``streams`` or ``policy``.
    """

    def __init__(self, device=None, streams: int = 4, policy: str = "greedy"):
        if isinstance(streams, bool) or not isinstance(streams, (int, np.integer)):
            raise ArgumentTypeError(f"Queue: streams must be an int, got {streams!r}")
        if not 1 <= streams <= 1024:
            raise ArgumentValueError(f"Queue: streams must be in [1, 1024], got {streams}")
        if policy not in _POLICIES:
            raise ArgumentValueError(f"Queue: policy must be one of {_POLICIES}, got {policy!r}")
        pool = [Stream(device) for _ in range(int(streams))]
        self.device = pool[0].device
        self.policy = policy
        self._lanes = [_Lane(k, s, True) for k, s in enumerate(pool)]
        self._pool = len(pool)
        self._foreign: dict = {}  # stream handle -> _Lane
        self._events: list = []   # recycled Events (timing=False)
        self._seq = count(1)
        self._rr = 0
        self._eager = _Mode()
        self._mode = self._eager
        self._layouts: dict = {}  # Function -> (layout source, access per parameter)
        self._pool_ids = {id(s) for s in pool}
        self._closed = False
        self.submissions = 0
        self.waits = 0

    # -- stream choice ------------------------------------------------------------------------
    @property
    def streams(self) -> tuple:
        """The pool's Streams."""
        return tuple(lane.stream for lane in self._lanes[:self._pool])

    def _lane_of(self, stream):
        if not isinstance(stream, Stream):
            raise ArgumentTypeError(f"stream= must be a pycudadrv Stream, got {type(stream).__name__}")
        for lane in self._lanes[:self._pool]:
            if lane.stream is stream:
                return lane
        lane = self._foreign.get(stream.handle)
        if lane is None or lane.stream is not stream:
            if stream.closed:
                raise ClosedError(f"stream= {stream!r} is closed")
            lane = _Lane(len(self._lanes), stream, False)
            self._lanes.append(lane)
            self._foreign[stream.handle] = lane
        return lane

    def _retire(self):
        """Mark the submissions the GPU has finished (``cuEventQuery``, front of each stream)."""
        pool = self._events
        for lane in self._lanes:
            dq = lane.inflight
            while dq:
                sub = dq[0]
                try:
                    if not sub._event.query():
                        break
                except CaptureError:      # another capture on this thread forbids queries: try later
                    return
                except CudaError as err:
                    raise self._async_error(err, "checking which submissions completed") from err
                dq.popleft()
                sub.done = True
                if not sub._exposed:
                    pool.append(sub._event)
                    sub._event = None

    def _choose(self, first_writer):
        mode = self._mode
        lanes = self._lanes
        if self.policy == "round_robin":
            k = self._rr
            self._rr = (k + 1) % self._pool
            return lanes[k]
        if first_writer is not None and first_writer.lane.owned and mode.tails.get(first_writer.lane) is first_writer:
            return first_writer.lane      # right behind its input: no wait, nothing unrelated in between
        if mode.graph is None:      # the first of the least loaded (in flight, not seen complete)
            return min(lanes[:self._pool], key=lambda lane: len(lane.inflight))
        return min(lanes[:self._pool], key=lambda lane: mode.loads.get(lane, 0))

    # -- the one submission path ----------------------------------------------------------------
    def _issue(self, label, access, stream, run, keep, fresh=()):
        """Order, issue and record one submission: ``access`` is a list of
        ``((lo, hi), is_write)``, ``run(stream)`` does the work, ``keep`` (a
        tuple) is what a graph capturing it must keep alive, ``fresh`` the
        allocation streams of Buffers the queue sees for the first time."""
        if self._closed:
            raise ClosedError("Queue is closed")
        mode = self._mode
        if mode.graph is None:
            self._retire()
        tracker = mode.tracker
        seq = next(self._seq)
        me = Submission(self, seq, label, None, None, mode.graph is not None)
        deps = {}
        first = None
        for (lo, hi), write in access:
            f = tracker.collect(lo, hi, write, me, deps)
            if first is None:
                first = f
        lane = self._lane_of(stream) if stream is not None else self._choose(first)
        s = lane.stream
        if mode.graph is not None and lane not in mode.joined:
            s.wait(mode.fork)                 # the stream joins the capture
            mode.joined.add(lane)
        if fresh and mode.graph is None:
            for st in fresh:      # memory made on a stream outside the pool: wait for it while it is busy
                if st is s or st.closed:
                    continue
                try:
                    if st.query():
                        continue
                except CaptureError:          # another capture on this thread forbids the query
                    pass
                s.wait_stream(st)
                self.waits += 1
        if deps:
            seen = mode.seen.get(lane)
            if seen is None:
                seen = mode.seen[lane] = {}
            for dl, dep in deps.items():
                if dl is lane or seen.get(dl, 0) >= dep.seq:
                    continue
                s.wait(dep._event)
                seen[dl] = dep.seq
                self.waits += 1
        me.lane = lane
        if mode.graph is None:
            ev = self._events.pop() if self._events else Event(timing=False, device=self.device)
        else:
            ev = Event(timing=False, device=self.device)    # a captured event is never queried or reused
        try:
            run(s)
            ev.record(s)
        except CudaError as err:
            if err.code in ASYNC_ERROR_CODES:
                raise self._async_error(err, f"issuing {label}", me) from err
            raise
        if mode.graph is not None:
            mode.loads[lane] = mode.loads.get(lane, 0) + 1
            if keep:
                mode.graph.hold(*keep)      # launches on joined streams are not seen by the capture itself
        me._event = ev
        mode.tails[lane] = me
        for (lo, hi), write in access:
            tracker.commit(lo, hi, write, me)
        if mode.graph is None:
            lane.inflight.append(me)
        self.submissions += 1
        return me

    # -- what a submission reads and writes ------------------------------------------------------
    def _param_access(self, fn):
        """Per parameter: True (written: ``T*``, or constness unknown), False (read: ``const T*``),
        None (not a pointer); None for the whole when the layout is unknown."""
        src = fn.layout_source
        hit = self._layouts.get(fn)
        if hit is not None and hit[0] == src:
            return hit[1]
        layout = fn.param_layout
        acc = None if layout is None else tuple(
            (p.const is not True) if p.kind == POINTER else None for p in layout)
        self._layouts[fn] = (src, acc)
        return acc

    def _sight(self, buf, fresh):
        """Note the allocation stream of a Buffer made outside the pool: its
        queued work (the allocation, an upload by from_numpy) must come first."""
        st = buf.stream
        if st is not None and id(st) not in self._pool_ids and st not in fresh:
            fresh.append(st)

    def _access(self, fn, args, reads, writes, name):
        """``(access list, fresh streams)`` of a launch of ``fn`` with ``args``."""
        acc = {}
        fresh = []
        per = self._param_access(fn)
        n = -1 if per is None else len(per)
        for k, a in enumerate(args):
            if type(a) is Buffer:
                m = a.nbytes
                if m == 0:
                    continue
                lo = a.ptr
                sp = (lo, lo + m)
                self._sight(a, fresh)
            elif isinstance(a, _SCALARS):
                continue
            else:
                try:
                    sp = _span(a, f"{name}, argument #{k}")
                except ArgumentTypeError:
                    if isinstance(getattr(a, "__cuda_array_interface__", None), dict):
                        raise     # a malformed array interface: the queue cannot tell which bytes it covers
                    continue      # not memory the queue can see; the launch itself judges the value
                if sp is None:
                    continue
            if n >= 0:
                if k >= n or per[k] is None:
                    continue
                w = per[k]
            else:
                w = True
            acc[sp] = acc.get(sp, False) or w
        self._explicit(acc, reads, writes, name, fresh)
        return list(acc.items()), fresh

    def _explicit(self, acc, reads, writes, name, fresh):
        for what, items, w in (("reads", reads, False), ("writes", writes, True)):
            if items is None:
                continue
            if isinstance(items, (Buffer, str, bytes)) or not hasattr(items, "__iter__"):
                items = (items,)
            for k, b in enumerate(items):
                sp = _span(b, f"{name}, {what}[{k}]")
                if sp is not None:
                    acc[sp] = w        # writes come second: named in both, it is a write
                    if isinstance(b, Buffer):
                        self._sight(b, fresh)

    def _buffers(self, name, *items):
        """``(access, fresh)`` for ``(buffer, is_write)`` items (Buffers only)."""
        acc, fresh = [], []
        for buf, w in items:
            if not isinstance(buf, Buffer):
                raise ArgumentTypeError(f"{name}: expected a pycudadrv Buffer, got {type(buf).__name__}")
            sp = _span(buf, name)
            if sp is not None:
                acc.append((sp, w))
            self._sight(buf, fresh)
        return acc, fresh

    # -- submitting -------------------------------------------------------------------------------
    def launch(self, fn, grid, block, *args, reads=None, writes=None, stream=None, **launch_kw) -> Submission:
        """Launch ``fn`` (as :meth:`Function.launch`, which takes ``launch_kw``:
        ``shared_mem_bytes``, ``cooperative``, ``cluster``, ...) on a stream of
        the pool, after the work it depends on.

        ``reads`` / ``writes``: Buffers, views or CAI objects (or one of them)
        that the kernel reads / writes; they override what the parameter
        layout says about the same memory and add memory the arguments do not
        show. Raises what :meth:`Function.launch` raises; a CudaError of an
        earlier kernel's fault names the earliest unfinished submission."""
        if isinstance(fn, PreparedLaunch):
            raise ArgumentTypeError("Queue.launch takes a Function and its arguments; submit a PreparedLaunch "
                                    "with Queue.submit(p)")
        if not callable(getattr(fn, "launch", None)) or not isinstance(getattr(fn, "name", None), str):
            raise ArgumentTypeError(f"Queue.launch takes a Function (module.function(name)) and its arguments, got "
                                    f"{type(fn).__name__} {fn!r:.40}")
        access, fresh = self._access(fn, args, reads, writes, f"Queue.launch of kernel '{fn.name}'")
        return self._issue(f"kernel '{fn.name}'", access, stream,
                           lambda s: fn.launch(grid, block, *args, stream=s, **launch_kw), args, fresh)

    def submit(self, prepared, *, reads=None, writes=None, stream=None) -> Submission:
        """Launch a :class:`PreparedLaunch` (with its bound arguments) on a
        stream of the pool (``PreparedLaunch.launch_on``); reads and writes as
        :meth:`launch`."""
        if not isinstance(prepared, PreparedLaunch):
            raise ArgumentTypeError(f"Queue.submit takes a PreparedLaunch (fn.bind(...)), got "
                                    f"{type(prepared).__name__}; launch a Function with Queue.launch")
        fn = prepared.function
        args = prepared.args
        if args is None:
            raise ArgumentTypeError(f"Queue.submit: kernel '{fn.name}' has no arguments bound yet; call p(*args) or "
                                    "bind them with fn.bind(grid, block, *args)")
        access, fresh = self._access(fn, args, reads, writes, f"Queue.submit of kernel '{fn.name}'")
        return self._issue(f"kernel '{fn.name}' (prepared)", access, stream, prepared.launch_on,
                           (prepared, *args), fresh)

    def copy(self, src, dst, nbytes=None, *, src_offset: int = 0, dst_offset: int = 0, stream=None) -> Submission:
        """Copy ``nbytes`` (default: the rest of ``src``) between Buffers
        (``cuMemcpyDtoDAsync``; peer copies across devices), or a host array
        into a Buffer (``cuMemcpyHtoDAsync``; the whole array). For device to
        host use :meth:`read`. Raises ArgumentValueError for a range outside
        either buffer (before any driver call), and as ``Buffer.copy_to`` /
        ``Buffer.write``."""
        # The checks of Buffer.copy_to / Buffer.write, here before the hazard ranges are computed from them.
        src_offset = _byte_arg(src_offset, "src_offset", "Queue.copy")
        dst_offset = _byte_arg(dst_offset, "dst_offset", "Queue.copy")
        if nbytes is not None:
            nbytes = _byte_arg(nbytes, "nbytes", "Queue.copy")
        if not isinstance(dst, Buffer):
            raise ArgumentTypeError(f"Queue.copy: dst must be a Buffer, got {type(dst).__name__} (device to host: "
                                    "Queue.read)")
        if not isinstance(src, Buffer):
            n = _host_array(src, False, "Queue.copy").nbytes
            if nbytes is not None and int(nbytes) != n:
                raise ArgumentValueError(f"Queue.copy: a host source is copied whole ({n} bytes), nbytes={nbytes} "
                                         "given")
            access, fresh = self._buffers("Queue.copy dst", (dst, True))
            if dst_offset < 0 or dst_offset + n > dst.nbytes:
                raise ArgumentValueError(f"Queue.copy: {n} bytes at offset {dst_offset} overrun the "
                                         f"{dst.nbytes}-byte destination")
            access = [((dst.ptr + dst_offset, dst.ptr + dst_offset + n), True)] if n else []
            return self._issue(f"upload of {n} bytes", access, stream,
                               lambda s: dst.write(src, dst_offset, stream=s), (src, dst), fresh)
        _, fresh = self._buffers("Queue.copy", (src, False), (dst, True))
        n = (src.nbytes - src_offset) if nbytes is None else int(nbytes)
        if min(src_offset, dst_offset, n) < 0 or src_offset + n > src.nbytes or dst_offset + n > dst.nbytes:
            raise ArgumentValueError(f"Queue.copy: {n} bytes from offset {src_offset} of a {src.nbytes}-byte source "
                                     f"to offset {dst_offset} of a {dst.nbytes}-byte destination fall outside a "
                                     "buffer")
        access = [((src.ptr + src_offset, src.ptr + src_offset + n), False),
                  ((dst.ptr + dst_offset, dst.ptr + dst_offset + n), True)] if n else []
        return self._issue(f"copy of {n} bytes", access, stream,
                           lambda s: src.copy_to(dst, n, src_offset, dst_offset, stream=s), (src, dst), fresh)

    def fill(self, buf, value, *, stream=None) -> Submission:
        """Set every element of ``buf`` to ``value`` (``Buffer.fill``:
        ``cuMemsetD8/16/32Async``)."""
        access, fresh = self._buffers("Queue.fill", (buf, True))
        return self._issue(f"fill of {buf.nbytes} bytes", access, stream, lambda s: buf.fill(value, stream=s),
                           (buf,), fresh)

    def empty(self, shape, dtype=None) -> Buffer:
        """``Buffer.empty`` allocated on a stream of the pool
        (``cuMemAllocAsync``), its allocation a submission that later work on
        the memory is ordered after; its free is ordered on that stream."""
        if self._mode.graph is not None:
            raise CaptureError("Queue.empty() during Queue.capture(): allocate before the capture (memory made "
                               "inside a capture exists only inside the graph)")
        box = []
        sub = self._issue("allocation", [], None, lambda s: box.append(Buffer.empty(shape, dtype, stream=s)), ())
        buf = box[0]
        sp = _span(buf, "Queue.empty")
        if sp is not None:
            self._mode.tracker.commit(sp[0], sp[1], True, sub)
        return buf

    def from_numpy(self, array) -> Buffer:
        """A Buffer holding a copy of ``array``, allocated (:meth:`empty`) and
        uploaded (:meth:`copy`) through the queue."""
        arr = np.ascontiguousarray(array)
        buf = self.empty(arr.shape, arr.dtype)
        self.copy(arr, buf)
        return buf

    def dispatch(self, dispatch, grid=None, *, threads=None, indirect=None, reads=None, writes=None) -> Submission:
        """Run a :class:`pycudadrv.Dispatch` (``grid=``, ``threads=`` or
        ``indirect=`` as :meth:`Dispatch.dispatch`). It runs on its encoder's
        stream (a Dispatch's prepared launches are bound to it), ordered
        against the pool by events. Storage bindings are read and written
        (read only where the kernel declares the parameter ``const``), uniform
        bindings and the indirect buffer are read. Raises ArgumentTypeError for
        anything but a Dispatch."""
        if not isinstance(dispatch, Dispatch):
            raise ArgumentTypeError(f"Queue.dispatch takes a pycudadrv Dispatch (Pass.dispatch(fn)), got "
                                    f"{type(dispatch).__name__}")
        fn = dispatch.function
        name = f"Queue.dispatch of '{fn.name}'"
        per = self._param_access(fn)
        acc: dict = {}
        fresh: list = []
        k = 0
        bindings = [dispatch._bindings[slot] for slot in sorted(dispatch._bindings)]
        for buf, kind in bindings:
            w = kind == "storage" and (per is None or k >= len(per) or per[k] is not False)
            sp = _span(buf, f"{name}, binding #{k}")
            if sp is not None:
                acc[sp] = acc.get(sp, False) or w
            self._sight(buf, fresh)
            k += 2 if kind == "storage" else 1
        if indirect is not None and isinstance(indirect, Buffer):
            sp = _span(indirect, f"{name}, indirect")
            if sp is not None:
                acc.setdefault(sp, False)
            self._sight(indirect, fresh)
        self._explicit(acc, reads, writes, name, fresh)
        keep = (dispatch, indirect, *(b for b, _ in bindings))
        return self._issue(f"dispatch of '{fn.name}'", list(acc.items()), dispatch._pass.encoder.stream,
                           lambda s: dispatch.dispatch(grid, threads=threads, indirect=indirect), keep, fresh)

    def launch_graph(self, graph, *, reads=None, writes=None, stream=None) -> Submission:
        """Replay a :class:`CapturedGraph` (``cuGraphLaunch``) on a stream of
        the pool. Without ``reads``/``writes`` it is a barrier: it waits for
        all earlier work and all later work waits for it. Raises
        ArgumentTypeError for an object without ``launch(stream)``."""
        if not callable(getattr(graph, "launch", None)):
            raise ArgumentTypeError(f"Queue.launch_graph takes a CapturedGraph, got {type(graph).__name__}")
        acc: dict = {}
        fresh: list = []
        if reads is None and writes is None:
            acc[_WHOLE] = True
        self._explicit(acc, reads, writes, "Queue.launch_graph", fresh)
        return self._issue("graph launch", list(acc.items()), stream, lambda s: graph.launch(s), (graph,), fresh)

    # -- sync points -----------------------------------------------------------------------------
    def read(self, buf, out=None):
        """Copy ``buf`` to the host once the work writing it is done, and wait
        (``cuMemcpyDtoHAsync`` + ``cuStreamSynchronize`` of that one stream);
        returns ``out`` or a new array of ``buf``'s dtype and shape.

        Raises CudaError for a fault in the queue's work, naming the earliest
        unfinished submission's kernel; CaptureError during ``capture()``."""
        if self._mode.graph is not None:
            raise CaptureError("Queue.read() during Queue.capture(): a read to the host synchronises; read after "
                               "the `with` block")
        access, fresh = self._buffers("Queue.read", (buf, False))
        box = []
        sub = self._issue(f"read of {buf.nbytes} bytes to the host", access, None,
                          lambda s: box.append(buf.to_numpy(out=out, stream=s)), (), fresh)
        self._retire()
        sub.done = True
        return box[0]

    def synchronize(self) -> None:
        """Wait for every submission (``cuStreamSynchronize`` of each stream
        used) and forget what they touched.

        Raises CudaError for a fault in the queue's work, naming the earliest
        unfinished submission's kernel; CaptureError during ``capture()``."""
        if self.__dict__.get("_closed", True):     # closed, or never initialised
            return
        if self._mode.graph is not None:
            raise CaptureError("Queue.synchronize() during Queue.capture(): end the `with` block first")
        for lane in self._lanes:
            if lane.inflight:
                try:
                    lane.stream.synchronize()
                except CudaError as err:
                    raise self._async_error(err, "Queue.synchronize()") from err
        for lane in self._lanes:
            for sub in lane.inflight:
                sub.done = True
                if not sub._exposed:
                    self._events.append(sub._event)
                    sub._event = None
            lane.inflight.clear()
        self._eager.tracker = RangeTracker()
        self._eager.seen = {}
        self._eager.tails = {}

    def _async_error(self, err, where, current=None):
        """A CudaError like ``err`` whose message names the earliest submission
        not seen complete (an asynchronous fault belongs to one of those;
        ``current`` is one being issued)."""
        pending = [sub for lane in self._lanes for sub in lane.inflight]
        if current is not None:
            pending.append(current)
        pending.sort(key=lambda s: s.seq)
        if pending:
            first = pending[0]
            ctx = (f"asynchronous error found while {where}: the earliest submission not seen complete is "
                   f"{first.label} (#{first.seq}, stream {first.lane.index} of the queue)")
            if len(pending) > 1:
                more = ", ".join(f"{s.label} (#{s.seq})" for s in pending[1:6])
                ctx += f"; also unfinished: {more}{', ...' if len(pending) > 6 else ''}"
        else:
            ctx = f"asynchronous error found while {where} (every queue submission had completed)"
        if err.context:
            ctx += "\n" + err.context
        return CudaError(err.code, err.name, err.description, err.call, ctx)

    # -- graph capture ---------------------------------------------------------------------------
    def capture(self, mode: str = "thread_local"):
        """``with q.capture() as graph:`` records the queue's submissions into
        one CUDA graph instead of running them: the capture begins on the
        first pool stream (``cuStreamBeginCapture``), every other stream joins
        it by waiting on an event recorded there, the queue's event waits
        become the graph's edges, and at the end every stream joins back
        before ``cuStreamEndCapture``. The graph keeps every argument alive.
        Inside, nothing runs: ``read()`` and ``synchronize()`` raise
        CaptureError; submissions cannot be awaited. Work submitted before the
        capture is not waited for by the graph: replay it with
        :meth:`launch_graph` (a barrier) or after ``synchronize()``."""
        return _QueueCapture(self, mode)

    # -- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy the pool's streams (``cuStreamDestroy``; queued work still
        completes, and frees of memory it used still wait for it). A second
        close is a no-op. Raises StateError during ``capture()``."""
        if self.__dict__.get("_closed", True):     # closed, or never initialised
            return
        if self._mode.graph is not None:
            raise StateError("Queue.close() during Queue.capture(): end the `with` block first")
        self._closed = True
        for lane in self._lanes[:self._pool]:
            lane.stream.close()
        for lane in self._lanes:
            lane.inflight.clear()
        self._events = []
        self._eager = self._mode = _Mode()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __getattr__(self, name):
        raise missing(self, name, "_closed", "Queue(device, streams=4)")

    def stats(self) -> dict:
        """``{"submissions", "waits", "in_flight": [per pool stream], "tracked_ranges"}``:
        submissions made, event waits inserted, submissions not yet seen
        complete per stream, byte ranges being tracked."""
        return {"submissions": self.submissions, "waits": self.waits,
                "in_flight": [len(lane.inflight) for lane in self._lanes[:self._pool]],
                "tracked_ranges": len(self._mode.tracker)}

    def __repr__(self):
        if not initialised(self, "_closed"):
            return "<Queue not initialised (made by Queue.__new__)>"
        if self._closed:
            return "<Queue closed>"
        busy = sum(len(lane.inflight) for lane in self._lanes)
        cap = ", capturing" if self._mode.graph is not None else ""
        return (f"<Queue on device {self.device.ordinal}, {self._pool} streams, policy={self.policy!r}, "
                f"{busy} submission(s) in flight{cap}>")


class _QueueCapture:
    """``with q.capture() as graph:`` (see :meth:`Queue.capture`)."""

    def __init__(self, queue, mode):
        self._q = queue
        self._mode = mode
        self._graph = None

    def __enter__(self):
        q = self._q
        if q._closed:
            raise ClosedError("Queue is closed")
        if q._mode.graph is not None:
            raise CaptureError("Queue.capture(): this queue is already capturing")
        origin = q._lanes[0]
        graph = origin.stream.capture(self._mode)
        graph.__enter__()
        try:
            fork = Event(timing=False, device=q.device).record(origin.stream)
        except BaseException:
            graph.__exit__(*sys.exc_info())
            raise
        m = _Mode(graph, fork)
        m.joined.add(origin)
        q._mode = m
        self._graph = graph
        return graph

    def __exit__(self, exc_type, exc, tb):
        q = self._q
        m = q._mode
        origin = q._lanes[0]
        try:
            for lane in m.joined:
                if lane is not origin:
                    try:
                        origin.stream.wait(Event(timing=False, device=q.device).record(lane.stream))
                    except Exception:
                        if exc_type is None:
                            raise
        finally:
            q._mode = q._eager
        return self._graph.__exit__(exc_type, exc, tb)
