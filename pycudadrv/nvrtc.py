"""compile(): CUDA C++ -> CUBIN (default), PTX, LTO-IR or a multi-architecture
fatbin through NVRTC, loaded at run time.

NVRTC is looked for, in order: ``$PYCUDADRV_NVRTC`` (a path, never a
fallback), the ``nvidia-cuda-nvrtc`` wheel (``pip install pycudadrv[nvrtc]``),
a toolkit's library folders (:func:`pycudadrv._paths.library_dirs`: ``lib64``
and ``targets/<arch>-linux/lib`` under ``$CUDA_HOME``, ``$CUDA_PATH``,
``/usr/local/cuda`` and ``/opt/cuda``, then the system's), then the loader.
NVRTC needs no GPU: with ``arch`` given, compilation works on any machine.
Fatbins are assembled with nvFatbin and LTO-IR is linked with nvJitLink
(:mod:`pycudadrv.link`). Results are cached on disk (:mod:`pycudadrv._compile_cache`).
"""
from __future__ import annotations

import atexit
import ctypes
import glob
import json
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pycudadrv import _compile_cache, _includes
from pycudadrv._compile_cache import cache_dir, cache_size, clear_cache
from pycudadrv._linklibs import fatbin_object
from pycudadrv._paths import library_dirs
from pycudadrv._textargs import yes_no, _encodable, _relocatable, _strings
from pycudadrv._errors import (ArgumentTypeError, ArgumentValueError, CudaError, CudaUnavailableError, NvrtcError,
                               NvrtcUnavailableError)

if TYPE_CHECKING:  # for annotations only: pycudadrv._module imports this module
    from pycudadrv._module import Module
    from pycudadrv._stream import _DeviceLike

__all__ = ["compile", "ObjectCode", "NvrtcError", "NvrtcUnavailableError", "nvrtc_version", "nvrtc_path",
           "nvrtc_supported_archs", "cache_dir", "cache_size", "clear_cache", "FAST_MATH_OPTIONS"]

Target = Literal["cubin", "ptx", "fatbin", "ltoir"]
#: One declared parameter of an extern "C" kernel: (kind, size, align, const), or None when not a plain C type.
SourceDecl = tuple[int, int, int, "bool | None"]
T = TypeVar("T")
#: zyx's NVRTC options, as a preset: ``compile(src, options=FAST_MATH_OPTIONS)``. ``--use_fast_math`` (denormals
#: flushed, approximate division, square root and transcendentals) is opt-in: compile() adds no options. zyx
#: compiles PTX for the device's virtual architecture: pass ``arch="compute_90"`` for that too.
FAST_MATH_OPTIONS: tuple[str, ...] = ("--use_fast_math",)

_lib: ctypes.CDLL | None = None
_lib_path: str | None = None
_lock = threading.Lock()
_NVRTC_ERROR_CANCELLED = 16
_FLOW_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _candidates() -> Iterable[str]:
    # PYCUDADRV_NVRTC is handled by _load() alone: it never falls back to these.
    try:
        import nvidia  # type: ignore[import-untyped,import-not-found,unused-ignore]  # the nvidia-* wheels

        for base in list(nvidia.__path__):
            for sub in ("cu13/lib", "cuda_nvrtc/lib", "cu12/lib"):
                yield from sorted(glob.glob(os.path.join(base, sub, "libnvrtc.so*")), reverse=True)
    except ImportError:
        pass
    for d in library_dirs():
        yield from sorted(glob.glob(os.path.join(d, "libnvrtc.so*")), reverse=True)
    yield from ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


def _load() -> ctypes.CDLL:
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


def _declare(lib: ctypes.CDLL) -> None:
    P, S, I, C = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p
    sigs: dict[str, list[Any]] = {
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
    optional: dict[str, list[Any]] = {   # newer NVRTC only: LTO-IR (12.0), supported archs (11.2), cancel (12.8)
        "nvrtcGetLTOIRSize": [P, ctypes.POINTER(S)],
        "nvrtcGetLTOIR": [P, C],
        "nvrtcGetNumSupportedArchs": [ctypes.POINTER(I)],
        "nvrtcGetSupportedArchs": [ctypes.POINTER(I)],
        "nvrtcSetFlowCallback": [P, _FLOW_CALLBACK, P],
    }
    for name, args in list(sigs.items()) + list(optional.items()):
        if name in optional and not hasattr(lib, name):
            continue
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = C if name == "nvrtcGetErrorString" else I


def default_include_dirs() -> list[str]:
    """Directories with the CUDA device headers (``cuda_fp16.h``,
    ``cooperative_groups.h``, and the CCCL headers they include) that
    compile() passes as ``-I``. Looked for beside the NVRTC library (the
    nvidia-* wheels share one include folder), then in pycudadrv's one list
    of CUDA include directories (:func:`pycudadrv._paths.cuda_include_candidates`:
    toolkit roots, the nvidia-* wheels, ``/usr/include``); the first complete
    one wins. The same answer before and after NVRTC is first used: the
    library is looked for here when it was not loaded yet (none found:
    the list alone decides)."""
    if _lib_path is None:
        try:
            _load()
        except NvrtcUnavailableError:
            pass
    return _includes.device_include_dirs(_lib_path)


def nvrtc_version() -> tuple[int, int]:
    """``(major, minor)`` of the NVRTC that compile() uses (``nvrtcVersion``).
    Raises NvrtcUnavailableError when none is found."""
    lib = _load()
    a, b = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b))
    return (a.value, b.value)


def nvrtc_path() -> str:
    """Path of the NVRTC library compile() loaded (as it was given to the loader)."""
    _load()
    assert _lib_path is not None
    return _lib_path


def nvrtc_supported_archs() -> list[str]:
    """The architectures this NVRTC compiles for, oldest first, e.g.
    ``["sm_75", ..., "sm_90", ...]`` (``nvrtcGetSupportedArchs``); empty when
    the library cannot tell."""
    lib = _load()
    if not hasattr(lib, "nvrtcGetSupportedArchs"):
        return []
    n = ctypes.c_int()
    if lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) != 0 or n.value <= 0:
        return []
    arr = (ctypes.c_int * n.value)()
    if lib.nvrtcGetSupportedArchs(arr) != 0:
        return []
    return [f"sm_{a}" for a in sorted(arr)]


def _nvrtc_identity() -> list[Any]:
    """The full identity of the NVRTC in use, for cache keys: version plus the library file."""
    path = _lib_path if _lib_path and os.path.isabs(_lib_path) else _compile_cache.loaded_path("libnvrtc")
    return [*nvrtc_version(), *_compile_cache.library_identity(path)]


@dataclass
class ObjectCode:
    """A compiled image and what is known about it.

    ``image`` holds the bytes per ``target``: ``"cubin"`` (ELF for one
    architecture), ``"ptx"`` (text), ``"fatbin"`` (one CUBIN per architecture
    in ``archs`` plus PTX for the newest) or ``"ltoir"`` (NVVM IR for
    :class:`pycudadrv.link.Linker`; not loadable as it is). ``arch`` is the
    architecture (the newest one of a fatbin); ``ptx`` the PTX text (kept for
    CUBIN and fatbin too, so launches know each parameter's type; None for
    LTO-IR); ``source_decls`` the parameter types each ``extern "C"`` kernel
    declares in the source (signedness and constness for launches); ``log``
    the compiler's log; ``lowered_names`` maps each name expression to its
    mangled name; ``linker_version`` is set on a :class:`~pycudadrv.link.Linker` result.
    """

    image: bytes
    target: str
    arch: str
    ptx: str | None = None
    log: str = ""
    options: tuple[str, ...] = ()
    lowered_names: dict[str, str] = field(default_factory=dict)
    nvrtc_version: tuple[int, int] = (0, 0)
    from_cache: bool = False
    source_decls: dict[str, list[SourceDecl | None]] | None = None
    archs: tuple[str, ...] = ()
    name: str = "kernel.cu"
    linker_version: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not self.archs:
            self.archs = (self.arch,)

    def load(self, device: _DeviceLike | None = None) -> Module:
        """Load into ``device`` (current by default) through the module cache
        (``cuModuleLoadDataEx``); returns the Module. Raises
        ArgumentValueError for LTO-IR, which must be linked first."""
        if self.target == "ltoir":
            raise ArgumentValueError(f"ObjectCode.load: {self.name} is LTO-IR, which the driver cannot load; link it "
                                     "first: pycudadrv.Linker(arch=...).add(obj).link().load()")
        from pycudadrv._module import load_module

        return load_module(self, device=device)

    def __repr__(self) -> str:
        # Never raises, even for an ObjectCode made by __new__ or with None fields.
        target, arch, image = (getattr(self, k, None) for k in ("target", "arch", "image"))
        lv, nv = getattr(self, "linker_version", None), getattr(self, "nvrtc_version", None) or (0, 0)
        by = f"linked by nvJitLink {lv[0]}.{lv[1]}" if lv else f"NVRTC {nv[0]}.{nv[1]}"
        where = "+".join(map(str, getattr(self, "archs", None) or ())) if target == "fatbin" else arch
        size = f"{len(image)} bytes" if isinstance(image, (bytes, bytearray)) else "no image"
        return f"<ObjectCode {target} for {where}, {size}, {by}>"


def _source_decls(text: str) -> dict[str, list[SourceDecl | None]] | None:
    from pycudadrv._signature import source_params

    try:
        return source_params(text)
    except Exception:  # a best-effort refinement of the layouts: never a reason for compile() to fail
        return None


# --- running NVRTC and nvJitLink so that Ctrl-C gets through -------------------------------------

_running: dict[threading.Thread, threading.Event] = {}


def run_interruptible(jobs: Sequence[Callable[[threading.Event], T]]) -> list[T]:
    """Run each job in its own worker thread and wait for all of them; the
    jobs' results in order, or the first job's exception. The wait lets a
    KeyboardInterrupt (Ctrl-C) through at once: it sets the cancel event each
    job receives (NVRTC compiles poll it through ``nvrtcSetFlowCallback`` and
    stop early) and re-raises; a worker still inside a library call finishes
    in the background and drops its result."""
    cancel = threading.Event()
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)
    done = [threading.Event() for _ in jobs]

    def body(i: int, job: Callable[[threading.Event], T]) -> None:
        try:
            results[i] = job(cancel)
        except BaseException as e:  # handed to the waiting thread
            errors[i] = e
        finally:
            done[i].set()
            _running.pop(threading.current_thread(), None)

    threads = [threading.Thread(target=body, args=(i, j), name="pycudadrv-compile", daemon=True)
               for i, j in enumerate(jobs)]
    try:
        for t in threads:
            _running[t] = cancel
            t.start()
        for ev in done:
            while not ev.wait(0.05):
                pass
    except BaseException:
        cancel.set()
        raise
    for e in errors:
        if e is not None:
            raise e
    return results


@atexit.register
def _cancel_running() -> None:
    # A daemon worker still inside NVRTC at interpreter exit: ask it to stop and give it a moment.
    for t, ev in list(_running.items()):
        ev.set()
        t.join(5.0)


# --- compile() ----------------------------------------------------------------------------------

#: An architecture as compile() takes it: sm_ or compute_, ASCII digits, at most one variant letter
#: ('a': architecture-specific features, 'f': family-specific features).
_ARCH = re.compile(r"(sm|compute)_([0-9]+)([af]?)", re.ASCII)
#: A kernel entry point in PTX: ``.entry name`` outside a ``//`` comment.
_PTX_ENTRY = re.compile(r"^[^/\n]*\.entry\s+[A-Za-z_$%]", re.M)
#: The oldest architecture with each variant (CUDA 12.0: sm_90a; CUDA 12.9: sm_100f); NVRTC refuses the others.
_VARIANT_FROM = {"a": 90, "f": 100}


def _arch_number(a: str) -> int:
    return int(a.split("_", 1)[1].rstrip("af"))


def _supported_text(subject: str | None = None) -> str:
    """'; it supports sm_75, ... (the 'a' variants from sm_90, ...)' (``subject`` instead of "it"), or ''
    when no NVRTC is installed or it cannot tell."""
    try:
        archs = nvrtc_supported_archs()
        subject = subject or "it"
        if subject == "NVRTC":
            subject = f"NVRTC {'.'.join(map(str, nvrtc_version()))}"
    except Exception:  # noqa: BLE001 -- no NVRTC: the message goes without the list
        return ""
    if not archs:
        return ""
    return (f"; {subject} supports {', '.join(archs)} (the 'a' variants from sm_{_VARIANT_FROM['a']}, the 'f' variants "
            f"from sm_{_VARIANT_FROM['f']})")


def _parse_arch(a: Any, what: str = "arch", who: str = "compile") -> str:
    """``a`` (``"sm_90"``, ``"sm_90a"``, ``"compute_90"``, ``90``, ``"90"``) as ``"sm_90"`` style text.
    Raises ArgumentTypeError for another type, ArgumentValueError for text of another form (non-ASCII
    digits, two variant letters, ...), with the architectures NVRTC supports when it is installed."""
    if isinstance(a, bool) or not isinstance(a, (str, int)):
        raise ArgumentTypeError(f"{who}: {what} must be a str like 'sm_90' (or a list of them), got {a!r}")
    s = str(a).strip()
    if re.fullmatch(r"[0-9]+", s, re.ASCII):
        s = "sm_" + s
    m = _ARCH.fullmatch(s)
    if m is None:
        raise ArgumentValueError(f"{who}: {what} must look like 'sm_90', 'sm_90a', 'sm_100f' or 'compute_90' "
                                 f"(ASCII digits, at most one variant letter), got {a!r}{_supported_text('NVRTC')}")
    if int(m.group(2)) < 50:
        raise ArgumentValueError(f"{who}: {what} {a!r} is not a GPU architecture (they start at sm_50; CUDA 13 "
                                 f"compiles for sm_75 and newer){_supported_text('NVRTC')}")
    return s


def _no_gpu_arch(err: CudaError, who: str = "compile") -> CudaUnavailableError:
    try:
        archs = nvrtc_supported_archs()
    except Exception:
        archs = []
    known = f" (this NVRTC compiles for {', '.join(archs)})" if archs else ""
    return CudaUnavailableError(  # type: ignore[no-untyped-call,unused-ignore]
        f"{who}: no arch= given and no GPU to take it from ({err}); pass the architecture you target, e.g. "
        f"arch='sm_90'{known}, to compile without a GPU", code=getattr(err, "code", -1))


def _check_supported(archs: Sequence[str]) -> None:
    """Refuse, before NVRTC, an architecture it does not compile for, or a variant ('a', 'f') that the
    architecture does not have (sm_75a, sm_90f), listing what it supports."""
    known = nvrtc_supported_archs()
    nums = {_arch_number(k) for k in known}
    for a in archs:
        m = _ARCH.fullmatch(a)
        assert m is not None  # _parse_arch made it
        num, variant = int(m.group(2)), m.group(3)
        if known and num not in nums:
            raise ArgumentValueError(f"compile: NVRTC {'.'.join(map(str, nvrtc_version()))} cannot compile for "
                                     f"{a}{_supported_text()}")
        if variant and num < _VARIANT_FROM[variant]:
            kind = "architecture-specific" if variant == "a" else "family-specific"
            raise ArgumentValueError(f"compile: {a} does not exist: the '{variant}' ({kind}) variants start at "
                                     f"sm_{_VARIANT_FROM[variant]} (use {m.group(1)}_{num} here)"
                                     f"{_supported_text('NVRTC')}")


def compile(source: str | bytes, *, name: str = "kernel.cu", options: str | Sequence[str] | None = (),
            target: Target | None = None, arch: str | int | Sequence[str | int] | None = None,
            name_expressions: str | Sequence[str] | None = (), headers: Mapping[str, str] | None = None,
            include_paths: str | Sequence[str] | None = (), use_cache: bool = True) -> ObjectCode:
    """Compile CUDA C++ ``source`` with NVRTC.

    Parameters
    ----------
    source : str
        CUDA C++ source text. Kernels meant to be found by name should be
        ``extern "C"``; templates go through ``name_expressions``.
    target : {"cubin", "ptx", "fatbin", "ltoir"}, optional
        ``"cubin"`` (the default for one real ``arch``, ``"sm_XX"``): machine
        code for one architecture (loads on a driver older than NVRTC).
        ``"ptx"`` (the default for a virtual ``arch``, ``"compute_XX"``): text
        the driver JIT-compiles (it must be at least as new as NVRTC).
        ``"fatbin"`` (the default when ``arch`` is a list): a CUBIN per
        architecture plus the PTX of the newest, as ``nvcc -gencode`` makes
        (assembled with nvFatbin); the driver picks the best match at load.
        ``"ltoir"``: LTO-IR (NVRTC ``-dlto``) for :class:`pycudadrv.link.Linker`.
    arch : str or list of str, optional
        ``"sm_90"`` style (or ``90``; a virtual ``"compute_90"`` gives PTX
        for that virtual architecture, and a CUBIN of it is refused), ASCII
        digits with at most one variant letter: ``"sm_90a"``
        (architecture-specific, sm_90 and newer) or ``"sm_100f"``
        (family-specific, sm_100 and newer); a list gives a fatbin. Defaults to the
        current device's compute capability (needs a GPU; give it explicitly to
        compile on a machine without one).
    options : str or sequence of str, optional
        Extra NVRTC options, e.g. ``("--use_fast_math", "-DN=4", "-std=c++17")``;
        one string is split as a shell would (``"-DN=4 -std=c++17"``);
        :data:`FAST_MATH_OPTIONS` is zyx's preset (fast math, which is never on by default).
        ``-arch`` and ``-dlto`` are refused (use ``arch=`` and ``target=``).
    name_expressions : sequence of str, optional
        e.g. ``("axpy<float>",)``; their lowered names land in ``lowered_names``.
    headers : dict of str -> str, optional
        In-memory headers, name -> source.
    include_paths : sequence of str, optional
        Directories passed as ``-I`` (before the CUDA headers' directory,
        which is added automatically: see :func:`default_include_dirs`);
        one that is not a directory is an ArgumentValueError.
    use_cache : bool
        ``True`` or ``False`` (anything else is an ArgumentTypeError).
        Look the result up in (and store it into) the on-disk compile cache
        (:func:`cache_dir`; ``PYCUDADRV_CACHE=0`` disables it everywhere). The
        key is a SHA-256 of source, name, headers, options, name expressions,
        target, arch and the NVRTC library (version, path, size, mtime); each
        architecture of a fatbin is an entry of its own.

    Returns
    -------
    ObjectCode

    Raises
    ------
    NvrtcError
        Compilation failed; carries the full log, the options and the NVRTC version.
    HeaderNotFoundError
        (an NvrtcError) A header the source ``#include``s is in no include
        directory (nor ``headers``): names the header, the source line and the
        directories searched. Raised before NVRTC runs for the CUDA headers
        (``cuda_fp16.h``, ``cooperative_groups.h``, CCCL, ...) included outside
        any ``#if``; for any other header when NVRTC cannot open it.
    NvrtcUnavailableError
        No NVRTC library found (names where it looked and the pip package).
    LinkerUnavailableError
        A fatbin was asked for and nvFatbin is not installed.
    CudaUnavailableError
        No ``arch`` and no GPU to take it from (the message says to pass ``arch="sm_XX"``).
    ArgumentTypeError, ArgumentValueError
        Malformed source, name, options (a dict, unbalanced quotes, ``-arch``),
        headers, target or arch (``"sm_90aa"``, non-ASCII digits), an arch
        NVRTC does not support or a variant it lacks (``"sm_75a"``; the
        message lists the supported ones), text with a lone surrogate
        (``"\\ud800"``, which UTF-8 cannot encode; the message gives its
        index, line and column), a ``use_cache`` that is not a bool, or
        ``target="cubin"`` with a virtual ``"compute_XX"`` arch (a CUBIN
        needs ``"sm_XX"``).
    KeyboardInterrupt
        Ctrl-C while NVRTC runs (in worker threads): raised at once; the
        workers are asked to cancel (``nvrtcSetFlowCallback``) and finish in
        the background.

    Warns
    -----
    RuntimeWarning
        The CUBIN, PTX or fatbin defines no kernel (its PTX has no
        ``.entry``), naming the file (``name``): its module would have
        nothing to launch. LTO-IR and relocatable device code
        (``-rdc=true``, ``-dc``), which hold device functions for the
        linker, never warn.
    """
    if target is not None and target not in ("cubin", "ptx", "fatbin", "ltoir"):
        raise ArgumentValueError(f"target must be 'cubin', 'ptx', 'fatbin' or 'ltoir', got {target!r}")
    if isinstance(source, str):
        _encodable(source, "the source", "compile")
        src = source.encode()
    elif isinstance(source, (bytes, bytearray, memoryview)):
        src = bytes(source)
        try:
            src.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ArgumentValueError(f"compile: source bytes are not UTF-8 ({e}); NVRTC would silently drop text") \
                from None
    else:
        raise ArgumentTypeError(f"compile: source must be str or bytes, got {type(source).__name__}")
    if b"\0" in src:
        raise ArgumentValueError("compile: source contains a NUL byte (NVRTC would ignore everything after it)")
    if not isinstance(name, str) or not name or "\0" in name:
        raise ArgumentTypeError(f"compile: name must be a non-empty str, got {name!r}")
    _encodable(name, "name", "compile")
    use_cache = yes_no(use_cache, "use_cache", "compile")
    opts_in = _strings(options, "options", split=True)
    incs = _strings(include_paths, "include_paths")
    for d in incs:
        if not os.path.isdir(d):
            raise ArgumentValueError(f"compile: include_paths entry {d!r} is not a directory"
                                     + (" (it is a file: give the directory that holds it)" if os.path.exists(d)
                                        else " (it does not exist)"))
    exprs = _strings(name_expressions, "name_expressions")
    for opt in opts_in:
        if opt.startswith(("-arch", "--gpu-architecture", "-gencode", "--generate-code")):
            raise ArgumentValueError(f"compile: give the architecture as arch=..., not in options ({opt!r})")
        if opt in ("-dlto", "--dlink-time-opt", "-dlink-time-opt"):
            raise ArgumentValueError(f"compile: ask for LTO-IR with target='ltoir', not in options ({opt!r})")
    if headers is not None:
        if not isinstance(headers, Mapping):
            raise ArgumentTypeError("compile: headers must be a dict of name -> source text")
        for hk, hv in headers.items():
            if not isinstance(hk, str) or not isinstance(hv, str) or "\0" in hk or "\0" in hv:
                raise ArgumentTypeError(f"compile: header {hk!r} must map a str name to str source without NUL bytes")
            if not hk.strip():
                raise ArgumentValueError(f"compile: header name {hk!r} is empty: give the name the source "
                                         "#includes (e.g. \"params.h\")")
            _encodable(hk, "a header name", "compile")
            _encodable(hv, f"header {hk!r}", "compile")
    hdrs = dict(headers or {})

    archs, tgt = _resolve_archs(arch, target)
    lib = _load()
    _check_supported(archs)
    base = [*[f"-I{p}" for p in incs], *[f"-I{p}" for p in default_include_dirs()], *opts_in]
    _includes.check_source(src.decode(), name, hdrs, base, nvrtc_version())
    piece_target = "cubin" if tgt == "fatbin" else tgt
    pieces = []   # one NVRTC compile per architecture: (arch, options, cache key)
    ident = _nvrtc_identity() if use_cache and cache_dir() else None
    for a in archs:
        gpu_arch = ("compute_" if piece_target == "ptx" else "sm_") + a.split("_", 1)[1]
        opts = [f"-arch={gpu_arch}", *base] + (["-dlto"] if piece_target == "ltoir" else [])
        k = None if ident is None else _compile_cache.key(
            b"pycudadrv compile v2", src, name.encode(), json.dumps(sorted(hdrs.items())).encode(),
            json.dumps(opts).encode(), json.dumps(list(exprs)).encode(), piece_target.encode(), gpu_arch.encode(),
            json.dumps(ident).encode())
        pieces.append((gpu_arch, opts, k))
    found: list[ObjectCode | None] = []
    for _a, _o, k in pieces:
        found.append(_compile_cache.fetch(k, ObjectCode) if k is not None else None)
    missing = [i for i, f in enumerate(found) if f is None]
    decls = _source_decls(src.decode())
    jobs = [_job(lib, src, name, hdrs, pieces[i][1], exprs, piece_target, pieces[i][0]) for i in missing]
    for i, obj in zip(missing, run_interruptible(jobs) if jobs else []):
        obj.source_decls = decls
        found[i] = obj
        key = pieces[i][2]
        if key is not None:
            _compile_cache.store(key, obj)
    objs = [f for f in found if f is not None]
    for o in objs:
        o.source_decls = decls      # read now, never a cache entry's: an older reader's may be wrong
    if piece_target != "ltoir" and not _relocatable(opts_in) and not any(_ptx_has_entry(o.ptx) for o in objs):
        warnings.warn(f"compile: {name} defines no kernel (no __global__ function: its PTX has no .entry), so "
                      "its module has nothing to launch (a template kernel is emitted only for its "
                      "name_expressions). Device functions meant for linking: compile them with target='ltoir' or "
                      "options=['-rdc=true']", RuntimeWarning, stacklevel=2)
    if tgt != "fatbin":
        return objs[0]
    return fatbin_object(objs, name)


def _ptx_has_entry(ptx: str | None) -> bool:
    """Whether PTX text declares a kernel entry point (``.entry`` outside a comment; True without PTX)."""
    return ptx is None or _PTX_ENTRY.search(ptx) is not None


def _resolve_archs(arch: str | int | Sequence[str | int] | None, target: str | None) -> tuple[list[str], str]:
    """The architectures to compile for (oldest first) and the target."""
    if isinstance(arch, (list, tuple)):
        archs = list(dict.fromkeys(_parse_arch(a, "each arch") for a in arch))
        if not archs:
            raise ArgumentValueError("compile: arch=[] names no architecture")
        if any(a.startswith("compute_") for a in archs):
            raise ArgumentValueError(f"compile: arch={list(arch)!r}: list real architectures ('sm_XX'); the fatbin "
                                     "carries the PTX of the newest one for the others")
        if target not in (None, "fatbin"):
            raise ArgumentValueError(f"compile: target={target!r} holds one architecture; several (arch={archs}) "
                                     "make a fatbin (target='fatbin', or leave target out)")
        return sorted(archs, key=_arch_number), "fatbin"
    if arch is None:
        try:
            arch = _default_arch()
        except CudaError as e:
            raise _no_gpu_arch(e) from e
    a = _parse_arch(arch)
    if a.startswith("compute_"):   # a virtual architecture: its code is PTX
        if target is None:
            return [a], "ptx"
        if target == "cubin":
            raise ArgumentValueError(f"compile: arch={arch!r} is a virtual architecture, which has no machine code: "
                                     f"a CUBIN needs a real one (arch='sm_{a.split('_', 1)[1]}'); for PTX of "
                                     f"{a} leave target out or give target='ptx'")
    return [a], target or "cubin"


def _default_arch() -> str:
    from pycudadrv._device import get_current_device

    return str(get_current_device().arch)


def _nvrtc_error(message: str, log: str, opts: Sequence[str], name: str, code: int | None = None) -> NvrtcError:
    err: NvrtcError = NvrtcError(  # type: ignore[no-untyped-call,unused-ignore]
        message, log, opts, nvrtc_version(), name, code=code)
    return err


def _check(lib: ctypes.CDLL, code: int, what: str, opts: Sequence[str], name: str) -> None:
    if code != 0:
        raise _nvrtc_error(f"{what} failed: {lib.nvrtcGetErrorString(code).decode()}", "", opts, name, code)


def _log(lib: ctypes.CDLL, prog: ctypes.c_void_p) -> str:
    n = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)) != 0 or n.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, buf)
    return buf.value.decode(errors="replace")


def _nvrtc_compile_program(lib: ctypes.CDLL, prog: ctypes.c_void_p, opts: Sequence[str],
                           cancel: threading.Event) -> int:
    """``nvrtcCompileProgram`` with a flow callback that cancels once ``cancel`` is set (a seam for tests)."""
    cb = None
    if hasattr(lib, "nvrtcSetFlowCallback"):
        cb = _FLOW_CALLBACK(lambda _payload, _reserved: 1 if cancel.is_set() else 0)
        lib.nvrtcSetFlowCallback(prog, cb, None)
    copts = (ctypes.c_char_p * max(len(opts), 1))(*[o.encode() for o in opts])
    code: int = lib.nvrtcCompileProgram(prog, len(opts), copts)
    del cb  # alive until NVRTC returned
    return code


def _job(lib: ctypes.CDLL, src: bytes, name: str, headers: dict[str, str], opts: list[str], exprs: tuple[str, ...],
         target: str, gpu_arch: str) -> Callable[[threading.Event], ObjectCode]:
    return lambda cancel: _compile(lib, src, name, headers, opts, exprs, target, gpu_arch, cancel)


def _compile(lib: ctypes.CDLL, src: bytes, name: str, headers: dict[str, str], opts: list[str],
             name_expressions: tuple[str, ...], target: str, gpu_arch: str, cancel: threading.Event) -> ObjectCode:
    prog = ctypes.c_void_p()
    hnames = (ctypes.c_char_p * max(len(headers), 1))(*[k.encode() for k in headers])
    hsrcs = (ctypes.c_char_p * max(len(headers), 1))(*[v.encode() for v in headers.values()])
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode(), len(headers),
                                       hsrcs if headers else None, hnames if headers else None),
           "nvrtcCreateProgram", opts, name)
    try:
        for expr in name_expressions:
            _check(lib, lib.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression", opts, name)
        code = _nvrtc_compile_program(lib, prog, opts, cancel)
        log = _log(lib, prog)
        if code == _NVRTC_ERROR_CANCELLED:
            raise KeyboardInterrupt(f"compiling {name} for {gpu_arch} was cancelled")
        if code != 0:
            _includes.check_log(log, src.decode(errors="replace"), name, opts, nvrtc_version())
            raise _nvrtc_error(f"compiling {name} failed: {lib.nvrtcGetErrorString(code).decode()}", log, opts,
                               name, code)
        lowered = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            _check(lib, lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)), "nvrtcGetLoweredName",
                   opts, name)
            lowered[expr] = (out.value or b"").decode()
        n = ctypes.c_size_t()
        ptx = None
        if target != "ltoir" and lib.nvrtcGetPTXSize(prog, ctypes.byref(n)) == 0 and n.value > 1:
            buf = ctypes.create_string_buffer(n.value)
            _check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX", opts, name)
            ptx = buf.value.decode()
        if target in ("cubin", "ltoir"):
            size_fn, get_fn = (("nvrtcGetCUBINSize", "nvrtcGetCUBIN") if target == "cubin"
                               else ("nvrtcGetLTOIRSize", "nvrtcGetLTOIR"))
            if not hasattr(lib, size_fn):
                raise _nvrtc_error(f"this NVRTC ({'.'.join(map(str, nvrtc_version()))}) cannot produce LTO-IR "
                                   f"({size_fn} is missing; NVRTC 12.0 or newer can)", log, opts, name)
            _check(lib, getattr(lib, size_fn)(prog, ctypes.byref(n)), size_fn, opts, name)
            if n.value == 0:
                raise _nvrtc_error(f"NVRTC produced no {target.upper()}", log, opts, name)
            buf = ctypes.create_string_buffer(n.value)
            _check(lib, getattr(lib, get_fn)(prog, buf), get_fn, opts, name)
            image = buf.raw[: n.value]
        else:
            if ptx is None:
                raise _nvrtc_error("NVRTC produced no PTX", log, opts, name)
            image = ptx.encode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ObjectCode(image=image, target=target, arch=gpu_arch, ptx=ptx, log=log, options=tuple(opts),
                      lowered_names=lowered, nvrtc_version=nvrtc_version(), name=name)
