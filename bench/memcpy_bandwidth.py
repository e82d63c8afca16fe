#!/usr/bin/env python3
"""Copy bandwidth of pycudadrv against CuPy and the device's measured copy bandwidth.

What is measured
----------------
Five kinds of copy, each at sizes from 4 KiB to 1 GiB (powers of 4), on one
owned non-blocking stream of device 0:

* **H2D pinned / pageable** -- host to device from page-locked memory (a
  ``HostBuffer``) or from an ordinary numpy array: pycudadrv
  ``buf.write(view, offset, stream)`` (``cuMemcpyHtoDAsync``) against CuPy
  ``cupy.cuda.runtime.memcpyAsync(..., memcpyHostToDevice, stream)``;
* **D2H pinned / pageable** -- device to host: pycudadrv ``buf.read(out=view,
  offset=..., nbytes=..., stream=s, synchronize=False)`` (``cuMemcpyDtoHAsync``)
  against ``memcpyAsync(..., memcpyDeviceToHost, ...)``;
* **D2D** -- device to device: pycudadrv ``a.copy_to(b, nbytes, src_offset,
  dst_offset, stream)`` (``cuMemcpyDtoDAsync``) against ``memcpyAsync(...,
  memcpyDeviceToDevice, ...)``, and a copy kernel (16-byte loads and stores,
  four in flight per thread, compiled here with NVRTC) launched through a
  prepared launch. D2D bandwidth counts the bytes read plus the bytes
  written (2 x size / time), as a device's memory bandwidth is quoted.

Both libraries copy between the same allocations (pycudadrv's; CuPy gets
their addresses and pycudadrv's stream), so only the path from Python to the
copy engine differs. H2D and D2H bandwidth counts the bytes moved once.

Method
------
A batch is ``n`` copies of one size (``n`` from the bytes per batch, between
2 and 256), each to the next of up to 16 slots of the pools (rotating
buffers, so no copy finds the previous one's lines in a cache), bracketed by
two CUDA events (``pycudadrv.Event``) on the stream; bandwidth = n x bytes /
``Event.elapsed_ms``. A round runs every batch of every kind and size, the
two libraries in turn, their order swapped every round; one warm-up round is
not counted, then ``--rounds`` rounds. For each figure: the median over
rounds; each pycudadrv/CuPy ratio is taken within a round, then the median.
The measured copy bandwidth of the device (``peak``) is the best median D2D
bandwidth over the copy kernel, pycudadrv and CuPy at sizes of 256 MiB and
more. Copied data is checked (H2D, D2D, copy kernel, D2H round trip of random
bytes) before anything is timed.

A C floor adds nothing here: at the sizes the targets concern, the copy
engines, not the call path, set the time.

Targets (H200): every copy of 64 MiB or more within 5% of CuPy
(``worst_large_copy_vs_cupy`` >= 0.95); D2D within 10% of the measured copy
bandwidth (``d2d_fraction_of_peak`` >= 0.90; about 4.3 TB/s on an H200).

Output: the table on stdout, ``bench/results/memcpy_bandwidth.json`` (flat
``summary``, every per-round figure) and ``bench/results/memcpy_bandwidth.png``
(bandwidth against size, the ratios) when matplotlib is installed.

Usage: ``python bench/memcpy_bandwidth.py [--rounds 7]`` (``--help`` for the
rest). Exits 2 when CUDA or NVRTC is missing (CuPy is optional: its columns
are then empty); with ``--strict``, 1 when a target is missed.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import (add_output_args, check_common_args, common_args, log, median_or_nan, new_parser,  # noqa: E402
                     pyplot, report_header, save_figure, write_report)

try:
    from _harness import cuda_missing, summarize  # noqa: E402  (the harness imports pycudadrv)
except ImportError as _e:
    print(f"memcpy_bandwidth: pycudadrv is not importable (install it, or build it in place with "
          f"`python -m pip install -e .`): {_e}", file=sys.stderr)
    sys.exit(2)

KINDS = ("H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable", "D2D")
PY, CUPY, KERNEL = "pycudadrv", "CuPy", "copy kernel"
LARGE = 64 << 20              # the targets concern copies of this many bytes or more
PEAK_FROM = 256 << 20         # the peak is taken over sizes from here up
MAX_SLOTS = 16
MIN_COPIES, MAX_COPIES = 2, 256
TARGET_VS_CUPY = 0.95
TARGET_D2D_FRACTION = 0.90

COPY_KERNEL = r"""
extern "C" __global__ void copy16(const int4* __restrict__ src, int4* __restrict__ dst, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}
"""
COPY_BLOCK = 256


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def batch_copies(size: int, batch_bytes: int) -> int:
    return max(MIN_COPIES, min(MAX_COPIES, math.ceil(batch_bytes / size)))


class Setup:
    """Pools shared by every size: device A and B, pinned and pageable host memory,
    each ``pool`` bytes; per size, up to MAX_SLOTS slots of each."""

    def __init__(self, cd, pool: int, sizes: list[int]):
        self.cd = cd
        self.dev = cd.Device(0)
        self.dev.set_current()
        self.s = cd.Stream()
        self.pool = pool
        self.a = cd.Buffer.empty(pool, stream=self.s)
        self.b = cd.Buffer.empty(pool, stream=self.s)
        self.pinned = cd.HostBuffer.empty(pool)
        self.pageable = np.empty(pool, np.uint8)
        self.pinned.array.fill(1)          # touch every page once, outside any timing
        self.pageable.fill(1)
        self.a.fill(np.uint8(2), stream=self.s)
        self.b.fill(np.uint8(3), stream=self.s)
        self.s.synchronize()
        self.sizes = sizes
        self.start, self.end = cd.Event(), cd.Event()
        self.slots = {size: max(1, min(MAX_SLOTS, pool // size)) for size in sizes}
        self.views = {}                    # (host kind, size) -> one host view per slot
        for size in sizes:
            k = self.slots[size]
            self.views["pinned", size] = [self.pinned.array[j * size:(j + 1) * size] for j in range(k)]
            self.views["pageable", size] = [self.pageable[j * size:(j + 1) * size] for j in range(k)]

    def time_batch(self, issue) -> float:
        """Milliseconds between two events around ``issue()`` on the stream."""
        self.start.record(self.s)
        issue()
        self.end.record(self.s)
        return self.cd.Event.elapsed_ms(self.start, self.end)


def pycudadrv_issuers(st: Setup, kind: str, size: int, n: int):
    k = st.slots[size]
    s = st.s
    if kind.startswith("H2D"):
        views = st.views[kind.split()[1], size]
        write = st.a.write

        def issue():
            for j in range(n):
                write(views[j % k], (j % k) * size, s)
    elif kind.startswith("D2H"):
        views = st.views[kind.split()[1], size]
        read = st.a.read

        def issue():
            for j in range(n):
                read(views[j % k], (j % k) * size, size, s, False)
    else:
        a, b = st.a, st.b

        def issue():
            copy = a.copy_to
            for j in range(n):
                off = (j % k) * size
                copy(b, size, off, off, s)
    return issue


def cupy_issuer(cupy, st: Setup, kind: str, size: int, n: int):
    rt = cupy.cuda.runtime
    memcpy = rt.memcpyAsync
    k = st.slots[size]
    sh = st.s.handle
    dev_a = [st.a.ptr + j * size for j in range(k)]
    if kind == "D2D":
        dev_b = [st.b.ptr + j * size for j in range(k)]
        how = getattr(rt, "memcpyDeviceToDevice", 3)

        def issue():
            for j in range(n):
                memcpy(dev_b[j % k], dev_a[j % k], size, how, sh)
        return issue
    host = [v.ctypes.data for v in st.views[kind.split()[1], size]]
    if kind.startswith("H2D"):
        how = getattr(rt, "memcpyHostToDevice", 1)

        def issue():
            for j in range(n):
                memcpy(dev_a[j % k], host[j % k], size, how, sh)
    else:
        how = getattr(rt, "memcpyDeviceToHost", 2)

        def issue():
            for j in range(n):
                memcpy(host[j % k], dev_a[j % k], size, how, sh)
    return issue


def kernel_issuer(st: Setup, fn, size: int, n: int):
    k = st.slots[size]
    grid = max(1, min(math.ceil(size // 16 / COPY_BLOCK), st.dev.multiprocessor_count * 8))
    launches = [fn.bind(grid, COPY_BLOCK, st.a.ptr + j * size, st.b.ptr + j * size, size // 16, stream=st.s).launch
                for j in range(k)]

    def issue():
        for j in range(n):
            launches[j % k]()
    return issue


def check_copies(cd, st: Setup, fn, cupy, rng) -> list[str]:
    """Random bytes through every copy path once; returns what went wrong (empty: all right)."""
    size = min(4 << 20, st.pool // 2)
    problems = []
    data = rng.integers(0, 256, size, dtype=np.uint8)
    back = np.full(size, 0x5A, np.uint8)
    st.a.write(data, 0, st.s)
    st.a.copy_to(st.b, size, 0, size, st.s)                 # D2D to the second slot of b
    st.b.read(back, size, size, st.s, True)
    if not np.array_equal(back, data):
        problems.append("pycudadrv H2D + D2D + D2H round trip differs")
    st.b.fill(np.uint8(0xA5), stream=st.s)
    fn.launch(64, COPY_BLOCK, st.a.ptr, st.b.ptr, size // 16, stream=st.s)
    back.fill(0x5A)
    st.b.read(back, 0, size, st.s, True)
    if not np.array_equal(back, data):
        problems.append("copy kernel output differs from its input")
    if cupy is not None:
        rt = cupy.cuda.runtime
        st.b.fill(np.uint8(0xA5), stream=st.s)
        rt.memcpyAsync(st.b.ptr, st.a.ptr, size, getattr(rt, "memcpyDeviceToDevice", 3), st.s.handle)
        back.fill(0x5A)
        rt.memcpyAsync(back.ctypes.data, st.b.ptr, size, getattr(rt, "memcpyDeviceToHost", 2), st.s.handle)
        st.s.synchronize()
        if not np.array_equal(back, data):
            problems.append("CuPy D2D + D2H round trip differs")
    return problems


def run(st: Setup, fn, cupy, rounds: int, batch_bytes: dict) -> tuple[dict, dict]:
    """{kind: {lib: {size: [GB/s per round]}}} and {kind: {size: [pycudadrv/CuPy per round]}}."""
    issuers = {}
    for kind in KINDS:
        for size in st.sizes:
            n = batch_copies(size, batch_bytes[kind])
            libs = {PY: pycudadrv_issuers(st, kind, size, n)}
            if cupy is not None:
                libs[CUPY] = cupy_issuer(cupy, st, kind, size, n)
            if kind == "D2D":
                libs[KERNEL] = kernel_issuer(st, fn, size, n)
            issuers[kind, size] = (n, libs)
    bw = {kind: {} for kind in KINDS}
    ratios = {kind: {size: [] for size in st.sizes} for kind in KINDS}
    for r in range(-1, rounds):                      # round -1: warm-up, not counted
        for kind in KINDS:
            for size in st.sizes:
                n, libs = issuers[kind, size]
                order = list(libs) if r % 2 == 0 else list(reversed(libs))
                got = {}
                for lib in order:
                    ms = st.time_batch(libs[lib])
                    moved = n * size * (2 if kind == "D2D" else 1)
                    got[lib] = moved / (ms * 1e-3) / 1e9
                if r < 0:
                    continue
                for lib, v in got.items():
                    bw[kind].setdefault(lib, {}).setdefault(size, []).append(v)
                if CUPY in got:
                    ratios[kind][size].append(got[PY] / got[CUPY])
        if r >= 0:
            log(f"  round {r + 1}/{rounds}: " + ", ".join(
                f"{kind} {size_text(st.sizes[-1])} {median_or_nan(bw[kind][PY][st.sizes[-1]]):.1f} GB/s"
                for kind in KINDS))
    return bw, ratios


def plot(path: Path, sizes: list[int], med: dict, ratio_med: dict, peak: float, title: str) -> None:
    plt = pyplot()
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 5.2))
    x = np.array(sizes, dtype=float)
    colors = {"H2D pinned": "tab:blue", "H2D pageable": "tab:cyan", "D2H pinned": "tab:red",
              "D2H pageable": "tab:orange", "D2D": "tab:green"}
    for kind in KINDS[:4]:
        for lib, style in ((PY, "-o"), (CUPY, "--x")):
            if lib in med[kind]:
                ax1.plot(x, [med[kind][lib][s] for s in sizes], style, color=colors[kind], ms=4,
                         label=f"{kind}, {lib}")
    ax1.set(xscale="log", yscale="log", xlabel="copy size (bytes)", ylabel="GB/s (bytes moved / time)",
            title="host <-> device")
    ax1.legend(fontsize=7)
    for lib, style in ((PY, "-o"), (CUPY, "--x"), (KERNEL, ":s")):
        if lib in med["D2D"]:
            ax2.plot(x, [med["D2D"][lib][s] for s in sizes], style, ms=4, label=f"D2D, {lib}")
    if peak == peak:
        ax2.axhline(peak, color="gray", lw=0.8, label=f"measured copy bandwidth {peak:.0f} GB/s")
        ax2.axhline(peak * TARGET_D2D_FRACTION, color="gray", lw=0.8, ls="--", label="90% of it (target)")
    ax2.set(xscale="log", yscale="log", xlabel="copy size (bytes)", ylabel="GB/s (bytes read + written / time)",
            title="device to device")
    ax2.legend(fontsize=7)
    for kind in KINDS:
        ys = [ratio_med[kind][s] for s in sizes]
        if any(y == y for y in ys):
            ax3.plot(x, ys, "-o", color=colors[kind], ms=4, label=kind)
    ax3.axhline(1.0, color="gray", lw=0.8)
    ax3.axhline(TARGET_VS_CUPY, color="gray", lw=0.8, ls="--", label="0.95 (target from 64 MiB)")
    if x[-1] >= LARGE:
        ax3.axvspan(LARGE, x[-1] * 1.5, color="gray", alpha=0.08)
    ax3.set(xscale="log", xlabel="copy size (bytes)", ylabel="pycudadrv / CuPy bandwidth (same round)",
            title="ratio to CuPy")
    ax3.legend(fontsize=7)
    save_figure(fig, path, title)


def main(argv=None) -> int:
    ap = new_parser(__doc__)
    common_args(ap, rounds=7, warmup=False, rotate=False)     # one warm-up round, always
    ap.add_argument("--min-size", type=int, default=4 << 10, help="smallest copy in bytes (default 4 KiB)")
    ap.add_argument("--max-size", type=int, default=1 << 30, help="largest copy in bytes (default 1 GiB)")
    ap.add_argument("--batch-mib", type=int, default=256,
                    help="bytes per host<->device batch in MiB (default 256; D2D batches 8x that)")
    ap.add_argument("--no-cupy", action="store_true", help="leave CuPy out")
    add_output_args(ap)
    args = check_common_args(ap, ap.parse_args(argv))
    if args.min_size < 16 or args.min_size % 16 or args.max_size < args.min_size:
        ap.error("--min-size must be a multiple of 16 bytes and at most --max-size")

    try:
        import pycudadrv as cd
    except ImportError as e:
        print(f"memcpy_bandwidth: pycudadrv is not importable (install it, or build it in place with "
              f"`python -m pip install -e .`): {e}", file=sys.stderr)
        return 2
    why = cuda_missing(cd)
    if why is not None:
        print(f"memcpy_bandwidth: {why}", file=sys.stderr)
        return 2
    try:
        fn = cd.compile(COPY_KERNEL).load().function("copy16")
    except cd.NvrtcUnavailableError as e:
        print(f"memcpy_bandwidth: NVRTC is needed for the copy kernel: {e}", file=sys.stderr)
        return 2
    cupy, cupy_status = None, "skipped: --no-cupy"
    if not args.no_cupy:
        try:
            import cupy

            cupy.cuda.Device(0).use()
            cupy_status = f"ok (CuPy {cupy.__version__})"
        except Exception as e:  # noqa: BLE001 -- an optional peer: its columns stay empty
            cupy, cupy_status = None, f"skipped: {type(e).__name__}: {e}"
    sizes = []
    size = args.min_size
    while size <= args.max_size:
        sizes.append(size)
        size *= 4
    pool = 2 * sizes[-1]
    st = Setup(cd, pool, sizes)
    dv = cd.driver_version()
    title = (f"{st.dev.name}, driver CUDA {dv[0]}.{dv[1]}, pycudadrv {cd.__version__}; "
             f"{args.rounds} rounds, {size_text(sizes[0])} to {size_text(sizes[-1])}")
    log(f"memcpy_bandwidth: {title}")
    log(f"  CuPy: {cupy_status}; pools of {size_text(pool)} (device x2, pinned, pageable)")
    problems = check_copies(cd, st, fn, cupy, np.random.default_rng())
    for p in problems:
        print(f"memcpy_bandwidth: check failed: {p}", file=sys.stderr)
    batch = {kind: args.batch_mib << 20 for kind in KINDS}
    batch["D2D"] = 8 * (args.batch_mib << 20)
    bw, ratios = run(st, fn, cupy, args.rounds, batch)

    med = {kind: {lib: {s: median_or_nan(v) for s, v in per.items()} for lib, per in libs.items()}
           for kind, libs in bw.items()}
    ratio_med = {kind: {s: median_or_nan(v) for s, v in per.items()} for kind, per in ratios.items()}
    large = [(ratio_med[k][s], k, s) for k in KINDS for s in sizes if s >= LARGE and ratio_med[k][s] == ratio_med[k][s]]
    worst = min(large) if large else None
    peak_cands = [(med["D2D"][lib][s], lib, s) for lib in med["D2D"] for s in sizes if s >= PEAK_FROM]
    if not peak_cands:   # --max-size below PEAK_FROM: the largest size stands in
        peak_cands = [(med["D2D"][lib][sizes[-1]], lib, sizes[-1]) for lib in med["D2D"]]
    peak, peak_lib, peak_size = max(peak_cands)
    d2d_py = med["D2D"][PY][sizes[-1]]
    fraction = d2d_py / peak
    summary = {
        "worst_large_copy_vs_cupy": worst[0] if worst else None,
        "worst_large_copy": f"{worst[1]} {size_text(worst[2])}" if worst else None,
        "d2d_fraction_of_peak": fraction,
        "d2d_pycudadrv_gb_s": d2d_py,
        "peak_copy_bandwidth_gb_s": peak,
        "peak_from": f"{peak_lib} {size_text(peak_size)}",
        "copy_kernel_gb_s": med["D2D"][KERNEL][sizes[-1]],
        "h2d_pinned_gb_s": med["H2D pinned"][PY][sizes[-1]],
        "d2h_pinned_gb_s": med["D2H pinned"][PY][sizes[-1]],
        "h2d_pageable_gb_s": med["H2D pageable"][PY][sizes[-1]],
        "d2h_pageable_gb_s": med["D2H pageable"][PY][sizes[-1]],
        "checks_ok": not problems,
    }
    targets = {"worst_large_copy_vs_cupy": {"target": f">= {TARGET_VS_CUPY}", "value": summary[
        "worst_large_copy_vs_cupy"], "passed": None if worst is None else worst[0] >= TARGET_VS_CUPY},
               "d2d_fraction_of_peak": {"target": f">= {TARGET_D2D_FRACTION}", "value": fraction,
                                        "passed": fraction >= TARGET_D2D_FRACTION}}
    passed = not problems and all(t["passed"] is not False for t in targets.values())

    pdev = st.dev
    data = {
        **report_header("memcpy_bandwidth", cd, pdev),
        "cupy": cupy_status,
        "summary": summary,
        "targets": targets,
        "passed": passed,
        "checks": problems,
        "config": {"rounds": args.rounds, "sizes": sizes, "slots": st.slots, "pool_bytes": pool,
                   "copies_per_batch": {k: {s: batch_copies(s, batch[k]) for s in sizes} for k in KINDS},
                   "d2d_counts": "bytes read + bytes written", "h2d_d2h_counts": "bytes moved",
                   "copy_kernel": {"block": COPY_BLOCK, "max_grid": pdev.multiprocessor_count * 8}},
        "gb_per_s": {kind: {lib: {str(s): summarize(v) for s, v in per.items()} for lib, per in libs.items()}
                     for kind, libs in bw.items()},
        "ratio_to_cupy": {kind: {str(s): summarize(v) for s, v in per.items()} for kind, per in ratios.items()},
    }
    write_report(args.results_dir, "memcpy_bandwidth", data,
                 None if args.no_plot else lambda path: plot(path, sizes, med, ratio_med, peak,
                                                             f"memcpy bandwidth: {title}"))

    print(f"\n=== memcpy bandwidth, GB/s (pycudadrv, and its ratio to CuPy in the same round): {title} ===")
    print(f"{'size':>9} " + " ".join(f"{k + (' (r+w)' if k == 'D2D' else ''):>19}" for k in KINDS)
          + f" {'copy kernel (r+w)':>18}")
    for s in sizes:
        cells = []
        for k in KINDS:
            r = ratio_med[k][s]
            cells.append(f"{med[k][PY][s]:>10.1f}" + (f" ({r:5.3f})" if r == r else " " * 8))
        print(f"{size_text(s):>9} " + " ".join(f"{c:>19}" for c in cells) + f" {med['D2D'][KERNEL][s]:>18.1f}")
    w = summary["worst_large_copy_vs_cupy"]
    print(f"\nworst pycudadrv/CuPy ratio over copies >= {size_text(LARGE)}: "
          + (f"{w:.3f} ({summary['worst_large_copy']}; target >= {TARGET_VS_CUPY})" if w is not None
             else "n/a (no CuPy, or no copy that large)"))
    print(f"D2D {size_text(sizes[-1])}: {d2d_py:.0f} GB/s = {fraction:.3f} of the measured copy bandwidth "
          f"{peak:.0f} GB/s ({summary['peak_from']}; target >= {TARGET_D2D_FRACTION})")
    print("checks: " + ("all copies verified" if not problems else "; ".join(problems)))
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
