"""``python -m pycudadrv``: the driver, the devices, and a real workload.

Prints the driver version and a table of devices, measures this GPU's copy
bandwidth (device to device, ``Buffer.copy_to``: ``cuMemcpyDtoDAsync`` of 1 GiB,
bytes read plus written), then runs a 2-D heat diffusion (5-point stencil) on a
2048x2048 float32 grid for 1,000 steps from CUDA C++ compiled with pycudadrv.compile(), checks
each result against a NumPy float64 reference (relative error must be under
1e-5, and every way gives the same bits) and prints the ladder of ways to issue
the steps, the host doing less at each rung: eager launches (``fn.launch`` each
step), prepared launches (``fn.bind`` once, ``launch()`` each step), a captured
graph (100 steps captured once and replayed) and a device-side loop (the
graph's steps as the body of a conditional WHILE node: one launch for all of
them). Each rung gives steps per second and the stencil's memory bandwidth
(``8 n^2`` bytes a step: each cell read and written once, what a copy of the
grid moves) as a fraction of the measured copy bandwidth, the physical limit of
the stencil (a grid that fits in the L2 cache may go past it). The last line
sums it up. Exits 1 with one line saying why when CUDA (or NVRTC) is
unavailable, ending with a pointer to ``--info``; 2 when a check fails; and
2 with a usage line (argparse) for an argument out of range (``--size``
3..46340, ``--steps`` >= 1), checked before the GPU is.

``python -m pycudadrv --info`` prints the report of
:func:`pycudadrv.show_config` instead (version, driver, devices, NVRTC,
cache, optional libraries, environment) and exits 0, with or without a GPU.
"""
import argparse
import re
import sys

import numpy as np

from pycudadrv.heat import MAX_SIZE, MIN_SIZE

#: Where a one-line failure points for the whole picture.
INFO_HINT = "For what pycudadrv found (driver, devices, NVRTC, environment): python -m pycudadrv --info"


def _plain(text):
    """reStructuredText inline markup as plain terminal text: ``x`` and :func:`x` become x."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``(.+?)``", r"\1", text)


def _fail(reason):
    """Print the one line a failed run ends with (the reason, then where to look) and return 1."""
    reason = str(reason).rstrip()
    if not reason.endswith((".", "!", "?")):
        reason += "."
    print(f"pycudadrv: {reason} {INFO_HINT}", file=sys.stderr)
    return 1


def _int_in(low, high=None):
    """An argparse type: an int in [low, high] (no upper bound when high is None)."""
    allowed = f"from {low} to {high}" if high is not None else f"{low} or more"

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer (allowed: {allowed})") from None
        if v < low or (high is not None and v > high):
            raise argparse.ArgumentTypeError(f"{v} is out of range (allowed: {allowed})")
        return v

    parse.__name__ = "int"
    return parse


def main(argv=None):
    first, _, rest = __doc__.partition("\n\n")
    ap = argparse.ArgumentParser(prog="python -m pycudadrv", description=_plain(first), epilog=_plain(rest.strip()),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=_int_in(MIN_SIZE, MAX_SIZE), default=2048,
                    help=f"grid edge in cells, {MIN_SIZE} to {MAX_SIZE} (the kernel indexes with an int; "
                         "default 2048)")
    ap.add_argument("--steps", type=_int_in(1), default=1000, help="time steps, 1 or more (default 1000)")
    ap.add_argument("--info", action="store_true",
                    help="print the configuration report (pycudadrv.show_config()) and exit")
    args = ap.parse_args(argv)

    import pycudadrv as cd

    if args.info:
        cd.show_config()
        return 0
    from pycudadrv import heat

    try:
        cd.require()
        n_dev = cd.device_count()
    except cd.CudaUnavailableError as e:
        return _fail(f"CUDA unavailable: {e}")
    if n_dev == 0:
        return _fail("CUDA unavailable: the driver reports no device")

    major, minor = cd.driver_version()
    print(f"pycudadrv {cd.__version__}: CUDA driver {major}.{minor} "
          f"(built against cuda.h {cd._driver.HEADER_CUDA_VERSION // 1000}.{cd._driver.HEADER_CUDA_VERSION % 1000 // 10})")
    print(f"{'#':>2}  {'name':<28} {'cc':>5} {'SMs':>4} {'memory (GiB)':>13}")
    for i in range(n_dev):
        d = cd.Device(i)
        cc = "%d.%d" % d.compute_capability
        print(f"{i:>2}  {d.name:<28} {cc:>5} {d.multiprocessor_count:>4} {d.total_memory / 2**30:>13.1f}")
    try:
        print(f"NVRTC {'.'.join(map(str, cd.nvrtc_version()))} at {cd.nvrtc.nvrtc_path()}")
    except cd.NvrtcUnavailableError as e:
        return _fail(e)

    return _ladder(cd, heat, args.size, args.steps)


#: The rungs of the main job: (``heat.run`` mode, label, how each step is issued).
RUNGS = (("launch", "eager", "fn.launch(...) each step"),
         ("prepared", "prepared", "PreparedLaunch.launch() each step"),
         ("graph", "graph", "100 steps captured once, replayed"),
         ("device_loop", "device loop", "one launch: a WHILE node runs them"))


def _reference(heat, n, steps):
    """The NumPy float64 result: in closed form (heat.reference_fast) where that is the cheaper."""
    u0 = heat.initial_grid(n)
    if n <= 8192 and n <= 64 * steps:
        return heat.reference_fast(u0, steps)
    return heat.reference(u0, steps)


def _ladder(cd, heat, n, steps, repeats=3):
    """Measure the copy bandwidth, run every rung (best of ``repeats``, each result checked), print
    the table and the summary line; 0 when every check passed, else 2."""
    copy_bps, copied = heat.copy_bandwidth()
    print(f"copy bandwidth: {copy_bps / 1e9:,.0f} GB/s (device to device, {copied >> 20} MiB, bytes read + written)")
    moved = heat.bytes_per_step(n)
    print(f"heat diffusion: {n}x{n} float32, {steps} steps, 5-point stencil, alpha={heat.ALPHA}, "
          f"{moved / 1e6:.1f} MB moved a step at least")
    for mode, _, _ in RUNGS:                    # warm-up: compile, load, first launches of every way
        try:
            heat.run(64, 200, mode=mode)
        except cd.NotSupportedError:
            pass
    ref = _reference(heat, n, steps)
    print(f"  {'rung':<12} {'how the steps are issued':<36} {'steps/s':>9} {'ms':>7} {'GB/s':>7} "
          f"{'x copy':>6}  vs NumPy float64")
    results, first, worst, ok = {}, None, 0.0, True
    for mode, label, how in RUNGS:
        try:
            runs = [heat.run(n, steps, mode=mode) for _ in range(repeats)]
        except cd.NotSupportedError as e:
            print(f"  {label:<12} {how:<36} {'n/a':>9}  ({e})")
            results[label] = None
            continue
        out = runs[0][0]
        err = heat.rel_error(out, ref)
        same = all(np.array_equal(r[0], out) for r in runs) and (first is None or np.array_equal(out, first))
        first = out if first is None else first
        good = err < 1e-5 and same
        ok &= good
        worst = max(worst, err)
        seconds = min(r[1] for r in runs)
        results[label] = steps / seconds
        bw = moved * steps / seconds
        verdict = f"{err:.1e} {'OK' if good else 'FAIL'}" + ("" if same else " (bits differ from the first rung)")
        print(f"  {label:<12} {how:<36} {steps / seconds:>9,.0f} {seconds * 1e3:>7.2f} {bw / 1e9:>7,.0f} "
              f"{bw / copy_bps:>6.2f}  {verdict}")
    measured = {k: v for k, v in results.items() if v is not None}
    best = max(measured.values())
    ladder = " | ".join(f"{label} {'n/a' if v is None else f'{v:,.0f}'}" for label, v in results.items())
    print(f"check vs NumPy float64: {'OK' if ok else 'FAIL'} (worst relative error {worst:.1e}, limit 1e-5; "
          f"heat total {first.astype(float).sum():.6e} vs reference {ref.sum():.6e})")
    print(f"pycudadrv: {n}x{n} heat, {steps} steps: {ladder} steps/s; best {moved * best / 1e9:,.0f} GB/s = "
          f"{moved * best / copy_bps:.2f} of copy bandwidth {copy_bps / 1e9:,.0f} GB/s; check vs NumPy float64 "
          f"{'OK' if ok else 'FAIL'}")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
