#!/usr/bin/env python3
"""Strong and weak scaling of the MPI heat diffusion (examples/heat_mpi.py) over 1, 2 and 4 ranks.

What is measured
----------------
Each configuration is one ``mpirun -n P python examples/heat_mpi.py ...`` (the launcher line
of ``pycudadrv.mpi.mpirun_command``), whose rank 0 writes a JSON report:

* **strong scaling** -- a fixed ``--n`` x ``--n`` grid (8192) split over 1, 2 and 4 ranks, each
  run twice: overlapped (interior computed while the halo is in flight, the default) and
  serial (``--no-overlap``: exchange, then compute);
* **weak scaling** -- ``--rows`` (2048) rows of width ``--n`` per rank, so the grid grows with
  the ranks (2048, 4096, 8192 rows), overlapped.

The grid is large (8192^2 floats: about 0.5 GB of memory traffic per step) so that the interior
kernel runs long enough to hide an exchange behind; at the main job's 2048^2 a step's kernel
is 16 times shorter and the exchange's fixed costs dominate.

Per run: milliseconds per step (wall time of the slowest rank over the timed steps, after
``--warmup``), host milliseconds per step in halo exchanges (mean of the ranks), and the overlap
achieved -- the share of each exchange, on the GPU clock, during which the interior kernel ran
(events on both streams; see the example). Every run also checks that the gathered result
equals the single-process run bit for bit (``matches_single``); the NumPy float64 reference is
left to the tests (``--no-reference`` here, to keep the runtime short). Configurations are
interleaved over ``--rounds`` rounds and medians kept. There is no C floor: the baseline is
the 1-rank run of the same program.

Sharing one GPU: with one device every rank runs on it (``local_rank % device_count``). The
ranks' kernels then never run at the same time (without MPS the GPU time-slices between the
processes' contexts), so strong scaling cannot speed up and weak scaling adds work to the same
device; the figures show the cost of the decomposition (exchanges, extra launches, context
switches), not a multi-GPU speedup. The note in the JSON says which case was measured.

Output: the table, ``bench/results/mpi_scaling.json`` (``summary``: ``ranks2_matches_single``,
``ranks4_matches_single``, ``overlap_fraction`` at 2 ranks, ...) and ``mpi_scaling.png``. Exit 2
with one line when CUDA, mpi4py or mpirun is missing; 1 when a run fails or does not match.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _harness, _report, wherever we are run from

from _harness import cuda_missing  # noqa: E402
from _report import (add_output_args, check_common_args, common_args, log, median_or_nan, new_parser,  # noqa: E402
                     pyplot, report_header, save_figure, write_report)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "heat_mpi.py"
RANKS = (1, 2, 4)
NAME = "mpi_scaling"


def _rel(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def _missing(cd, mpi) -> str | None:
    why = cuda_missing(cd)
    if why is not None:
        return why
    try:
        import mpi4py  # noqa: F401
    except ImportError as e:
        return f"mpi4py is not installed ({e}): pip install 'pycudadrv[mpi]'"
    try:
        mpi.mpirun_command(1)
    except cd.LibraryUnavailableError as e:
        return str(e)
    if not EXAMPLE.exists():
        return f"{_rel(EXAMPLE)} is missing"
    return None


def run_config(mpi, ranks: int, ny: int, nx: int, steps: int, warmup: int, extra: list[str],
               timeout: float) -> dict:
    """One mpirun of the example; its rank-0 JSON report plus ``rc`` and ``wall_s`` (or ``error``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = mpi.mpirun_command(ranks) + [sys.executable, str(EXAMPLE), "--n", str(nx), "--ny", str(ny),
                                            "--steps", str(steps), "--warmup", str(warmup), "--no-reference",
                                            "--json", str(out), *extra]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"rc": None, "error": f"timed out after {timeout:.0f} s", "wall_s": timeout}
        wall = time.perf_counter() - t0
        if r.returncode != 0 or not out.exists():
            tail = (r.stderr or r.stdout).strip().splitlines()[-6:]
            return {"rc": r.returncode, "error": " | ".join(tail), "wall_s": wall}
        rep = json.loads(out.read_text())
        rep.update(rc=0, wall_s=wall, transfer_line=next((ln for ln in r.stdout.splitlines()
                                                           if ln.startswith("MPI: ")), ""))
        return rep


def _median(reports: list[dict], key: str) -> float:
    vals = [r[key] for r in reports if r.get("rc") == 0 and r.get(key) is not None]
    return median_or_nan(vals)


def main(argv=None) -> int:
    ap = new_parser(__doc__)
    ap.add_argument("--n", type=int, default=8192, help="grid width; strong-scaling grid is n x n (default 8192)")
    ap.add_argument("--rows", type=int, default=2048, help="rows per rank for weak scaling (default 2048)")
    ap.add_argument("--steps", type=int, default=600, help="steps per run, warm-up included (default 600)")
    ap.add_argument("--warmup", type=int, default=50, help="steps left out of the timings (default 50)")
    common_args(ap, rounds=2, warmup=False, rotate=False)     # rounds: of every configuration, interleaved
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mpirun (default 300)")
    add_output_args(ap)
    args = check_common_args(ap, ap.parse_args(argv))
    import pycudadrv as cd
    from pycudadrv import mpi

    why = _missing(cd, mpi)
    if why is not None:
        print(f"{NAME}: {why}", file=sys.stderr)
        return 2
    dev = cd.Device(0)
    n_dev = cd.device_count()
    dv = cd.driver_version()
    title = (f"{dev.name} x{n_dev}, driver CUDA {dv[0]}.{dv[1]}, pycudadrv {cd.__version__}; {args.steps} steps, "
             f"{args.rounds} round(s)")
    log(f"{NAME}: {title}")
    log(f"  launcher: {' '.join(mpi.mpirun_command(2))} ...")
    configs: list[tuple[str, str, int, int, list[str]]] = []
    for p in RANKS:
        configs.append(("strong", "overlap", p, args.n, []))
        configs.append(("strong", "serial", p, args.n, ["--no-overlap"]))
    for p in RANKS:
        configs.append(("weak", "overlap", p, args.rows * p, []))
    results: dict[tuple, list[dict]] = {c[:3]: [] for c in configs}
    t_start = time.perf_counter()
    for rnd in range(args.rounds):
        for kind, mode, p, ny, extra in configs:
            rep = run_config(mpi, p, ny, args.n, args.steps, args.warmup, extra, args.timeout)
            results[(kind, mode, p)].append(rep)
            if rep.get("rc") == 0:
                log(f"  round {rnd + 1}: {kind:<6} {mode:<7} {p} rank(s) {ny}x{args.n}: {rep['ms_per_step']:.4f} "
                    f"ms/step, exchange {rep['exchange_ms_per_step']:.4f} ms, overlap "
                    f"{rep['overlap_fraction'] * 100:.0f}%, matches single: {rep['matches_single']} "
                    f"({rep['wall_s']:.1f} s)")
            else:
                log(f"  round {rnd + 1}: {kind:<6} {mode:<7} {p} rank(s): FAILED ({rep.get('error')})")
    total_s = time.perf_counter() - t_start

    def row(kind, mode, p):
        reps = results[(kind, mode, p)]
        ok = [r for r in reps if r.get("rc") == 0]
        return {"ranks": p, "runs": len(reps), "failed": len(reps) - len(ok),
                "ny": ok[0]["ny"] if ok else None, "nx": args.n,
                "ms_per_step": _median(reps, "ms_per_step"), "steps_per_s": _median(reps, "steps_per_s"),
                "exchange_ms_per_step": _median(reps, "exchange_ms_per_step"),
                "exchange_gpu_ms_per_step": _median(reps, "exchange_gpu_ms_per_step"),
                "interior_gpu_ms_per_step": _median(reps, "interior_gpu_ms_per_step"),
                "overlap_fraction": _median(reps, "overlap_fraction"),
                "single_process_ms_per_step": _median(reps, "single_process_ms_per_step"),
                "matches_single": bool(ok) and len(ok) == len(reps) and all(r["matches_single"] for r in ok),
                "transfer": ok[0]["transfer"] if ok else None,
                "errors": [r["error"] for r in reps if r.get("rc") != 0]}

    strong = {mode: [row("strong", mode, p) for p in RANKS] for mode in ("overlap", "serial")}
    weak = [row("weak", "overlap", p) for p in RANKS]
    any_ok = next((r for reps in results.values() for r in reps if r.get("rc") == 0), None)

    def matches(p):
        return all(r["matches_single"] for r in (strong["overlap"][RANKS.index(p)], strong["serial"][RANKS.index(p)],
                                                 weak[RANKS.index(p)]))

    base_s, base_w = strong["overlap"][0]["ms_per_step"], weak[0]["ms_per_step"]
    shared = n_dev < max(RANKS)
    note = (f"{n_dev} GPU(s) for up to {max(RANKS)} ranks: "
            + ("ranks share a device (local_rank % device_count). Without MPS the GPU time-slices between the "
               "ranks' contexts, so their kernels never overlap each other: strong scaling cannot speed up (each "
               "rank's 1/p of the work still queues behind the others', plus context switches and exchanges) and "
               "weak scaling puts p times the work on one device, so time per step grows about linearly. The "
               "figures measure the decomposition's overhead, not multi-GPU speedup." if shared else
               "one rank per device; exchanges cross devices through the MPI library."))
    summary = {
        "ranks2_matches_single": matches(2),
        "ranks4_matches_single": matches(4),
        "overlap_fraction": strong["overlap"][1]["overlap_fraction"],
        "strong_speedup_2": base_s / strong["overlap"][1]["ms_per_step"],
        "strong_speedup_4": base_s / strong["overlap"][2]["ms_per_step"],
        "weak_efficiency_2": base_w / weak[1]["ms_per_step"],
        "weak_efficiency_4": base_w / weak[2]["ms_per_step"],
        "overlap_gain_2": strong["serial"][1]["ms_per_step"] / strong["overlap"][1]["ms_per_step"],
        "single_process_ms_per_step": strong["overlap"][0]["single_process_ms_per_step"],
        "transfer": any_ok["transfer"] if any_ok else None,
        "cuda_aware": any_ok["cuda_aware"] if any_ok else None,
        "gpus": n_dev,
        "ranks_share_one_gpu": shared,
    }
    data = {"summary": summary, **report_header(NAME, cd, dev),
            "mpi_library": any_ok["mpi_library"] if any_ok else None,
            "cuda_aware_source": any_ok["cuda_aware_source"] if any_ok else None,
            "launcher": " ".join(mpi.mpirun_command(2)),
            "config": {"n": args.n, "rows_per_rank_weak": args.rows, "steps": args.steps, "warmup": args.warmup,
                       "rounds": args.rounds, "ranks": list(RANKS)},
            "note": note, "strong": strong, "weak": weak, "total_seconds": total_s,
            "runs": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in results.items()}}
    data["device"]["count"] = n_dev
    write_report(args.results_dir, NAME, data,
                 None if args.no_plot else (lambda path: plot(path, strong, weak, summary, title)))
    log(f"note: {note}")

    print(f"\n=== {NAME}: {title} ({total_s:.0f} s) ===")
    print(f"{'scaling':<8} {'ranks':>5} {'grid':>11} {'ms/step':>9} {'serial':>9} {'exchange':>9} {'overlap':>8} "
          f"{'speedup':>8} {'matches':>8}")
    for i, p in enumerate(RANKS):
        o, s = strong["overlap"][i], strong["serial"][i]
        print(f"{'strong':<8} {p:>5} {f'{args.n}x{args.n}':>11} {o['ms_per_step']:>9.4f} {s['ms_per_step']:>9.4f} "
              f"{o['exchange_ms_per_step']:>9.4f} {o['overlap_fraction'] * 100:>7.0f}% "
              f"{base_s / o['ms_per_step']:>8.2f} {str(o['matches_single'] and s['matches_single']):>8}")
    single = strong["overlap"][0]["single_process_ms_per_step"]
    print(f"{'single':<8} {1:>5} {f'{args.n}x{args.n}':>11} {single:>9.4f} {'':>9} {'':>9} {'':>8} "
          f"{base_s / single:>8.2f}  (pycudadrv.heat.run, no MPI)")
    for i, p in enumerate(RANKS):
        w = weak[i]
        print(f"{'weak':<8} {p:>5} {f'{args.rows * p}x{args.n}':>11} {w['ms_per_step']:>9.4f} {'':>9} "
              f"{w['exchange_ms_per_step']:>9.4f} {w['overlap_fraction'] * 100:>7.0f}% "
              f"{base_w / w['ms_per_step']:>8.2f} {str(w['matches_single']):>8}")
    print("(ms/step: slowest rank, overlapped; serial: --no-overlap; exchange: host ms/step; overlap: share of the "
          "exchange hidden behind interior compute; speedup: strong t1/tp, weak efficiency t1/tp)")
    print(f"summary: ranks2_matches_single={summary['ranks2_matches_single']} "
          f"ranks4_matches_single={summary['ranks4_matches_single']} "
          f"overlap_fraction={summary['overlap_fraction']:.3f} transfer={summary['transfer']}")
    failed = any(r.get("rc") != 0 for reps in results.values() for r in reps)
    return 1 if failed or not (summary["ranks2_matches_single"] and summary["ranks4_matches_single"]) else 0


def plot(path: Path, strong: dict, weak: list, summary: dict, title: str) -> None:
    """Two panels: strong and weak scaling, ms/step against ranks, exchange time shaded."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    ax.plot(RANKS, [r["ms_per_step"] for r in strong["overlap"]], "o-", label="overlapped")
    ax.plot(RANKS, [r["ms_per_step"] for r in strong["serial"]], "s--", label="serial (--no-overlap)")
    ax.bar(RANKS, [r["exchange_ms_per_step"] for r in strong["overlap"]], width=0.35, alpha=0.3,
           label="host time in exchanges (overlapped)")
    for r in strong["overlap"]:
        ax.annotate(f"{r['overlap_fraction'] * 100:.0f}% hidden", (r["ranks"], r["ms_per_step"]),
                    textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.set_title(f"strong scaling, {strong['overlap'][0]['nx']}^2 grid", fontsize=10)
    ax2 = axes[1]
    ax2.plot(RANKS, [r["ms_per_step"] for r in weak], "o-", color="C2", label="overlapped")
    ax2.bar(RANKS, [r["exchange_ms_per_step"] for r in weak], width=0.35, alpha=0.3, color="C2",
            label="host time in exchanges")
    ax2.set_title(f"weak scaling, {weak[0]['ny']} rows x {weak[0]['nx']} per rank", fontsize=10)
    for a in axes:
        a.set_xlabel("MPI ranks" + (" (sharing one GPU)" if summary["ranks_share_one_gpu"] else ""))
        a.set_ylabel("ms per step (slowest rank)")
        a.set_xticks(RANKS)
        a.set_ylim(bottom=0)
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    save_figure(fig, path, f"{NAME}: {title}", fontsize=10)


if __name__ == "__main__":
    sys.exit(main())
