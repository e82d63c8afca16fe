"""Labelled pass timing with CUDA events, cheap enough to leave on in a loop
(the khal Timestamps: passes, a request for their results, a non-blocking take)."""
from __future__ import annotations

from pycudadrv import nvtx
from pycudadrv._errors import NotReadyError, StateError
from pycudadrv._stream import Event, Stream

__all__ = ["Timestamps"]

# Pass objects cached per label (a loop reuses one); cleared beyond this many labels.
_PASS_CACHE_LIMIT = 256


class _Pass:
    """``with ts.measure(label):`` -- one event recorded on entry, one on exit.
    Holds no state of its own, so one object serves every (nested) use of its label."""

    __slots__ = ("_ts", "label")

    def __init__(self, ts, label):
        self._ts = ts
        self.label = label

    def __enter__(self):
        ts = self._ts
        pool = ts._pool
        ev = pool.pop() if pool else ts._new_event()
        ev.record(ts.stream)
        entry = [self.label, ev, None]
        ts._passes.append(entry)
        ts._open.append(entry)
        if nvtx.enabled and nvtx.push(self.label):
            ts._nvtx_open.append(entry)
        return ts

    def __exit__(self, *exc):
        ts = self._ts
        pool = ts._pool
        ev = pool.pop() if pool else ts._new_event()
        ev.record(ts.stream)
        entry = ts._open.pop()
        entry[2] = ev
        ts._last_end = ev
        if ts._nvtx_open and ts._nvtx_open[-1] is entry:
            ts._nvtx_open.pop()
            nvtx.pop()
        return False

    def __repr__(self):
        return f"<Timestamps pass {self.label!r}>"


class Timestamps:
    """Time labelled passes of GPU work on a stream.

    >>> ts = Timestamps(stream)
    >>> with ts.measure("advect"):        # also spelled ts.pass_("advect")
    ...     advect.launch()
    >>> ts.try_take()                      # None until the GPU has finished them
    [('advect', 0.012)]

    Each pass records a start and an end event (``cuEventRecord``) around
    whatever is launched on the stream inside the block; events come from a
    pool and ``measure(label)`` returns the same small pass object for the
    same label, so a steady loop creates nothing but one list per pass. Times
    are in milliseconds (``cuEventElapsedTime``, resolution about 0.5 us).

    Results, as in khal: :meth:`request_read` asks for the results of every
    pass closed so far; :meth:`try_take` returns them once the GPU has
    finished them (``None`` before), never blocking, and asks itself when
    nothing was asked for; :meth:`read` returns them too, waiting for the GPU
    by default and raising NotReadyError with ``blocking=False``. Passes
    closed after a request wait for the next one, so a loop that calls
    ``try_take()`` once a frame gets each frame's results as soon as they
    are ready, even while later frames keep the GPU busy. Passes may nest;
    a pass is reported in the first request after it closed. :attr:`is_idle`
    is True only once every result was taken.

    Parameters
    ----------
    stream : Stream, optional
        Defaults to the current device's default stream.
    """

    def __init__(self, stream: Stream | None = None):
        if stream is None:
            from pycudadrv._device import get_current_device

            stream = get_current_device().default_stream
        self.stream = stream
        self._passes: list[list] = []      # [label, start Event, end Event or None while open], not yet requested
        self._open: list[list] = []        # the open passes, innermost last
        self._nvtx_open: list[list] = []   # those of them that opened an NVTX range (pycudadrv.nvtx on)
        self._requested: list[list] = []   # closed passes whose results were asked for
        self._req_end: Event | None = None  # the last end event among them (one stream: it finishes last)
        self._last_end: Event | None = None
        self._pool: list[Event] = []
        self._labels: dict = {}

    def _new_event(self) -> Event:
        return Event(device=self.stream.device)

    def measure(self, label: str) -> _Pass:
        """A pass: ``with ts.measure(label):`` records a start event, runs the
        block, records an end event (also when the block raises). Nested
        passes are allowed; results come back in order of their start. With
        NVTX on (:mod:`pycudadrv.nvtx`) the pass is also an NVTX range named ``label``."""
        try:
            p = self._labels.get(label)
        except TypeError:           # an unhashable label: a pass of its own
            return _Pass(self, str(label))
        if p is None:
            if len(self._labels) >= _PASS_CACHE_LIMIT:
                self._labels.clear()
            p = self._labels[label] = _Pass(self, str(label))
        return p

    pass_ = measure

    def request_read(self) -> None:
        """Ask for the results of every pass closed so far (khal's
        ``request_read``); a later :meth:`try_take` or :meth:`read` returns
        them. Passes still open (an outer pass around this call) and passes
        closed later go to the next request. Never blocks."""
        passes = self._passes
        if not passes:
            return
        if not self._open:
            self._requested.extend(passes)
            self._passes = []
        else:
            keep: list[list] = []
            req = self._requested
            for e in passes:
                (req if e[2] is not None else keep).append(e)
            self._passes = keep
        if self._requested:
            self._req_end = self._last_end

    def _ready(self) -> bool:
        end = self._req_end
        return end is None or end.query()

    def _take(self) -> list:
        req, self._requested = self._requested, []
        self._req_end = None
        starts = [e[1] for e in req]
        ends = [e[2] for e in req]
        out = list(zip([e[0] for e in req], Event.elapsed_ms_pairs(starts, ends)))
        pool = self._pool
        pool.extend(starts)
        pool.extend(ends)
        return out

    def try_take(self):
        """The results asked for (see :meth:`request_read`; asked now when
        nothing was) as ``[(label, milliseconds), ...]`` in order of start,
        once the GPU has finished them (``cuEventQuery``), clearing them;
        ``None`` while they are still running or while the only passes are
        still open; ``[]`` when there is nothing at all. Never blocks."""
        if not self._requested:
            self.request_read()
            if not self._requested:
                return None if self._open else []
        if not self._ready():
            return None
        return self._take()

    def read(self, blocking: bool = True) -> list:
        """Ask for every closed pass and return ``[(label, milliseconds), ...]``
        (in order of start), clearing them.

        With ``blocking=True`` (default) waits for the GPU
        (``cuEventSynchronize``); with ``blocking=False`` raises NotReadyError
        while the GPU has not finished them (as khal's ``read``; the request
        stays, so a later ``try_take()`` or ``read()`` returns them).

        Raises StateError inside an open pass (its end is not recorded yet)."""
        if self._open:
            raise StateError(f"Timestamps.read() inside the open pass {self._open[-1][0]!r}: leave the `with "
                             "ts.measure(...)` block first (or use try_take(), which leaves open passes for "
                             "later)")
        self.request_read()
        if not self._requested:
            return []
        if blocking:
            if self._req_end is not None:
                self._req_end.synchronize()
        elif not self._ready():
            raise NotReadyError(f"Timestamps.read(blocking=False): {len(self._requested)} pass(es) still running "
                                "on the GPU; try_take() returns them once they are done, read() waits")
        return self._take()

    def wait_read(self) -> list:
        """``read(blocking=True)``: wait for every closed pass and return its results."""
        return self.read(blocking=True)

    @property
    def is_idle(self) -> bool:
        """True when no pass is open and every result was taken (or reset)."""
        return not self._open and not self._passes and not self._requested

    def reset(self) -> None:
        """Drop every recorded pass and request without reading them.
        Raises StateError inside an open pass."""
        if self._open:
            raise StateError(f"Timestamps.reset() inside the open pass {self._open[-1][0]!r}")
        pool = self._pool
        for _, start, end in self._requested + self._passes:
            pool.append(start)
            pool.append(end)
        self._passes = []
        self._requested = []
        self._req_end = None

    def __repr__(self):
        return (f"<Timestamps on {self.stream!r}, {len(self._open)} open, "
                f"{len(self._passes) - len(self._open)} closed, {len(self._requested)} requested>")
