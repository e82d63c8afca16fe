"""Profiling and trace modes for every kernel launch.

* Profiling (``PYCUDADRV_PROFILE=1`` at import, or :func:`enable`): each launch
  is bracketed by two CUDA events; finished launches are folded into running
  per-kernel totals (total ms, calls) and their events go back to a pool, so
  memory stays flat however many launches are profiled (at most
  :data:`MAX_PENDING` launches wait unread; beyond that the oldest is waited
  for). :func:`report` (and, with the environment variable, exit) prints a
  table per kernel name sorted by total time: total ms, calls, us per call,
  percent.
* Trace (``PYCUDADRV_TRACE=1`` or :func:`enable_trace`): synchronise after
  every launch and print the kernel name, grid and block to stderr, so the
  launch that faults is the last one named; a fault raises CudaError naming it.

With NVTX on (:mod:`pycudadrv.nvtx`), each profiled launch is also an NVTX
range named after its kernel. Launches inside a graph capture are not
instrumented.
"""
from __future__ import annotations

import atexit
import sys
from collections import deque
from typing import IO, Any

from pycudadrv import nvtx
from pycudadrv._env import env_flag
from pycudadrv._errors import CudaError
from pycudadrv._launch import get_launch_hook, set_launch_hook
from pycudadrv._event import Event

__all__ = ["enable", "disable", "enable_trace", "report", "reset", "stats", "pending", "MAX_PENDING"]

#: Profiled launches whose events may be outstanding at once; the oldest is waited for beyond it.
MAX_PENDING = 4096
#: Pending launches examined (cuEventQuery) per profiled launch, oldest first.
_DRAIN_PER_LAUNCH = 4


class _Profiler:
    def __init__(self) -> None:
        self.pending: deque = deque()          # (name, start Event, end Event), oldest first
        self.pool: list[Event] = []
        self.totals: dict[str, list] = {}       # name -> [total ms, calls]

    def _ev(self, dev: Any) -> Event:
        return self.pool.pop() if self.pool else Event(device=dev)

    def before(self, fn: Any, stream: Any) -> tuple[Event, bool]:
        pushed = nvtx.enabled and nvtx.push(fn.name)
        ev = self._ev(stream.device)
        ev.record(stream)
        return ev, pushed

    def after(self, tok: tuple[Event, bool], fn: Any, stream: Any, grid: Any, block: Any, shmem: int) -> None:
        start, pushed = tok
        end = self._ev(stream.device)
        end.record(stream)
        if pushed:
            nvtx.pop()
        self.pending.append((fn.name, start, end))
        self._fold(_DRAIN_PER_LAUNCH, block_on_full=True)

    def _fold_one(self) -> None:
        name, start, end = self.pending.popleft()
        t = self.totals.get(name)
        if t is None:
            t = self.totals[name] = [0.0, 0]
        t[0] += Event.elapsed_ms(start, end)
        t[1] += 1
        self.pool.append(start)
        self.pool.append(end)

    def _fold(self, budget: int, block_on_full: bool = False) -> None:
        """Fold finished launches (at most ``budget``; all when < 0) into the totals."""
        while self.pending and (budget < 0 or budget > 0):
            if not self.pending[0][2].query():
                break
            self._fold_one()
            budget -= 1
        while block_on_full and len(self.pending) > MAX_PENDING:
            self._fold_one()                     # waits for the oldest (elapsed_ms synchronizes)

    def drain(self) -> None:
        while self.pending:
            self._fold_one()


class _Tracer:
    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out

    def before(self, fn: Any, stream: Any) -> bool:
        return True

    def after(self, tok: Any, fn: Any, stream: Any, grid: Any, block: Any, shmem: int) -> None:
        out = self.out or sys.stderr
        print(f"[pycudadrv trace] {fn.name} grid={grid} block={block} shared_mem_bytes={shmem}", file=out,
              flush=True)
        try:
            stream.synchronize()
        except CudaError as e:
            raise CudaError(e.code, e.name, e.description, e.call,
                            f"after kernel '{fn.name}' grid={grid} block={block} (trace mode)") from e


_profiler = _Profiler()


def enable() -> None:
    """Time every launch with events from now on."""
    set_launch_hook(_profiler)


def enable_trace(out: IO[str] | None = None) -> None:
    """Synchronise and print after every launch from now on (``out``: a file, default stderr)."""
    set_launch_hook(_Tracer(out))


def disable() -> None:
    """Stop profiling or tracing (launches go back to the uninstrumented path)."""
    set_launch_hook(None)


def pending() -> int:
    """Profiled launches whose times are not folded into the totals yet."""
    return len(_profiler.pending)


def stats() -> dict[str, tuple[float, int]]:
    """``{kernel name: (total ms, calls)}`` so far (waits for pending launches)."""
    _profiler.drain()
    return {k: (v[0], v[1]) for k, v in _profiler.totals.items()}


def reset() -> None:
    """Forget everything profiled so far."""
    _profiler.drain()
    _profiler.totals.clear()


def report(file: IO[str] | None = None) -> str:
    """Print the table, sorted by total time, and return it as a string."""
    st = stats()
    total = sum(v[0] for v in st.values()) or 1.0
    lines = [f"{'kernel':<32} {'total ms':>10} {'calls':>8} {'us/call':>10} {'%':>6}"]
    for name, (ms, calls) in sorted(st.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{name[:32]:<32} {ms:>10.3f} {calls:>8d} {1e3 * ms / calls:>10.2f} {100 * ms / total:>6.1f}")
    text = "\n".join(lines)
    print(text, file=file or sys.stderr)
    return text


def _at_exit() -> None:
    if isinstance(get_launch_hook(), _Profiler) and (_profiler.pending or _profiler.totals):
        try:
            report()
        except Exception as e:  # the driver may be gone at exit
            print(f"[pycudadrv profile] no report: {e}", file=sys.stderr)


if env_flag("PYCUDADRV_TRACE"):
    enable_trace()
elif env_flag("PYCUDADRV_PROFILE"):
    enable()
    atexit.register(_at_exit)
