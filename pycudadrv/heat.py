"""2-D heat diffusion (5-point stencil): the main job's workload, shared by
``python -m pycudadrv``, the tests and the benchmarks.

The grid is ``n x n`` float32 with a hot square in the middle and fixed
(Dirichlet) edges; each step computes
``u'[i,j] = u[i,j] + alpha * (u[i-1,j] + u[i+1,j] + u[i,j-1] + u[i,j+1] - 4 u[i,j])``
for interior points, ping-ponging two buffers.
"""
from __future__ import annotations

import numpy as np

SOURCE = r"""
extern "C" __global__ void heat_step(float* __restrict__ out, const float* __restrict__ in,
                                     int nx, int ny, float alpha) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");   // a PDL dependent waits for the step before it
#endif
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    int i = y * nx + x;
    if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) { out[i] = in[i]; return; }
    float c = in[i];
    out[i] = c + alpha * (in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx] - 4.0f * c);
}
"""

ALPHA = 0.2
BLOCK = (32, 8)
#: Grid edges ``python -m pycudadrv --size`` takes: at least one interior cell (3), at most what the
#: kernel's int index ``y * nx + x`` holds (n * n < 2**31).
MIN_SIZE, MAX_SIZE = 3, 46340


def initial_grid(n: int, hot: float = 100.0, background: float = 1.0) -> np.ndarray:
    """``n x n`` float32 grid at ``background`` with a hot square (n/8 wide) in the middle."""
    u = np.full((n, n), background, dtype=np.float32)
    h = max(n // 16, 1)
    c = n // 2
    u[c - h:c + h, c - h:c + h] = hot
    return u


def reference(u0: np.ndarray, steps: int, alpha: float = ALPHA) -> np.ndarray:
    """The same steps in NumPy float64."""
    u = u0.astype(np.float64)
    v = u.copy()
    for _ in range(steps):
        v[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * (
            u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1])
        v[0, :], v[-1, :], v[:, 0], v[:, -1] = u[0, :], u[-1, :], u[:, 0], u[:, -1]
        u, v = v, u
    return u


def grid_for(n: int):
    return ((n + BLOCK[0] - 1) // BLOCK[0], (n + BLOCK[1] - 1) // BLOCK[1])


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """``||out - ref|| / ||ref||`` (Frobenius); NaN anywhere gives inf."""
    d = np.linalg.norm(out.astype(np.float64) - ref)
    r = float(d / np.linalg.norm(ref))
    return r if np.isfinite(r) else float("inf")


MODES = ("launch", "prepared", "graph", "pdl_graph", "device_loop")


def run(n: int, steps: int, *, mode: str = "prepared", stream=None, k: int = 100):
    """Run ``steps`` steps on the GPU; returns ``(final grid, seconds)``.

    ``mode`` is ``"launch"`` (generic ``fn.launch`` each step), ``"prepared"``
    (two prepared launches, one per buffer order), ``"graph"`` (``k`` steps
    captured once and replayed), ``"pdl_graph"`` (the same graph with
    programmatic edges: sm_90+) or ``"device_loop"`` (``k`` steps as the body of
    a device-side loop, one launch). Every mode runs the same kernel in the
    same order, so all give the same bits. ``k`` must be even (the buffers
    alternate). Raises ArgumentValueError for an unknown mode or an odd ``k``.
    """
    import time

    import pycudadrv as cd

    if mode not in MODES:
        raise cd.ArgumentValueError(f"mode must be one of {MODES}, got {mode!r}")
    if k < 2 or k % 2:
        raise cd.ArgumentValueError(f"k must be an even number >= 2, got {k}")
    fn = cd.compile(SOURCE).load().function("heat_step")
    u0 = initial_grid(n)
    a = cd.Buffer.from_numpy(u0, stream=stream)
    b = cd.Buffer.from_numpy(np.full_like(u0, np.nan), stream=stream)  # poisoned
    s = a.stream
    grid = grid_for(n)
    ab = fn.bind(grid, BLOCK, b, a, n, n, ALPHA, stream=s)
    ba = fn.bind(grid, BLOCK, a, b, n, n, ALPHA, stream=s)

    def k_steps():
        for _ in range(k // 2):
            ab.launch()
            ba.launch()

    replay = None
    if mode in ("graph", "pdl_graph"):
        with s.capture(pdl=(mode == "pdl_graph")) as g:
            k_steps()
        replay = g.launch
    elif mode == "device_loop" and steps // k:
        with s.loop(times=steps // k) as loop:
            k_steps()
        replay = loop.launch
    s.synchronize()
    t0 = time.perf_counter()
    done = 0
    if replay is not None:
        for _ in range(1 if mode == "device_loop" else steps // k):
            replay()
        done = steps - steps % k
    src, dst = (a, b) if done % 2 == 0 else (b, a)
    for kk in range(done, steps):
        if mode == "launch":
            fn.launch(grid, BLOCK, dst, src, n, n, ALPHA, stream=s)
        else:
            (ab if kk % 2 == 0 else ba).launch()
        src, dst = dst, src
    s.synchronize()
    seconds = time.perf_counter() - t0
    return src.to_numpy(), seconds
