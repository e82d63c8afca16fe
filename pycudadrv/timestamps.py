"""Labelled pass timing with CUDA events, cheap enough to leave on in a loop."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pycudadrv._stream import Event, Stream

__all__ = ["Timestamps"]


class Timestamps:
    """Time labelled passes of GPU work on a stream.

    >>> ts = Timestamps(stream)
    >>> with ts.measure("advect"):        # also spelled ts.pass_("advect")
    ...     advect.launch()
    >>> ts.try_take()                      # None while any pass is still running
    [('advect', 0.012)]

    Each pass records a start and an end event (``cuEventRecord``) around
    whatever is launched on the stream inside the block; the events come
    from a pool, so a steady loop creates none. Times are in milliseconds
    (``cuEventElapsedTime``, resolution about 0.5 us).

    Parameters
    ----------
    stream : Stream, optional
        Defaults to the current device's default stream.
    """

    def __init__(self, stream: Stream | None = None) -> None:
        if stream is None:
            from pycudadrv._device import get_current_device

            stream = get_current_device().default_stream
        self.stream = stream
        self._pending: list[list] = []  # type: ignore[type-arg]  # [label, start Event, end Event or None while open]
        self._pool: list[Event] = []
        self._open = 0

    def _event(self) -> Event:
        return self._pool.pop() if self._pool else Event(device=self.stream.device)

    @contextmanager
    def measure(self, label: str) -> Iterator[Timestamps]:
        """Record a start event, run the block, record an end event.
        Nested passes are allowed; results come back in order of their start."""
        start = self._event()
        start.record(self.stream)
        entry = [str(label), start, None]
        self._pending.append(entry)
        self._open += 1
        try:
            yield self
        finally:
            self._open -= 1
            end = self._event()
            end.record(self.stream)
            entry[2] = end

    pass_ = measure

    def _last_done(self) -> bool:
        # Every pass is on one stream, so they finish in order: the last end event decides.
        return not self._pending or self._pending[-1][2].query()

    @property
    def is_idle(self) -> bool:
        """True when no pass is open and every recorded pass has finished on the GPU."""
        return self._open == 0 and self._last_done()

    def _collect(self) -> list[tuple[str, float]]:
        out = [(label, Event.elapsed_ms(start, end)) for label, start, end in self._pending]
        for _, start, end in self._pending:
            self._pool.extend((start, end))
        self._pending = []
        return out

    def try_take(self) -> list[tuple[str, float]] | None:
        """Non-blocking: ``None`` while any pass is open or still running on
        the GPU (``cuEventQuery``), else the list of ``(label, milliseconds)``
        in order, and the passes are cleared."""
        if self._open or not self._last_done():
            return None
        return self._collect()

    def read(self) -> list[tuple[str, float]]:
        """Wait for every pass (``cuEventSynchronize``) and return
        ``[(label, milliseconds), ...]``, clearing them.

        Raises RuntimeError if a pass is still open."""
        if self._open:
            raise RuntimeError("Timestamps.read() inside an open pass")
        if self._pending:
            self._pending[-1][2].synchronize()
        return self._collect()

    def reset(self) -> None:
        """Drop every recorded pass without reading it."""
        if self._open:
            raise RuntimeError("Timestamps.reset() inside an open pass")
        for _, start, end in self._pending:
            self._pool.append(start)
            if end is not None:
                self._pool.append(end)
        self._pending = []

    def __repr__(self) -> str:
        return f"<Timestamps on {self.stream!r}, {len(self._pending)} pass(es) pending>"
