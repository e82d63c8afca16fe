"""The linker libraries, nvJitLink and nvFatbin: found, loaded and declared once (ctypes), their
versions and identities (for cache keys), and nvFatbin's image builder.

Below both :mod:`pycudadrv.nvrtc` and :mod:`pycudadrv.link`: ``compile(arch=[...])`` makes its fatbin
here, and :class:`pycudadrv.link.Linker` / :func:`pycudadrv.link.build_fatbin` load their libraries
here, so neither of those two modules imports the other back. Where a library is looked for:
``$PYCUDADRV_NVJITLINK`` / ``$PYCUDADRV_NVFATBIN`` (a path; no fallback when set), the
``nvidia-nvjitlink`` / ``nvidia-nvfatbin`` wheels, a toolkit's library folders
(:func:`pycudadrv._paths.library_dirs`), then the system loader.
"""
from __future__ import annotations

import ctypes
import dataclasses
import glob
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from pycudadrv import _compile_cache
from pycudadrv._errors import LinkError, LinkerUnavailableError, NvrtcError
from pycudadrv._paths import library_dirs

T = TypeVar("T")

_libs: dict[str, tuple[ctypes.CDLL, str]] = {}
_lock = threading.Lock()


def _link_error(message: str, log: str = "", code: int | None = None) -> LinkError:
    err: LinkError = LinkError(message, log=log, code=code)  # type: ignore[no-untyped-call,unused-ignore]
    return err


def _candidates(stem: str, subdirs: Sequence[str], sonames: Sequence[str]) -> Iterable[str]:
    try:
        import nvidia  # type: ignore[import-untyped,import-not-found,unused-ignore]  # the nvidia-* wheels

        for base in list(nvidia.__path__):
            for sub in subdirs:
                yield from sorted(glob.glob(os.path.join(base, sub, stem + ".so*")), reverse=True)
    except ImportError:
        pass
    for d in library_dirs():
        yield from sorted(glob.glob(os.path.join(d, stem + ".so*")), reverse=True)
    yield from sonames


def _load(what: str) -> tuple[ctypes.CDLL, str]:
    """nvJitLink (``what="nvjitlink"``) or nvFatbin (``"nvfatbin"``), loaded once."""
    got = _libs.get(what)
    if got is not None:
        return got
    if what == "nvjitlink":
        stem, env_var, probe, pkg = "libnvJitLink", "PYCUDADRV_NVJITLINK", "nvJitLinkCreate", "nvidia-nvjitlink"
        subs = ("cu13/lib", "nvjitlink/lib", "cu12/lib")
    else:
        stem, env_var, probe, pkg = "libnvfatbin", "PYCUDADRV_NVFATBIN", "nvFatbinCreate", "nvidia-nvfatbin"
        subs = ("cu13/lib", "nvfatbin/lib", "cu12/lib")
    sonames = (f"{stem}.so.13", f"{stem}.so.12", f"{stem}.so")
    with _lock:
        got = _libs.get(what)
        if got is not None:
            return got
        env = os.environ.get(env_var)
        cands = [env] if env else list(_candidates(stem, subs, sonames))
        errors = []
        for cand in cands:
            try:
                lib = ctypes.CDLL(cand)
                getattr(lib, probe)
            except (OSError, AttributeError) as e:
                errors.append(str(e) if cand in str(e) else f"{cand}: {e}")   # dlerror() names the file itself
                continue
            _declare(lib, what)
            _libs[what] = (lib, cand)
            return lib, cand
        name = "nvJitLink" if what == "nvjitlink" else "nvFatbin"
        if env:
            raise LinkerUnavailableError(f"{env_var}={env!r} is not a loadable {name} library: {errors[0]}")
        raise LinkerUnavailableError(
            f"{name} ({stem}) not found; looked at: {', '.join(cands)}. Install it with `pip install {pkg}` "
            f"(a CUDA toolkit's lib64 works too), or set {env_var} to the library's path.")


def _declare(lib: ctypes.CDLL, what: str) -> None:
    P, S, C, U = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_uint
    PP = ctypes.POINTER(P)
    if what == "nvjitlink":
        sigs: dict[str, list[Any]] = {
            "nvJitLinkCreate": [PP, ctypes.c_uint32, ctypes.POINTER(C)], "nvJitLinkDestroy": [PP],
            "nvJitLinkAddData": [P, ctypes.c_int, C, S, C], "nvJitLinkComplete": [P],
            "nvJitLinkGetLinkedCubinSize": [P, ctypes.POINTER(S)], "nvJitLinkGetLinkedCubin": [P, C],
            "nvJitLinkGetErrorLogSize": [P, ctypes.POINTER(S)], "nvJitLinkGetErrorLog": [P, C],
            "nvJitLinkGetInfoLogSize": [P, ctypes.POINTER(S)], "nvJitLinkGetInfoLog": [P, C],
            "nvJitLinkVersion": [ctypes.POINTER(U), ctypes.POINTER(U)]}
    else:
        sigs = {"nvFatbinCreate": [PP, ctypes.POINTER(C), S], "nvFatbinDestroy": [PP],
                "nvFatbinAddPTX": [P, C, S, C, C, C], "nvFatbinAddCubin": [P, C, S, C, C],
                "nvFatbinAddLTOIR": [P, C, S, C, C, C], "nvFatbinSize": [P, ctypes.POINTER(S)],
                "nvFatbinGet": [P, C], "nvFatbinVersion": [ctypes.POINTER(U), ctypes.POINTER(U)]}
        lib.nvFatbinGetErrorString.argtypes = [ctypes.c_int]
        lib.nvFatbinGetErrorString.restype = C
    for name, args in sigs.items():
        if not hasattr(lib, name):
            continue   # nvJitLinkVersion is 12.3+: the others are checked when used
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = ctypes.c_int


def _version(what: str) -> tuple[int, int]:
    lib, _path = _load(what)
    fn = getattr(lib, "nvJitLinkVersion" if what == "nvjitlink" else "nvFatbinVersion", None)
    a, b = ctypes.c_uint(), ctypes.c_uint()
    if fn is None or fn(ctypes.byref(a), ctypes.byref(b)) != 0:
        return (0, 0)
    return (a.value, b.value)


def _identity(what: str) -> list[Any]:
    _lib, path = _load(what)
    if not os.path.isabs(path):
        path = _compile_cache.loaded_path(os.path.basename(path).split(".so")[0]) or path
    return [*_version(what), *_compile_cache.library_identity(path)]


def fatbin_image(entries: Sequence[tuple[str, bytes, str]], identifier: str, options: Sequence[bytes] = ()) -> bytes:
    """The fatbin of ``entries`` (``(kind, data, arch)``, kind ``"cubin"``, ``"ptx"`` or ``"ltoir"``, arch
    already checked, ``"sm_90"`` style) through ``nvFatbinCreate``, ``nvFatbinAddCubin``/``AddPTX``/
    ``AddLTOIR``, ``nvFatbinGet``. Raises LinkerUnavailableError without nvFatbin, LinkError (``code``:
    the ``nvFatbinResult``) where it refuses an entry."""
    lib, _path = _load("nvfatbin")
    handle = ctypes.c_void_p()

    def check(code: int, what: str) -> None:
        if code != 0:
            raise _link_error(f"{what} failed: {lib.nvFatbinGetErrorString(code).decode(errors='replace')} "
                              f"(nvFatbin {'.'.join(map(str, _version('nvfatbin')))})", code=code)

    copts = (ctypes.c_char_p * max(len(options), 1))(*options)
    check(lib.nvFatbinCreate(ctypes.byref(handle), copts, len(options)), "nvFatbinCreate")
    try:
        ident = identifier.encode()
        for kind, data, arch in entries:
            num = arch.split("_", 1)[1].encode()
            if kind == "cubin":
                check(lib.nvFatbinAddCubin(handle, data, len(data), num, ident), f"nvFatbinAddCubin (sm_{num.decode()})")
            elif kind == "ptx":
                text = data if data.endswith(b"\0") else data + b"\0"
                check(lib.nvFatbinAddPTX(handle, text, len(text), num, ident, b""), f"nvFatbinAddPTX ({arch})")
            else:
                check(lib.nvFatbinAddLTOIR(handle, data, len(data), num, ident, b""), f"nvFatbinAddLTOIR ({arch})")
        n = ctypes.c_size_t()
        check(lib.nvFatbinSize(handle, ctypes.byref(n)), "nvFatbinSize")
        buf = ctypes.create_string_buffer(n.value)
        check(lib.nvFatbinGet(handle, buf), "nvFatbinGet")
        return buf.raw[:n.value]
    finally:
        lib.nvFatbinDestroy(ctypes.byref(handle))


def fatbin_object(objs: Sequence[T], name: str) -> T:
    """The fatbin ObjectCode of ``compile(arch=[...])`` (nvFatbin): each CUBIN of ``objs`` (NVRTC's
    ObjectCodes, oldest architecture first) and the newest one's PTX; the newest one's fields
    otherwise. Raises NvrtcError when NVRTC gave the newest no PTX."""
    cs: list[Any] = list(objs)   # ObjectCode, which lives in nvrtc, above this module
    newest = cs[-1]
    if newest.ptx is None:
        raise NvrtcError(f"NVRTC produced no PTX for {newest.arch}", newest.log,  # type: ignore[no-untyped-call,unused-ignore]
                         newest.options, newest.nvrtc_version, name)
    parts = [("cubin", o.image, o.arch) for o in cs] + [("ptx", newest.ptx.encode(), newest.arch)]
    logs = [f"[{o.arch}] {o.log.strip()}" for o in cs if o.log.strip()]
    out: T = dataclasses.replace(newest, image=fatbin_image(parts, name), target="fatbin", log="\n".join(logs),
                                 lowered_names=dict(newest.lowered_names), from_cache=all(o.from_cache for o in cs),
                                 archs=tuple(o.arch for o in cs), name=name, linker_version=None)
    return out
