"""The differential fuzz (tests/_fuzz_programs.py): random programs over
streams, events, views, another library's arrays on their own streams,
generic/prepared/sequence launches, captures and replays, device loops, Queue
DAGs, awaits, frees and stream closes, each compared bit for bit with the same
program run eagerly in order on one stream; guard words around every
allocation are checked after every step.

The seed is fresh each run and printed; PYCUDADRV_FUZZ_SEED=<seed> repeats a
run, and ``python tools/fuzz_seams.py --seed <seed>`` replays one program (and
runs long fuzzes)."""
import os
import time

import pytest

pytestmark = pytest.mark.gpu

PROGRAMS = 90          # about 25 steps each: over 2,000 steps in the suite
SEGMENTS = 10


def test_random_programs_match_their_eager_in_order_run_bit_for_bit():
    import _fuzz_programs as fz

    base = int(os.environ.get("PYCUDADRV_FUZZ_SEED") or int.from_bytes(os.urandom(4), "little"))
    libs = fz.available_libs()
    print(f"fuzz base seed {base} (libraries: {', '.join(libs) or 'none'}); replay one program with "
          f"python tools/fuzz_seams.py --seed <seed>")
    t0 = time.perf_counter()
    steps, failures = 0, []
    for k in range(PROGRAMS):
        seed = base + k
        n, bad, guard = fz.run_program(seed, SEGMENTS, libs)
        steps += n
        if bad or guard is not None:
            failures.append(f"seed {seed}: slots {bad} differ from the eager run" if bad else
                            f"seed {seed}: a guard word was overwritten by step {guard}")
    print(f"fuzz: {PROGRAMS} programs, {steps} steps in {time.perf_counter() - t0:.1f} s, "
          f"{len(failures)} failing")
    assert steps >= 2000
    assert failures == [], "\n".join(failures)
