"""compile(): CUDA C++ -> CUBIN (default) or PTX through NVRTC, loaded at run time.

NVRTC is looked for, in order: ``$PYCUDADRV_NVRTC`` (a path), the
``nvidia-cuda-nvrtc`` wheel (``pip install pycudadrv[nvrtc]``),
``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda``, then the system loader.
NVRTC needs no GPU: with ``arch`` given, compilation works on any machine.
"""
from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import struct
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

__all__ = ["compile", "ObjectCode", "NvrtcError", "NvrtcUnavailableError", "nvrtc_version", "nvrtc_path",
           "cache_dir", "clear_cache"]


from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, NvrtcError, NvrtcUnavailableError

if TYPE_CHECKING:
    from pycudadrv._device import Device
    from pycudadrv._module import Module


_lib = None
_lib_path = None
_lock = threading.Lock()


def _candidates():
    # PYCUDADRV_NVRTC is handled by _load() alone: it never falls back to these.
    try:
        import nvidia  # namespace package of the nvidia-* wheels

        for base in list(nvidia.__path__):
            for sub in ("cu13/lib", "cuda_nvrtc/lib", "cu12/lib"):
                yield from sorted(glob.glob(os.path.join(base, sub, "libnvrtc.so*")), reverse=True)
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            yield from sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")), reverse=True)
    yield from sorted(glob.glob("/usr/local/cuda/lib64/libnvrtc.so*"), reverse=True)
    yield from ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


def _load():
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        env = os.environ.get("PYCUDADRV_NVRTC")
        if env:
            try:
                lib = ctypes.CDLL(env)
                lib.nvrtcVersion  # noqa: B018
            except (OSError, AttributeError) as e:
                raise NvrtcUnavailableError(f"PYCUDADRV_NVRTC={env!r} is not a loadable NVRTC library: {e}") from None
            _declare(lib)
            _lib, _lib_path = lib, env
            return lib
        tried = []
        for cand in _candidates():
            if "builtins" in os.path.basename(cand) or cand.endswith(".alt.so"):
                continue
            tried.append(cand)
            try:
                lib = ctypes.CDLL(cand)
                lib.nvrtcVersion  # noqa: B018 -- is it NVRTC at all?
            except (OSError, AttributeError):
                continue
            _declare(lib)
            _lib, _lib_path = lib, cand
            return lib
        raise NvrtcUnavailableError(
            "NVRTC (libnvrtc) not found; looked at: " + ", ".join(tried) +
            ". Install it with `pip install nvidia-cuda-nvrtc` (or `pip install pycudadrv[nvrtc]`), "
            "or set PYCUDADRV_NVRTC to the library's path.")


def _declare(lib):
    P, S, I, C = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p
    sigs = {
        "nvrtcVersion": [ctypes.POINTER(I), ctypes.POINTER(I)],
        "nvrtcGetErrorString": [I],
        "nvrtcCreateProgram": [ctypes.POINTER(P), C, C, I, ctypes.POINTER(C), ctypes.POINTER(C)],
        "nvrtcDestroyProgram": [ctypes.POINTER(P)],
        "nvrtcCompileProgram": [P, I, ctypes.POINTER(C)],
        "nvrtcGetProgramLogSize": [P, ctypes.POINTER(S)],
        "nvrtcGetProgramLog": [P, C],
        "nvrtcGetPTXSize": [P, ctypes.POINTER(S)],
        "nvrtcGetPTX": [P, C],
        "nvrtcGetCUBINSize": [P, ctypes.POINTER(S)],
        "nvrtcGetCUBIN": [P, C],
        "nvrtcAddNameExpression": [P, C],
        "nvrtcGetLoweredName": [P, C, ctypes.POINTER(C)],
    }
    for name, args in sigs.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = C if name == "nvrtcGetErrorString" else I


def default_include_dirs() -> list[str]:
    """Directories with the CUDA device headers (``cuda_fp16.h``,
    ``cooperative_groups.h``, and the CCCL headers they include) that
    compile() passes as ``-I``. Looked for beside the NVRTC library (the
    nvidia-* wheels share one include folder), then in ``$CUDA_HOME`` /
    ``$CUDA_PATH``, then ``/usr/local/cuda``; the first complete one wins."""
    cands = []
    if _lib_path and os.path.isabs(_lib_path):
        cands.append(os.path.join(os.path.dirname(os.path.dirname(_lib_path)), "include"))
    try:
        import nvidia

        for base in list(nvidia.__path__):
            cands += sorted(glob.glob(os.path.join(base, "*", "include")))
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "include"))
    cands.append("/usr/local/cuda/include")
    def has(c, rel):
        return os.path.isfile(os.path.join(c, rel))

    def cccl_dir(c):
        # CUDA 13 keeps CCCL (cuda/std, nv/target, cub, thrust) under include/cccl; older ones in include/
        for d in (os.path.join(c, "cccl"), c):
            if has(d, os.path.join("cuda", "std", "type_traits")):
                return d
        return None

    device = [c for c in cands if has(c, "cuda_fp16.h")]
    for c in device:
        cc = cccl_dir(c)
        if cc is not None:
            return [c] if cc == c else [c, cc]
    # An incomplete wheel set (no nvidia-cuda-cccl): device headers from one place, CCCL from another.
    other = [d for d in (cccl_dir(c) for c in cands) if d is not None]
    return device[:1] + other[:1]


def nvrtc_version() -> tuple[int, int]:
    """``(major, minor)`` of the NVRTC that compile() uses.
    Raises NvrtcUnavailableError when none is found."""
    lib = _load()
    a, b = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b))
    return (a.value, b.value)


def nvrtc_path() -> str:
    """Path of the NVRTC library compile() loaded."""
    _load()
    return _lib_path


@dataclass
class ObjectCode:
    """A compiled image. ``image`` holds CUBIN (ELF) or PTX bytes per
    ``target``; ``ptx`` the PTX text (also kept for CUBIN, so launches know each
    parameter's type); ``log`` NVRTC's log; ``lowered_names`` maps each name
    expression to its mangled name."""

    image: bytes
    target: str
    arch: str
    ptx: str | None = None
    log: str = ""
    options: tuple[str, ...] = ()
    lowered_names: dict[str, str] = field(default_factory=dict)
    nvrtc_version: tuple[int, int] = (0, 0)
    from_cache: bool = False

    def load(self, device: Device | int | None = None) -> Module:
        """Load into ``device`` (current by default) through the module cache;
        returns the Module."""
        from pycudadrv._module import load_module

        return load_module(self, device=device)

    def __repr__(self) -> str:
        return (f"<ObjectCode {self.target} for {self.arch}, {len(self.image)} bytes, "
                f"NVRTC {self.nvrtc_version[0]}.{self.nvrtc_version[1]}>")


# --- on-disk compile cache ----------------------------------------------------------------
#
# One file per compilation, named by the SHA-256 of everything that determines NVRTC's
# output: source, its name (it appears in __FILE__ and line info), in-memory headers,
# options (the -I paths included), name expressions, target, architecture and NVRTC version. Headers that NVRTC reads from include paths on
# disk are not hashed: change one and clear the cache (or set PYCUDADRV_CACHE=0).
# File layout: MAGIC | sha256(body) (32 bytes) | body, where body = u32 length of a JSON
# header | JSON | image bytes. Files are written to a temporary name and renamed, so a
# reader never sees half a file; a file whose checksum does not match is recompiled.

_MAGIC = b"PYCUDADRV-CACHE1"


def cache_dir() -> str | None:
    """Directory of the compile cache: ``$PYCUDADRV_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/pycudadrv``, else ``~/.cache/pycudadrv``; None when
    ``PYCUDADRV_CACHE=0`` disables it."""
    if os.environ.get("PYCUDADRV_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    d = os.environ.get("PYCUDADRV_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "pycudadrv")
    return os.path.expanduser(d)


def clear_cache() -> int:
    """Delete every cached compilation; returns how many files were removed."""
    d = cache_dir()
    n = 0
    if d and os.path.isdir(d):
        for f in glob.glob(os.path.join(d, "*.nvrtc")):
            try:
                os.remove(f)
                n += 1
            except OSError:
                pass
    return n


def _cache_key(src, name, headers, opts, name_expressions, target, arch, version):
    h = hashlib.sha256()
    for part in (b"pycudadrv compile v1", src, name.encode(), json.dumps(sorted(headers.items())).encode(),
                 json.dumps(list(opts)).encode(), json.dumps(list(name_expressions)).encode(),
                 target.encode(), arch.encode(), json.dumps(list(version)).encode()):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.hexdigest()


_CACHE_MAX_BYTES = 1 << 30


def _cache_read(path):
    import stat

    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _CACHE_MAX_BYTES:
            return None  # a FIFO, a device, a directory, or absurdly large: never read it
        with open(path, "rb") as f:
            data = f.read(_CACHE_MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) < len(_MAGIC) + 36 or not data.startswith(_MAGIC):
        return None
    digest, body = data[len(_MAGIC):len(_MAGIC) + 32], data[len(_MAGIC) + 32:]
    if hashlib.sha256(body).digest() != digest:
        return None  # truncated or corrupt: recompile
    (n,) = struct.unpack("<I", body[:4])
    try:
        meta = json.loads(body[4:4 + n])
    except ValueError:
        return None
    image = body[4 + n:]
    if len(image) != meta.get("image_bytes"):
        return None
    return ObjectCode(image=image, target=meta["target"], arch=meta["arch"], ptx=meta.get("ptx"),
                      log=meta.get("log", ""), options=tuple(meta["options"]),
                      lowered_names=dict(meta.get("lowered_names", {})),
                      nvrtc_version=tuple(meta["nvrtc_version"]), from_cache=True)


def _cache_write(path, obj):
    meta = json.dumps({"target": obj.target, "arch": obj.arch, "ptx": obj.ptx, "log": obj.log,
                       "options": list(obj.options), "lowered_names": obj.lowered_names,
                       "nvrtc_version": list(obj.nvrtc_version), "image_bytes": len(obj.image)}).encode()
    body = struct.pack("<I", len(meta)) + meta + obj.image
    d = os.path.dirname(path)
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".nvrtc")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(body).digest() + body)
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except OSError:
        try:
            os.remove(tmp)
        except (OSError, UnboundLocalError):
            pass


def _check(lib, code, what, prog=None, options=(), name="kernel.cu"):
    if code != 0:
        msg = lib.nvrtcGetErrorString(code).decode()
        log = _log(lib, prog) if prog is not None else ""
        raise NvrtcError(f"{what} failed: {msg}", log, options, nvrtc_version(), name)


def _log(lib, prog):
    n = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)) != 0 or n.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, buf)
    return buf.value.decode(errors="replace")


def _default_arch():
    from pycudadrv._device import get_current_device

    return get_current_device().arch


def compile(source: str | bytes, *, name: str = "kernel.cu", options: str | Sequence[str] = (),
            target: Literal["cubin", "ptx"] = "cubin", arch: str | None = None,
            name_expressions: str | Sequence[str] = (), headers: dict[str, str] | None = None,
            include_paths: str | Sequence[str] = (), use_cache: bool = True) -> ObjectCode:
    """Compile CUDA C++ ``source`` with NVRTC.

    Parameters
    ----------
    source : str
        CUDA C++ source text. Kernels meant to be found by name should be
        ``extern "C"``; templates go through ``name_expressions``.
    target : {"cubin", "ptx"}
        CUBIN for one architecture (the default: loads on a driver older than
        NVRTC) or PTX (JIT-compiled by the driver, which must be at least as
        new as NVRTC).
    arch : str, optional
        ``"sm_90"`` style; defaults to the current device's compute capability
        (needs a GPU; give it explicitly to compile on a machine without one).
    options : sequence of str
        Extra NVRTC options, e.g. ``("--use_fast_math", "-DN=4", "-std=c++17")``.
    name_expressions : sequence of str
        e.g. ``("axpy<float>",)``; their lowered names land in ``lowered_names``.
    headers : dict of str -> str, optional
        In-memory headers, name -> source.
    include_paths : sequence of str
        Directories passed as ``-I`` (before the CUDA headers' directory,
        which is added automatically: see :func:`default_include_dirs`).
    use_cache : bool
        Look the result up in (and store it into) the on-disk compile cache
        (:func:`cache_dir`; ``PYCUDADRV_CACHE=0`` disables it everywhere).
        The key is a SHA-256 of source, name, headers, options, name
        expressions, target, arch and NVRTC version; a corrupt entry is recompiled.

    Returns
    -------
    ObjectCode

    Raises
    ------
    NvrtcError
        Compilation failed; carries the full log, the options and the NVRTC version.
    NvrtcUnavailableError
        No NVRTC library found (names where it looked and the pip package).
    ValueError
        Unknown target or malformed arch.
    """
    if target not in ("cubin", "ptx"):
        raise ArgumentValueError(f"target must be 'cubin' or 'ptx', got {target!r}")
    if isinstance(source, str):
        src = source.encode()
    elif isinstance(source, (bytes, bytearray, memoryview)):
        src = bytes(source)
        try:
            src.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ArgumentValueError(f"compile: source bytes are not UTF-8 ({e}); NVRTC would silently drop text") from None
    else:
        raise ArgumentTypeError(f"compile: source must be str or bytes, got {type(source).__name__}")
    if b"\0" in src:
        raise ArgumentValueError("compile: source contains a NUL byte (NVRTC would ignore everything after it)")
    if not isinstance(name, str) or not name or "\0" in name:
        raise ArgumentTypeError(f"compile: name must be a non-empty str, got {name!r}")

    def _strings(v, what):
        v = (v,) if isinstance(v, str) else tuple(v)
        for s in v:
            if not isinstance(s, str) or "\0" in s:
                raise ArgumentTypeError(f"compile: {what} must be strings without NUL bytes, got {s!r}")
        return v

    options = _strings(options, "options")
    include_paths = _strings(include_paths, "include_paths")
    name_expressions = _strings(name_expressions, "name_expressions")
    for o in options:
        if o.startswith(("-arch", "--gpu-architecture", "-gencode", "--generate-code")):
            raise ArgumentValueError(f"compile: give the architecture as arch=..., not in options ({o!r})")
    if headers is not None:
        if not isinstance(headers, dict):
            raise ArgumentTypeError("compile: headers must be a dict of name -> source text")
        for k, v in headers.items():
            if not isinstance(k, str) or not isinstance(v, str) or "\0" in k or "\0" in v:
                raise ArgumentTypeError(f"compile: header {k!r} must map a str name to str source without NUL bytes")
    lib = _load()
    if arch is None:
        arch = _default_arch()
    arch = str(arch)
    if arch.isdigit():
        arch = "sm_" + arch
    if not (arch.startswith("sm_") or arch.startswith("compute_")) or not arch.split("_", 1)[1].rstrip("af").isdigit():
        raise ArgumentValueError(f"arch must look like 'sm_90' (or 'compute_90'), got {arch!r}")
    num = arch.split("_", 1)[1]
    gpu_arch = ("sm_" if target == "cubin" else "compute_") + num
    opts = [f"-arch={gpu_arch}", *[f"-I{p}" for p in include_paths],
            *[f"-I{p}" for p in default_include_dirs()], *options]
    headers = dict(headers or {})
    cache_path = None
    cdir = cache_dir() if use_cache else None
    if cdir:
        key = _cache_key(src, name, headers, opts, name_expressions, target, gpu_arch, nvrtc_version())
        cache_path = os.path.join(cdir, key + ".nvrtc")
        hit = _cache_read(cache_path)
        if hit is not None:
            return hit
    obj = _compile(lib, src, name, headers, opts, name_expressions, target, gpu_arch)
    if cache_path:
        _cache_write(cache_path, obj)
    return obj


def _compile(lib, src, name, headers, opts, name_expressions, target, gpu_arch):
    prog = ctypes.c_void_p()
    hnames = (ctypes.c_char_p * max(len(headers), 1))(*[k.encode() for k in headers])
    hsrcs = (ctypes.c_char_p * max(len(headers), 1))(*[v.encode() for v in headers.values()])
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode(), len(headers),
                                       hsrcs if headers else None, hnames if headers else None),
           "nvrtcCreateProgram", options=opts, name=name)
    try:
        for expr in name_expressions:
            _check(lib, lib.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression",
                   options=opts, name=name)
        copts = (ctypes.c_char_p * max(len(opts), 1))(*[o.encode() for o in opts])
        code = lib.nvrtcCompileProgram(prog, len(opts), copts)
        log = _log(lib, prog)
        if code != 0:
            raise NvrtcError(f"compiling {name} failed: {lib.nvrtcGetErrorString(code).decode()}",
                             log, opts, nvrtc_version(), name)
        lowered = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            _check(lib, lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)),
                   "nvrtcGetLoweredName", options=opts, name=name)
            lowered[expr] = out.value.decode()
        n = ctypes.c_size_t()
        ptx = None
        if lib.nvrtcGetPTXSize(prog, ctypes.byref(n)) == 0 and n.value:
            buf = ctypes.create_string_buffer(n.value)
            _check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX", options=opts, name=name)
            ptx = buf.value.decode()
        if target == "cubin":
            _check(lib, lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "nvrtcGetCUBINSize", options=opts, name=name)
            buf = ctypes.create_string_buffer(n.value)
            _check(lib, lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN", options=opts, name=name)
            image = buf.raw[: n.value]
        else:
            if ptx is None:
                raise NvrtcError("NVRTC produced no PTX", log, opts, nvrtc_version(), name)
            image = ptx.encode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ObjectCode(image=image, target=target, arch=gpu_arch, ptx=ptx, log=log, options=tuple(opts),
                      lowered_names=lowered, nvrtc_version=nvrtc_version())
