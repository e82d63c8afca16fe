"""do_bench: time a callable that enqueues GPU work, with CUDA events."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from pycudadrv._event import Event
from pycudadrv._stream import Stream

__all__ = ["do_bench", "BenchResult"]


@dataclass
class BenchResult:
    """Statistics of the repetitions, in milliseconds per call of ``fn``."""

    median: float
    mean: float
    min: float
    max: float
    quantiles: dict[float, float] = field(default_factory=dict)
    times: NDArray[np.float64] = field(repr=False, default_factory=lambda: np.empty(0))
    reps: int = 0
    graph: bool = False

    def __float__(self) -> float:
        return self.median


def do_bench(fn: Callable[[], object], *, warmup: float = 25.0, rep: float = 100.0,
             quantiles: Sequence[float] = (0.2, 0.5, 0.8), flush_l2: bool = False, graph: bool = False,
             stream: Stream | None = None, calls_per_graph: int = 10) -> BenchResult:
    """Time ``fn()`` (which enqueues GPU work on ``stream``) with CUDA events.

    Parameters
    ----------
    fn : callable
        Enqueues the work to time on ``stream``, returns nothing.
    warmup, rep : float
        Milliseconds to spend warming up and measuring (like Triton's
        ``do_bench``); the repetition counts are derived from a first estimate.
    quantiles : sequence of float
        Quantiles (0..1) to report.
    flush_l2 : bool
        Overwrite a buffer twice the L2 size before each repetition
        (``cuMemsetD32Async``), so every repetition starts with a cold L2.
    graph : bool
        Capture ``calls_per_graph`` calls of ``fn`` into one CUDA graph and time
        its replays, dividing by the count: removes launch gaps from the figure.
        ``fn`` must launch only on ``stream``.
    stream : Stream, optional
        Defaults to the current device's default stream.

    Returns
    -------
    BenchResult
        median, mean, min, max and ``quantiles`` in milliseconds per call.

    Raises
    ------
    ValueError
        ``fn`` enqueued nothing on ``stream`` in graph mode (empty capture).
    """
    from pycudadrv._device import get_current_device
    from pycudadrv._memory import Buffer

    dev = get_current_device()
    s = dev.default_stream if stream is None else stream
    call = fn
    per = 1
    if graph:
        with s.capture() as g:
            for _ in range(calls_per_graph):
                fn()
        call = g.launch
        per = calls_per_graph
    flush = None
    if flush_l2:
        l2 = dev.attribute("l2_cache_size")
        flush = Buffer.empty(2 * max(l2, 1 << 20), device=dev, stream=s)
    # estimate
    call()
    s.synchronize()
    e0, e1 = Event(device=dev), Event(device=dev)
    e0.record(s)
    for _ in range(5):
        call()
    e1.record(s)
    est = max(Event.elapsed_ms(e0, e1) / 5, 1e-4)
    n_warm = max(1, int(warmup / est))
    n_rep = max(1, int(rep / est))
    for _ in range(n_warm):
        call()
    starts = [Event(device=dev) for _ in range(n_rep)]
    ends = [Event(device=dev) for _ in range(n_rep)]
    for i in range(n_rep):
        if flush is not None:
            flush.fill(np.uint32(0), stream=s)
        starts[i].record(s)
        call()
        ends[i].record(s)
    s.synchronize()
    times = np.array([Event.elapsed_ms(a, b) for a, b in zip(starts, ends)]) / per
    if graph:
        g.close()
    if flush is not None:
        flush.close()
    return BenchResult(median=float(np.median(times)), mean=float(times.mean()), min=float(times.min()),
                       max=float(times.max()), quantiles={q: float(np.quantile(times, q)) for q in quantiles},
                       times=times, reps=n_rep, graph=graph)
