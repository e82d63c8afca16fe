"""cuDNN matmul, optional: loaded at run time, planned once, executed at launch speed.

>>> import numpy as np, pycudadrv as cd
>>> from pycudadrv import cudnn
>>> plan = cudnn.matmul_plan((512, 256), (256, 128), "float16")      # out = a @ b, row-major
>>> a = cd.Buffer.from_numpy(np.ones((512, 256), np.float16))
>>> b = cd.Buffer.from_numpy(np.ones((256, 128), np.float16))
>>> out = cd.Buffer.empty((512, 128), np.float16)
>>> plan(a, b, out)                                                 # one cudnnBackendExecute
>>> float(out.to_numpy()[0, 0])
256.0

cuDNN v9 (``libcudnn.so.9``) is looked for on first use (``import pycudadrv``
and ``import pycudadrv.cudnn`` never touch it): ``$PYCUDADRV_CUDNN_PATH`` alone
when set, else the ``nvidia-cudnn-cu13`` wheel (``pip install pycudadrv[cudnn]``),
beside PyTorch, the system loader, then :data:`SYSTEM_PATHS`
(:func:`search_order`). ``PYCUDADRV_CUDNN=0`` (or :func:`set_enabled`) switches
it off; ``PYCUDADRV_DEBUG=1`` logs the load or why it failed. A plan is
built once through the cuDNN backend API (tensors, matmul operation, operation
graph, instant heuristics, execution plan, workspace) and cached by shapes,
dtype, compute type and device; calling it checks the operands and makes one
``cudnnBackendExecute``.

float32 with ``allow_tf32=False`` (the default) is computed in float32 or
refused with NotSupportedError, never silently in TF32: engines that use
tensor cores are left out, and so are cuBLASLt engines unless the process
runs with ``NVIDIA_TF32_OVERRIDE=0`` (NVIDIA's switch that keeps TF32 out of
every NVIDIA library; pycudadrv reads it, never sets it); the engine kept is
then checked once on a probe whose exact float32 product TF32 cannot give.
See docs/cudnn.md.
"""
from __future__ import annotations

import ctypes
import importlib.util
import math
import os
import sys
import threading
from typing import Any

import numpy as np

from pycudadrv import _cudnn
from pycudadrv._cudnn import MatmulPlan
from pycudadrv._env import debug_log, env_flag
from pycudadrv._textargs import yes_no
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, CudnnError, CudnnUnavailableError,
                               NotSupportedError)

__all__ = ["MatmulPlan", "matmul_plan", "is_available", "require", "unavailable_reason", "enabled",
           "set_enabled", "version", "library_path", "clear_cache", "tf32_override", "LIBRARY", "PIP_PACKAGE",
           "MIN_VERSION", "TF32_OVERRIDE_VARIABLE", "PATH_VARIABLE", "SYSTEM_PATHS", "search_order"]

#: The library looked for (cuDNN v9's front library; it loads its sub-libraries itself).
LIBRARY = "libcudnn.so.9"
#: The pip package that provides it (CUDA 13 build).
PIP_PACKAGE = "nvidia-cudnn-cu13"
#: The oldest cuDNN pycudadrv drives (the v9 backend API as it uses it).
MIN_VERSION = (9, 0, 0)
#: The environment variable naming the library to load (a path or a name; when set, the only one tried).
PATH_VARIABLE = "PYCUDADRV_CUDNN_PATH"
#: Where a system install of cuDNN lives (distribution packages, tarballs), tried after the system loader.
SYSTEM_PATHS = ("/usr/lib/x86_64-linux-gnu/libcudnn.so.9", "/usr/local/lib/libcudnn.so.9", "/usr/lib/libcudnn.so.9",
                "/usr/local/cuda/lib64/libcudnn.so.9", "/opt/cuda/lib64/libcudnn.so.9", "/opt/cudnn/lib/libcudnn.so.9")
#: NVIDIA's environment variable that, set to 0 before NVIDIA's libraries load, keeps TF32 out of them.
TF32_OVERRIDE_VARIABLE = "NVIDIA_TF32_OVERRIDE"

_OFF = ("cuDNN is switched off (PYCUDADRV_CUDNN=0 or pycudadrv.cudnn.set_enabled(False)); "
        "set PYCUDADRV_CUDNN=1 or call set_enabled(True) to use it")
_DTYPES = {"float32": "float32", "float": "float32", "f4": "float32", "fp32": "float32",
           "float16": "float16", "half": "float16", "f2": "float16", "fp16": "float16",
           "bfloat16": "bfloat16", "bf16": "bfloat16"}
#: Engines kept and timed by matmul_plan(autotune=True).
AUTOTUNE_CANDIDATES = 8
_MAX_ELEMENTS = 2 ** 50            # per operand: far beyond any device memory, far from int64 overflow

_lock = threading.RLock()
_lib: Any = None                   # ctypes handle of libcudnn (kept: the library stays mapped)
_blas: Any = None                  # ctypes handle of libcublasLt, opened first so cuDNN finds it
_path: str | None = None
_version: tuple[int, int, int] | None = None
_error: CudnnUnavailableError | None = None   # a failed load is reported again, not retried
_override: bool | None = None      # set_enabled()
_tf32_override_at_load: bool | None = None   # NVIDIA_TF32_OVERRIDE was "0" when cuDNN was loaded
_plans: dict = {}
_off_logged: list[bool] = []      # the debug log said once that cuDNN is switched off


# --------------------------------------------------------------------------- the switch

def enabled() -> bool:
    """Whether the cuDNN integration is on: :func:`set_enabled` if it was
    called, else ``PYCUDADRV_CUDNN`` (on unless 0/false/no/off)."""
    if _override is not None:
        return _override
    return env_flag("PYCUDADRV_CUDNN", True)


def set_enabled(flag: bool | None) -> bool:
    """Switch cuDNN on (True) or off (False) for this process, over
    ``PYCUDADRV_CUDNN``; None goes back to the environment variable. Returns
    whether it was on before. While off, :func:`is_available` is False and
    :func:`matmul_plan` raises CudnnUnavailableError; plans made before keep
    working.

    Raises ArgumentTypeError for anything but True, False or None."""
    global _override
    if flag is not None and not isinstance(flag, (bool, np.bool_)):
        raise ArgumentTypeError(f"cudnn.set_enabled: flag must be True, False or None, got {flag!r}")
    before = enabled()
    _override = None if flag is None else bool(flag)
    return before


# --------------------------------------------------------------------------- loading

def _version_tuple(v: int) -> tuple[int, int, int]:
    """cudnnGetVersion() as (major, minor, patch): MAJOR*10000 + MINOR*100 + PATCH
    since cuDNN 9, MAJOR*1000 + MINOR*100 + PATCH before."""
    if v >= 10000:
        return (v // 10000, (v % 10000) // 100, v % 100)
    return (v // 1000, (v % 1000) // 100, v % 100)


def _fmt(v: tuple) -> str:
    return ".".join(str(x) for x in v)


def _nvidia_dirs() -> list[str]:
    try:
        import nvidia  # namespace package of the nvidia-* wheels
    except ImportError:
        return []
    return list(nvidia.__path__)


def _library_candidates() -> list[str]:
    """Where libcudnn.so.9 is looked for, in order (see :func:`search_order`)."""
    env = os.environ.get(PATH_VARIABLE, "").strip()
    if env:
        return [os.path.expanduser(env)]
    out = []
    for base in _nvidia_dirs():
        for sub in ("cudnn/lib", "cu13/lib"):
            p = os.path.join(base, sub, LIBRARY)
            if os.path.isfile(p):
                out.append(p)
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        p = os.path.join(loc, "lib", LIBRARY)
        if os.path.isfile(p):
            out.append(p)
    return list(dict.fromkeys([*out, LIBRARY, *SYSTEM_PATHS]))


def search_order() -> list[str]:
    """The libraries cuDNN is loaded from, first that loads wins: the path in
    ``$PYCUDADRV_CUDNN_PATH`` alone when it is set (no fallback); else the
    ``nvidia-cudnn-cu13`` wheel's (``nvidia/cudnn/lib``, ``nvidia/cu13/lib``)
    and PyTorch's ``lib`` folder (found without importing it), each where the
    file exists, then the bare name for the system loader (LD_LIBRARY_PATH,
    ldconfig), then :data:`SYSTEM_PATHS`. Loads nothing."""
    return _library_candidates()


def _open() -> tuple[Any, str]:
    tried = []
    for cand in _library_candidates():
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            tried.append(f"{cand} ({e})")
            continue
        return lib, cand
    env = os.environ.get(PATH_VARIABLE, "").strip()
    if env:
        raise CudnnUnavailableError(
            f"cuDNN not found: {PATH_VARIABLE}={env!r} could not be loaded ({'; '.join(tried)}); when it is set "
            f"nothing else is tried: point it at {LIBRARY} or unset it to search the wheels and system paths")
    wheels = ", ".join(os.path.join(b, "cudnn", "lib") for b in _nvidia_dirs()) or "no nvidia-* wheel installed"
    raise CudnnUnavailableError(
        f"cuDNN not found: {LIBRARY} could not be loaded (looked in the {PIP_PACKAGE} wheel: {wheels}; "
        f"then tried, in order: {'; '.join(tried)}). Install it with `pip install {PIP_PACKAGE}` "
        f"(or `pip install pycudadrv[cudnn]`), set {PATH_VARIABLE} to its path, or switch cuDNN off with "
        "PYCUDADRV_CUDNN=0.")


def _open_cublaslt(cudnn_path: str, cuda_major: int, shown: str) -> Any:
    """cuBLASLt of cuDNN's CUDA major version, opened before cuDNN needs it:
    cuDNN's matmul engines dlopen it and abort the process when it is missing."""
    name = f"libcublasLt.so.{cuda_major}"
    dirs = []
    if os.path.isabs(cudnn_path):
        here = os.path.dirname(cudnn_path)
        dirs += [here, os.path.join(here, "..", "..", "cublas", "lib"),
                 os.path.join(here, "..", "..", f"cu{cuda_major}", "lib")]
    for base in _nvidia_dirs():
        dirs += [os.path.join(base, "cublas", "lib"), os.path.join(base, f"cu{cuda_major}", "lib")]
    cands = []
    for d in dirs:
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(p) and p not in cands:
            cands.append(p)
    cands.append(name)
    errors = []
    for c in cands:
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            errors.append(str(e))
    pkg = "nvidia-cublas" if cuda_major >= 13 else f"nvidia-cublas-cu{cuda_major}"
    raise CudnnUnavailableError(
        f"cuBLASLt ({name}) not found: cuDNN {shown} ({cudnn_path}) needs it for its matmul engines (and aborts "
        f"the process without it). Install it with `pip install {pkg}`; looked beside cuDNN, in the nvidia-* "
        f"wheels and through the system loader ({'; '.join(errors)})")


def _adopt(lib: Any, path: str) -> Any:
    """Check the opened library (version, cuBLASLt) and bind its entry points."""
    try:
        get_version = lib.cudnnGetVersion
    except AttributeError:
        raise CudnnUnavailableError(f"{path} is not a cuDNN library (it has no cudnnGetVersion)") from None
    get_version.restype = ctypes.c_size_t
    get_version.argtypes = []
    ver = _version_tuple(int(get_version()))
    if ver < MIN_VERSION:
        raise CudnnUnavailableError(
            f"cuDNN {_fmt(ver)} found at {path} is too old: pycudadrv needs cuDNN {_fmt(MIN_VERSION)} or newer "
            f"(`pip install -U {PIP_PACKAGE}`)")
    cuda_major = 13
    try:
        f = lib.cudnnGetCudartVersion
        f.restype, f.argtypes = ctypes.c_size_t, []
        cuda_major = int(f()) // 1000 or 13
    except AttributeError:
        pass
    blas = _open_cublaslt(path, cuda_major, _fmt(ver))
    addresses = {}
    for name in _cudnn.ENTRY_POINTS:
        try:
            addresses[name] = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        except AttributeError:
            addresses[name] = None
    _cudnn.bind(addresses)
    return ver, blas


def _load() -> None:
    global _lib, _blas, _path, _version, _error, _tf32_override_at_load
    if _lib is not None:
        return
    with _lock:
        if _lib is not None:
            return
        if _error is not None:
            raise CudnnUnavailableError(str(_error))
        override = os.environ.get(TF32_OVERRIDE_VARIABLE) == "0"
        try:
            lib, path = _open()
            ver, blas = _adopt(lib, path)
        except CudnnUnavailableError as e:
            _error = e
            debug_log("cuDNN", f"unavailable: {e}")
            raise
        debug_log("cuDNN", f"loaded {path} (cuDNN {_fmt(ver)})")
        _lib, _blas, _path, _version, _tf32_override_at_load = lib, blas, path, ver, override


def _forget() -> None:
    """Forget the loaded (or failed) library so the next call looks again
    (tests; plans already made keep working)."""
    global _lib, _blas, _path, _version, _error, _tf32_override_at_load
    with _lock:
        _lib = _blas = _path = _version = _error = _tf32_override_at_load = None


def tf32_override() -> bool:
    """Whether ``NVIDIA_TF32_OVERRIDE=0`` is in effect for pycudadrv's cuDNN:
    the variable is ``0`` now and was when pycudadrv loaded cuDNN and cuBLASLt
    (set later, the libraries may never see it). NVIDIA documents it as
    overriding every NVIDIA library's defaults and settings so that float32 is
    never computed in TF32; set it in the environment before the process
    starts (pycudadrv reads it, never sets it: it is process-wide). float32
    plans without TF32 then accept cuBLASLt engines. Loads cuDNN (raises
    CudnnUnavailableError as :func:`require`)."""
    require()
    return _tf32_override_now()


def _tf32_override_now() -> bool:
    """NVIDIA_TF32_OVERRIDE is "0" now and was when cuDNN was loaded (False before it is)."""
    return bool(_tf32_override_at_load) and os.environ.get(TF32_OVERRIDE_VARIABLE) == "0"


def require() -> None:
    """Load cuDNN now (nothing when it already is).

    Raises
    ------
    CudnnUnavailableError
        Switched off; ``libcudnn.so.9`` not found (the message says where it
        looked and names ``nvidia-cudnn-cu13``); older than :data:`MIN_VERSION`;
        cuBLASLt, which its matmul engines load, missing.
    """
    if not enabled():
        if not _off_logged:
            _off_logged.append(True)
            debug_log("cuDNN", "not loaded: switched off (PYCUDADRV_CUDNN=0 or set_enabled(False))")
        raise CudnnUnavailableError(_OFF)
    _load()


def unavailable_reason() -> str | None:
    """Why cuDNN cannot be used (the message :func:`require` would raise), or None."""
    try:
        require()
    except CudnnUnavailableError as e:
        return str(e)
    return None


def is_available() -> bool:
    """Whether cuDNN is switched on and loads (a recent enough libcudnn.so.9
    and its cuBLASLt). Needs no GPU; plans still need a device."""
    return unavailable_reason() is None


def version() -> tuple[int, int, int]:
    """The loaded cuDNN's version, e.g. ``(9, 28, 1)`` (``cudnnGetVersion``).
    Raises CudnnUnavailableError as :func:`require`."""
    require()
    return _version


def library_path() -> str:
    """The libcudnn.so.9 that was loaded (a path, or the bare name when the
    system loader found it). Raises CudnnUnavailableError as :func:`require`."""
    require()
    return _path


# --------------------------------------------------------------------------- plans

def _dtype_name(x: Any, what: str) -> str:
    if isinstance(x, str):
        name = x.strip().lower()
    elif str(x).startswith("torch."):
        name = str(x)
    else:
        try:
            name = np.dtype(x).name
        except TypeError:
            raise ArgumentTypeError(f"matmul_plan: {what} {x!r} is not a dtype; use float32, float16 or "
                                    "bfloat16") from None
    name = name.removeprefix("torch.")
    if name not in _DTYPES:
        raise ArgumentTypeError(f"matmul_plan: {what} {x!r} is not supported; use float32, float16 or bfloat16")
    return _DTYPES[name]


def _accepted(dt: str) -> tuple:
    """The numpy dtypes an operand Buffer of a ``dt`` plan may carry. NumPy has
    no bfloat16: its bits travel as uint16, int16 or 2-byte void (ml_dtypes'
    bfloat16 when that package is in use)."""
    if dt == "float32":
        return (np.dtype(np.float32),)
    if dt == "float16":
        return (np.dtype(np.float16),)
    out = [np.dtype(np.uint16), np.dtype(np.int16), np.dtype("V2")]   # V2: how PyTorch's CAI spells bfloat16
    ml = sys.modules.get("ml_dtypes")
    if ml is not None and hasattr(ml, "bfloat16"):
        out.append(np.dtype(ml.bfloat16))
    return tuple(out)


def _matrix(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__"):
        raise ArgumentTypeError(f"matmul_plan: {what} must be a tuple (rows, columns) or (batch, rows, columns), "
                                f"got {shape!r}")
    dims = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise ArgumentTypeError(f"matmul_plan: {what} {tuple(shape)!r} must hold ints, got {d!r}")
        dims.append(int(d))
    if len(dims) not in (2, 3):
        raise ArgumentValueError(f"matmul_plan: {what} {tuple(dims)} has {len(dims)} dimensions; give 2 "
                                 "(rows, columns) or 3 (batch, rows, columns)")
    if min(dims) < 1:
        raise ArgumentValueError(f"matmul_plan: {what} {tuple(dims)}: every dimension must be >= 1")
    if math.prod(dims) > _MAX_ELEMENTS:
        raise ArgumentValueError(f"matmul_plan: {what} {tuple(dims)} has more than 2**50 elements")
    return tuple(dims)


def _shapes(a_shape: Any, b_shape: Any, batch: Any):
    """(a, b, out) operand shapes and the 3-D cuDNN dimensions of a, b, out."""
    a = _matrix(a_shape, "a_shape")
    b = _matrix(b_shape, "b_shape")
    if batch is not None:
        if isinstance(batch, (bool, np.bool_)) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ArgumentValueError(f"matmul_plan: batch must be None or an int >= 1, got {batch!r}")
        batch = int(batch)
        for name, s in (("a_shape", a), ("b_shape", b)):
            if len(s) == 3 and s[0] != batch:
                raise ArgumentValueError(f"matmul_plan: {name} {s} has batch {s[0]}, batch={batch} was given")
        a = a if len(a) == 3 else (batch, *a)
        b = b if len(b) == 3 else (batch, *b)
    m, k = a[-2:]
    k2, n = b[-2:]
    if k != k2:
        raise ArgumentValueError(f"matmul_plan: a_shape {a} has {k} columns but b_shape {b} has {k2} rows; "
                                 "a @ b needs them equal")
    ba = a[0] if len(a) == 3 else None
    bb = b[0] if len(b) == 3 else None
    if ba is not None and bb is not None and ba != bb and 1 not in (ba, bb):
        raise ArgumentValueError(f"matmul_plan: batch sizes differ: {ba} (a_shape {a}) and {bb} (b_shape {b}); "
                                 "they must be equal, or one of them 1 (broadcast)")
    nb = max(x for x in (ba, bb, 0) if x is not None) or None
    out = (nb, m, n) if nb is not None else (m, n)
    return a, b, out, (ba or 1, m, k), (bb or 1, k, n), (nb or 1, m, n)


def _device(device: Any):
    from pycudadrv._device import Device, get_current_device
    if device is None:
        return get_current_device()
    if isinstance(device, Device):
        return device
    return Device(device)


def matmul_plan(a_shape: Any, b_shape: Any, dtype: Any, compute_dtype: Any = None, batch: int | None = None,
                device: Any = None, *, allow_tf32: bool = False, autotune: bool = False,
                cache: bool = True) -> MatmulPlan:
    """A cuDNN plan for ``out = a @ b`` (row-major, C-contiguous operands),
    built once and cached by (shapes, dtype, compute type, TF32, autotune,
    device).

    Parameters
    ----------
    a_shape, b_shape : tuple of int
        ``(M, K)`` and ``(K, N)`` in elements, or with a leading batch
        dimension ``(B, M, K)``, ``(B, K, N)``. A 2-D operand, or a batch of
        1, is broadcast over the other's batch (as in ``numpy.matmul``).
    dtype : "float32", "float16" or "bfloat16" (or a numpy / PyTorch dtype)
        Element type of a, b and out. bfloat16 operands are Buffers of uint16
        or int16 (the bits), raw-byte Buffers, or DLPack / CAI arrays.
    compute_dtype : "float32" (default) or "float16"
        Accumulation type (``CUDNN_ATTR_MATMUL_COMP_TYPE``); float16 only for
        float16 inputs.
    batch : int, optional
        Shorthand: prepends ``batch`` to 2-D ``a_shape`` and ``b_shape``.
    device : Device or int, optional
        The current device by default.
    allow_tf32 : bool
        float32 only: allow engines that compute in TF32 (inputs rounded to a
        10-bit mantissa: relative error about 3e-4 against float64, 1e-3 at
        worst), i.e. tensor-core and cuBLASLt engines. Off by default: then
        the product is computed in float32 (relative error about 1e-7) or
        the plan is refused. Engines noted TENSOR_CORE or
        DOWN_CONVERT_INPUTS are left out; so are engines noted
        CUBLASLT_DEPENDENCY unless :func:`tf32_override` (cuBLASLt computes
        float32 in TF32 otherwise); the engine kept is executed once on a
        probe (``a = 1 + 2**-12``, ``b = 1 + 2**-13`` in one term, zeros
        elsewhere: an exact float32 product that TF32 rounds away) and kept
        only if the product is exact (``plan.engine["precision_check"]``).
    autotune : bool
        Time up to 8 engines the heuristics offer and keep the fastest
        (milliseconds to seconds, once per plan); otherwise the first usable
        engine of the instant heuristics is taken.
    cache : bool
        Reuse (and remember) the plan of the same key; False builds a plan
        of its own, not remembered.

    Returns
    -------
    MatmulPlan
        Call it as ``plan(a, b, out, stream=None)``; ``out_shape`` gives out's
        shape (``(B, M, N)`` or ``(M, N)``), ``workspace_nbytes`` the workspace
        allocated once for it, ``engine`` what cuDNN chose.

    Raises
    ------
    ArgumentTypeError, ArgumentValueError
        Shapes that do not multiply (each named with its value), an unsupported
        dtype or compute type; checked before cuDNN or a GPU is needed.
    CudnnUnavailableError
        cuDNN is switched off or cannot be loaded (see :func:`require`).
    NotSupportedError
        No engine of this cuDNN computes the product as asked (the message
        lists every engine considered and why it was left out; for float32
        without TF32 it names both ways out: ``allow_tf32=True``, or
        ``NVIDIA_TF32_OVERRIDE=0`` in the environment of a new process).
    CudnnError
        A cuDNN call failed while building (its status and message).
    """
    dt = _dtype_name(dtype, "dtype")
    ct = "float32" if compute_dtype is None else _dtype_name(compute_dtype, "compute_dtype")
    if ct == "bfloat16" or (ct == "float16" and dt != "float16"):
        raise ArgumentValueError(f"matmul_plan: compute_dtype {ct} with dtype {dt}: the compute type is float32, "
                                 "or float16 for float16 inputs")
    allow_tf32, autotune, cache = (yes_no(v, name, "matmul_plan") for name, v in
                                   (("allow_tf32", allow_tf32), ("autotune", autotune), ("cache", cache)))
    a, b, out, a_dims, b_dims, c_dims = _shapes(a_shape, b_shape, batch)
    require()
    dev = _device(device)
    tf32 = bool(allow_tf32) and dt == "float32"
    strict = dt == "float32" and not tf32
    override = strict and tf32_override()
    key = (a, b, dt, ct, tf32, override, bool(autotune), dev.ordinal)
    with _lock:
        plan = _plans.get(key) if cache else None
        if plan is not None and not plan.closed:
            return plan
        plan = MatmulPlan._create(dev, dt, ct, tf32, override, a_dims, b_dims, c_dims, a, b, out, _accepted(dt),
                                  AUTOTUNE_CANDIDATES if autotune else 1)
        try:
            if strict:
                _check_float32(plan, keep_all=autotune)
            if autotune:
                _autotune(plan)
        except BaseException:
            plan.close()
            raise
        if cache:
            _plans[key] = plan
    return plan


def clear_cache() -> None:
    """Forget the cached plans (each is destroyed once nothing else holds it)."""
    with _lock:
        _plans.clear()


_ONE = {"float32": np.uint32(0x3F800000), "float16": np.uint16(0x3C00), "bfloat16": np.uint16(0x3F80)}

#: The precision probe of float32 plans: a[..., 0] = 1 + 2**-12 (all of a), b[0, :] = 1 + 2**-13 (row 0
#: of every batch of b, zeros elsewhere), so out = a[., 0] * b[0, .] in one exact term: float32 gives
#: 1 + 2**-12 + 2**-13 (the 2**-25 of the exact product rounds away, far from a tie); TF32 (and
#: float16, bfloat16) round both inputs to 1.0 and give 1.0, rounding one of them gives the other.
PROBE_A = np.float32(1 + 2 ** -12)
PROBE_B = np.float32(1 + 2 ** -13)
PROBE_OUT = np.float32(float(PROBE_A) * float(PROBE_B))
_PROBE_POISON = np.float32(-7.0)      # finite: an engine that reads out (beta 0) must not turn it into NaN
_PROBE_TOLERANCE = 2.0 ** -20        # relative; TF32 is off by >= 2**-13
_PROBE_SAMPLE_BYTES = 16384          # out read back at its start, middle and end


def _probe_verdict(got: np.ndarray) -> str | None:
    """None when every value of ``got`` (float32) is the probe's float32
    product, else what was wrong (the values seen, and what TF32 would give)."""
    got = np.asarray(got, dtype=np.float64)
    bad = ~(np.abs(got - float(PROBE_OUT)) <= _PROBE_TOLERANCE * float(PROBE_OUT))
    if not bad.any():
        return None
    seen = sorted({float(x) for x in got[bad][:64]})[:4]
    return (f"{int(bad.sum())} of {got.size} outputs checked are not {float(PROBE_OUT)!r} (float32 of "
            f"(1 + 2**-12) * (1 + 2**-13)); seen {seen} (TF32 gives 1.0; rounding only a gives "
            f"{float(PROBE_B)!r}, only b {float(PROBE_A)!r}; {float(_PROBE_POISON)!r}: not written)")


def _check_float32(plan: MatmulPlan, keep_all: bool = False) -> None:
    """Execute ``plan``'s candidate engines, in order, on the precision probe
    (scratch operands of the plan's shapes, a private stream) until one gives
    the exact float32 product; keep it (``keep_all``: keep every one that does,
    for autotuning). Each result goes into ``engines_considered`` and the
    engine's ``precision_check``. Raises NotSupportedError when none does."""
    from pycudadrv._memory import Buffer
    from pycudadrv._stream import Stream
    cands = plan._candidates()
    dev = plan.device
    s = Stream(dev)
    bufs = []
    passed = []
    try:
        nb, k, n = (plan.b_shape if len(plan.b_shape) == 3 else (1, *plan.b_shape))
        for shape in (plan.a_shape, plan.b_shape, plan.out_shape):
            bufs.append(Buffer.empty(math.prod(shape) * 4, device=dev, stream=s))
        a, b, out = bufs
        a.fill(PROBE_A.view(np.uint32), stream=s)
        b.fill(np.uint32(0), stream=s)
        for j in range(nb):                          # row 0 of every batch of b
            b[j * k * n * 4:(j * k * n + n) * 4].fill(PROBE_B.view(np.uint32), stream=s)
        size = out.nbytes
        chunk = min(size, _PROBE_SAMPLE_BYTES)
        offsets = sorted({0, (size // 2 - chunk // 2) // 4 * 4, size - chunk})
        for i, c in enumerate(cands):
            out.fill(_PROBE_POISON.view(np.uint32), stream=s)
            plan._try_candidate(i)
            try:
                plan(a, b, out, stream=s)
                s.synchronize()
                got = np.concatenate([out.read(offset=o, nbytes=chunk, stream=s).view(np.float32)
                                      for o in offsets])
                why = _probe_verdict(got)
            except CudnnError as e:
                why = f"failed to execute: {e}"
            check = {"probe": "a = 1 + 2**-12, b = 1 + 2**-13 in one term", "expected": float(PROBE_OUT),
                     "passed": why is None}
            if why is not None:
                check["failure"] = why
            plan._annotate_candidate(i, "precision_check", check)
            tag = f"precision check of engine {c['engine']} ({c['heuristic']} #{c['rank']})"
            plan.engines_considered.append(f"{tag}: " + ("float32, kept" if why is None else f"skipped ({why})"))
            if why is None:
                passed.append(i)
                if not keep_all:
                    break
        s.synchronize()
    finally:
        for buf in bufs:
            buf.close()
        s.close()
    if not passed:
        from pycudadrv._cudnn import no_engine_message
        late = ("; NVIDIA_TF32_OVERRIDE=0 takes effect only when it is set before NVIDIA's libraries load: start "
                "the process with it in its environment" if plan.tf32_override else "")
        label = (f"cudnn matmul plan {plan.a_shape} @ {plan.b_shape} -> {plan.out_shape} ({plan.dtype}, compute "
                 f"{plan.compute_dtype})")
        raise NotSupportedError(no_engine_message(
            label, version(), dev.ordinal, True, plan.tf32_override, list(plan.engines_considered),
            why="every engine left after the notes failed the precision check: it computed float32 in a "
                "narrower type (TF32) although cuDNN's notes do not say so" + late))
    plan._keep_candidates(passed)


def _autotune(plan: MatmulPlan, target_ms: float = 2.0) -> None:
    """Time every candidate engine of ``plan`` on scratch operands (all 1.0)
    on a private stream; keep the fastest."""
    from pycudadrv._memory import Buffer
    from pycudadrv._event import Event
    from pycudadrv._stream import Stream
    cands = plan._candidates()
    if len(cands) <= 1:
        plan._keep_candidate(0)
        return
    dev = plan.device
    itemsize = 4 if plan.dtype == "float32" else 2
    s = Stream(dev)
    bufs = []
    try:
        for shape in (plan.a_shape, plan.b_shape, plan.out_shape):
            buf = Buffer.empty(math.prod(shape) * itemsize, device=dev, stream=s)
            buf.fill(_ONE[plan.dtype], stream=s)
            bufs.append(buf)
        a, b, out = bufs
        e0, e1 = Event(device=dev), Event(device=dev)
        times = []
        for i in range(len(cands)):
            try:
                plan._try_candidate(i)
                plan(a, b, out, stream=s)               # first launch: the engine's code is loaded
                e0.record(s)
                plan(a, b, out, stream=s)
                e1.record(s)
                one = max(Event.elapsed_ms(e0, e1), 1e-3)
                reps = max(1, min(50, int(target_ms / one)))
                best = math.inf
                for _ in range(3):
                    e0.record(s)
                    for _ in range(reps):
                        plan(a, b, out, stream=s)
                    e1.record(s)
                    best = min(best, Event.elapsed_ms(e0, e1) / reps)
            except CudnnError:
                best = math.inf
            times.append(best)
        s.synchronize()
        best_i = min(range(len(times)), key=times.__getitem__)
        if math.isinf(times[best_i]):
            raise CudnnError(f"matmul_plan(autotune=True): every candidate engine of {plan!r} failed to execute")
        plan._keep_candidate(best_i)
        plan.engine["autotune_ms"] = times[best_i]
        plan.engine["autotune_candidates_ms"] = {c["engine"]: t for c, t in zip(cands, times)}
    finally:
        s.synchronize()
        for buf in bufs:
            buf.close()
        s.close()
