"""The differential fuzz (tests/_fuzz_programs.py): random programs over
streams, events, views, another library's arrays on their own streams,
generic/prepared/sequence launches, captures and replays, device loops, Queue
DAGs, awaits, frees and stream closes, each compared bit for bit with the same
program run eagerly in order on one stream; guard words around every
allocation are checked after every step.

Each run is a child process (tools/fuzz_seams.py), so a crash fails this test
with the seed that crashed (and, where cuda-gdb is installed, its native
backtrace, with PYCUDADRV_FUZZ_GDB=1) instead of ending the suite. The seed is fresh each run and printed;
PYCUDADRV_FUZZ_SEED=<seed> repeats a run, and
``python tools/fuzz_seams.py --seed <seed>`` replays one program."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import pycudadrv as cd

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "fuzz_seams.py")
PROGRAMS = 45          # per run below, about 25 steps each: over 2,000 steps in the suite
SEGMENTS = 10


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cd.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONFAULTHANDLER"] = "1"
    return env


def _backtrace(seed, extra):
    gdb = shutil.which("cuda-gdb") or shutil.which("gdb")
    if os.environ.get("PYCUDADRV_FUZZ_GDB") != "1" or gdb is None:
        return ("(set PYCUDADRV_FUZZ_GDB=1 with cuda-gdb or gdb installed for a native backtrace: "
                f"{gdb or 'neither is here'})")
    try:
        r = subprocess.run([gdb, "-batch", "-ex", "run", "-ex", "bt 30", "--args", sys.executable, TOOL, "--seed",
                            str(seed), *extra], capture_output=True, text=True, timeout=300, env=_env())
    except subprocess.TimeoutExpired:
        return f"({gdb} took more than 300 s)"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("#") or "signal" in ln.lower()]
    return "\n".join(lines[-40:]) or r.stdout[-3000:]


@pytest.mark.skipif(not os.path.exists(TOOL), reason="tools/fuzz_seams.py is not beside these tests (an installed "
                    "copy of the tests): the checkout's run covers the fuzz")
@pytest.mark.parametrize("libs", ["wrappers", "libraries"])
def test_random_programs_match_their_eager_in_order_run_bit_for_bit(libs):
    base = int(os.environ.get("PYCUDADRV_FUZZ_SEED") or int.from_bytes(os.urandom(4), "little"))
    base += 0 if libs == "wrappers" else 1_000_003
    extra = ["--no-libs"] if libs == "wrappers" else []
    r = subprocess.run([sys.executable, TOOL, "--base", str(base), "--programs", str(PROGRAMS), "--segments",
                        str(SEGMENTS), "--progress", "--hang-dump", "60", *extra], capture_output=True, text=True, timeout=220, env=_env())
    print(r.stdout[-4000:])
    if r.returncode not in (0, 1):
        started = re.findall(r"^seed (\d+) \.\.\.", r.stdout, re.M)
        seed = int(started[-1]) if started else base
        pytest.fail(f"the fuzz child crashed (exit {r.returncode}) in program seed {seed} (replay: python "
                    f"tools/fuzz_seams.py --seed {seed} {' '.join(extra)})\nstderr:\n{r.stderr[-3000:]}\n"
                    f"native backtrace:\n{_backtrace(seed, extra)}")
    summary = re.search(r"fuzz: (\d+) programs, (\d+) steps, (\d+) failing", r.stdout)
    assert summary, r.stdout[-2000:] + r.stderr[-2000:]
    programs, steps, failing = map(int, summary.groups())
    assert programs == PROGRAMS and steps >= 1000
    assert failing == 0, "\n".join(ln for ln in r.stdout.splitlines() if ln.startswith("FAIL"))
    assert r.returncode == 0
