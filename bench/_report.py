"""Reports of the benchmarks: the host's description, the JSON (with its flat
``summary``), the PNG, the command line, and log lines that never name the
checkout's absolute path."""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Callable

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"


def log(msg: str) -> None:
    print(msg, flush=True)



# --------------------------------------------------------------------------- environment and output

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict:
    """Host facts worth keeping next to the figures."""
    import numpy as np

    env = {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
    }
    try:
        env["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    return env


def report_header(name: str, cd, pdev, env: dict | None = None) -> dict:
    """The first keys of every benchmark's JSON: ``benchmark``, the host
    (:func:`environment`), ``device`` (name, ordinal, compute capability, arch),
    ``driver_version``, ``pycudadrv_version`` and ``nvrtc_version`` (None without NVRTC)."""
    dv = cd.driver_version()
    try:
        nvrtc = ".".join(map(str, cd.nvrtc_version()))
    except Exception:  # noqa: BLE001
        nvrtc = None
    return {
        "benchmark": name,
        **(environment() if env is None else env),
        "device": {"name": pdev.name, "ordinal": pdev.ordinal, "compute_capability": list(pdev.compute_capability),
                   "arch": pdev.arch},
        "driver_version": f"{dv[0]}.{dv[1]}",
        "pycudadrv_version": cd.__version__,
        "nvrtc_version": nvrtc,
    }


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def print_skipped(peers: dict, *dropped: dict) -> None:
    """One line per peer that is not ok, then one per row dropped during a run."""
    for name, info in peers.items():
        if info["status"] != "ok":
            print(f"{name}: {info['status']}")
    for rows in dropped:
        for name, why in rows.items():
            print(f"{name}: dropped during the run ({why})")


def write_report(results_dir: Path, name: str, data: dict, plot: Callable[[Path], None] | None) -> None:
    """Write ``<results_dir>/<name>.json``; then, unless ``plot`` is None (--no-plot),
    ``plot(<results_dir>/<name>.png)`` when matplotlib is installed. Says what it wrote."""
    out_json = results_dir / f"{name}.json"
    write_json(out_json, data)
    print(f"\nwrote {_rel(out_json)}")
    if plot is None:
        return
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        print("matplotlib not installed: no PNG")
        return
    out_png = results_dir / f"{name}.png"
    plot(out_png)
    print(f"wrote {_rel(out_png)}")


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, title: str, fontsize: int = 11) -> None:
    """Title, lay out and save ``fig`` as ``path`` (120 dpi), then close it."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=fontsize)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- tables

def _cell(value, width: int, fmt: str) -> str:
    """``value`` in ``width`` columns: right-aligned with format ``fmt`` (``"<"``: a
    left-aligned text after two spaces); None is blank."""
    if fmt == "<":
        return "  " + ("" if value is None else f"{value:<{width - 2}}")
    if value is None:
        return " " * width
    return f"{value:>{width}{fmt}}"


def print_table(columns, rows, *, first: str = "row", heading: str | None = None, note: str | None = None) -> None:
    """A table: ``columns`` is ``[(title, width, fmt), ...]`` after the name column (``fmt``
    a format spec such as ``".3f"``, ``"<"`` for left-aligned text); ``rows`` is
    ``[(name, value, ...), ...]`` with None for a blank cell. ``heading`` goes before it
    (after an empty line; ``""``: the empty line alone), ``note`` after it."""
    w = max([len(first)] + [len(r[0]) for r in rows]) + 2
    if heading is not None:
        print(f"\n{heading}" if heading else "")
    print(f"{first:<{w}}" + "".join(_cell(t, wd, "<" if f == "<" else "") for t, wd, f in columns))
    print("-" * (w + sum(wd for _, wd, _ in columns)))
    for name, *vals in rows:
        print((f"{name:<{w}}" + "".join(_cell(v, wd, f) for v, (_, wd, f) in zip(vals, columns))).rstrip())
    if note:
        print(note)


def verdict(rep: dict, sign: str = "<=") -> tuple:
    """(target text, "PASS"/"FAIL") of a row report with a ``target``, else (None, None)."""
    if "target" not in rep:
        return None, None
    return f"{sign} {rep['target']:.2f}", "PASS" if rep["pass"] else "FAIL"


def print_ratio_table(rep: dict, *, heading: str | None = None, key: str = "per_launch_us",
                      unit: str = "us/launch", ratio: str = "x floor", fmt: str = ".3f", drain: bool = True,
                      extra=(), order=None, note: str | None = None) -> None:
    """The table of an :meth:`Interleaved.table_report`: per row the median ``<key>`` (as
    ``unit``), the median ratio to the floor with its min and max, the median drain time
    (``drain``), target and PASS/FAIL (when a row has a target); ``extra`` adds columns after ``unit``, each
    ``(title, width, fmt, value(row_report))``; ``order``: the rows (default all)."""
    fl, rows = rep["floor"], rep["rows"]
    cols = [(unit, 10, fmt)] + [(t, wd, f) for t, wd, f, _ in extra] + [(ratio, 9, ".3f"), ("min", 9, ".3f"),
                                                                        ("max", 9, ".3f")]
    if drain:
        cols.append(("drain us", 10, ".1f"))
    targets = any("target" in r for r in rows.values())
    if targets:
        cols += [("target", 9, ""), ("result", 8, "<")]

    def line(name, r, is_floor):
        rt = r.get("ratio_summary")
        vals = [name, r[f"{key}_summary"]["median"], *[get(r) for _, _, _, get in extra],
                1.0 if is_floor else rt["median"], None if is_floor else rt["min"], None if is_floor else rt["max"]]
        if drain:
            vals.append(median_or_nan(r["drain_us"]))
        return (*vals, *verdict(r)) if targets else tuple(vals)

    table = [line(fl["name"], fl, True)] + [line(n, rows[n], False) for n in (rows if order is None else order)]
    print_table(cols, table, heading=heading, note=note)


def drift_note(floor: dict, who: str = "floor", tail: str = "") -> str:
    """``(<who> drift within a round, last/first: median m, range a..b<tail>)``."""
    d = floor["drift_summary"]
    if not d.get("n"):
        return f"({who} drift: no rounds{tail})"
    return f"({who} drift within a round, last/first: median {d['median']:.3f}, range {d['min']:.3f}..{d['max']:.3f}{tail})"


def median_or_nan(values) -> float:
    return statistics.median(values) if values else float("nan")


# --------------------------------------------------------------------------- plots

def row_color(name: str, floor: bool = False) -> str:
    """Grey for a floor (or a row named "C ..."), blue for pycudadrv, orange for a peer."""
    if floor or name.startswith("C ") or name.startswith("C:"):
        return "0.5"
    return "tab:blue" if name.startswith("pycudadrv") else "tab:orange"


def bar_panel(ax, names, values, *, lo=None, hi=None, colors=None, labels=None, marks=None, vline=None,
              xlabel: str = "", title: str = "", room: float = 1.3, fontsize: int = 7) -> None:
    """Horizontal bars, first name on top: ``values`` with whiskers ``lo``/``hi`` (distances
    below and above), ``labels`` (text after each bar), ``marks`` (``{index: x}``: a red
    dashed tick on that bar, e.g. its target), ``vline`` (a black line across, e.g. 1.0)."""
    n = len(names)
    lo = [0.0] * n if lo is None else lo
    hi = [0.0] * n if hi is None else hi
    y = list(range(n))
    ax.barh(y, values, xerr=[lo, hi], color=colors or [row_color(nm) for nm in names], capsize=3)
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=fontsize + 1 if n < 8 else fontsize)
    ax.invert_yaxis()
    if vline is not None:
        ax.axvline(vline, color="k", lw=0.8)
    marks = marks or {}
    right = max([v + h for v, h in zip(values, hi)] + list(marks.values()) + [1e-12])
    for i in range(n):
        if labels is not None:
            ax.text(values[i] + hi[i] + 0.015 * right, i, labels[i], va="center", fontsize=fontsize)
        if i in marks:
            ax.plot([marks[i]] * 2, [i - 0.42, i + 0.42], color="red", ls="--", lw=1.2)
    ax.set_xlim(0, right * room)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_title(title, fontsize=9)


def ratio_panel(ax, rep: dict, *, key: str = "per_launch_us", unit: str = "us", fmt: str = "%.2f",
                title: str = "", order=None, targets=None, room: float = 1.3,
                xlabel: str = "time / C floor of the same round (median over rounds; whiskers: p25..p75)") -> None:
    """The bars of an :meth:`Interleaved.table_report`: each row's median ratio to the
    floor (whiskers p25..p75), labelled ``<ratio>x (<median key> <unit>)``, a red tick at
    each row's target (``targets``: ``{name: target}``, default the rows' own)."""
    fl, rows = rep["floor"], rep["rows"]
    order = list(rows) if order is None else list(order)
    names = [fl["name"], *order]
    summ = [rows[n]["ratio_summary"] for n in order]
    med = [1.0] + [r["median"] for r in summ]
    lo = [0.0] + [r["median"] - r["p25"] for r in summ]
    hi = [0.0] + [r["p75"] - r["median"] for r in summ]
    targets = {n: rows[n]["target"] for n in order if "target" in rows[n]} if targets is None else targets
    us = [fl[f"{key}_summary"]["median"]] + [rows[n][f"{key}_summary"]["median"] for n in order]
    bar_panel(ax, names, med, lo=lo, hi=hi, colors=[row_color(n, i == 0) for i, n in enumerate(names)],
              labels=[f"{m:.2f}x  ({fmt % u} {unit})" for m, u in zip(med, us)],
              marks={i: targets[n] for i, n in enumerate(names) if n in targets}, vline=1.0,
              xlabel=xlabel, title=title, room=room)


# --------------------------------------------------------------------------- command line

def new_parser(doc: str) -> argparse.ArgumentParser:
    """The benchmark's parser; its description is the first paragraph of ``doc``."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def common_args(ap: argparse.ArgumentParser, *, rounds: int, launches: int | None = None,
                warmup: bool = True, peers: str | None = None, rotate: bool = True) -> None:
    """The options every interleaved benchmark has: ``--rounds`` (default ``rounds``),
    ``--launches`` (when a default is given), ``--warmup-rounds`` (``warmup``),
    ``--no-peers`` (``peers``: what it skips) and ``--no-rotate`` (``rotate``). Check
    them after parsing with :func:`check_common_args`."""
    ap.add_argument("--rounds", type=int, default=rounds, help=f"counted rounds (default {rounds})")
    if launches is not None:
        ap.add_argument("--launches", type=int, default=launches,
                        help=f"launches per row per round (default {launches})")
    if warmup:
        ap.add_argument("--warmup-rounds", type=int, default=1, help="uncounted rounds first (default 1)")
    if peers is not None:
        ap.add_argument("--no-peers", action="store_true", help=f"skip {peers}")
    if rotate:
        ap.add_argument("--no-rotate", action="store_true", help="same row order every round")


def check_common_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``ap.error`` unless --rounds (and --launches) >= 1 and --warmup-rounds >= 0; returns ``args``."""
    if args.rounds < 1 or getattr(args, "launches", 1) < 1 or getattr(args, "warmup_rounds", 0) < 0:
        ap.error("--rounds" + (" and --launches" if hasattr(args, "launches") else "") + " must be >= 1"
                 + (", --warmup-rounds >= 0" if hasattr(args, "warmup_rounds") else ""))
    return args


def add_output_args(ap: argparse.ArgumentParser) -> None:
    """--no-plot, --results-dir and --strict (the last options of every benchmark)."""
    ap.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="default bench/results")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")


def _rel(path) -> str:
    p = os.path.abspath(str(path))
    return os.path.relpath(p, REPO_DIR) if p.startswith(str(REPO_DIR) + os.sep) else str(path)
