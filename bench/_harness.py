"""The benchmark harness: :func:`setup` (CUDA present, the C floor built and
initialised, device 0 current), the optional peers (CuPy, cuda.core),
:class:`Row` and :func:`run_interleaved` (every row in turn, round after round,
the C floor first and last in each round, same-round ratios only) and
:func:`summarize`."""
from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from itertools import repeat
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Callable

from _cfloor import BenchSetupError, CFloor, PeerSkipped, build_c_floor  # noqa: F401
from _report import environment, log, median_or_nan, report_header  # noqa: F401

# The tiny kernel of launch_overhead.py and graph_replay.py: launched with n = 0
# (no thread touches memory), grid 1, block 32.
KERNEL_NAME = "bench_kernel"
KERNEL_SRC = r"""
extern "C" __global__ void bench_kernel(float* a, const float* b, int n, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = s * b[i] + a[i];
}
"""
GRID, BLOCK = 1, 32
N_ELEMS = 32                 # elements in the a/b buffers (the kernel reads none with n = 0)



# --------------------------------------------------------------------------- set-up

@dataclass
class Bench:
    """What :func:`setup` found: pycudadrv (``cd``), the initialised C floor, device 0
    (current), the driver version, the host (:func:`environment`) and the run's title."""

    name: str
    cd: object
    floor: CFloor
    pdev: object
    driver_version: tuple
    env: dict
    title: str

    def report_header(self) -> dict:
        """The first keys of the JSON report (:func:`_report.report_header`) and how the
        C floor was built (``c_floor``)."""
        floor = self.floor
        return {**report_header(self.name, self.cd, self.pdev, self.env),
                "c_floor": {"compile": floor.compiler, "compiler": floor.compiler_version,
                            "cuda_include": floor.include_dir}}


def cuda_missing(cd) -> str | None:
    """Why nothing can be measured ("CUDA is not available, nothing to measure (<why>)"),
    or None when the driver loads and has a device."""
    why = None
    if not cd.is_available():
        try:
            cd.require()
            why = "is_available() is False"
        except Exception as e:  # noqa: BLE001 -- the reason, for the message
            why = f"{type(e).__name__}: {e}"
    elif cd.device_count() == 0:
        why = "the driver reports no device"
    return None if why is None else f"CUDA is not available, nothing to measure ({why})"


def setup(name: str, title_suffix: str, *, title_prefix: str = "",
          check_built: Callable[[CFloor], str | None] | None = None,
          check_ready: Callable[[CFloor], str | None] | None = None) -> Bench | None:
    """Everything a benchmark needs before its own work: CUDA available, the C floor
    compiled (then ``check_built(floor)``), device 0's primary context current, the C
    floor initialised (then ``check_ready(floor)``), the host described; logs
    ``<name>: <title>`` and the CPU / compiler line. The title is ``<title_prefix><device>,
    driver CUDA x.y, pycudadrv v; <title_suffix>``. A check returns an error message or
    None. Returns None, after printing ``<name>: <why>`` to stderr, when something is
    missing (the benchmark then exits 2)."""
    import pycudadrv as cd

    def fail(msg):
        print(f"{name}: {msg}", file=sys.stderr)

    why = cuda_missing(cd)
    if why is not None:
        fail(why)
        return None
    try:
        floor = build_c_floor()
    except BenchSetupError as e:
        fail(e)
        return None
    msg = check_built(floor) if check_built is not None else None
    if msg:
        fail(msg)
        return None
    pdev = cd.Device(0)
    pdev.set_current()
    try:
        floor.init()
    except BenchSetupError as e:
        fail(e)
        return None
    msg = check_ready(floor) if check_ready is not None else None
    if msg:
        fail(msg)
        return None
    dv = cd.driver_version()
    env = environment()
    title = f"{title_prefix}{pdev.name}, driver CUDA {dv[0]}.{dv[1]}, pycudadrv {cd.__version__}; {title_suffix}"
    log(f"{name}: {title}")
    log(f"  CPU {env['cpu']}; C floor built with: {floor.compiler_version}")
    return Bench(name, cd, floor, pdev, dv, env, title)


def launch_hook():
    """The pycudadrv launch hook, or None; logs a warning when there is one
    (profiling/tracing, PYCUDADRV_PROFILE / PYCUDADRV_TRACE, would add its cost
    to every pycudadrv row)."""
    try:
        from pycudadrv._launch import get_launch_hook
        hook = get_launch_hook()
    except ImportError:
        hook = None
    if hook is not None:
        log(f"WARNING: a pycudadrv launch hook is installed ({hook!r}); the pycudadrv rows include its cost")
    return hook


def setup_peers(makers, enabled: bool, pdev, detail: Callable[[dict], str] | None = None):
    """Set up the optional peer libraries: ``makers`` is ``[(name, make), ...]`` with
    ``make()`` returning ``(payload, meta)`` or raising (PeerSkipped, or anything: the
    peer is then skipped with the reason). ``pdev`` is made current after each (the
    peers share its primary context). With ``detail``, logs ``  <name>: <status>`` after
    each attempted peer, followed by ``detail(info)`` when it is ok. Returns
    ``({name: payload} of the peers that are ok, {name: info})``, info's "status"
    being "ok" (with meta) or "skipped: <why>"."""
    payloads, info = {}, {}
    for name, make in makers:
        if not enabled:
            info[name] = {"status": "skipped: --no-peers"}
            continue
        try:
            payload, meta = make()
        except PeerSkipped as e:
            info[name] = {"status": f"skipped: {e}"}
        except Exception as e:  # noqa: BLE001 -- any failure of an optional peer only skips it
            info[name] = {"status": f"skipped: {type(e).__name__}: {e}"}
        else:
            payloads[name] = payload
            info[name] = {"status": "ok", **meta}
        finally:
            pdev.set_current()  # the peers share the primary context; be sure it is current
        if detail is not None:
            st = info[name]
            log(f"  {name}: {st['status']}{detail(st) if st['status'] == 'ok' else ''}")
    return payloads, info


def cupy_bench_kernel():
    """CuPy's set-up of the benchmarks' kernel: a namespace with ``cupy``, ``kernel`` (a
    RawKernel of bench_kernel), ``stream`` (non-blocking), ``a`` = 0 and ``b`` = 1 (N_ELEMS
    float32), ``grid``, ``block`` and ``args`` (n = 0, s = 1); the kernel launched once on the
    stream (compiling and loading it, outside any capture) and synchronised. Raises
    PeerSkipped when CuPy is not installed."""
    import numpy as np

    try:
        import cupy
    except ImportError as e:
        raise PeerSkipped(f"not installed ({e})") from None
    kernel = cupy.RawKernel(KERNEL_SRC, KERNEL_NAME)
    st = cupy.cuda.Stream(non_blocking=True)
    a = cupy.zeros(N_ELEMS, dtype=cupy.float32)
    b = cupy.ones(N_ELEMS, dtype=cupy.float32)
    cupy.cuda.Device(0).synchronize()
    grid, block = (GRID,), (BLOCK,)
    args = (a, b, np.int32(0), np.float32(1.0))
    with st:
        kernel(grid, block, args)  # probe: compiles and loads the kernel outside any capture
    st.synchronize()
    return SimpleNamespace(cupy=cupy, kernel=kernel, stream=st, a=a, b=b, grid=grid, block=block, args=args)


def cuda_core_peer(pdev):
    """cuda.core (``cuda.core``, else ``cuda.core.experimental``): a namespace with its
    ``Device``, ``LaunchConfig``, ``Program``, ``ProgramOptions`` and ``launch``, the
    ``module`` they came from, the package ``version``, its ``device`` for ``pdev`` (made
    current) and a new ``stream`` of it. Raises PeerSkipped when cuda.core is not installed."""
    try:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
            modname = "cuda.core"
        except ImportError:
            from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
            modname = "cuda.core.experimental"
        import cuda.core as cc_pkg
        version = getattr(cc_pkg, "__version__", "?")
    except ImportError as e:
        raise PeerSkipped(f"not installed ({e})") from None
    dev = Device(pdev.ordinal)
    dev.set_current()
    stream = dev.create_stream()
    return SimpleNamespace(Device=Device, LaunchConfig=LaunchConfig, Program=Program, ProgramOptions=ProgramOptions,
                           launch=launch, module=modname, version=version, device=dev, stream=stream)


def sync_all_streams(syncs, pdev) -> Callable[[], None]:
    """A function that calls every one of ``syncs`` (stream synchronize methods; each
    stream once, in order), then makes ``pdev``'s context current again."""
    unique, seen = [], set()
    for f in syncs:
        key = id(getattr(f, "__self__", f))
        if key not in seen:
            seen.add(key)
            unique.append(f)

    def sync_all():
        for f in unique:
            f()
        pdev.set_current()
    return sync_all



# --------------------------------------------------------------------------- interleaved rounds

@dataclass
class Row:
    """One line of a benchmark table.

    ``run(n)`` makes ``n`` launches and returns the nanoseconds they took (its
    own timing region covers the launches only); ``sync()`` waits for the
    row's stream. A row that is not ``essential`` (a peer library) is dropped,
    with the reason kept, if it raises; an essential one stops the benchmark."""

    name: str
    run: Callable[[int], int]
    sync: Callable[[], None]
    essential: bool = True
    target: float | None = None
    keep: object = None   # objects the row's closures need alive (a peer's kernel, stream, buffers)


@dataclass
class Interleaved:
    """Per-round figures of one interleaved benchmark (nanoseconds per round), and the
    reports every benchmark writes of them: :meth:`row_report` / :meth:`floor_report`
    (time per unit and ratio to the round's floor), :meth:`table_report` (the floor and
    every row), :meth:`rate_report` (units per second, e.g. steps/s)."""

    launches: int
    floor_first_ns: list
    floor_last_ns: list
    rows: dict          # name -> list of ns per round
    drain_ns: dict      # name -> list of ns the row's stream took to drain after its launches
    dropped: dict       # name -> reason
    floor_name: str = ""
    targets: dict = field(default_factory=dict)   # name -> the Row's target (max ratio to the floor)
    # paired rounds only: name -> per round, the mean of the floor runs just before and just after the row
    row_floor_ns: dict = field(default_factory=dict)

    @property
    def floor_ns(self) -> list:
        return [(a + b) / 2 for a, b in zip(self.floor_first_ns, self.floor_last_ns)]

    def ns(self, name: str) -> list:
        """Nanoseconds per round of row ``name`` (the floor's: the mean of its two runs)."""
        return self.floor_ns if name == self.floor_name else self.rows[name]

    def ratios(self, name: str) -> list:
        """Per round: row time / the same round's floor time (1.0 for the floor); in paired
        rounds the floor is the mean of the two floor runs on either side of the row."""
        floor = self.row_floor_ns.get(name) if name != self.floor_name else None
        return [t / f for t, f in zip(self.ns(name), floor if floor else self.floor_ns)]

    def ratios_between(self, num: str, den: str) -> list:
        """Per round: time of ``num`` / time of ``den`` (same round)."""
        return [a / b for a, b in zip(self.ns(num), self.ns(den))]

    def per_launch_us(self, values_ns, per: int | None = None) -> list:
        """Microseconds per unit: ns / ``per`` (default: the launches per round) / 1e3."""
        per = self.launches if per is None else per
        return [v / per / 1e3 for v in values_ns]

    def drain_us(self, name: str) -> list:
        return [d / 1e3 for d in self.drain_ns.get(name, [])]

    @property
    def drift(self) -> list:
        """Per round: the floor's last run / its first run."""
        return [b / a for a, b in zip(self.floor_first_ns, self.floor_last_ns)]

    def row_report(self, name: str, target: float | None = None, *, per: int | None = None,
                   key: str = "per_launch_us") -> dict:
        """Row ``name``: ``per_round_ns``, ``<key>`` (us per unit, ``per`` units per round,
        default the launches) and its ``<key>_summary``, ``ratio_to_floor`` and
        ``ratio_summary``, ``drain_us``; with a target (given, else the Row's), ``target``
        and ``pass`` (median ratio at most the target)."""
        us = self.per_launch_us(self.rows[name], per)
        ratios = self.ratios(name)
        rep = {"per_round_ns": self.rows[name], key: us, f"{key}_summary": summarize(us),
               "ratio_to_floor": ratios, "ratio_summary": summarize(ratios), "drain_us": self.drain_us(name)}
        target = self.targets.get(name) if target is None else target
        if target is not None:
            rep["target"] = target
            rep["pass"] = bool(ratios) and rep["ratio_summary"]["median"] <= target
        return rep

    def floor_report(self, name: str | None = None, *, per: int | None = None, key: str = "per_launch_us") -> dict:
        """The floor: ``name``, ``first_ns``, ``last_ns``, ``<key>`` (as :meth:`row_report`)
        and its summary, ``drain_us``, ``drift_last_over_first`` and ``drift_summary``."""
        us = self.per_launch_us(self.floor_ns, per)
        name = self.floor_name if name is None else name
        drift = self.drift
        return {"name": name, "first_ns": self.floor_first_ns, "last_ns": self.floor_last_ns, key: us,
                f"{key}_summary": summarize(us), "drain_us": self.drain_us(name),
                "drift_last_over_first": drift, "drift_summary": summarize(drift)}

    def table_report(self, *, per: int | None = None, key: str = "per_launch_us") -> dict:
        """``{"floor": floor_report, "rows": {name: row_report}, "dropped": {name: why}}``,
        the rows in the order they were given (the dropped ones left out)."""
        return {"floor": self.floor_report(per=per, key=key),
                "rows": {n: self.row_report(n, per=per, key=key) for n in self.rows},
                "dropped": dict(self.dropped)}

    def rate_report(self, name: str, per: int | None = None, unit: str = "step") -> dict:
        """Row (or floor) ``name`` as a rate, ``per`` units per round (default the launches):
        ``per_round_ns``, ``<unit>s_per_s``, ``us_per_<unit>`` and their summaries; the
        floor also gets ``first_ns`` and ``last_ns``."""
        per = self.launches if per is None else per
        ns = self.ns(name)
        rate = [per * 1e9 / t for t in ns]
        us = [t / per / 1e3 for t in ns]
        rep = {"per_round_ns": ns, f"{unit}s_per_s": rate, f"us_per_{unit}": us,
               f"{unit}s_per_s_summary": summarize(rate), f"us_per_{unit}_summary": summarize(us)}
        if name == self.floor_name:
            rep["first_ns"], rep["last_ns"] = self.floor_first_ns, self.floor_last_ns
        return rep


def ratio_median(rows: dict, name: str, key: str = "ratio_summary") -> float | None:
    """The median of ``rows[name][key]`` (a :func:`summarize` dict), or None when the row
    is missing or has no rounds."""
    r = rows.get(name)
    return None if r is None or not r.get(key, {}).get("n") else r[key]["median"]


def loop_call0(f):
    """A row's run(n): n x f(), timed (the launches only)."""
    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            f()
        return perf_counter_ns() - t0
    return run


def loop_replay_sync(launch, sync):
    """A row's run(n): n x launch(), then sync(); both inside the timing (GPU-bound rows)."""
    def run(n):
        it = repeat(None, n)
        t0 = perf_counter_ns()
        for _ in it:
            launch()
        sync()
        return perf_counter_ns() - t0
    return run


def batched(run_batch, sync, batch):
    """run(n): ``run_batch(k)`` over batches of ``batch`` launches (all n in one when
    batch <= 0), ``sync()`` between batches outside the timing; returns the summed timed
    nanoseconds. The last batch is drained by the caller (the row's sync)."""
    def run(n):
        step = batch if batch > 0 else n
        total = done = 0
        while done < n:
            k = min(step, n - done)
            total += run_batch(k)
            done += k
            if done < n:
                sync()
        return total
    return run


def _time_row(row: Row, n: int) -> tuple[int, int]:
    """(launch ns, drain ns): the row's launches, then its stream's synchronize
    (timed apart), so the next row starts with nothing queued."""
    elapsed = row.run(n)
    t0 = perf_counter_ns()
    row.sync()
    return elapsed, perf_counter_ns() - t0


def run_interleaved(floor: Row, rows: list[Row], *, rounds: int, launches: int, warmup_rounds: int = 1,
                    rotate: bool = True, sync_all: Callable[[], None] | None = None,
                    label: str = "", log: Callable[[str], None] = print, paired: bool = False) -> Interleaved:
    """Run ``warmup_rounds`` uncounted rounds, then ``rounds`` rounds. Each round
    times ``floor``, every row in turn (their order rotated by one each round
    when ``rotate``, so no row always follows the floor), then ``floor`` again;
    the round's floor is the mean of its two floor measurements. ``sync_all``
    ends each round (every stream idle).

    ``paired``: the floor also runs between every two rows (floor, row, floor,
    row, ..., floor), and each row's ratio is to the mean of the floor runs just
    before and just after it, so host drift within a round (clocks, other load:
    10-20% over a second of launches on a shared host) cancels row by row
    instead of only over the whole round. The floor's own report still uses the
    round's first and last runs."""
    rows = list(rows)
    res = Interleaved(launches, [], [], {r.name: [] for r in rows}, {r.name: [] for r in rows}, {},
                      floor_name=floor.name, targets={r.name: r.target for r in rows if r.target is not None})
    res.drain_ns[floor.name] = []
    total = warmup_rounds + rounds
    for k in range(total):
        counted = k >= warmup_rounds
        shift = (k % len(rows)) if (rotate and rows) else 0
        order = rows[shift:] + rows[:shift]
        first, d0 = _time_row(floor, launches)
        before = first              # paired: the floor run just before the next row
        timed_rows = []             # (name, ns, drain ns, floor run before it)
        for row in order:
            if row.name in res.dropped:
                continue
            try:
                t, d = _time_row(row, launches)
            except Exception as e:  # noqa: BLE001 -- a peer failing must not stop the benchmark
                if row.essential:
                    raise
                res.dropped[row.name] = f"{type(e).__name__}: {e}"
                log(f"  [{label}] {row.name}: dropped ({res.dropped[row.name]})")
                try:
                    row.sync()
                except Exception:  # noqa: BLE001
                    pass
                continue
            timed_rows.append((row.name, t, d, before))
            if paired and row is not order[-1]:
                before, _ = _time_row(floor, launches)
        last, d1 = _time_row(floor, launches)
        if counted:
            for i, (name, t, d, fb) in enumerate(timed_rows):
                res.rows[name].append(t)
                res.drain_ns[name].append(d)
                if paired:
                    fa = timed_rows[i + 1][3] if i + 1 < len(timed_rows) else last
                    res.row_floor_ns.setdefault(name, []).append((fb + fa) / 2)
        if sync_all is not None:
            sync_all()
        if counted:
            res.floor_first_ns.append(first)
            res.floor_last_ns.append(last)
            res.drain_ns[floor.name].append((d0 + d1) / 2)
            fl = (first + last) / 2
            log(f"  [{label}] round {k - warmup_rounds + 1}/{rounds}: floor "
                f"{fl / launches / 1e3:.3f} us/launch")
        else:
            log(f"  [{label}] warm-up round {k + 1}/{warmup_rounds} done")
    for name in list(res.dropped):
        res.rows.pop(name, None)
        res.drain_ns.pop(name, None)
        res.row_floor_ns.pop(name, None)
    return res


def summarize(values: list) -> dict:
    """median, quartiles (p25, p75), min, max, mean and count of a list of numbers."""
    if not values:
        return {"n": 0}
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return {"median": statistics.median(values), "p25": q1, "p75": q3, "min": min(values), "max": max(values),
            "mean": statistics.fmean(values), "n": len(values)}


