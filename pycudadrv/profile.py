"""Profiling and trace modes for every kernel launch.

* Profiling (``PYCUDADRV_PROFILE=1`` at import, or :func:`enable`): each launch
  is bracketed by two CUDA events; :func:`report` (and, with the environment
  variable, exit) prints a table per kernel name sorted by total time: total
  ms, calls, us per call, percent.
* Trace (``PYCUDADRV_TRACE=1`` or :func:`enable_trace`): synchronise after
  every launch and print the kernel name, grid and block to stderr, so the
  launch that faults is the last one named; a fault raises CudaError naming it.

Launches inside a graph capture are not instrumented.
"""
from __future__ import annotations

import atexit
import os
import sys
from collections import defaultdict
from typing import IO

from pycudadrv._driver import CudaError
from pycudadrv._launch import get_launch_hook, set_launch_hook
from pycudadrv._stream import Event

__all__ = ["enable", "disable", "enable_trace", "report", "reset", "stats"]


class _Profiler:
    def __init__(self):
        self.records = []
        self.pool = []

    def _ev(self, dev):
        return self.pool.pop() if self.pool else Event(device=dev)

    def before(self, fn, stream):
        ev = self._ev(stream.device)
        ev.record(stream)
        return ev

    def after(self, start, fn, stream, grid, block, shmem):
        end = self._ev(stream.device)
        end.record(stream)
        self.records.append((fn.name, start, end))


class _Tracer:
    def __init__(self, out=None):
        self.out = out

    def before(self, fn, stream):
        return True

    def after(self, tok, fn, stream, grid, block, shmem):
        out = self.out or sys.stderr
        print(f"[pycudadrv trace] {fn.name} grid={grid} block={block} shared_mem_bytes={shmem}", file=out,
              flush=True)
        try:
            stream.synchronize()
        except CudaError as e:
            raise CudaError(e.code, e.name, e.description, e.call,
                            f"after kernel '{fn.name}' grid={grid} block={block} (trace mode)") from None


_profiler = _Profiler()
_totals: dict = defaultdict(lambda: [0.0, 0])


def enable() -> None:
    """Time every launch with events from now on."""
    set_launch_hook(_profiler)


def enable_trace(out: IO[str] | None = None) -> None:
    """Synchronise and print after every launch from now on (``out``: a file, default stderr)."""
    set_launch_hook(_Tracer(out))


def disable() -> None:
    """Stop profiling or tracing (launches go back to the uninstrumented path)."""
    set_launch_hook(None)


def _drain():
    for name, start, end in _profiler.records:
        ms = Event.elapsed_ms(start, end)
        t = _totals[name]
        t[0] += ms
        t[1] += 1
        _profiler.pool.extend((start, end))
    _profiler.records = []


def stats() -> dict[str, tuple[float, int]]:
    """``{kernel name: (total ms, calls)}`` so far (waits for pending launches)."""
    _drain()
    return {k: (v[0], v[1]) for k, v in _totals.items()}


def reset() -> None:
    """Forget everything profiled so far."""
    _drain()
    _totals.clear()


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


def _at_exit():
    if isinstance(get_launch_hook(), _Profiler) and (_profiler.records or _totals):
        try:
            report()
        except Exception as e:  # the driver may be gone at exit
            print(f"[pycudadrv profile] no report: {e}", file=sys.stderr)


def _env_on(name):
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


if _env_on("PYCUDADRV_TRACE"):
    enable_trace()
elif _env_on("PYCUDADRV_PROFILE"):
    enable()
    atexit.register(_at_exit)
