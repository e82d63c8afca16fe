#!/usr/bin/env python3
"""Run the differential fuzz of tests/fuzz/test_gpu_fuzz.py for longer, or replay one program.

    python tools/fuzz_seams.py --seed 1234            # one program (the seed a failure printed)
    python tools/fuzz_seams.py --programs 2000        # a long run from a fresh base seed
    python tools/fuzz_seams.py --base 77 --programs 500 --segments 20

Prints each failing seed; exits 1 if any program differed from its eager in-order run
or overwrote a guard word. Needs a GPU."""
import argparse
import faulthandler
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import _fuzz_programs as fz  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="replay this one program")
    ap.add_argument("--base", type=int, help="first seed of a run (default: fresh)")
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--segments", type=int, default=10)
    ap.add_argument("--no-libs", action="store_true", help="no PyTorch/CuPy slots (wrappers only)")
    ap.add_argument("--progress", action="store_true", help="print each seed as it starts (to name a crash)")
    ap.add_argument("--hang-dump", type=float, default=0, metavar="S",
                    help="a program still running after S seconds: print every thread's stack and exit")
    a = ap.parse_args()
    libs = () if a.no_libs else fz.available_libs()
    base = a.base if a.base is not None else int.from_bytes(os.urandom(4), "little")
    seeds = [a.seed] if a.seed is not None else [base + k for k in range(a.programs)]
    print(f"fuzz: seeds {seeds[0]}..{seeds[-1]}, {a.segments} segments, libraries: {', '.join(libs) or 'none'}")
    t0 = time.perf_counter()
    steps = bad_runs = 0
    for seed in seeds:
        if a.progress:
            print(f"seed {seed} ...", flush=True)
        if a.hang_dump:
            faulthandler.dump_traceback_later(a.hang_dump, exit=True)
        n, bad, guard = fz.run_program(seed, a.segments, libs)
        steps += n
        if bad or guard is not None:
            bad_runs += 1
            print(f"FAIL seed {seed}: slots {bad}, first guard hit at step {guard}")
    print(f"fuzz: {len(seeds)} programs, {steps} steps, {bad_runs} failing, {time.perf_counter() - t0:.1f} s")
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
