"""``python -m pycudadrv``: the driver, the devices, and a real workload.

Prints the driver version and a table of devices, then runs a 2-D heat
diffusion (5-point stencil) on a 2048x2048 float32 grid for 1,000 steps from
CUDA C++ compiled with ``pycudadrv.compile()``, checks the result against a
NumPy float64 reference (relative error must be under 1e-5) and prints the
steps per second. Exits 1 with one line saying why when CUDA (or NVRTC) is
unavailable, ending with a pointer to ``--info``; 2 when the check fails; and
2 with a usage line (argparse) for an argument out of range (``--size``
3..46340, ``--steps`` >= 1), checked before the GPU is.

``python -m pycudadrv --info`` prints the report of
:func:`pycudadrv.show_config` instead (version, driver, devices, NVRTC,
cache, optional libraries, environment) and exits 0, with or without a GPU.
"""
import argparse
import re
import sys

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
          f"(built against cuda.h {cd.HEADER_CUDA_VERSION // 1000}.{cd.HEADER_CUDA_VERSION % 1000 // 10})")
    print(f"{'#':>2}  {'name':<28} {'cc':>5} {'SMs':>4} {'memory (GiB)':>13}")
    for i in range(n_dev):
        d = cd.Device(i)
        cc = "%d.%d" % d.compute_capability
        print(f"{i:>2}  {d.name:<28} {cc:>5} {d.multiprocessor_count:>4} {d.total_memory / 2**30:>13.1f}")
    try:
        print(f"NVRTC {'.'.join(map(str, cd.nvrtc_version()))} at {cd.nvrtc.nvrtc_path()}")
    except cd.NvrtcUnavailableError as e:
        return _fail(e)

    n, steps = args.size, args.steps
    print(f"heat diffusion: {n}x{n} float32, {steps} steps, 5-point stencil, alpha={heat.ALPHA}")
    heat.run(64, 4)  # warm-up: compile, load, first launches
    out, seconds = heat.run(n, steps, mode="prepared")
    print(f"GPU: {steps / seconds:,.0f} steps/s ({seconds * 1e3:.1f} ms for {steps} steps)")
    ref = heat.reference(heat.initial_grid(n), steps)
    err = heat.rel_error(out, ref)
    ok = err < 1e-5
    print(f"check vs NumPy float64: relative error {err:.2e} ({'OK' if ok else 'FAIL'}, limit 1e-5); "
          f"heat total {out.astype(float).sum():.6e} vs reference {ref.sum():.6e}")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
