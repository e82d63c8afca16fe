"""Triton kernels through pycudadrv (pycudadrv.from_triton).

CPU tests compile Triton kernels for sm_90 without a GPU -- through the JIT's own
specialisation code (create_function_from_signature, _pack_args), exactly as
``kernel[grid](...)`` would -- and check the calling convention pycudadrv reads
from them against the PTX and the bytes Triton's launcher would pass. GPU tests
(Triton, PyTorch and a GPU) launch the same kernels through Triton and through
pycudadrv and require bit-identical results, also as prepared launches and inside
pycudadrv graphs with other pycudadrv kernels."""
import struct
from types import SimpleNamespace

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv._signature import parse_signature, ptx_entries
from pycudadrv.triton import TritonParam, triton_convention

triton = pytest.importorskip("triton", reason="Triton is not installed")
tl = pytest.importorskip("triton.language")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)


class FakeTensor:
    """What Triton's specialisation looks at in a tensor argument: data_ptr() and dtype."""

    def __init__(self, ptr, dtype=tl.float32):
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self):
        return self.ptr


def jit_compile(fn, *args, target=SM90, **kwargs):
    """Compile ``fn`` for ``args`` as ``fn[grid](*args, **kwargs)`` would (same binder, same
    specialisation, same options), without a GPU."""
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, opts = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, opts)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


@triton.jit
def axpb(x, out, n, a, b_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m) * a
    if b_ptr is not None:
        v += tl.load(b_ptr + offs, mask=m)
    tl.store(out + offs, v, mask=m)


@triton.jit(do_not_specialize=["a"])
def axpb_dns(x, out, n, a, b_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m) * a
    if b_ptr is not None:
        v += tl.load(b_ptr + offs, mask=m)
    tl.store(out + offs, v, mask=m)


@triton.jit
def scalars(out, a: tl.float16, b: tl.bfloat16, c: tl.float64, d, e: tl.int64, f: tl.uint8, g: tl.int16):
    tl.store(out + 0, a.to(tl.float32))
    tl.store(out + 1, b.to(tl.float32))
    tl.store(out + 2, c.to(tl.float32))
    tl.store(out + 3, d.to(tl.float32))
    tl.store(out + 4, e.to(tl.float32))
    tl.store(out + 5, f.to(tl.float32))
    tl.store(out + 6, g.to(tl.float32))


@triton.jit
def softmax_rows(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    x = tl.load(in_ptr + row * in_row_stride + offs, mask=m, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + offs, num / tl.sum(num, axis=0), mask=m)


@triton.jit
def desc_scale(x, out, M, N, BM: tl.constexpr, BN: tl.constexpr):
    # Tensor descriptors made on the device live in global scratch memory.
    pid = tl.program_id(0)
    d_in = tl.make_tensor_descriptor(x, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    d_out = tl.make_tensor_descriptor(out, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    d_out.store([pid * BM, 0], d_in.load([pid * BM, 0]) * 2.0)


@triton.jit
def pair_sum(t, out, BLOCK: tl.constexpr):
    x, n = t
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)


X = FakeTensor(0x10000)


# --- the convention, read on the CPU --------------------------------------------------------

def test_constexprs_ints_equal_to_one_and_none_are_not_kernel_parameters():
    conv = triton_convention(jit_compile(axpb, X, X, 1000, 1, None, BLOCK=256))
    assert conv.arg_names == ("x", "out", "n", "a", "b_ptr", "BLOCK")
    assert conv.arg_types == ("*fp32", "*fp32", "i32", "constexpr", "constexpr", "constexpr")
    assert [p.name for p in conv.params] == ["x", "out", "n", "global_scratch", "profile_scratch"]
    assert conv.signature == "void*, void*, int32, void*, void*"
    assert conv.constants == {(3,): 1, (4,): None, (5,): 256}


def test_do_not_specialize_keeps_an_int_equal_to_one_a_parameter():
    conv = triton_convention(jit_compile(axpb_dns, X, X, 1000, 1, None, BLOCK=256))
    assert [p.name for p in conv.params] == ["x", "out", "n", "a", "global_scratch", "profile_scratch"]
    assert conv.params[3] == TritonParam("a", "i32", "int32", (3,), False)


def test_the_convention_matches_the_ptx_entry_parameter_for_parameter():
    for ck in (jit_compile(axpb, X, X, 1000, 2, X, BLOCK=256),
               jit_compile(scalars, X, 1.5, 2.5, 3.5, True, 1, 7, -3),
               jit_compile(softmax_rows, X, X, 781, 781, 781, BLOCK=1024, num_warps=8),
               jit_compile(desc_scale, X, X, 64, 64, BM=16, BN=64),
               jit_compile(pair_sum, (X, 100), X, BLOCK=128)):
        conv = triton_convention(ck)
        ptx = ptx_entries(ck.asm["ptx"])[conv.name]
        assert [p.size for p in ptx] == [p.size for p in parse_signature(conv.signature)]


def test_divisibility_by_16_keeps_the_abi_and_is_checked_at_launch():
    conv = triton_convention(jit_compile(axpb, X, X, 1024, 2, X, BLOCK=256))
    n = conv.params[2]
    assert n.name == "n" and n.divisible_by_16 and n.c_type == "int32"   # still a parameter
    assert conv.params[0].divisible_by_16
    with pytest.raises(cd.ArgumentValueError, match=r"argument 'n' was compiled for a value divisible by 16.*0x3e8"):
        conv.kernel_args([X, X, 1000, 2, X, 256], [None, None])
    with pytest.raises(cd.ArgumentValueError, match="pointer divisible by 16"):
        conv.kernel_args([FakeTensor(0x10004), X, 1024, 2, X, 256], [None, None])
    assert conv.kernel_args([X, X, 2048, 3, X, 256], [None, None]) == [X, X, 2048, 3, X, None, None]


def test_arguments_are_all_of_triton_s_or_only_the_runtime_ones_and_constexprs_must_match():
    conv = triton_convention(jit_compile(axpb, X, X, 1000, 1, None, BLOCK=256))
    assert conv.kernel_args([X, X, 77, 1, None, 256], [None, None]) == [X, X, 77, None, None]
    assert conv.kernel_args([X, X, 77], [None, None]) == [X, X, 77, None, None]
    with pytest.raises(cd.ArgumentValueError, match=r"'a' was compiled as the constant 1 \(Triton specialised"):
        conv.kernel_args([X, X, 77, 2, None, 256], [None, None])
    with pytest.raises(cd.ArgumentValueError, match=r"'BLOCK' was compiled as the constant 256 \(it is a tl.constexpr"):
        conv.kernel_args([X, X, 77, 1, None, 512], [None, None])
    with pytest.raises(cd.ArgumentValueError, match="'b_ptr' was compiled as the constant None"):
        conv.kernel_args([X, X, 77, 1, X, 256], [None, None])
    with pytest.raises(cd.ArgumentTypeError, match=r"takes 6 arguments .* or the 3 that are not constexpr"):
        conv.kernel_args([X, X, 77, 1], [None, None])


def test_scalar_types_are_passed_as_triton_s_launcher_packs_them():
    ck = jit_compile(scalars, X, 1.5, 2.5, 3.5, True, 1, 7, -3)
    conv = triton_convention(ck)
    assert conv.arg_types[1:] == ("fp16", "bf16", "fp64", "u1", "i64", "u8", "i16")
    assert conv.signature == "void*, half, uint16, double, uint8, int64, uint8, int16, void*, void*"
    b = 1.0 + 2.0 ** -8 + 2.0 ** -9        # bf16: Triton truncates the float32 (0x3f80c000 -> 0x3f80)
    vals = conv.kernel_args([0x10000, 1.5, b, 3.25, True, 2 ** 40 + 3, 7, -3], [None, None])
    got = cd.pack_arguments(conv.signature, vals)[0]
    assert got == [struct.pack("<Q", 0x10000), struct.pack("<e", 1.5), struct.pack("<H", 0x3F80),
                   struct.pack("<d", 3.25), b"\x01", struct.pack("<q", 2 ** 40 + 3), b"\x07",
                   struct.pack("<h", -3), bytes(8), bytes(8)]


def test_tuple_arguments_are_flattened():
    conv = triton_convention(jit_compile(pair_sum, (X, 100), X, BLOCK=128))
    assert [p.name for p in conv.params][:3] == ["t[0]", "t[1]", "out"]
    assert conv.kernel_args([(X, 100), X, 128], [None, None]) == [X, 100, X, None, None]
    with pytest.raises(cd.ArgumentTypeError, match="must be a tuple"):
        conv.kernel_args([X, X, 128], [None, None])


def test_launch_configuration_comes_from_the_metadata():
    ck = jit_compile(softmax_rows, X, X, 781, 781, 781, BLOCK=1024, num_warps=8)
    conv = triton_convention(ck)
    assert conv.block == (256, 1, 1) and conv.cluster is None and conv.num_ctas == 1
    assert conv.shared_mem_bytes == ck.metadata.shared > 0 and conv.launch_grid((7,)) == (7, 1, 1)
    pdl = triton_convention(jit_compile(axpb, X, X, 1000, 2, X, BLOCK=256, launch_pdl=True,
                                        launch_cooperative_grid=True))
    assert pdl.programmatic_dependent and pdl.cooperative
    two = triton_convention(jit_compile(axpb, X, X, 1000, 2, X, BLOCK=256, num_ctas=2))
    assert two.cluster == (2, 1, 1) and two.launch_grid((3, 2)) == (6, 2, 1)


def test_grid_may_be_a_function_of_the_arguments_by_name():
    conv = triton_convention(jit_compile(axpb, X, X, 1000, 2, X, BLOCK=256))
    assert conv.launch_grid(lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),), [X, X, 1000, 2, X]) == (4, 1, 1)
    with pytest.raises(cd.ArgumentTypeError, match="grid must be 1 to 3 ints"):
        conv.launch_grid((1, 2, 3, 4))


def test_a_kernel_that_makes_tensor_descriptors_needs_global_scratch():
    conv = triton_convention(jit_compile(desc_scale, X, X, 64, 64, BM=16, BN=64))
    assert conv.global_scratch_size > 0 and conv.global_scratch_align >= 64
    assert conv.scratch_bytes(conv.launch_grid((4,))) == (4 * conv.global_scratch_size, 0)
    assert [p.name for p in conv.params][-2:] == ["global_scratch", "profile_scratch"]


def test_host_tensor_descriptors_and_non_kernels_are_refused():
    fake = SimpleNamespace(kernel=b"\x7fELF", src=SimpleNamespace(signature={"d": "tensordesc<fp32[16, 64]>"}),
                           metadata=SimpleNamespace(name="k", num_warps=4, shared=0))
    with pytest.raises(cd.NotSupportedError, match="host-side tensor descriptor"):
        triton_convention(fake)
    with pytest.raises(cd.ArgumentTypeError, match="expected a Triton CompiledKernel"):
        cd.from_triton(object())


# --- on the GPU: Triton and pycudadrv launch the same CUBIN --------------------------------------

gpu = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="PyTorch is needed for Triton's own launches")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def bits(t):
    return t.detach().cpu().numpy().view(np.uint32)


def poisoned(torch, shape):
    size = (shape,) if isinstance(shape, int) else tuple(shape)
    return torch.full(size, float("nan"), dtype=torch.float32, device="cuda")


def sync(torch):
    torch.cuda.synchronize()
    cd.Device(0).synchronize_all()


@gpu
def test_elementwise_kernel_gives_bit_identical_results_every_way(torch, rng):
    n = 10_000
    x0, b0 = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, b = torch.from_numpy(x0).cuda(), torch.from_numpy(b0).cuda()
    want = poisoned(torch, n)
    grid = (triton.cdiv(n, 1024),)
    ck = axpb[grid](x, want, n, 3, b, BLOCK=1024)
    sync(torch)
    np.testing.assert_allclose(want.cpu().numpy(), 3 * x0.astype(np.float64) + b0, rtol=1e-6, atol=1e-6)
    tk = cd.from_triton(ck)
    assert tk.function.num_params == 7 and tk.block == (128, 1, 1)   # 5 arguments + 2 scratch
    for how in ("launch all args", "launch runtime args", "getitem", "prepared"):
        out = poisoned(torch, n)
        sync(torch)
        if how == "launch all args":
            tk.launch(grid, x, out, n, 3, b, 1024)
        elif how == "launch runtime args":
            tk.launch(grid, x, out, n, 3, b)
        elif how == "getitem":
            tk[grid](x, out, n, 3, b, 1024)
        else:
            p = tk.bind(grid, x, out, n, 3, b)
            p()
            p()
        sync(torch)
        assert np.array_equal(bits(out), bits(want)), how


@gpu
def test_specialised_arguments_are_dropped_on_the_gpu_too(torch, rng):
    n = 4096
    x0 = rng.standard_normal(n).astype(np.float32)
    x = torch.from_numpy(x0).cuda()
    want = poisoned(torch, n)
    ck = axpb[(4,)](x, want, n, 1, None, BLOCK=1024)          # a == 1 and b_ptr None become constants
    tk = cd.from_triton(ck)
    assert tk.function.num_params == 5
    out = poisoned(torch, n)
    sync(torch)
    tk.launch((4,), x, out, n, 1, None, 1024)
    sync(torch)
    assert np.array_equal(bits(out), bits(want))
    np.testing.assert_array_equal(out.cpu().numpy(), x0)
    with pytest.raises(cd.ArgumentValueError, match="compiled as the constant 1"):
        tk.launch((4,), x, out, n, 2, None, 1024)


@gpu
def test_half_bfloat16_double_and_integer_scalars_arrive_as_triton_sends_them(torch):
    vals = (1.5, 1.0 + 2.0 ** -8 + 2.0 ** -9, 3.25, True, 2 ** 40 + 3, 7, -3)   # bf16: truncated to 1.0
    want = poisoned(torch, 8)
    ck = scalars[(1,)](want, *vals)
    tk = cd.from_triton(ck)
    out = poisoned(torch, 8)
    sync(torch)
    tk.launch(1, out, *vals)
    sync(torch)
    assert np.array_equal(bits(out)[:7], bits(want)[:7])
    np.testing.assert_array_equal(out.cpu().numpy()[:7], np.float32([1.5, 1.0, 3.25, 1, 2 ** 40, 7, -3]))


@gpu
def test_row_softmax_matches_triton_bit_for_bit_and_numpy(torch, rng):
    rows, cols = 257, 781
    x0 = rng.standard_normal((rows, cols)).astype(np.float32)
    x = torch.from_numpy(x0).cuda()
    want = poisoned(torch, (rows, cols))
    ck = softmax_rows[(rows,)](want, x, x.stride(0), want.stride(0), cols, BLOCK=1024, num_warps=8)
    sync(torch)
    e = np.exp(x0.astype(np.float64) - x0.max(axis=1, keepdims=True))
    np.testing.assert_allclose(want.cpu().numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    tk = cd.from_triton(ck)
    assert tk.block == (256, 1, 1)
    out = poisoned(torch, (rows, cols))
    sync(torch)
    p = tk.bind((rows,), out, x, x.stride(0), out.stride(0), cols)
    p()
    sync(torch)
    assert np.array_equal(bits(out), bits(want))


AFFINE = r"""
extern "C" __global__ void affine(float* out, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + b;
}
"""


@gpu
def test_a_graph_of_pycudadrv_and_triton_kernels_replays_what_they_compute_eagerly(torch, rng):
    rows, cols = 64, 500
    n = rows * cols
    x0 = rng.standard_normal((rows, cols)).astype(np.float32)
    affine = cd.compile(AFFINE).load().function("affine")
    x = torch.from_numpy(x0).cuda()
    # Eagerly: pycudadrv affine, Triton softmax (Triton's own launch), pycudadrv affine.
    t1, t2, want = poisoned(torch, (rows, cols)), poisoned(torch, (rows, cols)), poisoned(torch, (rows, cols))
    sync(torch)
    affine.launch((n + 255) // 256, 256, t1, x, 2.0, 1.0, n)
    sync(torch)
    ck = softmax_rows[(rows,)](t2, t1, cols, cols, cols, BLOCK=512, num_warps=4)
    sync(torch)
    affine.launch((n + 255) // 256, 256, want, t2, 3.0, -1.0, n)
    sync(torch)
    tk = cd.from_triton(ck)
    s = cd.Stream()
    u1, u2, out = poisoned(torch, (rows, cols)), poisoned(torch, (rows, cols)), poisoned(torch, (rows, cols))
    v2, out2 = poisoned(torch, (rows, cols)), poisoned(torch, (rows, cols))
    p = tk.bind((rows,), v2, u1, cols, cols, cols, stream=s)
    sync(torch)
    with s.capture() as g:
        affine.launch((n + 255) // 256, 256, u1, x, 2.0, 1.0, n, stream=s)
        tk.launch((rows,), u2, u1, cols, cols, cols, stream=s)      # generic launch, captured
        affine.launch((n + 255) // 256, 256, out, u2, 3.0, -1.0, n, stream=s)
        p()                                                          # prepared launch, captured
        affine.launch((n + 255) // 256, 256, out2, v2, 3.0, -1.0, n, stream=s)
    g.launch()
    g.launch()
    s.synchronize()
    assert np.array_equal(bits(out), bits(want)) and np.array_equal(bits(out2), bits(want))


@gpu
def test_a_kernel_needing_global_scratch_gets_it_from_pycudadrv(torch, rng):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("device-side tensor descriptors need compute capability 9.0")
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    M, N = 128, 64
    x0 = rng.standard_normal((M, N)).astype(np.float32)
    x = torch.from_numpy(x0).cuda()
    want = poisoned(torch, (M, N))
    ck = desc_scale[(M // 16,)](x, want, M, N, BM=16, BN=64)
    sync(torch)
    np.testing.assert_array_equal(want.cpu().numpy(), 2 * x0)
    tk = cd.from_triton(ck)
    assert tk.convention.global_scratch_size > 0
    out, out2, out3 = poisoned(torch, (M, N)), poisoned(torch, (M, N)), poisoned(torch, (M, N))
    sync(torch)
    tk.launch((M // 16,), x, out, M, N)                  # scratch allocated and freed for this launch
    p = tk.bind((M // 16,), x, out2, M, N)               # scratch owned by the prepared launch
    p()
    s = cd.Stream()
    with s.capture() as g:
        tk.launch((M // 16,), x, out3, M, N, stream=s)   # scratch as graph memory nodes
    g.launch()
    sync(torch)
    for o in (out, out2, out3):
        assert np.array_equal(bits(o), bits(want))
