#!/usr/bin/env python3
"""Heat diffusion run until it converges: three ways to stop, one answer.

The 2-D heat diffusion of the main job (``pycudadrv.heat``: 5-point stencil,
fixed edges, a hot square in the middle) runs until the largest change of any
cell during a step falls below a tolerance, checked every ``--every`` (10)
steps:

* **host**   -- prepared launches; after every 10 steps a reduction kernel
  writes the largest change, the host reads it (a synchronisation) and decides;
* **graph**  -- the 10 steps and the reduction captured once into a graph; the
  host replays it and reads the largest change after each replay;
* **device** -- the same body as a device-side loop
  (``stream.loop(until=pycudadrv.when(change, "<", tol), max_iterations=M)``):
  one ``launch()``, the GPU checks the condition itself, no host round trip.

All three run the very same kernels in the same order, so they must stop
after the same number of steps with bit-identical grids; the final grid is
also checked against NumPy float64 run for the same number of steps (relative
error under 1e-5). Prints the time to the answer of each way and the device
loop's speedup over the host loop. Exits 1 when CUDA is unavailable, 2 when a
check fails.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pycudadrv as cd
from pycudadrv import heat

REDUCE_SOURCE = r"""
// The largest |a - b| over the grid into *change (a float >= 0: compared as its bit pattern).
extern "C" __global__ void max_change(unsigned int* change, const float* a, const float* b, int n) {
    __shared__ unsigned int best[256];
    unsigned int m = 0u;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned int d = __float_as_uint(fabsf(a[i] - b[i]));
        m = d > m ? d : m;
    }
    best[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && best[threadIdx.x + s] > best[threadIdx.x]) best[threadIdx.x] = best[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicMax(change, best[0]);
}
"""
WAYS = ("host", "graph", "device")


class Convergence:
    """The simulation state and its prepared launches (two buffers ping-ponged)."""

    def __init__(self, n: int, every: int, stream=None):
        if every < 2 or every % 2:
            raise cd.ArgumentValueError(f"--every must be an even number >= 2, got {every}")
        self.n, self.every = n, every
        self.stream = stream if stream is not None else cd.Stream()
        s = self.stream
        fn = cd.compile(heat.SOURCE, name="heat.cu").load().function("heat_step")
        red = cd.compile(REDUCE_SOURCE, name="max_change.cu").load().function("max_change")
        self.u0 = heat.initial_grid(n)
        self.a = cd.Buffer.from_numpy(self.u0, stream=s)
        self.b = cd.Buffer.from_numpy(np.full_like(self.u0, np.nan), stream=s)
        self.change = cd.Buffer.zeros(1, np.uint32, stream=s)
        grid = heat.grid_for(n)
        self.ab = fn.bind(grid, heat.BLOCK, self.b, self.a, n, n, heat.ALPHA, stream=s)
        self.ba = fn.bind(grid, heat.BLOCK, self.a, self.b, n, n, heat.ALPHA, stream=s)
        # after an even number of steps the newest grid is in a, the previous one in b
        self.reduce = red.bind(min(1024, (n * n + 255) // 256), 256, self.change, self.a, self.b, n * n, stream=s)

    def reset(self):
        self.a.write(self.u0, stream=self.stream)
        self.b.fill(np.float32(np.nan), stream=self.stream)
        self.stream.synchronize()

    def body(self):
        """``every`` steps, then the largest change of the last step into ``change``."""
        for _ in range(self.every // 2):
            self.ab.launch()
            self.ba.launch()
        self.change.fill(np.uint32(0), stream=self.stream)
        self.reduce.launch()

    def change_value(self) -> float:
        return float(self.change.to_numpy(stream=self.stream).view(np.float32)[0])

    def run(self, way: str, tol: float, max_checks: int):
        """Run ``way`` until the change falls below ``tol`` (or ``max_checks``
        checks); returns ``(final grid, steps, seconds)``."""
        s = self.stream
        self.reset()
        checks = 0
        if way == "host":
            t0 = time.perf_counter()
            while checks < max_checks:
                self.body()
                checks += 1
                if self.change_value() < tol:
                    break
            seconds = time.perf_counter() - t0
        elif way == "graph":
            with s.capture() as g:
                self.body()
            t0 = time.perf_counter()
            while checks < max_checks:
                g.launch()
                checks += 1
                if self.change_value() < tol:
                    break
            seconds = time.perf_counter() - t0
            g.close()
        elif way == "device":
            tol_bits = np.array([tol], np.float32).view(np.uint32)[0]   # compare as bits, as the kernel writes them
            with s.loop(until=cd.when(self.change, "<", tol_bits), max_iterations=max_checks) as loop:
                self.body()
            t0 = time.perf_counter()
            loop.launch()
            s.synchronize()
            seconds = time.perf_counter() - t0
            checks = loop.iterations
            loop.close()
        else:
            raise cd.ArgumentValueError(f"way must be one of {WAYS}, got {way!r}")
        return self.a.to_numpy(stream=s), checks * self.every, seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=256, help="grid edge in cells (default 256)")
    ap.add_argument("--every", type=int, default=10, help="steps between checks (even; default 10)")
    ap.add_argument("--tol", type=float, default=2e-3, help="stop when the largest change is below (default 2e-3)")
    ap.add_argument("--max-checks", type=int, default=20_000, help="upper bound on checks (default 20000)")
    args = ap.parse_args(argv)
    try:
        cd.require()
    except cd.CudaUnavailableError as e:
        print(f"heat_convergence: CUDA unavailable: {e}", file=sys.stderr)
        return 1
    sim = Convergence(args.size, args.every)
    sim.run("device", args.tol, 2)       # warm-up: compile and load everything once
    results = {w: sim.run(w, args.tol, args.max_checks) for w in WAYS}
    grids = {w: r[0] for w, r in results.items()}
    steps = {w: r[1] for w, r in results.items()}
    print(f"heat convergence: {args.size}x{args.size}, tol {args.tol:g}, checked every {args.every} steps")
    for w in WAYS:
        print(f"  {w:<7} {steps[w]:>7} steps  {results[w][2] * 1e3:9.2f} ms to the answer")
    ok = True
    if len(set(steps.values())) != 1:
        print(f"FAIL: the ways stopped after different step counts: {steps}")
        ok = False
    if not all(np.array_equal(grids["host"], grids[w]) for w in WAYS):
        print("FAIL: the final grids differ between the ways")
        ok = False
    ref = heat.reference(heat.initial_grid(args.size), steps["host"])
    err = heat.rel_error(grids["host"], ref)
    print(f"  same steps and bit-identical grids: {'OK' if ok else 'FAIL'}; vs NumPy float64: relative error "
          f"{err:.2e} ({'OK' if err < 1e-5 else 'FAIL'}, limit 1e-5)")
    print(f"  device loop speedup over the host-checked loop: {results['host'][2] / results['device'][2]:.2f}x")
    return 0 if ok and err < 1e-5 else 2


if __name__ == "__main__":
    sys.exit(main())
