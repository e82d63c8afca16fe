"""pycudadrv.cudnn: cuDNN matmul plans.

CPU tests (the switch, what an unusable cuDNN says, argument checks, the
engine rules for float32, the precision probe) run everywhere; GPU tests need
a device and cuDNN and are skipped with the reason otherwise (CI has no
cuDNN). Results are checked against NumPy float64 on fresh random input
(``rng``), outputs are poisoned with NaN first.

float32 without TF32 is held to 1e-5 in a process started with
NVIDIA_TF32_OVERRIDE=0 (the only way cuBLASLt engines compute float32 in
float32, and it must be set before NVIDIA's libraries load): the tests named
``test_strict_float32_*`` run only in such a process, and
``test_float32_checks_in_a_process_started_with_NVIDIA_TF32_OVERRIDE_0`` starts
one for them. Without the override a float32 plan must be float32 or refused.
"""
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import _cudnn, cudnn

gpu = pytest.mark.gpu
#: NVIDIA_TF32_OVERRIDE=0 was in this process's environment when it started (before any library loaded).
OVERRIDE_AT_START = os.environ.get("NVIDIA_TF32_OVERRIDE") == "0"
strict_float32 = pytest.mark.skipif(
    not OVERRIDE_AT_START, reason="needs a process started with NVIDIA_TF32_OVERRIDE=0: "
    "test_float32_checks_in_a_process_started_with_NVIDIA_TF32_OVERRIDE_0 runs it in one")

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


# --------------------------------------------------------------------------- CPU: which engines compute float32

TC, DOWN, RPR, LT = "TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "CUBLASLT_DEPENDENCY"


@pytest.mark.parametrize("dtype, allow_tf32, override, numerical, behavior, expect", [
    # float32 without TF32: no tensor cores, with or without the override
    ("float32", False, False, [TC], [], "TENSOR_CORE"),
    ("float32", False, True, [TC], [], "left out under NVIDIA_TF32_OVERRIDE=0 too"),
    # cuBLASLt engines compute float32 in TF32 unless the override is in effect
    ("float32", False, False, [], [LT], "NVIDIA_TF32_OVERRIDE=0"),
    ("float32", False, True, [], [LT], None),
    ("float32", False, False, [], None, "behaviour notes are unknown"),
    ("float32", False, False, None, [], "numerical notes are unknown"),
    ("float32", False, False, [], [], None),
    ("float32", False, False, [DOWN], [], "DOWN_CONVERT_INPUTS"),
    ("float32", False, True, [RPR], [LT], "REDUCED_PRECISION_REDUCTION"),
    # allow_tf32: tensor cores and cuBLASLt are what was asked for
    ("float32", True, False, [TC], [LT], None),
    ("float32", True, False, None, None, None),
    # half types: inputs kept, float32 accumulation
    ("float16", False, False, [TC], [LT], None),
    ("bfloat16", False, False, [TC, RPR], [], "REDUCED_PRECISION_REDUCTION"),
    ("float16", False, False, [DOWN], [], "DOWN_CONVERT_INPUTS"),
])
def test_engine_rules_keep_float32_in_float32(dtype, allow_tf32, override, numerical, behavior, expect):
    why = _cudnn.engine_rejection(dtype, "float32", allow_tf32, override, numerical, behavior)
    if expect is None:
        assert why is None
    else:
        assert expect in why


def test_a_refused_float32_plan_names_both_ways_out():
    msg = _cudnn.no_engine_message("cudnn matmul plan (8, 8) @ (8, 8) -> (8, 8) (float32, compute float32)",
                                   (9, 19, 0), 0, True, False, ["instant #0: engine 0: skipped (CUBLASLT)"])
    assert msg.startswith("cudnn matmul plan (8, 8) @ (8, 8) -> (8, 8) (float32, compute float32): cuDNN 9.19.0 "
                          "offers no usable engine on device 0 that computes float32 in float32")
    assert "allow_tf32=True" in msg and "start the process with NVIDIA_TF32_OVERRIDE=0" in msg
    assert msg.endswith("Engines considered:\n  instant #0: engine 0: skipped (CUBLASLT)")


def test_with_the_override_in_effect_a_refusal_offers_allow_tf32_only():
    msg = _cudnn.no_engine_message("plan", (9, 19, 0), 0, True, True, [])
    assert "NVIDIA_TF32_OVERRIDE=0 is set" in msg and "allow_tf32=True" in msg
    assert "start the process with" not in msg


def test_the_precision_probe_is_exact_in_float32_and_rounded_away_by_tf32():
    def tf32(x):                      # round to nearest even at a 10-bit mantissa, as TF32 does
        u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0xFFF + ((u >> 13) & 1)) & ~np.uint64(0x1FFF)).astype(np.uint32).view(np.float32)

    assert float(cudnn.PROBE_OUT) == (1 + 2 ** -12) * (1 + 2 ** -13) - 2 ** -25 == 1.0003662109375
    assert cudnn._probe_verdict(np.full(8, cudnn.PROBE_OUT)) is None
    as_tf32 = np.float32(tf32(cudnn.PROBE_A) * tf32(cudnn.PROBE_B))
    assert float(as_tf32) == 1.0
    assert "TF32 gives 1.0" in cudnn._probe_verdict(np.array([cudnn.PROBE_OUT, as_tf32], np.float32))
    for wrong in (cudnn.PROBE_A, cudnn.PROBE_B, np.float32(-7.0), np.float32("nan")):
        assert cudnn._probe_verdict(np.array([wrong], np.float32)).startswith("1 of 1 outputs checked")


@pytest.mark.parametrize("at_load, now, expect", [(True, "0", True), (True, "1", False), (True, None, False),
                                                   (False, "0", False), (None, "0", False)])
def test_the_override_counts_only_if_set_before_cudnn_was_loaded(monkeypatch, at_load, now, expect):
    monkeypatch.setattr(cudnn, "_tf32_override_at_load", at_load)
    if now is None:
        monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    else:
        monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", now)
    assert cudnn._tf32_override_now() is expect


def test_the_benchmark_cudnn_floor_compiles(tmp_path):
    src = Path(__file__).resolve().parents[2] / "bench" / "c_cudnn_floor.c"
    cc = shutil.which("cc") or shutil.which("gcc")
    if not src.is_file() or cc is None:
        pytest.skip("needs the source tree's bench/ and a C compiler")
    out = tmp_path / "floor.so"
    r = subprocess.run([cc, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", str(src), "-o", str(out), "-ldl"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import ctypes
    lib = ctypes.CDLL(str(out))
    lib.cudnn_floor_init.argtypes = [ctypes.c_char_p]
    lib.cudnn_floor_init_error.restype = ctypes.c_char_p
    assert lib.cudnn_floor_init(b"/nonexistent/libcudnn.so.9") == -1
    assert b"is not loaded in this process" in lib.cudnn_floor_init_error()
    lib.cudnn_floor_execute_loop.restype = ctypes.c_double
    assert lib.cudnn_floor_execute_loop(None, None, None, 1) < 0     # not initialised: an error, no call


# --------------------------------------------------------------------------- GPU: results

CASES = {
    "square": ((128, 128), (128, 128), None),
    "tall": ((1000, 64), (64, 24), None),
    "odd": ((129, 77), (77, 51), None),               # no dimension a multiple of 16
    "batched": ((4, 33, 70), (4, 70, 45), None),
    "broadcast_a": ((33, 70), (3, 70, 45), None),
    "batch_argument": ((40, 24), (24, 17), 2),
}


def _check_matmul(plan, rng, dtype):
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
    assert rel_err(got, ref) < TOLERANCE[dtype], plan.engines_considered


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matmul_matches_float64(need_cudnn, rng, dtype, case):
    a_shape, b_shape, batch = CASES[case]
    _check_matmul(cudnn.matmul_plan(a_shape, b_shape, dtype, batch=batch), rng, dtype)


@gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_without_tf32_is_computed_in_float32_or_refused(need_cudnn, rng, case):
    # Whatever the environment: never TF32 (relative error 3e-4) behind allow_tf32=False.
    a_shape, b_shape, batch = CASES[case]
    try:
        plan = cudnn.matmul_plan(a_shape, b_shape, "float32", batch=batch)
    except cd.NotSupportedError as e:
        assert "allow_tf32=True" in str(e) and "NVIDIA_TF32_OVERRIDE=0" in str(e)
        return
    assert plan.engine["precision_check"]["passed"] is True
    if not cudnn.tf32_override():
        assert "CUBLASLT_DEPENDENCY" not in plan.engine["behavior_notes"]
    _check_matmul(plan, rng, "float32")


@strict_float32
@gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_strict_float32_matches_float64(need_cudnn, rng, case):
    a_shape, b_shape, batch = CASES[case]
    try:
        plan = cudnn.matmul_plan(a_shape, b_shape, "float32", batch=batch)
    except cd.NotSupportedError as e:
        # Allowed only where every engine uses tensor cores (cuBLASLt engines qualify under the override).
        assert len(a_shape) == 3 or len(b_shape) == 3 or batch, f"a 2-D float32 product was refused: {e}"
        assert "every engine offered uses tensor cores" in str(e)
        return
    _check_matmul(plan, rng, "float32")


@strict_float32
@gpu
def test_strict_float32_plans_use_no_tf32_and_stay_within_1e_5(need_cudnn, rng):
    plan = cudnn.matmul_plan((256, 512), (512, 192), "float32")
    assert "TENSOR_CORE" not in plan.engine["numerical_notes"]
    a, a64 = upload(rng.standard_normal(plan.a_shape), "float32")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    plan(a, b, out)
    assert rel_err(download(out, "float32"), a64 @ b64) < 1e-5


@strict_float32
@gpu
def test_strict_float32_plans_record_their_precision_check(need_cudnn):
    plan = cudnn.matmul_plan((96, 80), (80, 40), "float32", cache=False)
    assert plan.tf32_override is True and cudnn.tf32_override() is True
    assert plan.engine["precision_check"] == {"probe": "a = 1 + 2**-12, b = 1 + 2**-13 in one term",
                                              "expected": 1.0003662109375, "passed": True}
    assert any(line.startswith(f"precision check of engine {plan.engine['engine']} ") and line.endswith(
        "float32, kept") for line in plan.engines_considered)
    plan.close()


@gpu
def test_float32_checks_in_a_process_started_with_NVIDIA_TF32_OVERRIDE_0(need_cudnn):
    if OVERRIDE_AT_START:
        pytest.skip("this process started with NVIDIA_TF32_OVERRIDE=0: the test_strict_float32_* tests ran here")
    env = dict(os.environ, NVIDIA_TF32_OVERRIDE="0")
    here = os.path.dirname(os.path.dirname(os.path.abspath(cd.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", os.path.abspath(__file__),
           "-k", "strict_float32"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", out.splitlines()[-1]))
    assert counts.get("passed") == len(CASES) + 4 and "skipped" not in counts, out[-3000:]


@gpu
def test_allow_tf32_gives_float32_results_within_tf32_precision(need_cudnn, rng, record_property):
    """Also records the measured errors (docs/cudnn.md quotes them): ``pytest -rP -k tf32_precision``
    prints the line ``TF32 measured: ...``; the junit XML has them as properties."""
    plan = cudnn.matmul_plan((256, 512), (512, 192), "float32", allow_tf32=True)
    assert plan.allow_tf32 is True
    a, a64 = upload(rng.standard_normal(plan.a_shape), "float32")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    plan(a, b, out)
    got, ref = download(out, "float32"), a64 @ b64
    assert np.isfinite(got).all(), "output still poisoned"
    errs = tf32_errors(got, ref)
    for k, v in errs.items():
        record_property(f"tf32_{k}", v)
    print(f"TF32 measured: (256x512)@(512x192) float32, allow_tf32=True, engines {plan.engines_considered}: "
          + ", ".join(f"{k} {v:.3g}" for k, v in errs.items()))
    assert errs["norm_relative_error"] < 5e-3


def tf32_errors(got, ref):
    """The errors of ``got`` against the float64 ``ref``: norm-wise relative (what the tests bound),
    the largest error relative to the largest |ref|, and the largest element-wise relative error
    over the elements with |ref| at least a tenth of ref's RMS (near-zero elements are left out)."""
    diff = np.abs(got.astype(np.float64) - ref)
    big = np.abs(ref) >= 0.1 * np.sqrt(np.mean(ref * ref))
    return {"norm_relative_error": rel_err(got, ref), "max_error_over_max_ref": float(diff.max() / np.abs(ref).max()),
            "max_elementwise_relative_error": float((diff[big] / np.abs(ref[big])).max())}


def test_the_tf32_error_record_measures_what_it_names():
    ref = np.array([[1.0, -2.0], [4.0, 0.001]])
    got = np.array([[1.001, -2.0], [3.99, 0.5]], np.float32)
    errs = tf32_errors(got, ref)
    assert errs["max_error_over_max_ref"] == pytest.approx(0.499 / 4.0, rel=1e-5)
    assert errs["max_elementwise_relative_error"] == pytest.approx(0.0025, rel=1e-4)   # 0.001 is left out
    assert errs["norm_relative_error"] == pytest.approx(rel_err(got, ref))


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


@strict_float32
@gpu
def test_strict_float32_foreign_operands_through_cuda_array_interface(need_cudnn, rng):
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


@gpu
def test_raw_handles_are_what_cudnn_executes(need_cudnn, rng):
    import ctypes
    plan = cudnn.matmul_plan((96, 40), (40, 72), "float16", cache=False)
    a, a64 = upload(rng.standard_normal(plan.a_shape), "float16")
    b, b64 = upload(rng.standard_normal(plan.b_shape), "float16")
    out = poisoned_out(plan)
    s = cd.Stream()
    s.wait_stream(cd.Device(0).default_stream)
    handle, exec_plan, pack = plan._raw_handles(a, b, out, stream=s)
    assert all(isinstance(x, int) and x != 0 for x in (handle, exec_plan, pack))
    execute = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        ctypes.cast(cudnn._lib.cudnnBackendExecute, ctypes.c_void_p).value)
    assert execute(handle, exec_plan, pack) == 0           # CUDNN_STATUS_SUCCESS, on s (cudnnSetStream done)
    s.synchronize()
    assert rel_err(download(out, "float16"), a64 @ b64) < 1e-2
    plan.close()


@gpu
def test_raw_handles_are_refused_during_a_capture(need_cudnn, rng):
    plan = cudnn.matmul_plan((32, 16), (16, 8), "float16")
    a, _ = upload(rng.standard_normal(plan.a_shape), "float16")
    b, _ = upload(rng.standard_normal(plan.b_shape), "float16")
    out = poisoned_out(plan)
    s = cd.Stream()
    s.wait_stream(cd.Device(0).default_stream)
    with s.capture() as g:
        with pytest.raises(cd.CaptureError, match="eager executions"):
            plan._raw_handles(a, b, out, stream=s)
        plan(a, b, out, stream=s)
    g.close()


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


@strict_float32
@gpu
def test_strict_float32_graph_keeps_a_closed_plan_until_the_graph_is_closed(need_cudnn, rng):
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
    plan = cudnn.matmul_plan((32, 16), (16, 8), "float32", allow_tf32=True)
    a, _ = upload(rng.standard_normal(plan.a_shape), "float32")
    b, _ = upload(rng.standard_normal(plan.b_shape), "float32")
    out = poisoned_out(plan)
    s = cd.Stream()
    s.wait_stream(cd.Device(0).default_stream)
    with s.capture() as g:
        with pytest.raises(cd.CaptureError, match="build it before the capture"):
            cudnn.matmul_plan((48, 16), (16, 8), "float32", allow_tf32=True, cache=False)
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
    # allow_tf32=True: these tests are about the operand checks, and a float32 plan without TF32 may be
    # refused where NVIDIA_TF32_OVERRIDE=0 is not set.
    plan = cudnn.matmul_plan((64, 64), (64, 64), "float32", allow_tf32=True)
    a, _ = upload(rng.standard_normal(plan.a_shape), "float32")
    b, _ = upload(rng.standard_normal(plan.b_shape), "float32")
    return plan, a, b, poisoned_out(plan)


def _assert_not_executed(out):
    assert np.isnan(download(out, "float32")).all(), "the plan executed"


@gpu
def test_wrong_shape_is_refused_naming_the_operand(need_cudnn, rng):
    plan = cudnn.matmul_plan((64, 32), (32, 16), "float32", allow_tf32=True)
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
