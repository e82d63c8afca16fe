#!/usr/bin/env python3
"""N-body particle simulation on the GPU, driven six ways by pycudadrv.

The physics
-----------
``N`` unit-mass bodies in 3-D, in a quartic trap, every pair joined by a weak
spring:

    U = sum_i [ k/2 |x_i|^2 + lam/4 |x_i|^4 ] + kappa/(2N) sum_{i<j} |x_i - x_j|^2

The pair sum is exact and still O(N): for a harmonic pair potential it equals
``kappa/2 sum_i |x_i - c|^2`` with ``c`` the centre of mass, so the force on
body ``i`` is

    a_i = -(k + lam |x_i|^2) x_i - kappa (x_i - c).

Time integration is velocity Verlet (kick-drift-kick, symplectic and
time-reversible), float32 state, with the centre of mass reduced in float64.
One step is four kernels, all ``extern "C"`` and all written once to the
shader-style Dispatch convention of :mod:`pycudadrv.dispatch` (storage bindings
as ``(pointer, u64 byte length)``, uniforms as a pointer, push constants as
u64 words, then the ``(indirect, indirect_len)`` pair):

1. ``kick_drift``   v += dt/2 a;  x += dt v                     (per body)
2. ``com_partial``  per-block sums of x, float64 (fixed-order tree)
3. ``com_final``    one block sums the partials in a fixed order -> c
4. ``force_kick``   a = a(x, c);  v += dt/2 a                   (per body)

No atomics anywhere: every sum is reduced in the same order on every run, so
the same kernels in the same order give bit-identical results.

The six ways
-------------
* **eager**    ``fn.launch(grid, block, *args, stream=s)`` for every kernel of
  every step (grid/block checks and argument marshalling each time);
* **prepared** one ``PreparedLaunch`` per kernel (``fn.bind(...)`` once), then
  ``p.launch()``;
* **dispatch** one :class:`pycudadrv.Dispatch` per kernel (bindings and push
  constants set once through an Encoder pass), ``d.dispatch(grid=...)`` per step;
* **graph**    ``K`` steps of prepared launches captured once
  (``with stream.capture() as g``), then ``g.launch()`` ``steps / K`` times;
* **pdl_graph** the same graph captured with ``capture(pdl=True)``: consecutive
  kernels joined by programmatic edges (each kernel waits for its producer
  with ``griddepcontrol.wait`` before reading), compute capability 9.0+;
* **device_loop** ``K`` steps captured once as the body of a device-side loop
  (``with stream.loop(times=steps / K)``): one ``launch()`` for the whole run.

Every way passes exactly the argument list that ``Dispatch.arguments()``
builds, with the same grids, on one owned stream, so all six must end in the
same bits.

The checks (exit 0 only if all pass)
------------------------------------
* a short run (``--check-steps``, 100) of each way against a NumPy float64
  reference of the same integrator: ``||gpu - ref|| / ||ref|| < 1e-5`` over
  positions and velocities (float32 round-off gives a few 1e-7 here);
* the final state of the long run (``--steps``, 10,000) is bit-identical
  across the six ways (``np.array_equal`` on positions and velocities);
* total energy (kinetic + trap + springs, summed in float64 from the state) is
  conserved: ``|E(T) - E(0)| / |E(0)| < 1e-4``. Velocity Verlet keeps the
  energy error bounded at O((omega dt)^2), about 2e-5 for dt = 0.01 here; float32
  round-off adds about 1e-8 over 10^4 steps.

Usage: ``python examples/particles.py [--n 16384] [--steps 10000] [--k 100]
[--check-steps 100]``. Exits 1 with one line when CUDA is unavailable, 2 when
a check fails.

The module is importable (``bench/step_loop.py`` uses :class:`Simulation`);
nothing touches CUDA until a :class:`Simulation` is made.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

__all__ = ["SOURCE", "STEP_KERNELS", "PUSH_DTYPE", "Simulation", "push_constants", "initial_state",
           "reference", "energy", "rel_error", "main"]

# --------------------------------------------------------------------------- the kernels

SOURCE = r"""
// Dispatch convention (pycudadrv.dispatch): one group per binding sorted by (space, index) --
// storage: (pointer, u64 byte length); uniform: pointer -- then the push constants as u64
// words, then (const unsigned* indirect, u64 indirect_len).
typedef unsigned long long u64;

// Push constants, 24 bytes = 3 u64 words: {u32 n; f32 dt, k, lam, kappa; u32 pad}.
struct Push { unsigned n; float dt, k, lam, kappa; };

__device__ __forceinline__ Push unpack(u64 w0, u64 w1, u64 w2) {
    Push p;
    p.n = (unsigned)(w0 & 0xffffffffull);
    p.dt = __uint_as_float((unsigned)(w0 >> 32));
    p.k = __uint_as_float((unsigned)(w1 & 0xffffffffull));
    p.lam = __uint_as_float((unsigned)(w1 >> 32));
    p.kappa = __uint_as_float((unsigned)(w2 & 0xffffffffull));
    return p;
}

// Programmatic dependent launch: a kernel launched as a PDL dependent (a graph captured with
// pdl=True) waits here for the kernel before it, whose outputs it reads.
__device__ __forceinline__ void wait_producer() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The workgroups this block runs: first, first + stride, ... below count. Direct dispatch:
// one workgroup per block. Indirect dispatch: persistent blocks loop over the counts read
// from the device.
struct Groups { u64 first, stride, count; };

__device__ __forceinline__ Groups groups(const unsigned* indirect, u64 indirect_len) {
    Groups g;
    if (indirect_len) {
        g.count = (u64)indirect[0] * indirect[1] * indirect[2];
        g.first = blockIdx.x;
        g.stride = gridDim.x;
    } else {
        g.count = (u64)gridDim.x * gridDim.y * gridDim.z;
        g.first = blockIdx.x + (u64)gridDim.x * (blockIdx.y + (u64)gridDim.y * blockIdx.z);
        g.stride = g.count;
    }
    return g;
}

// Bodies in a (3, n) float32 array of len_bytes, or 0 when the binding is too short.
__device__ __forceinline__ u64 bodies(const Push& p, u64 len_bytes) {
    return len_bytes >= 12ull * p.n ? (u64)p.n : 0ull;
}

__device__ __forceinline__ double warp_sum(double s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    return s;
}

// Block-wide sums of three values in a fixed order (warp shuffles, then the first warp);
// the result is in thread 0. blockDim.x: a multiple of 32, at most 1024. Every thread of
// the block must call it; it ends with a barrier, so it can be called again at once.
__device__ __forceinline__ void block_sum3(double& a, double& b, double& c) {
    __shared__ double sh[3][32];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    c = warp_sum(c);
    if (lane == 0) { sh[0][warp] = a; sh[1][warp] = b; sh[2][warp] = c; }
    __syncthreads();
    if (warp == 0) {
        a = lane < nwarps ? sh[0][lane] : 0.0;
        b = lane < nwarps ? sh[1][lane] : 0.0;
        c = lane < nwarps ? sh[2][lane] : 0.0;
        a = warp_sum(a);
        b = warp_sum(b);
        c = warp_sum(c);
    }
    __syncthreads();
}

// a_i = -(k + lam |x_i|^2) x_i - kappa (x_i - c)
__device__ __forceinline__ void accel(const float* __restrict__ x, u64 n, u64 i, const double* __restrict__ cm,
                                      const Push& p, float& ax, float& ay, float& az) {
    const float px = x[i], py = x[n + i], pz = x[2 * n + i];
    const float cx = (float)cm[0], cy = (float)cm[1], cz = (float)cm[2];
    const float r2 = px * px + py * py + pz * pz;
    const float f = -(p.k + p.lam * r2);
    ax = f * px - p.kappa * (px - cx);
    ay = f * py - p.kappa * (py - cy);
    az = f * pz - p.kappa * (pz - cz);
}

// 1. v += dt/2 a; x += dt v.   storage (0,0) x, (0,1) v, (0,2) a
extern "C" __global__ void __launch_bounds__(1024)
kick_drift(float* __restrict__ x, u64 x_len, float* __restrict__ v, u64 v_len,
           const float* __restrict__ a, u64 a_len,
           u64 pc0, u64 pc1, u64 pc2, const unsigned* indirect, u64 indirect_len) {
    wait_producer();
    const Push p = unpack(pc0, pc1, pc2);
    u64 n = bodies(p, x_len);
    if (bodies(p, v_len) < n) n = bodies(p, v_len);
    if (bodies(p, a_len) < n) n = bodies(p, a_len);
    const float h = 0.5f * p.dt;
    const Groups g = groups(indirect, indirect_len);
    for (u64 wg = g.first; wg < g.count; wg += g.stride) {
        const u64 i = wg * blockDim.x + threadIdx.x;
        if (i >= n) continue;
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            const u64 j = (u64)c * n + i;
            const float vj = v[j] + h * a[j];
            v[j] = vj;
            x[j] = x[j] + p.dt * vj;
        }
    }
}

// 2. partial[wg] = sum of x over workgroup wg (float64, padded to 4).
//    storage (0,0) x, (0,1) partial (one double4 per workgroup of this dispatch)
extern "C" __global__ void __launch_bounds__(1024)
com_partial(const float* __restrict__ x, u64 x_len, double* __restrict__ partial, u64 partial_len,
            u64 pc0, u64 pc1, u64 pc2, const unsigned* indirect, u64 indirect_len) {
    wait_producer();
    const Push p = unpack(pc0, pc1, pc2);
    const u64 n = bodies(p, x_len);
    const u64 slots = partial_len / (4 * sizeof(double));
    const Groups g = groups(indirect, indirect_len);
    for (u64 wg = g.first; wg < g.count; wg += g.stride) {   // uniform per block: barriers are safe
        const u64 i = wg * blockDim.x + threadIdx.x;
        double sx = 0.0, sy = 0.0, sz = 0.0;
        if (i < n) { sx = x[i]; sy = x[n + i]; sz = x[2 * n + i]; }
        block_sum3(sx, sy, sz);
        if (threadIdx.x == 0 && wg < slots) {
            partial[4 * wg + 0] = sx;
            partial[4 * wg + 1] = sy;
            partial[4 * wg + 2] = sz;
            partial[4 * wg + 3] = 0.0;
        }
    }
}

// 3. cm = (sum of all partials) / n, by one workgroup in a fixed order.
//    storage (0,0) partial, (0,1) cm (double4)
extern "C" __global__ void __launch_bounds__(1024)
com_final(const double* __restrict__ partial, u64 partial_len, double* __restrict__ cm, u64 cm_len,
          u64 pc0, u64 pc1, u64 pc2, const unsigned* indirect, u64 indirect_len) {
    wait_producer();
    const Push p = unpack(pc0, pc1, pc2);
    const u64 slots = partial_len / (4 * sizeof(double));
    const Groups g = groups(indirect, indirect_len);
    for (u64 wg = g.first; wg < g.count; wg += g.stride) {
        if (wg != 0) continue;                               // uniform per block
        double sx = 0.0, sy = 0.0, sz = 0.0;
        for (u64 j = threadIdx.x; j < slots; j += blockDim.x) {
            sx += partial[4 * j + 0];
            sy += partial[4 * j + 1];
            sz += partial[4 * j + 2];
        }
        block_sum3(sx, sy, sz);
        if (threadIdx.x == 0 && cm_len >= 4 * sizeof(double)) {
            const double nn = p.n ? (double)p.n : 1.0;
            cm[0] = sx / nn;
            cm[1] = sy / nn;
            cm[2] = sz / nn;
            cm[3] = 0.0;
        }
    }
}

// 4. a = a(x, cm); v += dt/2 a.   storage (0,0) x, (0,1) v, (0,2) a; uniform (1,0) cm
extern "C" __global__ void __launch_bounds__(1024)
force_kick(const float* __restrict__ x, u64 x_len, float* __restrict__ v, u64 v_len,
           float* __restrict__ a, u64 a_len, const double* __restrict__ cm,
           u64 pc0, u64 pc1, u64 pc2, const unsigned* indirect, u64 indirect_len) {
    wait_producer();
    const Push p = unpack(pc0, pc1, pc2);
    u64 n = bodies(p, x_len);
    if (bodies(p, v_len) < n) n = bodies(p, v_len);
    if (bodies(p, a_len) < n) n = bodies(p, a_len);
    const float h = 0.5f * p.dt;
    const Groups g = groups(indirect, indirect_len);
    for (u64 wg = g.first; wg < g.count; wg += g.stride) {
        const u64 i = wg * blockDim.x + threadIdx.x;
        if (i >= n) continue;
        float ax, ay, az;
        accel(x, n, i, cm, p, ax, ay, az);
        a[i] = ax;
        a[n + i] = ay;
        a[2 * n + i] = az;
        v[i] = v[i] + h * ax;
        v[n + i] = v[n + i] + h * ay;
        v[2 * n + i] = v[2 * n + i] + h * az;
    }
}

// Set-up only (not part of a step): a = a(x, cm).   storage (0,0) x, (0,1) a; uniform (1,0) cm
extern "C" __global__ void __launch_bounds__(1024)
force(const float* __restrict__ x, u64 x_len, float* __restrict__ a, u64 a_len,
      const double* __restrict__ cm,
      u64 pc0, u64 pc1, u64 pc2, const unsigned* indirect, u64 indirect_len) {
    wait_producer();
    const Push p = unpack(pc0, pc1, pc2);
    u64 n = bodies(p, x_len);
    if (bodies(p, a_len) < n) n = bodies(p, a_len);
    const Groups g = groups(indirect, indirect_len);
    for (u64 wg = g.first; wg < g.count; wg += g.stride) {
        const u64 i = wg * blockDim.x + threadIdx.x;
        if (i >= n) continue;
        float ax, ay, az;
        accel(x, n, i, cm, p, ax, ay, az);
        a[i] = ax;
        a[n + i] = ay;
        a[2 * n + i] = az;
    }
}
"""

#: The kernels of one step, in launch order.
STEP_KERNELS = ("kick_drift", "com_partial", "com_final", "force_kick")
#: Kernels that compute the initial accelerations (before the first step).
SETUP_KERNELS = ("com_partial", "com_final", "force")

BLOCK = 256                    # threads per block (a multiple of 32, at most 1024)
DT, K_TRAP, LAMBDA, KAPPA = 0.01, 1.0, 0.05, 0.5

#: The push constants as the kernels read them (24 bytes, three u64 words).
PUSH_DTYPE = np.dtype([("n", "<u4"), ("dt", "<f4"), ("k", "<f4"), ("lam", "<f4"), ("kappa", "<f4"),
                       ("pad", "<u4")])

REF_TOL = 1e-5                 # ||gpu - ref|| / ||ref|| after --check-steps steps
ENERGY_TOL = 1e-4              # |E(T) - E(0)| / |E(0)| after --steps steps


def physical_params(dt=DT, k=K_TRAP, lam=LAMBDA, kappa=KAPPA) -> dict:
    """The constants as the GPU sees them (float32), as Python floats."""
    return {name: float(np.float32(val)) for name, val in (("dt", dt), ("k", k), ("lam", lam), ("kappa", kappa))}


def push_constants(n: int, params: dict) -> bytes:
    """The 24 bytes of push constants for ``n`` bodies and ``params``."""
    rec = np.zeros((), PUSH_DTYPE)
    rec["n"] = n
    for name in ("dt", "k", "lam", "kappa"):
        rec[name] = params[name]
    return rec.tobytes()


# --------------------------------------------------------------------------- NumPy side

def initial_state(n: int, seed: int = 0):
    """Positions ~ N(0, 1) and velocities ~ N(0, 0.5^2) per component, as
    (3, n) float32 arrays (component-major, as the kernels store them)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, n)).astype(np.float32)
    v = (0.5 * rng.standard_normal((3, n))).astype(np.float32)
    return x, v


def _accel64(x, params):
    cm = x.mean(axis=1, keepdims=True)
    r2 = (x * x).sum(axis=0)
    return -(params["k"] + params["lam"] * r2) * x - params["kappa"] * (x - cm)


def reference(x0, v0, steps: int, params: dict):
    """The same velocity Verlet steps in NumPy float64 (from the float32 initial
    state and the float32-rounded constants); returns (x, v) float64."""
    x = np.asarray(x0, dtype=np.float64).copy()
    v = np.asarray(v0, dtype=np.float64).copy()
    dt = params["dt"]
    h = 0.5 * dt
    a = _accel64(x, params)
    for _ in range(steps):
        v += h * a
        x += dt * v
        a = _accel64(x, params)
        v += h * a
    return x, v


def energy(x, v, params: dict) -> float:
    """Total energy in float64: kinetic + quartic trap + pair springs (exact,
    through the centre of mass)."""
    x = np.asarray(x, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    r2 = (x * x).sum(axis=0)
    cm = x.mean(axis=1, keepdims=True)
    kinetic = 0.5 * float((v * v).sum())
    trap = float((0.5 * params["k"] * r2 + 0.25 * params["lam"] * r2 * r2).sum())
    springs = 0.5 * params["kappa"] * float(((x - cm) ** 2).sum())
    return kinetic + trap + springs


def rel_error(x, v, xr, vr) -> float:
    """``||(x, v) - (xr, vr)|| / ||(xr, vr)||``; inf when anything is not finite."""
    got = np.concatenate([np.ravel(x), np.ravel(v)]).astype(np.float64)
    ref = np.concatenate([np.ravel(xr), np.ravel(vr)]).astype(np.float64)
    r = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    return r if np.isfinite(r) else float("inf")


# --------------------------------------------------------------------------- the GPU side

class Simulation:
    """The particle system on one device and one owned stream, with the six
    ways to advance it.

    ``Simulation(n)`` compiles the kernels (NVRTC, cached module), allocates
    the state (positions ``x``, velocities ``v``, accelerations ``a``: (3, n)
    float32; ``partial``: one double4 per block; ``cm``: double4), and builds
    for every kernel a Dispatch (bindings + push constants), its argument list
    (``Dispatch.arguments()``) and a PreparedLaunch of that list.
    :meth:`reset` loads a state; then :meth:`step_eager`,
    :meth:`step_prepared`, :meth:`step_dispatch` or :meth:`run_graph` advance
    it. Everything is asynchronous on :attr:`stream`; :meth:`state` waits and
    copies the state back.
    """

    def __init__(self, n: int, *, params: dict | None = None, block: int = BLOCK, device=None, stream=None):
        import pycudadrv as cd

        if n < 1 or n >= 2**32:
            raise ValueError(f"n must be in [1, 2**32), got {n}")
        if block % 32 or not 32 <= block <= 1024:
            raise ValueError(f"block must be a multiple of 32 in [32, 1024], got {block}")
        self.n = int(n)
        self.block = (int(block), 1, 1)
        self.params = dict(params) if params is not None else physical_params()
        self.device = device if device is not None else cd.get_current_device()
        self.stream = stream if stream is not None else cd.Stream(self.device)
        s = self.stream
        self.module = cd.compile(SOURCE, name="particles.cu", arch=self.device.arch).load(self.device)
        self.functions = {name: self.module.function(name) for name in (*STEP_KERNELS, "force")}

        self.groups = -(-self.n // block)
        f32, f64 = np.float32, np.float64
        self.x = cd.Buffer.empty((3, self.n), f32, device=self.device, stream=s)
        self.v = cd.Buffer.empty((3, self.n), f32, device=self.device, stream=s)
        self.a = cd.Buffer.zeros((3, self.n), f32, device=self.device, stream=s)
        self.partial = cd.Buffer.zeros((self.groups, 4), f64, device=self.device, stream=s)
        self.cm = cd.Buffer.zeros(4, f64, device=self.device, stream=s)
        self.push = push_constants(self.n, self.params)

        # One Dispatch per kernel: bindings sorted by (space, index) at launch.
        self.encoder = cd.Encoder(self.device, s)
        bindings = {
            "kick_drift": [((0, 0), self.x, "storage"), ((0, 1), self.v, "storage"), ((0, 2), self.a, "storage")],
            "com_partial": [((0, 0), self.x, "storage"), ((0, 1), self.partial, "storage")],
            "com_final": [((0, 0), self.partial, "storage"), ((0, 1), self.cm, "storage")],
            "force_kick": [((0, 0), self.x, "storage"), ((0, 1), self.v, "storage"), ((0, 2), self.a, "storage"),
                           ((1, 0), self.cm, "uniform")],
            "force": [((0, 0), self.x, "storage"), ((0, 1), self.a, "storage"), ((1, 0), self.cm, "uniform")],
        }
        self.grids = {name: ((1, 1, 1) if name == "com_final" else (self.groups, 1, 1)) for name in bindings}
        self.dispatches = {}
        with self.encoder.pass_("particles") as p:
            for name, binds in bindings.items():
                d = p.dispatch(self.functions[name], block=self.block)
                for slot, buf, kind in binds:
                    d.set_arg(slot, buf, kind=kind)
                d.set_push_constants(self.push)
                self.dispatches[name] = d
        #: name -> the kernel's arguments in convention order (what Dispatch passes).
        self.arguments = {name: tuple(d.arguments()) for name, d in self.dispatches.items()}
        #: name -> PreparedLaunch of exactly those arguments, grid and block, on the stream.
        self.prepared = {name: self.functions[name].bind(self.grids[name], self.block, *self.arguments[name],
                                                         stream=s)
                         for name in self.dispatches}
        self._graphs = {}

    # -- state --------------------------------------------------------------------------
    def reset(self, x0, v0) -> None:
        """Load positions and velocities ((3, n) float32) and compute the
        initial accelerations (com_partial, com_final, force)."""
        x0 = np.ascontiguousarray(x0, dtype=np.float32)
        v0 = np.ascontiguousarray(v0, dtype=np.float32)
        if x0.shape != (3, self.n) or v0.shape != (3, self.n):
            raise ValueError(f"expected (3, {self.n}) arrays, got {x0.shape} and {v0.shape}")
        self.x.write(x0, stream=self.stream)
        self.v.write(v0, stream=self.stream)
        for name in SETUP_KERNELS:
            self.prepared[name].launch()

    def state(self):
        """Wait for the stream; return (x, v) as (3, n) float32 host arrays."""
        return self.x.to_numpy(stream=self.stream), self.v.to_numpy(stream=self.stream)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def step_launches(self):
        """``[(Function, grid, block, args)]`` of one step, in order: what every way launches."""
        return [(self.functions[k], self.grids[k], self.block, self.arguments[k]) for k in STEP_KERNELS]

    # -- the six ways ------------------------------------------------------------------
    def step_eager(self, steps: int) -> None:
        """``steps`` steps of ``fn.launch(grid, block, *args, stream=s)`` per kernel."""
        s = self.stream
        (f0, g0, b0, a0), (f1, g1, b1, a1), (f2, g2, b2, a2), (f3, g3, b3, a3) = \
            [(f.launch, g, b, a) for f, g, b, a in self.step_launches()]
        for _ in range(steps):
            f0(g0, b0, *a0, stream=s)
            f1(g1, b1, *a1, stream=s)
            f2(g2, b2, *a2, stream=s)
            f3(g3, b3, *a3, stream=s)

    def step_prepared(self, steps: int) -> None:
        """``steps`` steps of ``p.launch()`` per kernel (prepared once)."""
        l0, l1, l2, l3 = [self.prepared[k].launch for k in STEP_KERNELS]
        for _ in range(steps):
            l0()
            l1()
            l2()
            l3()

    def step_dispatch(self, steps: int) -> None:
        """``steps`` steps of ``d.dispatch(grid=...)`` per kernel."""
        (d0, g0), (d1, g1), (d2, g2), (d3, g3) = [(self.dispatches[k].dispatch, self.grids[k])
                                                  for k in STEP_KERNELS]
        for _ in range(steps):
            d0(g0)
            d1(g1)
            d2(g2)
            d3(g3)

    def graph(self, k: int):
        """The CapturedGraph of ``k`` steps (prepared launches captured once on
        the stream, instantiated and uploaded); cached per ``k``."""
        g = self._graphs.get(k)
        if g is None:
            if k < 1:
                raise ValueError(f"steps per graph must be >= 1, got {k}")
            with self.stream.capture() as g:
                self.step_prepared(k)
            g.upload()
            self._graphs[k] = g
        return g

    def pdl_graph(self, k: int):
        """The graph of ``k`` steps captured with programmatic edges (``capture(pdl=True)``)."""
        g = self._graphs.get(("pdl", k))
        if g is None:
            with self.stream.capture(pdl=True) as g:
                self.step_prepared(k)
            g.upload()
            self._graphs[("pdl", k)] = g
        return g

    def device_loop(self, k: int, iterations: int):
        """A device-side loop of ``iterations`` iterations of ``k`` steps (one launch)."""
        loop = self._graphs.get(("loop", k, iterations))
        if loop is None:
            with self.stream.loop(times=iterations) as loop:
                self.step_prepared(k)
            self._graphs[("loop", k, iterations)] = loop
        return loop

    def run_graph(self, steps: int, k: int) -> None:
        """``steps // k`` replays of the ``k``-step graph, then the remaining
        ``steps % k`` steps as prepared launches (same kernels, same order)."""
        launch = self.graph(k).launch
        for _ in range(steps // k):
            launch()
        if steps % k:
            self.step_prepared(steps % k)

    def run(self, way: str, steps: int, k: int = 100) -> None:
        """Advance ``steps`` steps the given way: eager, prepared, dispatch or graph."""
        if way == "eager":
            self.step_eager(steps)
        elif way == "prepared":
            self.step_prepared(steps)
        elif way == "dispatch":
            self.step_dispatch(steps)
        elif way == "graph":
            self.run_graph(steps, k)
        elif way == "pdl_graph":
            launch = self.pdl_graph(k).launch
            for _ in range(steps // k):
                launch()
            if steps % k:
                self.step_prepared(steps % k)
        elif way == "device_loop":
            if steps // k:
                self.device_loop(k, steps // k).launch()
            if steps % k:
                self.step_prepared(steps % k)
        else:
            raise ValueError(f"unknown way {way!r}; expected one of {WAYS}")

    def close(self) -> None:
        """Destroy the cached graphs (the buffers go with the object)."""
        for g in self._graphs.values():
            g.close()
        self._graphs.clear()


WAYS = ("eager", "prepared", "dispatch", "graph", "pdl_graph", "device_loop")


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16_384, help="number of bodies (default 16384)")
    ap.add_argument("--steps", type=int, default=10_000, help="time steps of the long run (default 10000)")
    ap.add_argument("--k", type=int, default=100, help="steps per captured graph (default 100)")
    ap.add_argument("--check-steps", type=int, default=100,
                    help="steps of the run checked against NumPy float64 (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the initial state (default 0)")
    args = ap.parse_args(argv)
    if args.n < 1 or args.steps < 1 or args.k < 1 or args.check_steps < 1:
        ap.error("--n, --steps, --k and --check-steps must be >= 1")
    return args


def _cuda_unavailable_reason(cd):
    """None when a CUDA device is usable, else one line saying why not."""
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

    why = _cuda_unavailable_reason(cd)
    if why is not None:
        print(f"particles: CUDA unavailable: {why}", file=sys.stderr)
        return 1

    n, steps, k = args.n, args.steps, args.k
    try:
        sim = Simulation(n)
    except cd.NvrtcUnavailableError as e:
        print(f"particles: NVRTC unavailable (needed to compile the kernels): {e}", file=sys.stderr)
        return 1
    params = sim.params
    dev = sim.device
    dv = cd.driver_version()
    print(f"particles: {n:,} bodies in a quartic trap with pairwise springs, velocity Verlet "
          f"dt={params['dt']:g}, {len(STEP_KERNELS)} kernels/step ({', '.join(STEP_KERNELS)})")
    print(f"  device {dev.name} ({dev.arch}), driver CUDA {dv[0]}.{dv[1]}, pycudadrv {cd.__version__}")
    x0, v0 = initial_state(n, args.seed)
    ok = True

    # The graph of k steps, captured once (not part of any timing), then a warm-up of every way.
    t0 = time.perf_counter()
    g = sim.graph(k)
    capture_ms = (time.perf_counter() - t0) * 1e3
    print(f"  graph: {k} steps = {g.num_kernels} kernel launches captured, instantiated and uploaded "
          f"in {capture_ms:.1f} ms")
    for way in WAYS:
        sim.reset(x0, v0)
        sim.run(way, k if way in ("graph", "pdl_graph", "device_loop") else 2, k)
    sim.synchronize()

    # 1. Short run of each way against NumPy float64.
    cs = args.check_steps
    xr, vr = reference(x0, v0, cs, params)
    short = {}
    for way in WAYS:
        sim.reset(x0, v0)
        sim.run(way, cs, k)
        short[way] = sim.state()
    errs = {way: rel_error(*short[way], xr, vr) for way in WAYS}
    worst = max(errs.values())
    ref_ok = worst < REF_TOL
    ok &= ref_ok
    print(f"check vs NumPy float64 ({cs} steps): relative error {worst:.2e} "
          f"(limit {REF_TOL:.0e}, worst of the {len(WAYS)} ways) {'OK' if ref_ok else 'FAIL'}")
    short_same = all(np.array_equal(short[w][0], short[WAYS[0]][0]) and
                     np.array_equal(short[w][1], short[WAYS[0]][1]) for w in WAYS)
    if not short_same:
        print("  the ways differ after the short run: " +
              ", ".join(f"{w} {errs[w]:.2e}" for w in WAYS))
    ok &= short_same

    # 2. The long run, each way from the same initial state, timed.
    e0 = energy(x0, v0, params)
    final = {}
    print(f"long run: {steps:,} steps each way (graph: {k} steps per graph, {steps // k} replays"
          + (f" + {steps % k} prepared steps" if steps % k else "") + ")")
    for way in WAYS:
        sim.reset(x0, v0)
        sim.synchronize()
        t0 = time.perf_counter()
        sim.run(way, steps, k)
        sim.synchronize()
        sec = time.perf_counter() - t0
        final[way] = sim.state()
        print(f"  {way:<9} {sec * 1e3:10.1f} ms  {steps / sec:12,.0f} steps/s  "
              f"{sec / steps / len(STEP_KERNELS) * 1e6:7.2f} us/kernel")

    # 3. Bit-identical final state.
    base = final[WAYS[0]]
    same = {w: bool(np.array_equal(final[w][0], base[0]) and np.array_equal(final[w][1], base[1])) for w in WAYS}
    ident_ok = all(same.values())
    ok &= ident_ok
    print(f"bit-identical final state across the {len(WAYS)} ways: {'OK' if ident_ok else 'FAIL'}"
          + ("" if ident_ok else " (" + ", ".join(f"{w}: {'same' if s else 'DIFFERENT'}"
                                                   for w, s in same.items()) + ")"))

    # 4. Energy conservation.
    finite = all(np.isfinite(final[w][0]).all() and np.isfinite(final[w][1]).all() for w in WAYS)
    e1 = energy(*base, params)
    drift = abs(e1 - e0) / abs(e0) if finite else float("inf")
    e_ok = drift < ENERGY_TOL
    ok &= e_ok
    print(f"energy: E(0) = {e0:.9e}, E({steps:,}) = {e1:.9e}, relative drift {drift:.2e} "
          f"(limit {ENERGY_TOL:.0e}) {'OK' if e_ok else 'FAIL'}")
    sim.close()
    print("all checks passed" if ok else "CHECK FAILED")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
