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
    """The same steps in NumPy float64, one array step at a time (see :func:`reference_fast`)."""
    u = u0.astype(np.float64)
    v = u.copy()
    for _ in range(steps):
        v[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * (
            u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1])
        v[0, :], v[-1, :], v[:, 0], v[:, -1] = u[0, :], u[-1, :], u[:, 0], u[:, -1]
        u, v = v, u
    return u


def _sine_basis(m: int) -> np.ndarray:
    """The orthonormal type-I sine basis of ``m`` points, ``Q[j, k] = sqrt(2/(m+1)) sin(pi (j+1) (k+1) / (m+1))``
    (symmetric and its own inverse): the eigenvectors of the 1-D second difference with zero ends,
    whose eigenvalues are ``-4 sin^2(pi (k+1) / (2 (m+1)))``."""
    jk = np.outer(np.arange(1, m + 1), np.arange(1, m + 1)) % (2 * (m + 1))   # exact: the angle stays < 2 pi
    return np.sqrt(2.0 / (m + 1)) * np.sin(jk * (np.pi / (m + 1)))


def reference_fast(u0: np.ndarray, steps: int, alpha: float = ALPHA) -> np.ndarray:
    """:func:`reference`'s result in NumPy float64, without stepping: four matrix
    products whatever the number of steps (about 1 CPU-second for 2048x2048, where
    :func:`reference` takes about a minute for 1,000 steps).

    With the edges all at one value ``b``, ``v = u - b`` on the interior obeys
    ``v' = (I + alpha L) v`` (``L`` the 5-point Laplacian with zero edges), whose
    eigenvectors are products of sines: in the sine basis ``Q`` of each axis,
    ``steps`` steps multiply mode ``(k, l)`` by ``(1 + alpha (mu_k + mu_l))**steps``,
    ``mu_k = -4 sin^2(pi k / (2 (m + 1)))``, so the result is
    ``b + Q0 (G * (Q0 v Q1)) Q1``. It agrees with :func:`reference` to about
    1e-14 relative (both are float64, rounded differently); the check of a GPU
    result allows 1e-5. A grid whose edges are not all one value (the hot square
    reaches them below 16x16) goes to :func:`reference`.
    """
    u0 = np.asarray(u0, dtype=np.float64)
    edge = np.concatenate([u0[0], u0[-1], u0[:, 0], u0[:, -1]])
    if min(u0.shape) < 3 or not (edge == edge[0]).all():
        return reference(u0, steps, alpha)
    b = edge[0]
    m0, m1 = u0.shape[0] - 2, u0.shape[1] - 2
    q0 = _sine_basis(m0)
    q1 = q0 if m1 == m0 else _sine_basis(m1)
    mu0 = -4.0 * np.sin(np.pi * np.arange(1, m0 + 1) / (2 * (m0 + 1))) ** 2
    mu1 = -4.0 * np.sin(np.pi * np.arange(1, m1 + 1) / (2 * (m1 + 1))) ** 2
    modes = (q0 @ (u0[1:-1, 1:-1] - b) @ q1) * (1.0 + alpha * (mu0[:, None] + mu1[None, :])) ** steps
    out = u0.copy()
    out[1:-1, 1:-1] = b + q0 @ modes @ q1
    return out


def bytes_per_step(n: int) -> int:
    """Bytes an ``n x n`` float32 step must move at least: every cell read once and
    written once (``2 * 4 * n * n``), what a copy of the grid moves too."""
    return 8 * n * n


def copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 5, device=None) -> tuple[float, int]:
    """This GPU's device-to-device copy bandwidth in bytes/s: the best of
    ``repeats`` copies of ``nbytes`` (``Buffer.copy_to``: ``cuMemcpyDtoDAsync``),
    each timed with a pair of events, counting the bytes read and written
    (``2 * nbytes / time``, as a memory bandwidth is quoted). ``nbytes`` is cut to
    a quarter of the free memory when that is less (whole MiB). The copy is
    checked (random bytes at both ends). Returns ``(bytes/s, nbytes copied)``.
    Raises ArgumentValueError when less than 8 MiB of device memory is free,
    pycudadrv.Error when the copied bytes differ."""
    import pycudadrv as cd

    dev = cd.Device(0) if device is None else device
    free, _total = dev.memory_info()
    nbytes = min(int(nbytes), free // 4) >> 20 << 20
    if nbytes < 1 << 21:
        raise cd.ArgumentValueError(f"copy_bandwidth: {free} bytes of device memory free, too few to measure")
    s = cd.Stream(device=dev)
    src = cd.Buffer.zeros(nbytes, device=dev, stream=s)
    dst = cd.Buffer.empty(nbytes, device=dev, stream=s)
    ends = np.random.default_rng().integers(0, 256, 8192, dtype=np.uint8)
    src[:4096].write(ends[:4096], stream=s)
    src[nbytes - 4096:].write(ends[4096:], stream=s)
    start, end = cd.Event(device=dev), cd.Event(device=dev)
    best = float("inf")
    for k in range(repeats + 1):           # the first copy warms up and is not counted
        start.record(s)
        src.copy_to(dst, stream=s)
        end.record(s)
        if k:
            best = min(best, cd.Event.elapsed_ms(start, end) * 1e-3)
    got = np.concatenate([dst[:4096].to_numpy(stream=s), dst[nbytes - 4096:].to_numpy(stream=s)])
    if not np.array_equal(got.view(np.uint8), ends):
        raise cd.Error(f"copy_bandwidth: a {nbytes}-byte cuMemcpyDtoDAsync did not copy its first and last 4 KiB")
    for b in (src, dst):
        b.close()
    return 2.0 * nbytes / best, nbytes


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
