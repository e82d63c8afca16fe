"""Profiling and trace modes for every kernel launch.

* Profiling (``PYCUDADRV_PROFILE=1`` at import, or :func:`enable`) folds
  every launch into running per-kernel totals (total ms, calls), measured by
  one of two clocks:

  - ``clock="events"`` (the default): each launch is bracketed by two CUDA
    events (``cuEventRecord``, read with ``cuEventElapsedTime``); launches
    still overlap, and finished ones are folded in and their events go back
    to a pool, so memory stays flat however many launches are profiled (at
    most :data:`MAX_PENDING` launches wait unread; beyond that the oldest is
    waited for).
  - ``clock="host"`` (``PYCUDADRV_PROFILE=host``), khal's serialised timing:
    synchronise the stream, read the host clock (``time.perf_counter_ns``),
    launch, synchronise again and read the clock. Each time is the kernel
    alone plus one launch and one synchronisation of host overhead; nothing
    overlaps, so the program runs slower, and a kernel that faults raises
    CudaError naming it (as trace mode does).

  :func:`report` (and, with the environment variable, exit) prints a table
  per kernel name sorted by total time: total ms, calls, us per call,
  percent, under a line naming the clock, and then forgets what it printed
  (``keep=True`` keeps it), as khal's report does.
* Trace (``PYCUDADRV_TRACE=1`` or :func:`enable_trace`): synchronise after
  every launch and print the kernel name, grid and block to stderr, so the
  launch that faults is the last one named; a fault raises CudaError naming it.

Both may be on at once (both variables set, or :func:`enable` and
:func:`enable_trace` in either order): each launch is timed and then traced.
With NVTX on (:mod:`pycudadrv.nvtx`), each profiled launch is also an NVTX
range named after its kernel. Launches inside a graph capture are not
instrumented.
"""
from __future__ import annotations

import atexit
import sys
import time
from collections import deque
from typing import IO, Any

from pycudadrv import nvtx
from pycudadrv._env import env_choice, env_flag
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, CudaError
from pycudadrv._launch import set_launch_hook
from pycudadrv._event import Event

__all__ = ["enable", "disable", "enable_trace", "disable_trace", "mode", "report", "reset", "stats", "pending",
           "CLOCKS", "MAX_PENDING"]

#: Profiled launches whose events may be outstanding at once; the oldest is waited for beyond it.
MAX_PENDING = 4096
#: The clocks :func:`enable` takes: CUDA events, or khal's serialised host clock.
CLOCKS = ("events", "host")
#: Pending launches examined (cuEventQuery) per profiled launch, oldest first.
_DRAIN_PER_LAUNCH = 4
_CLOCK_TITLE = {"events": "CUDA events", "host": "host clock, serialised: sync, launch, sync"}


def _fault(e: CudaError, fn: Any, grid: Any, block: Any, what: str) -> CudaError:
    return CudaError(e.code, e.name, e.description, e.call, f"after kernel '{fn.name}' grid={grid} block={block} "
                     f"({what})")


class _Profiler:
    def __init__(self) -> None:
        self.pending: deque = deque()          # (name, start Event, end Event), oldest first
        self.pool: list[Event] = []
        self.totals: dict[str, list] = {}       # name -> [total ms, calls]
        self.clock = "events"
        self.clocks_used: set[str] = set()      # the clocks of what the totals hold (the report names them)

    def _ev(self, dev: Any) -> Event:
        return self.pool.pop() if self.pool else Event(device=dev)

    def before(self, fn: Any, stream: Any) -> tuple[Any, bool]:
        if self.clock == "host":
            stream.synchronize()                 # what ran before is not this kernel's time
            pushed = nvtx.enabled and nvtx.push(fn.name)
            return time.perf_counter_ns(), pushed
        pushed = nvtx.enabled and nvtx.push(fn.name)
        ev = self._ev(stream.device)
        ev.record(stream)
        return ev, pushed

    def after(self, tok: tuple[Any, bool], fn: Any, stream: Any, grid: Any, block: Any, shmem: int) -> None:
        start, pushed = tok
        if isinstance(start, int):              # the host clock
            try:
                stream.synchronize()
            except CudaError as e:
                raise _fault(e, fn, grid, block, "profile mode, host clock") from e
            finally:
                if pushed:
                    nvtx.pop()
            self._add(fn.name, (time.perf_counter_ns() - start) / 1e6, "host")
            return
        end = self._ev(stream.device)
        end.record(stream)
        if pushed:
            nvtx.pop()
        self.pending.append((fn.name, start, end))
        self._fold(_DRAIN_PER_LAUNCH, block_on_full=True)

    def _add(self, name: str, ms: float, clock: str) -> None:
        t = self.totals.get(name)
        if t is None:
            t = self.totals[name] = [0.0, 0]
        t[0] += ms
        t[1] += 1
        self.clocks_used.add(clock)

    def _fold_one(self) -> None:
        name, start, end = self.pending.popleft()
        self._add(name, Event.elapsed_ms(start, end), "events")
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

    def clear(self) -> None:
        self.drain()
        self.totals.clear()
        self.clocks_used.clear()


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
            raise _fault(e, fn, grid, block, "trace mode") from e


class _Both:
    """Profile and trace mode together: each launch is timed (the profiler's before/after
    closest to it), then traced."""

    def __init__(self, profiler: _Profiler, tracer: _Tracer) -> None:
        self.profiler = profiler
        self.tracer = tracer

    def before(self, fn: Any, stream: Any) -> tuple[Any, Any]:
        return self.profiler.before(fn, stream), self.tracer.before(fn, stream)

    def after(self, tok: tuple[Any, Any], fn: Any, stream: Any, grid: Any, block: Any, shmem: int) -> None:
        self.profiler.after(tok[0], fn, stream, grid, block, shmem)
        self.tracer.after(tok[1], fn, stream, grid, block, shmem)


_profiler = _Profiler()
_profiling = False
_tracer: _Tracer | None = None


def _install() -> None:
    if _profiling and _tracer is not None:
        set_launch_hook(_Both(_profiler, _tracer))
    else:
        set_launch_hook(_profiler if _profiling else _tracer)   # one mode alone: its own hook, no extra call


def enable(clock: str = "events") -> None:
    """Time every launch from now on, with ``clock`` ``"events"`` (CUDA events,
    launches overlap) or ``"host"`` (khal's serialised host clock: synchronise,
    read ``time.perf_counter_ns``, launch, synchronise, read it again); trace
    mode, if on, stays on. Switching the clock keeps the totals so far
    (:func:`report` names every clock they hold).

    Raises ArgumentValueError for another ``clock``, ArgumentTypeError for one
    that is not a str."""
    global _profiling
    if not isinstance(clock, str):
        raise ArgumentTypeError(f"profile.enable: clock must be one of {CLOCKS}, got {type(clock).__name__} "
                                f"{clock!r:.40}")
    if clock not in CLOCKS:
        raise ArgumentValueError(f"profile.enable: clock must be one of {CLOCKS}, got {clock!r:.40}")
    _profiler.clock = clock
    _profiling = True
    _install()


def _check_file(what: str, f: Any) -> None:
    """Refuse, before anything changes, a file that print() could not write to."""
    if f is not None and not callable(getattr(f, "write", None)):
        raise ArgumentTypeError(f"{what} must be None or a text file (an object with write()), got "
                                f"{type(f).__name__} {f!r:.40}")


def enable_trace(out: IO[str] | None = None) -> None:
    """Synchronise and print after every launch from now on (``out``: a file,
    default stderr); profiling, if on, stays on. Raises ArgumentTypeError for
    an ``out`` without ``write`` (nothing changes)."""
    global _tracer
    _check_file("profile.enable_trace: out", out)
    _tracer = _Tracer(out)
    _install()


def disable() -> None:
    """Stop profiling and tracing (launches go back to the uninstrumented path).
    The totals are kept until :func:`report` or :func:`reset`."""
    global _profiling, _tracer
    _profiling, _tracer = False, None
    set_launch_hook(None)


def disable_trace() -> None:
    """Stop tracing; profiling, if on, goes on."""
    global _tracer
    _tracer = None
    _install()


def mode() -> tuple[str | None, bool]:
    """``(clock, tracing)``: the profiling clock (``"events"``, ``"host"``, or
    None when not profiling) and whether trace mode is on."""
    return (_profiler.clock if _profiling else None), _tracer is not None


def pending() -> int:
    """Profiled launches whose times are not folded into the totals yet."""
    return len(_profiler.pending)


def stats() -> dict[str, tuple[float, int]]:
    """``{kernel name: (total ms, calls)}`` so far (waits for pending launches)."""
    _profiler.drain()
    return {k: (v[0], v[1]) for k, v in _profiler.totals.items()}


def reset() -> None:
    """Forget everything profiled so far."""
    _profiler.clear()


def report(file: IO[str] | None = None, *, keep: bool = False) -> str:
    """Print the per-kernel table (to ``file``, default stderr), sorted by
    total time, and return it as a string; then forget what it printed, as
    khal's report does, unless ``keep``. Nothing profiled since the last
    report: prints nothing and returns ``""``.

    The first line names the kernels, the total ms and the clock(s) of the
    times; then one row per kernel: name, total ms, calls, us per call, %.
    Waits for pending launches (``cuEventElapsedTime``). Raises
    ArgumentTypeError for a ``file`` without ``write``."""
    _check_file("profile.report: file", file)
    st = stats()
    if not st:
        return ""
    total = sum(v[0] for v in st.values())
    clocks = " + ".join(_CLOCK_TITLE[c] for c in CLOCKS if c in _profiler.clocks_used)
    lines = [f"pycudadrv profile: {len(st)} kernel(s), {total:.3f} ms total ({clocks})",
             f"{'kernel':<32} {'total ms':>10} {'calls':>8} {'us/call':>10} {'%':>6}"]
    for name, (ms, calls) in sorted(st.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{name[:32]:<32} {ms:>10.3f} {calls:>8d} {1e3 * ms / calls:>10.2f} "
                     f"{100 * ms / (total or 1.0):>6.1f}")
    text = "\n".join(lines)
    print(text, file=file or sys.stderr)
    if not keep:
        _profiler.clear()
    return text


def _at_exit() -> None:
    if _profiling and (_profiler.pending or _profiler.totals):
        try:
            report()
        except Exception as e:  # the driver may be gone at exit
            print(f"[pycudadrv profile] no report: {e}", file=sys.stderr)


_env_profile = env_choice("PYCUDADRV_PROFILE", CLOCKS)
if env_flag("PYCUDADRV_TRACE"):
    enable_trace()
if _env_profile:
    enable(_env_profile if isinstance(_env_profile, str) else "events")
    atexit.register(_at_exit)
