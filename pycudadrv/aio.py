"""Awaitable GPU work for asyncio (the cuda-async model): a launch returns a
:class:`GpuFuture` that an ``await`` turns into "resume when the GPU is done".

>>> async def step(x, y):
...     await aio.launch(fn, grid, block, y, x, n)      # the stream comes from the device policy
...     await aio.wait(stream)                           # everything queued on `stream` so far
...     await q.launch(fn2, grid, block, y)              # a Queue submission
...     fut = aio.launch(fn, grid, block, y, x, n, lazy=True)   # nothing launched yet
...     await fut                                        # launched here; a launch error raises here

Nothing blocks a thread per pending future. Completion comes one of two ways (:func:`set_completion`; the
default from ``PYCUDADRV_AIO_COMPLETION``, else ``"loop"``):

* ``"loop"`` (default): the event loop's own thread asks the driver (``cuEventQuery``, in C:
  ``pycudadrv._channel.LoopPoller``) whether the awaited work has finished, once per loop iteration while
  any is pending, and resumes the awaiting tasks in that iteration: no thread wake-up on the path. The loop
  does not sleep meanwhile (one core busy, as a blocking ``synchronize()`` costs; other tasks and I/O run
  as usual); idle, it sleeps.
* ``"blocking"``: for a core saved while work is pending. One native waiter thread per device
  (``pycudadrv._waiter``, no GIL) takes the pending events in the order they were armed and sleeps in the
  driver until each is done (a ``CU_EVENT_BLOCKING_SYNC`` event recorded behind the work on a private
  stream), then writes an eventfd the loop watches (``loop.add_reader``): the GPU's interrupt and a thread
  wake-up come first, so it resumes later than ``"loop"``.

``bench/await_latency.py`` measures both modes (median and p99 of completion to resumption, CPU per await)
against a blocking ``synchronize()`` and C floors.

Lazy futures: ``launch(..., lazy=True)`` and ``submit(..., lazy=True)`` return a future whose work is
submitted at its first ``await`` (or :meth:`GpuFuture.submit`, or ``result()``), once; errors of the
launch or the policy then come back through the future, raised at every ``await``.

Errors: a fault raises CudaError (naming the awaited work) in the tasks awaiting it and nowhere else.
Cancelling an awaiting task never touches the GPU work: the future stays registered, keeping the launch's
arguments alive, until the GPU has finished. A loop closed with futures pending leaves them pending:
``result()`` and ``done()`` still work, and awaiting them in another loop arms them there.
Works under asyncio and anyio's asyncio backend; trio has no asyncio loop and is not supported.
"""
from __future__ import annotations

import itertools
import os
import weakref


from pycudadrv._device import Device, get_current_device
from pycudadrv._env import env_word
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, CaptureError, CudaError, StateError
from pycudadrv._event import Event
from pycudadrv._prepared import PreparedLaunch
from pycudadrv._stream import Stream
from pycudadrv._textargs import yes_no
from pycudadrv._uninit import initialised, missing
from pycudadrv import _waiter

__all__ = ["GpuFuture", "DevicePolicy", "wait", "launch", "submit", "policy", "set_policy", "set_completion",
           "get_completion"]

_PENDING, _DONE, _FAILED, _DEFERRED = 0, 1, 2, 3
_MODES = ("loop", "blocking")
_NO_REF = type(None)      # called, as a dead weakref is: None


_config = {"mode": env_word("PYCUDADRV_AIO_COMPLETION", _MODES, "loop")}
_events: dict = {}          # device ordinal -> [Event(timing=False)] ready for reuse
_policies: dict = {}        # device ordinal -> DevicePolicy
_completers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_last_completer = _NO_REF   # a weakref of the completer _completer() returned last


def set_completion(mode: str) -> dict:
    """Choose how awaited work reports completion: ``"loop"`` (default) or ``"blocking"`` (module docs),
    any case. Returns the previous settings (a dict; ``set_completion(**prev)`` restores them). Applies to
    futures armed from now on. Raises ArgumentValueError for another mode; a refused call changes nothing."""
    if not isinstance(mode, str) or mode.strip().lower() not in _MODES:
        raise ArgumentValueError(f"aio.set_completion: mode must be one of {_MODES} (any case), got {mode!r:.60}")
    prev = dict(_config)
    _config["mode"] = mode.strip().lower()
    return prev


def get_completion() -> dict[str, object]:
    """The current completion settings: ``{"mode": "loop" or "blocking"}``."""
    return dict(_config)


def _running_loop():
    """The running asyncio loop of this thread, or None (asyncio's C ``_get_running_loop``, bound once)."""
    global _running_loop
    from asyncio.events import _get_running_loop
    _running_loop = _get_running_loop     # (asyncio is imported at the first use, not at import)
    return _get_running_loop()


class GpuFuture:
    """GPU work that can be awaited: made by :func:`launch`, :func:`submit` and :func:`wait`.

    ``await fut`` resumes the task once the work has finished, or raises its CudaError. :meth:`done` asks
    without blocking, :meth:`result` blocks the thread (``cuEventSynchronize``). ``label`` names the work. A
    lazy future (``lazy=True``) submits its work at the first ``await``, :meth:`submit` or :meth:`result`;
    until then ``stream`` is None and :meth:`done` is False."""

    __slots__ = ("label", "stream", "_event", "_keep", "_state", "_error", "_waiters", "_armed", "_ordered",
                 "_exposed", "_key", "_thunk", "_waiting", "__weakref__")

    def __init__(self, label, stream, event, keep=None, *, ordered=False, exposed=True):
        self.label = label
        self.stream = stream
        self._event = event
        self._keep = keep
        self._state = _PENDING
        self._error = None
        self._waiters = []
        self._armed = None       # weakref of the loop whose completer watches it (a closed loop is freed)
        self._ordered = ordered  # recorded just now on `stream`: completes in order with that stream's others
        self._exposed = exposed  # the event belongs to someone else: never reuse it
        self._key = None         # its group in the completer
        self._thunk = None       # a lazy future's submission: () -> (stream, keep)
        self._waiting = 0        # waits of waiter threads still holding its event's handle

    @classmethod
    def _deferred(cls, label, thunk):
        gf = cls(label, None, None, None, ordered=True, exposed=False)
        gf._state, gf._thunk = _DEFERRED, thunk
        return gf

    def submit(self) -> "GpuFuture":
        """Submit a lazy future's work now (once; a no-op for any other future
        or a second call); returns self. An error of the launch or of the
        device policy is kept and raised by ``await`` / :meth:`result`."""
        if self._state != _DEFERRED:
            return self
        thunk, self._thunk = self._thunk, None
        self._state = _PENDING
        try:
            stream, keep = thunk()
            self.stream, self._keep = stream, keep      # (kept even if the record below fails)
            self._event = _recorded_event(self.label, stream)
        except Exception as err:     # launch, policy or record errors come back through the future
            self._error = err
            self._state = _FAILED
            return self
        loop = _running_loop()
        if loop is not None:
            _completer(loop).arm(self)
        return self

    @property
    def event(self) -> Event:
        """The Event recorded after the work (never reused once asked for); a
        lazy future is submitted first (its error raised here)."""
        if self._state == _DEFERRED:
            self.submit()
        if self._event is None and self._state == _FAILED:
            raise self._error
        self._exposed = True
        return self._event

    def _fail(self, err):
        if isinstance(err, CudaError):
            self._error = CudaError(err.code, err.name, err.description, err.call,
                                    f"asynchronous error of {self.label}" + (f" on {self.stream!r}" if self.stream
                                                                             is not None else "")
                                    + (f"\n{err.context}" if err.context else ""))
            self._error.__cause__ = err
        else:                       # e.g. the event was closed: the waiters get the error, the loop goes on
            self._error = err
        self._finish(_FAILED)

    def _check(self) -> bool:
        """Finish the future if its event completed (or failed); whether it is finished."""
        if self._state != _PENDING:
            return self._state != _DEFERRED
        try:
            if not self._event.query():
                return False
        except CaptureError:       # (not finished)
            return False
        except Exception as err:
            self._fail(err)
            return True
        self._finish(_DONE)
        return True

    def _waited(self, status, loop=None, out=None):
        """A waiter thread finished its wait for this future's event (the channel's reader, on
        ``loop``): CUresult ``status``; see ``_finish`` for ``out``."""
        self._waiting -= 1
        if self._state == _PENDING:
            if status == 0:
                self._finish(_DONE, loop, out)
                return
            err = _waiter.error(status, "cuEventSynchronize", f"waiting for {self.label}")
            try:
                self._event.query()      # a fault of the work is the query's error too (sticky)
            except CaptureError:
                pass
            except Exception as e:
                err = e
            self._fail(err)
        elif self._state == _DONE:
            self._recycle()

    def _recycle(self):
        if not self._exposed and not self._waiting and self._event is not None:
            _events.setdefault(self._event.device.ordinal, []).append(self._event)
            self._event = None

    def _finish(self, state, running=None, out=None):
        """``running``: the loop we are on, if known; ``out``: a list for its awaiting futures (the
        channel's reader resolves them and steps their tasks at once), else they are resolved here."""
        self._state = state
        waiters, self._waiters = self._waiters, []
        if waiters and running is None:
            running = _running_loop()
        for fut in waiters:
            if fut.done():
                continue
            loop = fut.get_loop()
            if loop is running:
                if out is None:
                    fut.set_result(None)
                else:
                    out.append(fut)
            else:
                loop.call_soon_threadsafe(_resolve, fut)
        self._keep = None
        if state == _DONE:
            self._recycle()

    def done(self) -> bool:
        """True once the work has finished or failed; never blocks (``cuEventQuery``).
        False for a lazy future not submitted yet."""
        return self._check()

    def result(self):
        """Block the thread until the work finishes (``cuEventSynchronize``;
        a lazy future is submitted first); raises its CudaError if it failed."""
        if self._state == _DEFERRED:
            self.submit()
        if self._state == _PENDING:
            try:
                self._event.synchronize()
            except CudaError:
                pass            # _check turns it into this future's error
            self._check()
        if self._state == _FAILED:
            raise self._error
        return None

    def exception(self):
        """The CudaError of failed work, None if it succeeded; blocks like :meth:`result`."""
        try:
            self.result()
        except CudaError as e:
            return e
        return None

    def __await__(self):
        if self._state == _DEFERRED:
            self.submit()
        if self._state == _PENDING and not self._check():
            loop = _running_loop()
            if loop is None:
                raise StateError("a GpuFuture is awaited from an asyncio event loop (anyio on the asyncio backend "
                                 "works; trio is not supported); from plain code call .result()")
            if self._armed is None or self._armed() is not loop:
                self._ordered = False        # armed late: other futures of its stream may be behind it
                _completer(loop).arm(self)
            if self._state == _PENDING:      # (arming can fail it: a closed event)
                fut = loop.create_future()
                self._waiters.append(fut)
                try:
                    yield from fut
                finally:                     # cancelled: a waiting future left here would keep its loop
                    if self._waiters:        # (resumed: _finish took the list; the fresh one is empty)
                        self._waiters = [w for w in self._waiters if w is not fut]
        if self._state == _FAILED:
            raise self._error
        return None

    def __new__(cls, *args, **kw):      # no __getattr__ here: it would slow every attribute read (CPython 3.11)
        return object.__new__(cls if args or kw else _Unmade)   # GpuFuture.__new__(GpuFuture): no __init__ follows

    def __repr__(self):
        if not initialised(self, "_state"):
            return "<GpuFuture not initialised (made by GpuFuture.__new__)>"
        state = ("pending", "done", "failed", "deferred (lazy, not submitted)")[self._state]
        return f"<GpuFuture {self.label}, {state}>"


class _Unmade(GpuFuture):
    __slots__ = ()

    def __getattr__(self, name):
        raise missing(self, name, "_state", "aio.launch(...), aio.submit(...) or aio.wait(...)")


_Unmade.__name__ = _Unmade.__qualname__ = "GpuFuture"
_sig = __import__("inspect").signature(GpuFuture.__init__)     # (the docs show __init__'s, not __new__'s)
GpuFuture.__signature__ = _sig.replace(parameters=list(_sig.parameters.values())[1:])  # type: ignore[attr-defined]


def _resolve(fut):
    if not fut.done():
        fut.set_result(None)


class _Completer:
    """The futures one event loop waits for, and how it learns they finished."""

    def __init__(self, loop):
        self._loop = weakref.ref(loop)   # the loop keeps its completer alive in _completers, not the reverse
        self.channel = None     # where the waiter thread hands over finished waits ("blocking")
        self.poller = _waiter.LoopPoller(loop, _PENDING, _DONE)   # the futures of "loop", in groups
        self.waits = {}         # token -> GpuFuture, while a waiter thread waits for it
        self.tokens = itertools.count(1)   # a token per armed wait

    @property
    def loop(self):
        return self._loop()

    def arm(self, gf):
        if _config["mode"] == "blocking":
            self._arm_waiter(gf)
            return
        gf._armed = self._loop
        key = gf._key = gf.stream.handle if (gf._ordered and gf.stream is not None) else id(gf)
        self.poller.add(gf, key)        # the poller schedules itself on the loop while any is pending

    def _arm_waiter(self, gf):
        """Queue gf's event with its device's waiter thread; the channel's reader resolves it."""
        ch = self._channel()
        token = next(self.tokens)
        try:
            _waiter_for(gf._event.device).submit(gf._event, ch, token)
        except Exception as err:     # a closed event, no thread could be started: the awaiting tasks get it
            gf._fail(err)
            return
        gf._armed = self._loop
        gf._waiting += 1
        self.waits[token] = gf

    def _channel(self):
        """This loop's completion channel, made (and watched with ``loop.add_reader``, once) on first use;
        its reader (``Channel.ready``, C) finishes the futures in ``waits``."""
        ch = self.channel
        if ch is None:
            ch = _waiter.Channel()
            ch.watch(self.loop, self.waits)
            self.channel = ch
        return ch

    def sweep(self, key=None) -> bool:
        """Finish what has completed (the poller's groups, each front first; only group ``key`` if given);
        whether anything finished."""
        return self.poller.sweep(key)


def _waiter_for(device):
    return _waiter.waiter_for(device)


def _forget_after_fork():
    """In a forked child the parent's loops and channels are never touched; a child's loop gets its own."""
    global _completers, _last_completer
    _completers, _last_completer = weakref.WeakKeyDictionary(), _NO_REF


os.register_at_fork(after_in_child=_forget_after_fork)


def _completer(loop) -> _Completer:
    global _last_completer
    c = _last_completer()               # the last loop's (held weakly: a closed loop's goes with it)
    if c is None or c._loop() is not loop:
        c = _completers.get(loop)
        c = c() if type(c) is weakref.ref else c
        if c is None:   # the loop owns it, held weakly here: awaits pending on a loop left unclosed are a cycle gc frees
            c = _completers[loop] = _Completer(loop)
            try:
                loop._pycudadrv_aio_completer, _completers[loop] = c, weakref.ref(c)
            except AttributeError:      # a loop that takes no attributes (uvloop's): held here, as before
                pass
        _last_completer = weakref.ref(c)
    return c


def _as_stream(stream, device) -> Stream:
    return stream if isinstance(stream, Stream) else Stream.from_handle(stream, device)


def _recorded_event(label, stream) -> Event:
    """A pooled event recorded now on ``stream``, after the work of ``label``."""
    device = stream.device
    pool = _events.get(device.ordinal)
    ev = pool.pop() if pool else Event(timing=False, device=device)
    try:
        ev.record(stream)
    except CudaError as err:    # a fault already: of this work or of earlier work on the device
        raise CudaError(err.code, err.name, err.description, err.call,
                        f"asynchronous error found right after queueing {label} on {stream!r} (by it or by "
                        "earlier work)" + (f"\n{err.context}" if err.context else "")) from err
    return ev


def _new_future(label, stream, keep, ordered=True):
    gf = GpuFuture(label, stream, _recorded_event(label, stream), keep, ordered=ordered, exposed=False)
    loop = _running_loop()
    if loop is not None:
        _completer(loop).arm(gf)
    return gf


def _future(label, thunk, lazy) -> GpuFuture:
    """Run ``thunk`` (-> stream, what to keep alive) now and return its future, or defer it (lazy)."""
    if lazy:
        return GpuFuture._deferred(label, thunk)
    stream, keep = thunk()
    return _new_future(label, stream, keep)


class DevicePolicy:
    """Picks the stream of each launch that does not name one: round robin
    over a pool of owned streams (cuda-async's default policy).

    Work given to different streams may run concurrently and in any order:
    launches that depend on each other are awaited in turn, given one
    ``stream=``, or submitted through a :class:`pycudadrv.Queue`.

    Raises ArgumentValueError for fewer than 1 stream."""

    def __init__(self, device=None, streams: int = 4):
        if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
            raise ArgumentValueError(f"DevicePolicy: streams must be an int >= 1, got {streams!r}")
        self._streams = [Stream(device) for _ in range(streams)]
        self.device = self._streams[0].device
        self._turn = 0

    @property
    def streams(self) -> tuple:
        """The pool's Streams."""
        return tuple(self._streams)

    def next_stream(self) -> Stream:
        """The stream for the next launch."""
        k = self._turn
        self._turn = (k + 1) % len(self._streams)
        return self._streams[k]

    def __getattr__(self, name):
        raise missing(self, name, "_streams", "DevicePolicy(device, streams=4)")

    def __repr__(self):
        if not initialised(self, "_streams"):
            return "<DevicePolicy not initialised (made by DevicePolicy.__new__)>"
        return f"<DevicePolicy round robin over {len(self._streams)} streams of device {self.device.ordinal}>"


def policy(device=None) -> DevicePolicy:
    """The device's policy (a round-robin :class:`DevicePolicy` over 4
    streams, made on first use, unless :func:`set_policy` gave another)."""
    dev = _device(device)
    p = _policies.get(dev.ordinal)
    if p is None:
        p = _policies[dev.ordinal] = DevicePolicy(dev)
    return p


def _device(device):
    return get_current_device() if device is None else (device if isinstance(device, Device) else Device(device))


def set_policy(new: object, device: "Device | int | None" = None) -> object:
    """Make ``new`` (anything with ``next_stream()``) the device's policy;
    returns the previous one. Raises ArgumentTypeError otherwise."""
    if not callable(getattr(new, "next_stream", None)):
        raise ArgumentTypeError(f"aio.set_policy: the policy needs a next_stream() method, got {type(new).__name__}")
    prev = policy(device)
    _policies[_device(device).ordinal] = new      # (a policy of set_policy need not have a .device)
    return prev


def launch(fn, grid, block, *args, stream=None, lazy=False, **launch_kw) -> GpuFuture:
    """Launch ``fn`` (as :meth:`Function.launch`, with ``launch_kw``) on
    ``stream`` or the device policy's next stream; returns a
    :class:`GpuFuture` that keeps ``args`` alive until the GPU is done.

    Eager (default): launched now; raises what :meth:`Function.launch`
    raises (and ArgumentTypeError for ``fn`` not a Function). ``lazy=True``:
    nothing happens until the future's first ``await`` (or ``.submit()``,
    ``.result()``), which picks the stream and launches, once; every error of
    that (a bad ``fn`` or argument, the policy's, the driver's) is raised by
    the ``await`` instead of this call. The future holds ``args`` from now.
    ``lazy`` that is not True or False is an ArgumentTypeError, raised here."""
    lazy = yes_no(lazy, "lazy", "aio.launch")

    def run():
        if not callable(getattr(fn, "launch", None)) or not isinstance(getattr(fn, "device", None), Device):
            raise ArgumentTypeError(f"aio.launch takes a Function (module.function(name)) and its arguments, got "
                                    f"{type(fn).__name__} {fn!r:.40}")
        s = policy(fn.device).next_stream() if stream is None else _as_stream(stream, fn.device)
        fn.launch(grid, block, *args, stream=s, **launch_kw)
        return s, args
    return _future(f"kernel '{getattr(fn, 'name', '?')}'", run, lazy)


def submit(prepared, *, stream=None, lazy=False) -> GpuFuture:
    """Launch a :class:`PreparedLaunch` on its bound stream or on ``stream``
    (``PreparedLaunch.launch_on``); returns a :class:`GpuFuture` that keeps it
    (and its arguments) alive until the GPU is done. ``lazy=True`` defers the
    launch to the first ``await`` as in :func:`launch` (errors raised there).

    Raises ArgumentTypeError for anything but a PreparedLaunch (a Function
    goes to :func:`launch` with its arguments, or is bound first:
    ``fn.bind(grid, block, *args)``), and what the launch raises."""
    lazy = yes_no(lazy, "lazy", "aio.submit")

    def run():
        if not isinstance(prepared, PreparedLaunch):
            hint = " (a Function: aio.launch(fn, grid, block, *args), or fn.bind(...) first)" \
                if callable(getattr(prepared, "bind", None)) else ""
            raise ArgumentTypeError(f"aio.submit takes a PreparedLaunch (fn.bind(grid, block, *args)), got "
                                    f"{type(prepared).__name__}{hint}")
        if stream is None:
            prepared.launch()
            return prepared.stream, prepared
        s = _as_stream(stream, prepared.function.device)
        prepared.launch_on(s)
        return s, prepared
    name = prepared.function.name if isinstance(prepared, PreparedLaunch) else "?"
    return _future(f"kernel '{name}' (prepared)", run, lazy)


def wait(what) -> GpuFuture:
    """An awaitable for ``what``: an :class:`Event` (once its recorded work is
    done), a :class:`Stream` (the work queued on it so far: an event is
    recorded now), a GpuFuture (returned as it is), or any piece of work with
    the awaitable-work protocol of a :class:`pycudadrv.Submission` of a
    Queue: ``label`` (str), ``stream`` (its Stream), ``done`` (True once known
    finished; a bool or a method) and ``event`` (the Event recorded after it;
    may raise StateError). The future keeps ``what`` alive until it is done.

    Raises ArgumentTypeError for anything else; StateError for an Event never
    recorded or a submission that was captured into a graph."""
    if isinstance(what, GpuFuture):
        return what
    if isinstance(what, Stream):
        return _new_future(f"work queued on {what!r}", what, None)
    if isinstance(what, Event):
        if not what.is_recorded:
            raise StateError("aio.wait(event): the event was never recorded; record it on a stream first")
        gf = GpuFuture("an event", None, what, None)
    else:
        if not (all(hasattr(what, a) for a in ("label", "stream", "done"))     # .event may raise: not asked
                and (hasattr(type(what), "event") or "event" in getattr(what, "__dict__", ()))):
            raise ArgumentTypeError(f"aio.wait: expected an Event, a Stream, a Queue Submission (anything with "
                                    f"label, stream, done and event) or a GpuFuture, got {type(what).__name__}")
        done = what.done
        if callable(done):
            done = done()
        if done:
            gf = GpuFuture(what.label, what.stream, None, what)
            gf._state = _DONE
            return gf
        gf = GpuFuture(what.label, what.stream, what.event, what)
    loop = _running_loop()
    if loop is not None:
        _completer(loop).arm(gf)
    return gf
