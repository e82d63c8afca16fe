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

import numpy as np

from pycudadrv._device import device_arg
from pycudadrv._env import env_word, env_int
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, CaptureError, ClosedError, StateError
from pycudadrv._memory import Buffer, _byte_arg, _host_array
from pycudadrv._lanes import Submission
from pycudadrv._queue import ASYNC_ERROR_CODES, QueueCore
from pycudadrv._interop import span as _span
from pycudadrv.dispatch import Dispatch
from pycudadrv._event import Event
from pycudadrv._stream import Stream, synchronize_context
from pycudadrv._textargs import yes_no
from pycudadrv._uninit import missing

__all__ = ["Queue", "Submission", "set_queue_defaults", "get_queue_defaults", "reset_queue_defaults"]

_POLICIES = ("greedy", "round_robin")
_BUILT_IN = {"streams": 4, "policy": "greedy"}
_set: dict = {}          # what set_queue_defaults() chose (absent: the environment variable, else the built-in value)


def _check_streams(streams, where):
    if isinstance(streams, bool) or not isinstance(streams, (int, np.integer)):
        raise ArgumentTypeError(f"{where}: streams must be an int, got {streams!r}")
    if not 1 <= streams <= 1024:
        raise ArgumentValueError(f"{where}: streams must be in [1, 1024], got {streams}")
    return int(streams)


def _check_policy(policy, where):
    if not isinstance(policy, str) or policy not in _POLICIES:
        raise ArgumentValueError(f"{where}: policy must be one of {_POLICIES}, got {policy!r}")
    return policy


def set_queue_defaults(*, streams: int | None = None, policy: str | None = None) -> dict:
    """Set the process-wide defaults of :class:`Queue` (what ``Queue()`` uses
    where its own ``streams=`` / ``policy=`` is not given); None leaves a
    value as it is. They win over the environment variables
    ``PYCUDADRV_QUEUE_STREAMS`` / ``PYCUDADRV_QUEUE_POLICY``; queues made
    before keep what they have. Returns the defaults in effect before the call
    (as :func:`get_queue_defaults`).

    Raises ArgumentTypeError / ArgumentValueError for a ``streams`` that is
    not an int in [1, 1024] or a ``policy`` not in ("greedy", "round_robin");
    a refused call changes nothing."""
    new = {}
    if streams is not None:
        new["streams"] = _check_streams(streams, "pycudadrv.queue.set_queue_defaults")
    if policy is not None:
        new["policy"] = _check_policy(policy, "pycudadrv.queue.set_queue_defaults")
    before = get_queue_defaults()
    _set.update(new)
    return before


def reset_queue_defaults() -> None:
    """Forget what :func:`set_queue_defaults` chose: the environment variables, else
    the built-in values (4 streams, ``"greedy"``), apply again."""
    _set.clear()


def get_queue_defaults() -> dict:
    """``{"streams": int, "policy": str}``: what ``Queue()`` uses where not
    told: :func:`set_queue_defaults`'s choice, else ``PYCUDADRV_QUEUE_STREAMS`` /
    ``PYCUDADRV_QUEUE_POLICY`` (read now; a value that is not an integer in
    [1, 1024], or not a policy, warns once and is not used), else 4 and
    ``"greedy"``."""
    out = {"streams": _set.get("streams"), "policy": _set.get("policy")}
    if out["streams"] is None:
        out["streams"] = env_int("PYCUDADRV_QUEUE_STREAMS", _BUILT_IN["streams"], minimum=1, maximum=1024)
    if out["policy"] is None:
        out["policy"] = env_word("PYCUDADRV_QUEUE_POLICY", _POLICIES, _BUILT_IN["policy"])
    return out


# pycudadrv.queue.set_defaults & co.: the same functions under their module's short names.
set_defaults, get_defaults, reset_defaults = set_queue_defaults, get_queue_defaults, reset_queue_defaults


class Queue(QueueCore):
    """A pool of owned streams that orders the work submitted to it.

    Parameters
    ----------
    device : Device or int, optional
        The current device by default.
    streams : int, optional
        Streams in the pool (``cuStreamCreate``, non-blocking), 1 to 1024.
        Default: the process-wide default (:func:`set_queue_defaults`,
        ``PYCUDADRV_QUEUE_STREAMS``, else 4).
    policy : {"greedy", "round_robin"}, optional
        How a submission's stream is chosen (see the module docs). Default:
        :func:`set_queue_defaults`, ``PYCUDADRV_QUEUE_POLICY``, else ``"greedy"``.

    Every submitting method returns a :class:`Submission` and accepts
    ``stream=`` (a pool stream or any other Stream) to place the work
    itself. Raises ArgumentTypeError / ArgumentValueError for a bad
    ``streams`` or ``policy``.

    The hazard tracking, the stream choice and the issuing are
    pycudadrv._queue's (compiled); this class adds the submissions that are
    not kernel launches.
    """

    def __init__(self, device=None, streams: int | None = None, policy: str | None = None):
        if streams is None or policy is None:
            d = get_queue_defaults()
            streams = d["streams"] if streams is None else streams
            policy = d["policy"] if policy is None else policy
        streams = _check_streams(streams, "Queue")
        policy = _check_policy(policy, "Queue")
        if device is not None:
            device = device_arg(device, "Queue")
        pool = [Stream(device) for _ in range(streams)]
        self.device = pool[0].device
        self.policy = policy
        self._setup(self.device, pool, policy == "round_robin", Stream, Event, Buffer)

    def _buffers(self, name, *items) -> int:
        """Start a submission's access list with ``(buffer, is_write)`` items (Buffers only); returns
        the token for ``_issue_call``."""
        token = self._access_of([], [])
        for buf, w in items:
            self._note_buffer(buf, w, name)
        return token

    def copy(self, src, dst, nbytes=None, *, src_offset: int = 0, dst_offset: int = 0, stream=None,
             timed: bool = False) -> Submission:
        """Copy ``nbytes`` (default: the rest of ``src``) between Buffers
        (``cuMemcpyDtoDAsync``; peer copies across devices), or a host array
        into a Buffer (``cuMemcpyHtoDAsync``; the whole array). For device to
        host use :meth:`read`. ``timed=True`` records timing events around
        it: ``sub.elapsed_ms()`` is the copy's GPU time in milliseconds.
        Raises ArgumentValueError for a range outside either buffer (before
        any driver call), and as ``Buffer.copy_to`` / ``Buffer.write``."""
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
            if dst_offset < 0 or dst_offset + n > dst.nbytes:
                raise ArgumentValueError(f"Queue.copy: {n} bytes at offset {dst_offset} overrun the "
                                         f"{dst.nbytes}-byte destination")
            self._buffers("Queue.copy dst", (dst, True))
            ptr = dst.ptr
            token = self._access_of([((ptr + dst_offset, ptr + dst_offset + n), True)] if n else [], [dst])
            return self._issue_call(token, f"upload of {n} bytes", stream,
                                    lambda s: dst.write(src, dst_offset, stream=s), (src, dst), False, timed)
        self._buffers("Queue.copy", (src, False), (dst, True))
        n = (src.nbytes - src_offset) if nbytes is None else int(nbytes)
        if min(src_offset, dst_offset, n) < 0 or src_offset + n > src.nbytes or dst_offset + n > dst.nbytes:
            raise ArgumentValueError(f"Queue.copy: {n} bytes from offset {src_offset} of a {src.nbytes}-byte source "
                                     f"to offset {dst_offset} of a {dst.nbytes}-byte destination fall outside a "
                                     "buffer")
        access = [((src.ptr + src_offset, src.ptr + src_offset + n), False),
                  ((dst.ptr + dst_offset, dst.ptr + dst_offset + n), True)] if n else []
        token = self._access_of(access, [src, dst])
        return self._issue_call(token, f"copy of {n} bytes", stream,
                                lambda s: src.copy_to(dst, n, src_offset, dst_offset, stream=s), (src, dst), False,
                                timed)

    def fill(self, buf, value, *, stream=None, timed: bool = False) -> Submission:
        """Set every element of ``buf`` to ``value`` (``Buffer.fill``:
        ``cuMemsetD8/16/32Async``); ``timed=True`` as :meth:`copy`."""
        token = self._buffers("Queue.fill", (buf, True))
        return self._issue_call(token, f"fill of {buf.nbytes} bytes", stream, lambda s: buf.fill(value, stream=s),
                                (buf,), False, timed)

    def empty(self, shape, dtype=None) -> Buffer:
        """``Buffer.empty`` allocated on a stream of the pool
        (``cuMemAllocAsync``), its allocation a submission that later work on
        the memory is ordered after; its free is ordered on that stream."""
        if self._capturing:
            raise CaptureError("Queue.empty() during Queue.capture(): allocate before the capture (memory made "
                               "inside a capture exists only inside the graph)")
        box = []
        token = self._access_of([], [])
        sub = self._issue_call(token, "allocation", None, lambda s: box.append(Buffer.empty(shape, dtype, stream=s)),
                               ())
        buf = box[0]
        self._note_write(sub, _span(buf, "Queue.empty"))
        return buf

    def from_numpy(self, array) -> Buffer:
        """A Buffer holding a copy of ``array``, allocated (:meth:`empty`) and
        uploaded (:meth:`copy`) through the queue."""
        arr = np.ascontiguousarray(array)
        buf = self.empty(arr.shape, arr.dtype)
        self.copy(arr, buf)
        return buf

    def dispatch(self, dispatch, grid=None, *, threads=None, indirect=None, reads=None, writes=None,
                 timed: bool = False) -> Submission:
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
        per = self._param_modes(fn)
        access = []
        fresh = []
        k = 0
        bindings = [dispatch._bindings[slot] for slot in sorted(dispatch._bindings)]
        for buf, kind in bindings:
            w = kind == "storage" and (per is None or k >= len(per) or per[k] != 1)
            sp = _span(buf, f"{name}, binding #{k}")
            if sp is not None:
                access.append((sp, w))
            fresh.append(buf)
            k += 2 if kind == "storage" else 1
        if indirect is not None and isinstance(indirect, Buffer):
            sp = _span(indirect, f"{name}, indirect")
            if sp is not None:
                access.append((sp, False))
            fresh.append(indirect)
        token = self._access_of(access, fresh, reads, writes, name)
        keep = (dispatch, indirect, *(b for b, _ in bindings))
        return self._issue_call(token, f"dispatch of '{fn.name}'", dispatch._pass.encoder.stream,
                                lambda s: dispatch.dispatch(grid, threads=threads, indirect=indirect), keep, True,
                                timed)

    def launch_graph(self, graph, *, reads=None, writes=None, stream=None, timed: bool = False) -> Submission:
        """Replay a :class:`CapturedGraph` (``cuGraphLaunch``) on a stream of
        the pool. Without ``reads``/``writes`` it is a barrier: it waits for
        all earlier work and all later work waits for it. ``timed=True``
        records timing events around it (:meth:`Submission.elapsed_ms`).
        Raises ArgumentTypeError for an object without ``launch(stream)``."""
        if not callable(getattr(graph, "launch", None)):
            raise ArgumentTypeError(f"Queue.launch_graph takes a CapturedGraph, got {type(graph).__name__}")
        token = self._access_of([], [], reads, writes, "Queue.launch_graph")
        if reads is None and writes is None:
            self._note_whole()
        return self._issue_call(token, "graph launch", stream, lambda s: graph.launch(s), (graph,), True, timed)

    def matmul(self, plan, a, b, out, *, stream=None, timed: bool = False) -> Submission:
        """Execute a cuDNN :class:`pycudadrv.cudnn.MatmulPlan`, ``out = a @ b``
        (``cudnnBackendExecute``, as ``plan(a, b, out, stream=s)``), on a
        stream of the pool, ordered like a kernel: it reads ``a`` and ``b``
        and writes ``out`` and the plan's workspace (``plan.workspace``), so
        kernels and other plan executions that touch that memory wait for it
        and it waits for them. Operands as the plan takes them (Buffers,
        views, CAI arrays; shapes and dtypes the plan's). ``timed=True``
        first drains the device (``cuCtxSynchronize``, as zyx's timed plan
        runs do: no earlier work of any stream shares the GPU with it), then
        records timing events around it: ``sub.elapsed_ms()`` is the
        execution's GPU time in milliseconds.

        Raises ArgumentTypeError for anything but a MatmulPlan; CaptureError
        during :meth:`capture` (execute the plan on the capture's stream
        instead); what the plan raises for its operands."""
        if not isinstance(plan, _plan_type()):
            raise ArgumentTypeError(f"Queue.matmul takes a cuDNN MatmulPlan (pycudadrv.cudnn.matmul_plan(...)), got "
                                    f"{type(plan).__name__}")
        if self._capturing:
            raise CaptureError("Queue.matmul during Queue.capture(): a plan executed on a stream joined to the "
                               "capture would share the eager workspace; call plan(a, b, out, stream=...) on the "
                               "capturing stream inside `with stream.capture()` instead")
        if plan.closed:
            raise ClosedError(f"Queue.matmul: {plan!r} is closed")
        what = f"Queue.matmul of {plan!r}"
        access = []
        fresh = []
        for name, x, w in (("a", a, False), ("b", b, False), ("out", out, True), ("workspace", plan.workspace, True)):
            if x is None and name == "workspace":
                continue
            sp = _span(x, f"{what}, {name}")
            if sp is not None:
                access.append((sp, w))
            if isinstance(x, Buffer):
                fresh.append(x)
        token = self._access_of(access, fresh)
        if yes_no(timed, "timed", "Queue.matmul"):
            synchronize_context(self.device)    # the timing is the plan's alone, never contended by earlier work
        return self._issue_call(token, f"cuDNN matmul {plan.m}x{plan.n}x{plan.k} ({plan.dtype})", stream,
                                lambda s: plan(a, b, out, stream=s), (plan, a, b, out), True, timed)

    # -- sync points -----------------------------------------------------------------------------
    def read(self, buf, out=None):
        """Copy ``buf`` to the host once the work writing it is done, and wait
        (``cuMemcpyDtoHAsync`` + ``cuStreamSynchronize`` of that one stream);
        returns ``out`` or a new array of ``buf``'s dtype and shape.

        Raises CudaError for a fault in the queue's work, naming the earliest
        unfinished kernel; CaptureError during ``capture()``."""
        if self._capturing:
            raise CaptureError("Queue.read() during Queue.capture(): a read to the host synchronises; read after "
                               "the `with` block")
        token = self._buffers("Queue.read", (buf, False))
        box = []
        sub = self._issue_call(token, f"read of {buf.nbytes} bytes to the host", None,
                               lambda s: box.append(buf.to_numpy(out=out, stream=s)), ())
        self._retire_now()
        sub.done = True
        return box[0]

    # -- graph capture ---------------------------------------------------------------------------
    def capture(self, mode: str = "thread_local"):
        """``with q.capture() as graph:`` records the queue's submissions into
        one CUDA graph instead of running them: the capture begins on the
        first pool stream (``cuStreamBeginCapture``), every other stream joins
        it by waiting on an event recorded there, the queue's event waits
        become the graph's edges, and at the end every stream joins back
        before ``cuStreamEndCapture``. The graph keeps every argument alive.
        Inside, nothing runs: ``read()``, ``synchronize()`` and ``empty()``
        raise CaptureError; submissions cannot be awaited. Work submitted before the
        capture is not waited for by the graph: replay it with
        :meth:`launch_graph` (a barrier) or after ``synchronize()``."""
        return _QueueCapture(self, mode)

    # -- lifetime --------------------------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __getattr__(self, name):
        raise missing(self, name, "policy", "Queue(device, streams=4)")


def _plan_type():
    """pycudadrv's cuDNN MatmulPlan class (importing pycudadrv._cudnn loads no cuDNN library)."""
    from pycudadrv._cudnn import MatmulPlan
    return MatmulPlan


class _QueueCapture:
    """``with q.capture() as graph:`` (see :meth:`Queue.capture`)."""

    def __init__(self, queue, mode):
        self._q = queue
        self._mode = mode
        self._graph = None

    def __enter__(self):
        q = self._q
        if q._closed_now:
            if not hasattr(q, "policy"):
                q.stats()                  # raises the never-initialised error
            raise ClosedError("Queue is closed")
        if q._capturing:
            raise CaptureError("Queue.capture(): this queue is already capturing")
        origin = q.streams[0]
        graph = origin.capture(self._mode)
        graph.__enter__()
        try:
            fork = Event(timing=False, device=q.device).record(origin)
        except BaseException:
            graph.__exit__(*sys.exc_info())
            raise
        q._capture_begin(graph, fork)
        self._graph = graph
        return graph

    def __exit__(self, exc_type, exc, tb):
        q = self._q
        origin = q.streams[0]
        try:
            for s in q._capture_joined():
                try:
                    origin.wait(Event(timing=False, device=q.device).record(s))
                except Exception:
                    if exc_type is None:
                        raise
        finally:
            q._capture_end()
        return self._graph.__exit__(exc_type, exc, tb)
