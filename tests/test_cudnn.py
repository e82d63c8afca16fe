"""pycudadrv.cudnn: cuDNN matmul plans.

CPU tests (the switch, what an unusable cuDNN says, argument checks) run
everywhere; GPU tests need a device and cuDNN and are skipped with the reason
otherwise (CI has no cuDNN). Results are checked against NumPy float64 on
fresh random input (``rng``), outputs are poisoned with NaN first.
"""
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import cudnn

gpu = pytest.mark.gpu

# NaN bit patterns of each dtype, and the error each dtype must reach against float64.
POISON = {"float32": np.uint32(0x7FC00000), "float16": np.uint16(0x7E00), "bfloat16": np.uint16(0x7FC0)}
TOLERANCE = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}
BUFFER_DTYPE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}   # bfloat16 as its bits


@pytest.fixture(autouse=True)
def _cudnn_state(monkeypatch):
    """Every test starts with the switch unset and leaves the loader as it found it."""
    monkeypatch.delenv("PYCUDADRV_CUDNN", raising=False)
    before = cudnn._override
    cudnn.set_enabled(None)
    yield
    cudnn.set_enabled(before)


@pytest.fixture
def fresh_loader():
    """Forget the loaded library before and after the test (it looks again)."""
    cudnn._forget()
    yield
    cudnn._forget()


@pytest.fixture
def need_cudnn():
    reason = cudnn.unavailable_reason()
    if reason is not None:
        pytest.skip(f"cuDNN unavailable: {reason}")


def to_bf16_bits(x):
    """float -> bfloat16 bits (uint16), rounded to nearest even."""
    f = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(bits):
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def upload(x, dtype):
    """(Buffer of ``x`` in ``dtype``, the values it holds as float64)."""
    if dtype == "bfloat16":
        bits = to_bf16_bits(x)
        return cd.Buffer.from_numpy(bits), from_bf16_bits(bits).astype(np.float64)
    arr = np.asarray(x).astype(BUFFER_DTYPE[dtype])
    return cd.Buffer.from_numpy(arr), arr.astype(np.float64)


def download(buf, dtype):
    arr = buf.to_numpy()
    return (from_bf16_bits(arr) if dtype == "bfloat16" else arr).astype(np.float64)


def poisoned_out(plan):
    out = cd.Buffer.empty(plan.out_shape, BUFFER_DTYPE[plan.dtype])
    out.fill(POISON[plan.dtype])
    return out


def rel_err(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


class CudaArray:
    """A device array as another library hands it over: __cuda_array_interface__ v3
    over a Buffer's memory, with the given shape, typestr and strides (bytes)."""

    def __init__(self, buf, shape, typestr, strides=None):
        self.buf = buf
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (buf.ptr, False),
                                         "strides": strides, "version": 3}


# --------------------------------------------------------------------------- CPU: loading and the switch

def test_importing_pycudadrv_or_its_cudnn_module_loads_no_cudnn():
    code = textwrap.dedent("""
        import sys
        import pycudadrv
        assert "pycudadrv.cudnn" not in sys.modules
        from pycudadrv import cudnn
        maps = open("/proc/self/maps").read()
        assert "libcudnn" not in maps, "libcudnn mapped at import"
        assert cudnn._lib is None
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_environment_switch_turns_cudnn_off(monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CUDNN", "0")
    assert cudnn.enabled() is False
    assert cudnn.is_available() is False
    assert "switched off" in cudnn.unavailable_reason()
    with pytest.raises(cd.CudnnUnavailableError, match="PYCUDADRV_CUDNN=0"):
        cudnn.require()
    with pytest.raises(cd.CudnnUnavailableError, match="switched off"):
        cudnn.matmul_plan((64, 32), (32, 16), "float32")


def test_set_enabled_overrides_the_environment_and_returns_the_previous_state(monkeypatch):
    monkeypatch.setenv("PYCUDADRV_CUDNN", "1")
    assert cudnn.set_enabled(False) is True
    assert cudnn.enabled() is False
    with pytest.raises(cd.CudnnUnavailableError, match="set_enabled"):
        cudnn.version()
    assert cudnn.set_enabled(None) is False
    assert cudnn.enabled() is True


def test_set_enabled_takes_only_true_false_or_none():
    with pytest.raises(cd.ArgumentTypeError, match="True, False or None"):
        cudnn.set_enabled("off")


def test_a_missing_library_names_the_library_and_the_pip_package(monkeypatch, fresh_loader):
    monkeypatch.setattr(cudnn, "_library_candidates", lambda: ["/nonexistent/libcudnn.so.9"])
    assert cudnn.is_available() is False
    with pytest.raises(cd.CudnnUnavailableError) as info:
        cudnn.require()
    msg = str(info.value)
    assert "libcudnn.so.9" in msg and "/nonexistent/libcudnn.so.9" in msg
    assert "pip install nvidia-cudnn-cu13" in msg
    assert isinstance(info.value, cd.LibraryUnavailableError)


def test_a_too_old_library_is_named_with_its_version(monkeypatch, fresh_loader):
    get_version = lambda: 8907  # noqa: E731 -- cuDNN 8.9.7's encoding
    fake = types.SimpleNamespace(cudnnGetVersion=get_version)
    monkeypatch.setattr(cudnn, "_open", lambda: (fake, "/opt/old/libcudnn.so.9"))
    with pytest.raises(cd.CudnnUnavailableError,
                       match=r"cuDNN 8\.9\.7 found at /opt/old/libcudnn\.so\.9 is too old.*9\.0\.0"):
        cudnn.require()


def test_missing_cublaslt_is_named_before_cudnn_could_abort(monkeypatch, fresh_loader):
    fake = types.SimpleNamespace(cudnnGetVersion=lambda: 92801, cudnnGetCudartVersion=lambda: 13000)
    monkeypatch.setattr(cudnn, "_open", lambda: (fake, "/opt/cudnn/lib/libcudnn.so.9"))

    def no_library(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(cudnn.ctypes, "CDLL", no_library)
    with pytest.raises(cd.CudnnUnavailableError, match=r"libcublasLt\.so\.13.*pip install nvidia-cublas"):
        cudnn.require()


@pytest.mark.parametrize("encoded, version", [(92801, (9, 28, 1)), (90000, (9, 0, 0)), (8907, (8, 9, 7))])
def test_cudnn_version_numbers_decode_as_major_minor_patch(encoded, version):
    assert cudnn._version_tuple(encoded) == version


# --------------------------------------------------------------------------- CPU: arguments

@pytest.mark.parametrize("args, kwargs, error, match", [
    (((64, 32), (31, 48), "float32"), {}, cd.ArgumentValueError, r"\(64, 32\) has 32 columns but b_shape \(31, 48\) "
                                                                  r"has 31 rows"),
    (((64, 32), (32, 48), "float64"), {}, cd.ArgumentTypeError, r"dtype 'float64' is not supported; use float32, "
                                                                r"float16 or bfloat16"),
    (((64, 32), (32, 48), np.int8), {}, cd.ArgumentTypeError, "not supported"),
    (((64, 32), (32, 48), "bfloat16", "float16"), {}, cd.ArgumentValueError, "compute_dtype float16 with dtype "
                                                                             "bfloat16"),
    (((64, 32), (32, 48), "float32", "float64"), {}, cd.ArgumentTypeError, "compute_dtype 'float64'"),
    (((64,), (64, 48), "float32"), {}, cd.ArgumentValueError, r"a_shape \(64,\) has 1 dimensions"),
    (((64, 0), (0, 48), "float32"), {}, cd.ArgumentValueError, "must be >= 1"),
    (((64, 32.0), (32, 48), "float32"), {}, cd.ArgumentTypeError, "must hold ints"),
    (((True, 32), (32, 48), "float32"), {}, cd.ArgumentTypeError, "must hold ints"),
    ((64, (32, 48), "float32"), {}, cd.ArgumentTypeError, "a_shape must be a tuple"),
    (((3, 64, 32), (4, 32, 48), "float16"), {}, cd.ArgumentValueError, r"batch sizes differ: 3 .* and 4"),
    (((3, 64, 32), (32, 48), "float16"), {"batch": 4}, cd.ArgumentValueError, r"has batch 3, batch=4"),
    (((64, 32), (32, 48), "float16"), {"batch": 0}, cd.ArgumentValueError, "batch must be None or an int >= 1"),
    (((64, 32), (32, 48), "float32"), {"allow_tf32": "yes"}, cd.ArgumentTypeError, "allow_tf32 must be True"),
])
def test_bad_arguments_are_refused_before_cudnn_or_a_gpu_is_needed(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        cudnn.matmul_plan(*args, **kwargs)


def test_shapes_batch_and_broadcast_like_numpy_matmul():
    # (a, b, out, cuDNN dims of a, b, out)
    assert cudnn._shapes((64, 32), (32, 48), None) == ((64, 32), (32, 48), (64, 48),
                                                       (1, 64, 32), (1, 32, 48), (1, 64, 48))
    assert cudnn._shapes((64, 32), (5, 32, 48), None)[2:] == ((5, 64, 48), (1, 64, 32), (5, 32, 48),
                                                              (5, 64, 48))
    assert cudnn._shapes((64, 32), (32, 48), 3)[:3] == ((3, 64, 32), (3, 32, 48), (3, 64, 48))
    assert cudnn._shapes((1, 64, 32), (6, 32, 48), None)[2] == (6, 64, 48)


@pytest.mark.parametrize("spelling", ["bfloat16", "bf16", "torch.bfloat16"])
def test_dtype_spellings(spelling):
    assert cudnn._dtype_name(spelling, "dtype") == "bfloat16"
    assert cudnn._dtype_name(np.float16, "dtype") == "float16"
    assert cudnn._dtype_name(np.dtype("float32"), "dtype") == "float32"


# --------------------------------------------------------------------------- GPU: results

CASES = {
    "square": ((128, 128), (128, 128), None),
    "tall": ((1000, 64), (64, 24), None),
    "odd": ((129, 77), (77, 51), None),               # no dimension a multiple of 16
    "batched": ((4, 33, 70), (4, 70, 45), None),
    "broadcast_a": ((33, 70), (3, 70, 45), None),
    "batch_argument": ((40, 24), (24, 17), 2),
}


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matmul_matches_float64(need_cudnn, rng, dtype, case):
    a_shape, b_shape, batch = CASES[case]
    plan = cudnn.matmul_plan(a_shape, b_shape, dtype, batch=batch)
    a_host = rng.standard_normal(plan.a_shape)
    b_host = rng.standard_normal(plan.b_shape)
    a, a64 = upload(a_host, dtype)
    b, b64 = upload(b_host, dtype)
    out = poisoned_out(plan)
    plan(a, b, out)
    got = download(out, dtype)
    ref = np.matmul(a64, b64)
    assert got.shape == ref.shape == plan.out_shape
    assert np.isfinite(got).all(), "output still poisoned"
    assert rel_err(got, ref) < TOLERANCE[dtype]


@gpu
def test_float32_plans_use_no_tf32_and_stay_within_1e_5(need_cudnn, rng):
    plan = cudnn.matmul_plan((256, 512), (512, 192), "float32")
    assert "TENSOR_CORE" not in plan.engine["numerical_notes"]
    a, a64 = upload(rng.standard_normal(plan.a_shape), "float32")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    plan(a, b, out)
    assert rel_err(download(out, "float32"), a64 @ b64) < 1e-5


@gpu
def test_allow_tf32_gives_float32_results_within_tf32_precision(need_cudnn, rng):
    plan = cudnn.matmul_plan((256, 512), (512, 192), "float32", allow_tf32=True)
    assert plan.allow_tf32 is True
    a, a64 = upload(rng.standard_normal(plan.a_shape), "float32")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    plan(a, b, out)
    assert rel_err(download(out, "float32"), a64 @ b64) < 5e-3


@gpu
def test_execution_on_an_explicit_stream(need_cudnn, rng):
    plan = cudnn.matmul_plan((96, 40), (40, 72), "float16")
    a, a64 = upload(rng.standard_normal(plan.a_shape), "float16")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float16")
    out = poisoned_out(plan)
    s = cd.Stream()
    s.wait_stream(cd.Device(0).default_stream)      # the uploads and the poison
    plan(a, b, out, stream=s)
    s.synchronize()
    assert rel_err(download(out, "float16"), a64 @ b64) < 1e-2


@gpu
def test_autotuned_plan_keeps_the_fastest_engine_and_is_correct(need_cudnn, rng):
    plan = cudnn.matmul_plan((512, 256), (256, 384), "bfloat16", autotune=True, cache=False)
    assert plan.engine["autotune_ms"] > 0
    assert plan.engine["engine"] in plan.engine["autotune_candidates_ms"]
    a, a64 = upload(rng.standard_normal(plan.a_shape), "bfloat16")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "bfloat16")
    out = poisoned_out(plan)
    plan(a, b, out)
    assert rel_err(download(out, "bfloat16"), a64 @ b64) < 1e-2
    plan.close()


@gpu
def test_foreign_operands_through_cuda_array_interface(need_cudnn, rng):
    plan = cudnn.matmul_plan((64, 48), (48, 32), "float32")
    a, a64 = upload(rng.standard_normal(plan.a_shape), "float32")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    plan(CudaArray(a, (64, 48), "<f4"), CudaArray(b, (48, 32), "<f4"), CudaArray(out, (64, 32), "<f4"))
    assert rel_err(download(out, "float32"), a64 @ b64) < 1e-5


@gpu
def test_torch_bfloat16_tensors_work_as_int16_views(need_cudnn, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    plan = cudnn.matmul_plan((64, 80), (80, 40), "bfloat16")
    a = torch.from_numpy(rng.standard_normal(plan.a_shape).astype(np.float32)).to("cuda", torch.bfloat16)
    b = torch.from_numpy(rng.standard_normal(plan.b_shape).astype(np.float32)).to("cuda", torch.bfloat16)
    out = torch.full(plan.out_shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    plan(a.view(torch.int16), b.view(torch.int16), out.view(torch.int16))
    cd.Device(0).synchronize()
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    assert rel_err(out.double().cpu().numpy(), ref) < 1e-2


# --------------------------------------------------------------------------- GPU: graphs and lifetime

@gpu
def test_captured_plan_replays_on_the_current_inputs(need_cudnn, rng):
    plan = cudnn.matmul_plan((80, 48), (48, 56), "float16")
    a, _ = upload(rng.standard_normal(plan.a_shape), "float16")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float16")
    out = poisoned_out(plan)
    s = cd.Stream()
    s.wait_stream(cd.Device(0).default_stream)
    with s.capture() as g:
        plan(a, b, out, stream=s)
    assert np.isnan(download(out, "float16")).all(), "the capture executed instead of recording"
    for _ in range(2):                      # new inputs each time: the replay reads them
        new = rng.standard_normal(plan.a_shape).astype(np.float16)
        a.write(new)
        out.fill(POISON["float16"])
        s.wait_stream(cd.Device(0).default_stream)
        g.launch()
        s.synchronize()
        assert rel_err(download(out, "float16"), new.astype(np.float64) @ b64) < 1e-2
    g.close()


@gpu
def test_a_graph_keeps_a_closed_plan_until_the_graph_is_closed(need_cudnn, rng):
    plan = cudnn.matmul_plan((64, 64), (64, 64), "float32", cache=False)
    a, a64 = upload(rng.standard_normal(plan.a_shape), "float32")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    s = cd.Stream()
    s.wait_stream(cd.Device(0).default_stream)
    with s.capture() as g:
        plan(a, b, out, stream=s)
    plan.close()
    assert plan.closed
    with pytest.raises(cd.ClosedError, match="plan is closed"):
        plan(a, b, out, stream=s)
    g.launch()
    s.synchronize()
    assert rel_err(download(out, "float32"), a64 @ b64) < 1e-5
    g.close()


@gpu
def test_building_a_plan_during_a_capture_is_refused(need_cudnn, rng):
    plan = cudnn.matmul_plan((32, 16), (16, 8), "float32")
    a, _ = upload(rng.standard_normal(plan.a_shape), "float32")
    b, _ = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    s = cd.Stream()
    s.wait_stream(cd.Device(0).default_stream)
    with s.capture() as g:
        with pytest.raises(cd.CaptureError, match="build it before the capture"):
            cudnn.matmul_plan((48, 16), (16, 8), "float32", cache=False)
        plan(a, b, out, stream=s)
    g.close()


@gpu
def test_plans_are_cached_by_shape_dtype_compute_type_and_device(need_cudnn):
    p = cudnn.matmul_plan((64, 32), (32, 16), "float16")
    assert cudnn.matmul_plan((64, 32), (32, 16), np.float16, device=0) is p
    assert cudnn.matmul_plan((64, 32), (32, 16), "float16", "float16") is not p
    assert cudnn.matmul_plan((64, 32), (32, 16), "float16", cache=False) is not p
    assert p.out_shape == (64, 16) and p.flops == 2 * 64 * 16 * 32
    assert p.workspace_nbytes >= 0 and p.engines_considered
    assert "(64, 32) @ (32, 16) -> (64, 16)" in repr(p)


# --------------------------------------------------------------------------- GPU: errors before execution

def _square_plan_and_operands(rng):
    plan = cudnn.matmul_plan((64, 64), (64, 64), "float32")
    a, _ = upload(rng.standard_normal(plan.a_shape), "float32")
    b, _ = upload(rng.standard_normal(plan.b_shape), "float32")
    return plan, a, b, poisoned_out(plan)


def _assert_not_executed(out):
    assert np.isnan(download(out, "float32")).all(), "the plan executed"


@gpu
def test_wrong_shape_is_refused_naming_the_operand(need_cudnn, rng):
    plan = cudnn.matmul_plan((64, 32), (32, 16), "float32")
    a = cd.Buffer.from_numpy(rng.standard_normal((32, 64)).astype(np.float32))     # transposed
    b, _ = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    with pytest.raises(cd.ArgumentValueError, match=r"a has shape \(32, 64\), expected \(64, 32\)"):
        plan(a, b, out)
    _assert_not_executed(out)


@gpu
def test_wrong_dtype_is_refused_naming_the_operand(need_cudnn, rng):
    plan, a, _, out = _square_plan_and_operands(rng)
    b = cd.Buffer.from_numpy(rng.standard_normal((64, 64)).astype(np.float16))
    with pytest.raises(cd.ArgumentTypeError, match="b has dtype float16, expected float32"):
        plan(a, b, out)
    _assert_not_executed(out)


@gpu
def test_wrong_size_of_raw_bytes_is_refused(need_cudnn, rng):
    plan, a, b, out = _square_plan_and_operands(rng)
    with pytest.raises(cd.ArgumentValueError, match=r"out has 100 bytes, expected 16384"):
        plan(a, b, cd.Buffer.empty(100))
    _assert_not_executed(out)


@gpu
def test_closed_operand_is_refused(need_cudnn, rng):
    plan, a, b, out = _square_plan_and_operands(rng)
    plan(a, b, out)                      # a passed the checks once: the closed check still applies
    cd.Device(0).synchronize()
    out.fill(POISON["float32"])
    a.close()
    with pytest.raises(cd.ClosedError, match="a: buffer is closed"):
        plan(a, b, out)
    _assert_not_executed(out)


@gpu
def test_non_contiguous_operand_is_refused(need_cudnn, rng):
    plan, a, b, out = _square_plan_and_operands(rng)
    a_transposed = CudaArray(a, (64, 64), "<f4", strides=(4, 256))
    with pytest.raises(cd.ArgumentTypeError, match="a: .*not C-contiguous"):
        plan(a_transposed, b, out)
    _assert_not_executed(out)


@gpu
def test_misaligned_operand_is_refused(need_cudnn, rng):
    plan, a, b, out = _square_plan_and_operands(rng)
    big = cd.Buffer.empty(64 * 64 + 1, np.float32)
    shifted = big[1:].view(np.float32, (64, 64))      # 4 bytes past a 256-byte boundary
    with pytest.raises(cd.ArgumentValueError, match="b's device pointer .* is not 16-byte aligned"):
        plan(a, shifted, out)
    _assert_not_executed(out)


@gpu
def test_out_overlapping_an_input_is_refused(need_cudnn, rng):
    plan, a, b, out = _square_plan_and_operands(rng)
    with pytest.raises(cd.ArgumentValueError, match="out overlaps a"):
        plan(a, b, a)
    _assert_not_executed(out)


@gpu
def test_operand_or_stream_on_another_device_is_refused(need_cudnn, rng):
    if cd.device_count() < 2:
        pytest.skip("needs two devices")
    plan, a, b, out = _square_plan_and_operands(rng)
    b1 = cd.Buffer.from_numpy(rng.standard_normal((64, 64)).astype(np.float32), device=1)
    with pytest.raises(cd.ArgumentValueError, match="b is on device 1, the plan runs on device 0"):
        plan(a, b1, out)
    with pytest.raises(cd.ArgumentValueError, match="belongs to device 1"):
        plan(a, b, out, stream=cd.Stream(1))
    _assert_not_executed(out)
