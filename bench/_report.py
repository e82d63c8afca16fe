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


# --------------------------------------------------------------------------- command line

def new_parser(doc: str) -> argparse.ArgumentParser:
    """The benchmark's parser; its description is the first paragraph of ``doc``."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_output_args(ap: argparse.ArgumentParser) -> None:
    """--no-plot, --results-dir and --strict (the last options of every benchmark)."""
    ap.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="default bench/results")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")


def _rel(path) -> str:
    p = os.path.abspath(str(path))
    return os.path.relpath(p, REPO_DIR) if p.startswith(str(REPO_DIR) + os.sep) else str(path)
