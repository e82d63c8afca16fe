"""Labelled pass timing with CUDA events, cheap enough to leave on in a loop
(the khal Timestamps: passes, a request for their results, a non-blocking take)."""
from __future__ import annotations

from pycudadrv._errors import ArgumentTypeError, NotReadyError, StateError
from pycudadrv._event import Event
from pycudadrv._stream import Stream
from pycudadrv._textargs import yes_no
from pycudadrv._timing import TimestampsBase

__all__ = ["Timestamps"]


class Timestamps(TimestampsBase):
    """Time labelled passes of GPU work on a stream.

    >>> ts = Timestamps(stream)
    >>> with ts.measure("advect"):        # also spelled ts.pass_("advect")
    ...     advect.launch()
    >>> ts.try_take()                      # None until the GPU has finished them
    [('advect', 0.012)]

    Each pass records a start and an end event (``cuEventRecord``) around
    whatever is launched on the stream inside the block; events come from a
    pool, ``measure(label)`` returns the same small pass object for the
    same label and entering or leaving it makes no Python object, so a
    steady loop that takes its results creates nothing. Times
    are in milliseconds (``cuEventElapsedTime``, resolution about 0.5 us).

    Results, as in khal: :meth:`request_read` asks for the results of every
    pass closed so far; :meth:`try_take` returns them once the GPU has
    finished them (``None`` before), never blocking, and asks itself when
    nothing was asked for (and, when it returns results, for the passes
    closed since); :meth:`read` returns them too, waiting for the GPU
    by default and raising NotReadyError with ``blocking=False``. Passes
    closed after a request wait for the next one, so a loop that calls
    ``try_take()`` once a frame gets each frame's results at the next call
    once they are ready, even while later frames keep the GPU busy, with the
    events of two frames in flight. Passes may nest;
    a pass is reported in the first request after it closed. :attr:`is_idle`
    is True only once every result was taken.

    Parameters
    ----------
    stream : Stream, optional
        Defaults to the current device's default stream. Anything else
        (an int handle, a string) is an ArgumentTypeError, raised here.
    """

    def __init__(self, stream: Stream | None = None) -> None:
        if stream is None:
            from pycudadrv._device import get_current_device

            stream = get_current_device().default_stream
        self.stream = stream        # checked by the setter, as a later assignment is

    def _new_event(self) -> Event:
        return Event(device=self.stream.device)

    pass_ = TimestampsBase.measure     # khal's spelling of measure()

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
        if end is None:
            return True
        old = self._old_events
        if old:                 # the requested passes' events recorded before a stream change: asked
            for e in self._requested:       # until seen complete, then forgotten
                for ev in (e[1], e[2]):
                    if id(ev) in old:
                        if not ev.query():
                            return False
                        del old[id(ev)]
        return end.query()

    def _take(self) -> list[tuple[str, float]]:
        req = self._requested
        starts = [e[1] for e in req]
        ends = [e[2] for e in req]
        out = list(zip([e[0] for e in req], Event.elapsed_ms_pairs(starts, ends)))   # (raising: nothing lost)
        self._requested = []
        self._req_end = None
        # Back in the pool so that it hands them out again in the order they were recorded (it pops
        # the last one put back first): the driver records a run of events fastest in that order.
        back = [ev for e in req for ev in (e[1], e[2])]
        back.reverse()
        if self._old_events:                # (seen complete by now; never asked for again once reused)
            for ev in back:
                self._old_events.pop(id(ev), None)
        self._give_back(back, req)
        return out

    def try_take(self) -> list[tuple[str, float]] | None:
        """The results asked for (see :meth:`request_read`; asked now when
        nothing was) as ``[(label, milliseconds), ...]`` in order of start,
        once the GPU has finished them (``cuEventQuery``), clearing them;
        ``None`` while they are still running or while the only passes are
        still open; ``[]`` when there is nothing at all. Never blocks.

        A call that returns results also asks for the passes closed since
        they were asked for, so a loop calling it once a frame gets each
        frame's passes at the next call (two frames' events in flight at
        most; each call one ``cuEventQuery``)."""
        if not self._requested:
            self.request_read()
            if not self._requested:
                return None if self._open else []
        if not self._ready():
            return None
        out = self._take()
        self.request_read()     # what closed since that request: asked for now, the next call's results
        return out

    def read(self, blocking: bool = True) -> list[tuple[str, float]]:
        """Ask for every closed pass and return ``[(label, milliseconds), ...]``
        (in order of start), clearing them.

        With ``blocking=True`` (default) waits for the GPU
        (``cuEventSynchronize``); with ``blocking=False`` raises NotReadyError
        while the GPU has not finished them (as khal's ``read``; the request
        stays, so a later ``try_take()`` or ``read()`` returns them).

        Raises StateError inside an open pass (its end is not recorded yet),
        ArgumentTypeError for a ``blocking`` that is not True or False."""
        blocking = yes_no(blocking, "blocking", "Timestamps.read")
        if self._open:
            raise StateError(f"Timestamps.read() inside the open pass {self._open[-1][0]!r}: leave the `with "
                             "ts.measure(...)` block first (or use try_take(), which leaves open passes for "
                             "later)")
        self.request_read()
        if not self._requested:
            return []
        if blocking:
            old = self._old_events
            for e in self._requested if old else ():
                for ev in (e[1], e[2]):
                    if old.pop(id(ev), None) is not None:
                        ev.synchronize()
            if self._req_end is not None:
                self._req_end.synchronize()
        elif not self._ready():
            raise NotReadyError(f"Timestamps.read(blocking=False): {len(self._requested)} pass(es) still running "
                                "on the GPU; try_take() returns them once they are done, read() waits")
        return self._take()

    def wait_read(self) -> list[tuple[str, float]]:
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
        dropped = self._requested + self._passes
        self._give_back([e for entry in dropped for e in entry[1:]], dropped)
        self._passes = []
        self._requested = []
        self._req_end = None
        self._old_events.clear()

    def __repr__(self) -> str:
        return (f"<Timestamps on {self.stream!r}, {len(self._open)} open, "
                f"{len(self._passes) - len(self._open)} closed, {len(self._requested)} requested>")
