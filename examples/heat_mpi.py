#!/usr/bin/env python3
"""2-D heat diffusion over MPI: the main job's grid split into horizontal slabs, one per rank.

The physics and the kernel are those of ``python -m pycudadrv`` (``pycudadrv/heat.py``: 5-point
stencil, ``alpha = 0.2``, fixed Dirichlet edges, float32, the ``heat_step`` kernel). The
``ny x nx`` grid is cut into ``size`` slabs of ``ny / size`` rows (``pycudadrv.mpi.decompose_rows``);
each rank keeps its slab in two ping-pong device buffers with one halo row above and below.

One step, overlapped (the default)
----------------------------------
1. stream A: ``heat_step`` over the slab's own rows (local rows ``1..h``, launched as an
   ``h``-row array): it computes rows ``2..h-1``, which need no halo, and copies rows 1 and h;
2. meanwhile the halo exchange (``pycudadrv.mpi.HaloExchange``): rows 1 and h go to the
   neighbours and their rows land in the halos -- through pinned ``HostBuffer`` staging on
   stream B, or straight from device memory when MPI is CUDA-aware;
3. stream A waits for the exchange's event, then computes each row next to a halo with
   ``heat_step`` over the 3-row window around it (into a scratch buffer: the kernel treats the
   window's first and last rows as boundary) and copies that window's middle row into place.

Every point is computed by the same kernel from the same five values in the same order as in
the single-process run, so the gathered result is bit-identical to it. ``--no-overlap``
exchanges first and then launches the kernel once over the slab with its halos (offset so
the global top and bottom rows stay the kernel's boundary). ``--graph`` captures the compute
of a step as CUDA graphs (``stream.capture()``; one per buffer order; overlapped: the interior
graph and the boundary graph), the exchange staying outside.

Measured: steps per second (the slowest rank), the host time in exchanges, and the overlap
achieved, from timing events on both streams: the share of each exchange (on the GPU clock:
from the moment its rows were ready to the moment its halos landed) during which the
interior kernel was running. Checked (rank 0, exit 2 on failure): the gathered result equals
the single-process run bit for bit (``pycudadrv.heat.run`` for the main job's square grid, else
the same kernel on the whole grid) and matches the NumPy float64 reference within 1e-5.

Usage::

    mpirun -n 4 python examples/heat_mpi.py [--n 1024] [--ny NY] [--steps 500]
        [--transfer auto|device|staged] [--no-overlap] [--graph] [--seed S]
        [--no-reference] [--devices 0,1] [--json PATH]

(Open MPI as root: ``mpirun --allow-run-as-root --oversubscribe -n 4 ...``.) Exits 1 with one
line when CUDA, NVRTC or mpi4py is unavailable, 2 when a check fails; a mistake on one rank
(a grid the rank count does not divide, a device that does not exist) is reported there and
aborts every rank.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["initial_grid", "single_process", "SlabHeat", "main", "REF_TOL"]

REF_TOL = 1e-5
TIMING_SLOTS = 3


def initial_grid(ny: int, nx: int, seed: int | None = None) -> np.ndarray:
    """``ny x nx`` float32 start: the main job's grid (``heat.initial_grid``) when square, the
    same hot rectangle otherwise; with ``seed``, uniform random values in [0.5, 100)."""
    from pycudadrv import heat

    if seed is not None:
        return np.random.default_rng(seed).uniform(0.5, 100.0, (ny, nx)).astype(np.float32)
    if ny == nx:
        return heat.initial_grid(nx)
    u = np.full((ny, nx), 1.0, dtype=np.float32)
    h = max(min(ny, nx) // 16, 1)
    cy, cx = ny // 2, nx // 2
    u[max(cy - h, 0):cy + h, max(cx - h, 0):cx + h] = 100.0
    return u


def _grid(nx: int, rows: int) -> tuple[int, int]:
    from pycudadrv import heat

    return ((nx + heat.BLOCK[0] - 1) // heat.BLOCK[0], (rows + heat.BLOCK[1] - 1) // heat.BLOCK[1])


def single_process(u0: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
    """``steps`` steps of ``heat_step`` over the whole grid on one GPU (as ``heat.run``, any
    shape); returns ``(final grid, seconds for the steps)``."""
    import pycudadrv as cd
    from pycudadrv import heat

    ny, nx = u0.shape
    fn = cd.compile(heat.SOURCE).load().function("heat_step")
    s = cd.Stream()
    a = cd.Buffer.from_numpy(u0, stream=s)
    b = cd.Buffer.from_numpy(np.full_like(u0, np.nan), stream=s)
    ab = fn.bind(_grid(nx, ny), heat.BLOCK, b, a, nx, ny, heat.ALPHA, stream=s)
    ba = fn.bind(_grid(nx, ny), heat.BLOCK, a, b, nx, ny, heat.ALPHA, stream=s)
    s.synchronize()
    t0 = time.perf_counter()
    for k in range(steps):
        (ab if k % 2 == 0 else ba).launch()
    s.synchronize()
    seconds = time.perf_counter() - t0
    return (b if steps % 2 else a).to_numpy(stream=s), seconds


class SlabHeat:
    """One rank's slab: two ping-pong buffers with halos, the launches of a step, the exchange."""

    def __init__(self, comm, dec, hx, *, overlap: bool = True, graph: bool = False):
        import pycudadrv as cd
        from pycudadrv import heat

        self.cd, self.comm, self.dec, self.hx = cd, comm, dec, hx
        self.overlap, self.graph = overlap, graph
        self.A = cd.Stream()           # compute
        self.B = hx.stream             # halo staging copies and exchange events
        nx, h = dec.nx, dec.rows
        self.nx, self.h = nx, h
        fn = cd.compile(heat.SOURCE).load().function("heat_step")
        # Device path: plain cuMemAlloc memory, which CUDA-aware MPI libraries can share between processes
        # through CUDA IPC (memory from the stream-ordered pool needs pool IPC handles they may not use).
        pool = hx.transfer != "device"
        self.a = cd.Buffer.empty(dec.local_shape, np.float32, stream=self.A, async_alloc=pool)
        self.b = cd.Buffer.empty(dec.local_shape, np.float32, stream=self.A, async_alloc=pool)
        self.scratch = cd.Buffer.empty((6, nx), np.float32, stream=self.A)
        self.scratch.fill(np.float32(np.nan))
        # Rows next to a halo that are not a global edge: computed from a 3-row window.
        self.edge_rows = sorted({r for r in (1, h) if (r != 1 or dec.up is not None)
                                 and (r != h or dec.down is not None)})
        lo = 0 if dec.up is not None else 1
        hi = h + 1 if dec.down is not None else h

        def rows(buf, r0, r1):           # local rows r0 .. r1 - 1
            return buf[r0 * nx:r1 * nx]

        # Per buffer order (parity): callables that enqueue the work on stream A.
        self.full, self.interior, self.tail = [], [], []
        for src, dst in ((self.a, self.b), (self.b, self.a)):
            self.full.append(fn.bind(_grid(nx, hi - lo + 1), heat.BLOCK, rows(dst, lo, hi + 1), rows(src, lo, hi + 1),
                                     nx, hi - lo + 1, heat.ALPHA, stream=self.A).launch)
            self.interior.append(fn.bind(_grid(nx, h), heat.BLOCK, rows(dst, 1, h + 1), rows(src, 1, h + 1),
                                         nx, h, heat.ALPHA, stream=self.A).launch)
            tail = []
            for k, r in enumerate(self.edge_rows):
                tail.append(fn.bind(_grid(nx, 3), heat.BLOCK, rows(self.scratch, 3 * k, 3 * k + 3),
                                    rows(src, r - 1, r + 2), nx, 3, heat.ALPHA, stream=self.A).launch)
                tail.append(self._copy_row(k, r, dst))
            self.tail.append(tail)
        if graph:
            self._capture()
        self.events = [{name: cd.Event(device=self.A.device) for name in ("done", "i0", "i1", "x0", "x1")}
                       for _ in range(TIMING_SLOTS)]

    def _copy_row(self, k, r, dst):
        nbytes, src_off, dst_off = self.nx * 4, (3 * k + 1) * self.nx * 4, r * self.nx * 4
        return lambda: self.scratch.copy_to(dst, nbytes, src_off, dst_off, stream=self.A)

    def _capture(self):
        """Replace the per-parity launch lists by CUDA graphs of the same work (uploaded once)."""
        def graph_of(calls):
            if not calls:
                return None
            with self.A.capture() as g:
                for c in calls:
                    c()
            g.upload()
            return g

        self.graphs = []
        for p in range(2):
            full = graph_of([self.full[p]])
            interior = graph_of([self.interior[p]])
            tail = graph_of(self.tail[p])
            self.graphs.append((full, interior, tail))
            self.full[p] = full.launch
            self.interior[p] = interior.launch
            self.tail[p] = [tail.launch] if tail is not None else []
        self.A.synchronize()

    def load(self, u0: np.ndarray) -> None:
        """This rank's rows of the global ``u0``; halos and the second buffer poisoned with NaN."""
        d = self.dec
        slab = np.full(d.local_shape, np.nan, dtype=np.float32)
        slab[d.own] = u0[d.global_rows]
        self.a.write(slab, stream=self.A)
        self.b.fill(np.float32(np.nan), stream=self.A)
        self.A.synchronize()

    def run(self, steps: int, warmup: int) -> dict:
        """``steps`` steps; timings over the steps after the first ``warmup``."""
        A, B, hx, ev = self.A, self.B, self.hx, self.events
        launch_full, launch_int, bufs = self.full, self.interior, (self.a, self.b)
        lonely = hx.lonely               # one rank: nothing to exchange, the host never waits
        prev_done = ev[-1]["done"].record(A)
        A.synchronize()
        self.comm.Barrier()
        acc = dict(wait=0.0, exch=0.0, ov=0.0, xgpu=0.0, igpu=0.0, n=0)
        t_start = time.perf_counter()
        for k in range(steps):
            if k == warmup:
                A.synchronize()
                self.comm.Barrier()
                acc = dict(wait=0.0, exch=0.0, ov=0.0, xgpu=0.0, igpu=0.0, n=0)
                t_start = time.perf_counter()
            p, e = k & 1, ev[k % TIMING_SLOTS]
            src = bufs[p]
            if self.overlap:
                e["i0"].record(A)
                launch_int[p]()
                e["i1"].record(A)
            t0 = time.perf_counter()
            if not lonely:
                prev_done.synchronize()  # the rows to send are written (the previous step is done)
            t1 = time.perf_counter()
            e["x0"].record(B)
            hx.exchange(src, after=prev_done)
            e["x1"].record(B)
            t2 = time.perf_counter()
            A.wait(e["x1"])
            if self.overlap:
                for c in self.tail[p]:
                    c()
            else:
                e["i0"].record(A)
                launch_full[p]()
                e["i1"].record(A)
            e["done"].record(A)
            if k >= warmup:
                acc["wait"] += t1 - t0
                acc["exch"] += t2 - t1
            if k - 1 >= warmup and not lonely:
                self._account(acc, k - 1)
            prev_done = e["done"]
        A.synchronize()
        seconds = time.perf_counter() - t_start
        if steps - 1 >= warmup and not lonely:
            self._account(acc, steps - 1)
        n = max(steps - warmup, 1)
        return {"seconds": seconds, "timed_steps": steps - warmup, "wait_ms": acc["wait"] * 1e3 / n,
                "exchange_ms": acc["exch"] * 1e3 / n, "exchange_gpu_ms": acc["xgpu"] / max(acc["n"], 1),
                "interior_gpu_ms": acc["igpu"] / max(acc["n"], 1),
                "overlap_fraction": acc["ov"] / acc["xgpu"] if acc["xgpu"] > 0 else 0.0}

    def _account(self, acc: dict, j: int) -> None:
        """Add step ``j``'s GPU intervals (all relative to the previous step's end)."""
        e, ref = self.events[j % TIMING_SLOTS], self.events[(j - 1) % TIMING_SLOTS]["done"]
        el = self.cd.Event.elapsed_ms
        i0, i1, x0, x1 = (el(ref, e[name]) for name in ("i0", "i1", "x0", "x1"))
        acc["ov"] += max(0.0, min(i1, x1) - max(i0, x0))
        acc["xgpu"] += max(x1 - x0, 0.0)
        acc["igpu"] += max(i1 - i0, 0.0)
        acc["n"] += 1

    def result(self, steps: int) -> np.ndarray:
        """The own rows after ``steps`` steps, on the host."""
        final = self.a if steps % 2 == 0 else self.b
        out = np.empty((self.h, self.nx), dtype=np.float32)
        final.read(out=out, offset=self.nx * 4, nbytes=self.h * self.nx * 4, stream=self.A)
        return out

    def close(self) -> None:
        for gs in getattr(self, "graphs", ()):
            for g in gs:
                if g is not None:
                    g.close()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1024, help="grid width, and height unless --ny (default 1024)")
    ap.add_argument("--ny", type=int, default=None, help="grid height in rows (default --n)")
    ap.add_argument("--steps", type=int, default=500, help="time steps (default 500)")
    ap.add_argument("--warmup", type=int, default=20, help="first steps left out of the timings (default 20)")
    ap.add_argument("--transfer", choices=("auto", "device", "staged"), default="auto",
                    help="halo path: detect (default), device memory to MPI, or pinned host staging")
    ap.add_argument("--no-overlap", action="store_true", help="exchange, then compute (no overlap)")
    ap.add_argument("--graph", action="store_true", help="capture the compute of a step as CUDA graphs")
    ap.add_argument("--seed", type=int, default=None, help="random initial grid from this seed")
    ap.add_argument("--no-reference", action="store_true", help="skip the NumPy float64 reference")
    ap.add_argument("--devices", default=None, help="device ordinals by local rank, e.g. 0,1 (default: "
                    "local rank %% device count)")
    ap.add_argument("--json", type=Path, default=None, help="write the results (rank 0) to this JSON file")
    args = ap.parse_args(argv)
    if args.n < 3 or (args.ny is not None and args.ny < 3) or args.steps < 1 or args.warmup < 0:
        ap.error("--n and --ny must be >= 3, --steps >= 1, --warmup >= 0")
    return args


def _unavailable(cd) -> str | None:
    try:
        cd.require()
        if cd.device_count() == 0:
            return "the driver reports no CUDA device"
    except Exception as e:  # noqa: BLE001 -- CudaUnavailableError and friends: report, do not crash
        return f"{type(e).__name__}: {e}"
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    import pycudadrv as cd
    from pycudadrv import heat
    from pycudadrv import mpi

    try:
        MPI = mpi.require_mpi()
    except cd.LibraryUnavailableError as e:
        print(f"heat_mpi: {e}", file=sys.stderr)
        return 1
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    why = next((w for w in comm.allgather(_unavailable(cd)) if w), None)
    if why is not None:
        if rank == 0:
            print(f"heat_mpi: CUDA unavailable: {why}", file=sys.stderr)
        return 1
    nx = args.n
    ny = args.ny if args.ny is not None else nx
    with mpi.abort_on_error(comm):
        assignment = mpi.assign_device(comm, ordinal=args.devices)
        dev = assignment.use()
        dec = mpi.SlabDecomposition.for_comm(comm, ny, nx, halo=1)
        awareness = mpi.detect_cuda_aware()
        forced = args.transfer != "auto"
        transfer = args.transfer if forced else awareness.transfer
        hx = mpi.HaloExchange(comm, dec, np.float32, transfer=transfer, stream=cd.Stream())
        try:
            sim = SlabHeat(comm, dec, hx, overlap=not args.no_overlap, graph=args.graph)
        except cd.NvrtcUnavailableError as e:
            print(f"heat_mpi: rank {rank}: NVRTC unavailable (needed to compile heat_step): {e}", file=sys.stderr)
            comm.Abort(1)
        infos = comm.gather(f"  {assignment}: {dev.name} ({dev.arch})", root=0)
        if rank == 0:
            print(f"heat_mpi: {size} rank(s), grid {ny}x{nx} float32, {dec.rows} rows per rank + 1 halo row above "
                  f"and below, {args.steps} steps, alpha={heat.ALPHA}")
            print("\n".join(infos))
            print(f"MPI: {awareness.library}; {awareness}")
            print(f"transfer: {transfer} ({'forced by --transfer' if forced else 'detected'}); "
                  f"overlap: {'off' if args.no_overlap else 'on'}; graph: {'on' if args.graph else 'off'}")
        u0 = initial_grid(ny, nx, args.seed)
        sim.load(u0)
        warmup = min(args.warmup, args.steps // 2)
        stats = sim.run(args.steps, warmup)
        own = sim.result(args.steps)
        full = np.full((ny, nx), np.nan, dtype=np.float32) if rank == 0 else None
        comm.Gather(own, full, root=0)
        per_rank = comm.gather(stats, root=0)
        sim.close()
        hx.close()
        ok = True
        report: dict = {}
        if rank == 0:
            ok, report = _check_and_report(args, ny, nx, u0, full, per_rank, size, dec, awareness, transfer, forced,
                                           warmup)
        ok = comm.bcast(ok, root=0)
    return 0 if ok else 2


def _check_and_report(args, ny, nx, u0, full, per_rank, size, dec, awareness, transfer, forced, warmup):
    from pycudadrv import heat

    steps = args.steps
    slowest = max(r["seconds"] for r in per_rank)
    timed = per_rank[0]["timed_steps"]
    mean = {k: float(np.mean([r[k] for r in per_rank]))
            for k in ("wait_ms", "exchange_ms", "exchange_gpu_ms", "interior_gpu_ms", "overlap_fraction")}
    ms_step = slowest * 1e3 / max(timed, 1)
    print(f"time: {timed / slowest if slowest > 0 else float('inf'):,.0f} steps/s ({ms_step:.3f} ms/step, slowest "
          f"rank, {timed} timed steps after {warmup}); exchanges {mean['exchange_ms']:.3f} ms/step on the host "
          f"(mean of the ranks), {mean['exchange_gpu_ms']:.3f} ms on the GPU clock; interior "
          f"{mean['interior_gpu_ms']:.3f} ms/step")
    if size == 1:
        print("overlap: nothing to overlap (one rank, no halo exchange)")
    else:
        print(f"overlap: {mean['overlap_fraction'] * 100:.1f}% of the exchange hidden behind interior compute "
              f"(ranks: {', '.join('%.0f%%' % (r['overlap_fraction'] * 100) for r in per_rank)})")
    square_default = ny == nx and args.seed is None
    if square_default:
        single, single_s = heat.run(nx, steps)
        single_name = "pycudadrv.heat.run"
    else:
        single, single_s = single_process(u0, steps)
        single_name = "heat_step on the whole grid, one process"
    print(f"single-process run ({single_name}): {single_s * 1e3 / steps:.4f} ms/step")
    same = bool(np.array_equal(full, single))
    diff = float(np.nanmax(np.abs(full.astype(np.float64) - single))) if not same else 0.0
    print(f"check: gathered result bit-identical to the single-process run ({single_name}): "
          + ("OK" if same else f"FAIL (max |difference| {diff:.3e}, NaN: {bool(np.isnan(full).any())})"))
    ok = same
    err = None
    if not args.no_reference:
        err = heat.rel_error(full, heat.reference(u0, steps))
        ref_ok = err < REF_TOL
        ok &= ref_ok
        print(f"check vs NumPy float64: relative error {err:.2e} (limit {REF_TOL:.0e}) {'OK' if ref_ok else 'FAIL'}")
    print("all checks passed" if ok else "CHECK FAILED")
    report = {"ranks": size, "ny": ny, "nx": nx, "rows_per_rank": dec.rows, "steps": steps, "timed_steps": timed,
              "transfer": transfer, "transfer_forced": forced, "cuda_aware": awareness.cuda_aware,
              "cuda_aware_source": awareness.source, "mpi_library": awareness.library,
              "overlap": not args.no_overlap, "graph": args.graph, "seconds": slowest,
              "steps_per_s": timed / slowest if slowest > 0 else None, "ms_per_step": ms_step,
              "exchange_ms_per_step": mean["exchange_ms"], "wait_ms_per_step": mean["wait_ms"],
              "exchange_gpu_ms_per_step": mean["exchange_gpu_ms"], "interior_gpu_ms_per_step": mean["interior_gpu_ms"],
              "overlap_fraction": mean["overlap_fraction"], "matches_single": same, "single_process": single_name,
              "single_process_ms_per_step": single_s * 1e3 / steps,
              "rel_error": err, "ok": ok, "per_rank": per_rank}
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return ok, report


if __name__ == "__main__":
    sys.exit(main())
