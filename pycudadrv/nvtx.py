"""NVTX ranges, so Nsight Systems timelines show pycudadrv's labels.

Ranges go to the ``pycudadrv`` NVTX domain through the ``nvtx`` package when
it is installed (``pip install nvtx``), else through the NVTX library loaded at
run time with ctypes: ``libnvtx3interop.so.1`` (the ``nvidia-nvtx`` wheel,
CUDA 13 toolkits) or ``libnvToolsExt.so.1`` (CUDA 12 and older), looked for in
the ``nvidia-*`` wheels, ``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda``,
then the system loader. Without a profiler attached, NVTX calls return at once.

Off by default. :func:`enable` (or ``PYCUDADRV_NVTX=1`` at import) turns it
on; :func:`disable` off. Off costs nothing beyond one module-attribute read in
the caller, which checks the flag before building a label::

    from pycudadrv import nvtx

    pushed = nvtx.enabled and nvtx.push(f"dispatch {name}")   # True only if a range was opened
    ...
    if pushed:
        nvtx.pop()

or, where a context manager is cheap enough::

    with nvtx.range("step"):
        ...

Ranges are per thread (NVTX's rule): pop on the thread that pushed.

Where ranges come from while on: every ``Timestamps.measure`` pass and
``Encoder.pass_`` (the label), every profiled launch (the kernel name), and,
after :func:`annotate_launches`, every launch.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

import numpy as np

from pycudadrv._env import env_flag
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, LibraryUnavailableError, StateError

__all__ = ["enabled", "enable", "disable", "is_enabled", "push", "pop", "range", "mark", "annotate_launches",
           "backend", "library_path", "DOMAIN"]

#: The NVTX domain pycudadrv's ranges belong to.
DOMAIN = "pycudadrv"

#: True while ranges are recorded. Callers read it (``nvtx.enabled``, not a copy made by
#: ``from pycudadrv.nvtx import enabled``) before building a label: the whole cost when off.
enabled = False

# C-level copies of `enabled` (a Timestamps pass reads one flag, no dict look-up), told of every change:
# enable()/disable(), `nvtx.enabled = ...` (and monkeypatch's setattr/delattr: the module's __setattr__
# below), a reload (the module's last line). A reload keeps the list.
_watchers: list[Callable[[bool], object]] = globals().get("_watchers", [])


def _notify() -> None:
    flag = bool(globals().get("enabled", False))
    for w in _watchers:
        w(flag)


def _watch(callback: Callable[[bool], object]) -> None:
    """Call ``callback(flag)`` now and whenever :data:`enabled` changes (a C module's copy of it)."""
    if callback not in _watchers:
        _watchers.append(callback)
    callback(bool(enabled))


class _Module(types.ModuleType):
    """This module's type: assigning or deleting ``nvtx.enabled`` from outside tells the watchers."""

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name == "enabled":
            _notify()

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        if name == "enabled":
            _notify()

_Backend = Literal["nvtx", "ctypes"]
_LIBRARY_NAMES = ("libnvtx3interop.so.1", "libnvToolsExt.so.1")
_LABEL_CACHE_MAX = 4096          # labels whose NVTX attributes are kept prepared
_lock = threading.Lock()
_impl: _PackageImpl | _CtypesImpl | None = None


class _EventAttributes(ctypes.Structure):
    """``nvtxEventAttributes_t`` (NVTX v2/v3, ``nvToolsExt.h``): 48 bytes on 64-bit Linux."""

    _fields_ = [
        ("version", ctypes.c_uint16),
        ("size", ctypes.c_uint16),
        ("category", ctypes.c_uint32),
        ("colorType", ctypes.c_int32),
        ("color", ctypes.c_uint32),
        ("payloadType", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("payload", ctypes.c_uint64),      # union payload_t: 8 bytes
        ("messageType", ctypes.c_int32),
        ("message", ctypes.c_void_p),      # union nvtxMessageValue_t: a pointer
    ]


_NVTX_VERSION = 3
_NVTX_MESSAGE_TYPE_ASCII = 1


class _PackageImpl:
    """Through the ``nvtx`` package's ``Domain`` (prepared attributes per label)."""

    name: _Backend = "nvtx"
    path: str | None = None

    def __init__(self) -> None:
        import nvtx as pkg  # type: ignore[import-untyped, import-not-found, unused-ignore]  # the optional dependency, imported only here

        self._domain = pkg.get_domain(DOMAIN)
        self._attrs: dict[str, object] = {}

    def push(self, label: str) -> None:
        a = self._attrs.get(label)
        if a is None:
            a = self._domain.get_event_attributes(message=label)
            if len(self._attrs) < _LABEL_CACHE_MAX:
                self._attrs[label] = a
        self._domain.push_range(a)

    def pop(self) -> None:
        self._domain.pop_range()

    def mark(self, label: str) -> None:
        self._domain.mark(message=label)


def _library_candidates() -> Iterator[str]:
    try:
        import nvidia  # type: ignore[import-untyped, import-not-found, unused-ignore]  # namespace package of the nvidia-* wheels

        for base in list(nvidia.__path__):
            for sub in ("cu13/lib", "cu12/lib", "nvtx/lib"):
                for name in _LIBRARY_NAMES:
                    yield from sorted(glob.glob(os.path.join(base, sub, name.split(".so")[0] + ".so*")),
                                      reverse=True)
    except ImportError:
        pass
    roots = [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)] + ["/usr/local/cuda"]
    for root in roots:
        for sub in ("lib64", "lib"):
            for name in _LIBRARY_NAMES:
                yield from sorted(glob.glob(os.path.join(root, sub, name.split(".so")[0] + ".so*")), reverse=True)
    yield from _LIBRARY_NAMES


class _CtypesImpl:
    """Through the NVTX C library: ``nvtxDomainRangePushEx``/``nvtxDomainRangePop`` in the
    ``pycudadrv`` domain, or ``nvtxRangePushA``/``nvtxRangePop`` where domains are missing."""

    name: _Backend = "ctypes"
    path: str

    def __init__(self) -> None:
        tried = []
        for cand in _library_candidates():
            tried.append(cand)
            try:
                lib = ctypes.CDLL(cand)
            except OSError:
                continue
            if hasattr(lib, "nvtxDomainRangePushEx") or hasattr(lib, "nvtxRangePushA"):
                self._setup(lib)
                self.path = cand
                return
        raise LibraryUnavailableError(
            "NVTX library not found (libnvtx3interop.so.1 or libnvToolsExt.so.1); looked at: "
            + ", ".join(dict.fromkeys(tried)) + ". Install it with `pip install nvidia-nvtx` "
            "(or `pip install nvtx` for the Python package).")

    def _setup(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._attrs: dict[str, tuple[_EventAttributes, bytes]] = {}
        self._domain = None
        if all(hasattr(lib, f) for f in ("nvtxDomainCreateA", "nvtxDomainRangePushEx", "nvtxDomainRangePop")):
            lib.nvtxDomainCreateA.argtypes = [ctypes.c_char_p]
            lib.nvtxDomainCreateA.restype = ctypes.c_void_p
            lib.nvtxDomainRangePushEx.argtypes = [ctypes.c_void_p, ctypes.POINTER(_EventAttributes)]
            lib.nvtxDomainRangePushEx.restype = ctypes.c_int
            lib.nvtxDomainRangePop.argtypes = [ctypes.c_void_p]
            lib.nvtxDomainRangePop.restype = ctypes.c_int
            self._domain = ctypes.c_void_p(lib.nvtxDomainCreateA(DOMAIN.encode()))
            if hasattr(lib, "nvtxDomainMarkEx"):
                lib.nvtxDomainMarkEx.argtypes = [ctypes.c_void_p, ctypes.POINTER(_EventAttributes)]
                lib.nvtxDomainMarkEx.restype = None
        else:
            lib.nvtxRangePushA.argtypes = [ctypes.c_char_p]
            lib.nvtxRangePushA.restype = ctypes.c_int
            lib.nvtxRangePop.argtypes = []
            lib.nvtxRangePop.restype = ctypes.c_int
            if hasattr(lib, "nvtxMarkA"):
                lib.nvtxMarkA.argtypes = [ctypes.c_char_p]
                lib.nvtxMarkA.restype = None

    def _attributes(self, label: str) -> tuple[_EventAttributes, bytes]:
        entry = self._attrs.get(label)
        if entry is None:
            text = label.encode("utf-8", "replace").replace(b"\0", b"?")
            a = _EventAttributes()
            a.version = _NVTX_VERSION
            a.size = ctypes.sizeof(_EventAttributes)
            a.messageType = _NVTX_MESSAGE_TYPE_ASCII
            a.message = ctypes.cast(ctypes.c_char_p(text), ctypes.c_void_p)
            entry = (a, text)         # the bytes stay referenced while the attributes are used
            if len(self._attrs) < _LABEL_CACHE_MAX:
                self._attrs[label] = entry
        return entry

    def push(self, label: str) -> None:
        if self._domain is not None:
            a, _text = self._attributes(label)
            self._lib.nvtxDomainRangePushEx(self._domain, ctypes.byref(a))
        else:
            self._lib.nvtxRangePushA(label.encode("utf-8", "replace").replace(b"\0", b"?"))

    def pop(self) -> None:
        if self._domain is not None:
            self._lib.nvtxDomainRangePop(self._domain)
        else:
            self._lib.nvtxRangePop()

    def mark(self, label: str) -> None:
        if self._domain is not None and hasattr(self._lib, "nvtxDomainMarkEx"):
            a, _text = self._attributes(label)
            self._lib.nvtxDomainMarkEx(self._domain, ctypes.byref(a))
        elif hasattr(self._lib, "nvtxMarkA"):
            self._lib.nvtxMarkA(label.encode("utf-8", "replace").replace(b"\0", b"?"))


def _make(which: _Backend | None) -> _PackageImpl | _CtypesImpl:
    if which == "nvtx":
        try:
            return _PackageImpl()
        except ImportError as e:
            raise LibraryUnavailableError(f"nvtx.enable(backend='nvtx'): the nvtx package is not installed "
                                          f"(pip install nvtx): {e}") from e
    if which == "ctypes":
        return _CtypesImpl()
    try:
        return _PackageImpl()
    except ImportError:
        return _CtypesImpl()


def enable(backend: Literal["nvtx", "ctypes"] | None = None) -> str:
    """Record NVTX ranges from now on; returns the backend used (``"nvtx"`` or ``"ctypes"``).

    Parameters
    ----------
    backend : {"nvtx", "ctypes"}, optional
        ``"nvtx"``: the ``nvtx`` package; ``"ctypes"``: the NVTX C library;
        None (default): the package when installed, else the library.

    Raises
    ------
    ArgumentValueError
        ``backend`` is not one of those.
    LibraryUnavailableError
        Neither is available (the message lists where the library was looked for).
    """
    global enabled, _impl
    if backend not in (None, "nvtx", "ctypes"):
        raise ArgumentValueError(f"nvtx.enable: backend must be 'nvtx', 'ctypes' or None, got {backend!r}")
    with _lock:
        if _impl is None or (backend is not None and _impl.name != backend):
            _impl = _make(backend)
        enabled = True
        _notify()
        return _impl.name


def disable() -> None:
    """Stop recording ranges (a range already pushed can still be popped)."""
    global enabled
    enabled = False
    _notify()


def is_enabled() -> bool:
    """Whether ranges are recorded (the value of :data:`enabled`)."""
    return enabled


def push(label: str) -> bool:
    """Open a range named ``label`` on the calling thread (``nvtxDomainRangePushEx``).

    Returns True when a range was opened (NVTX on), False otherwise; pop exactly
    when it returned True. Raises ArgumentTypeError for a non-str label (while on)."""
    if not enabled or _impl is None:
        return False
    if not isinstance(label, str):
        raise ArgumentTypeError(f"nvtx.push: label must be a str, got {type(label).__name__}")
    _impl.push(label)
    return True


def pop() -> None:
    """Close the calling thread's innermost range (``nvtxDomainRangePop``).

    Works after :func:`disable` too, so a range opened while on is closed; a no-op
    when no backend was ever enabled."""
    if _impl is not None:
        _impl.pop()


def mark(label: str) -> None:
    """An instantaneous event named ``label`` (``nvtxDomainMarkEx``); a no-op while off."""
    if enabled and _impl is not None:
        if not isinstance(label, str):
            raise ArgumentTypeError(f"nvtx.mark: label must be a str, got {type(label).__name__}")
        _impl.mark(label)


@contextmanager
def range(label: str) -> Iterator[None]:  # noqa: A001 -- the name NVTX users expect
    """``with nvtx.range("label"):`` a range around the block (nothing while off)."""
    pushed = push(label)
    try:
        yield
    finally:
        if pushed:
            pop()


class _LaunchRanges:
    """The launch hook of :func:`annotate_launches`: one range per launch, named after the kernel."""

    def before(self, fn: object, stream: object) -> bool:
        return enabled and push(fn.name)  # type: ignore[attr-defined]

    def after(self, tok: bool, fn: object, stream: object, grid: object, block: object, shmem: int) -> None:
        if tok:
            pop()


_launch_ranges = _LaunchRanges()


def annotate_launches(flag: bool = True) -> None:
    """With True, every kernel launch (``Function.launch``, prepared launches,
    dispatches, launch sequences) is an NVTX range named after its kernel while
    NVTX is on; False stops it. It is the launch hook (``set_launch_hook``), so
    launches take the instrumented path instead of the C fast path until it is
    turned off: a debugging aid, not for timing. Launches inside a capture get
    no range (they are recorded, not run).

    Raises ArgumentTypeError for a ``flag`` that is not a bool (``"no"`` would
    be truthy); StateError while profile or trace mode holds the launch hook
    (a profiled launch is already a range; :func:`pycudadrv.profile.disable`
    first)."""
    from pycudadrv._launch import get_launch_hook, set_launch_hook

    if not isinstance(flag, (bool, np.bool_)):
        raise ArgumentTypeError(f"nvtx.annotate_launches: flag must be True or False, got {type(flag).__name__} "
                                f"{flag!r}")
    flag = bool(flag)
    current = get_launch_hook()
    if flag:
        if current is not None and current is not _launch_ranges:
            raise StateError(f"nvtx.annotate_launches: the launch hook is held by {type(current).__name__} "
                             "(profile or trace mode); profiled launches are NVTX ranges already, or call "
                             "pycudadrv.profile.disable() first")
        set_launch_hook(_launch_ranges)
    elif current is _launch_ranges:
        set_launch_hook(None)


def backend() -> str | None:
    """The backend in use, or (while none was enabled) the one :func:`enable` would
    pick: ``"nvtx"``, ``"ctypes"``, or None when neither is available. Probing
    loads the library but records nothing."""
    global _impl
    if _impl is not None:
        return _impl.name
    with _lock:
        if _impl is None:
            try:
                _impl = _make(None)
            except LibraryUnavailableError:
                return None
        return _impl.name


def library_path() -> str | None:
    """Path (or name) of the NVTX C library in use with the ctypes backend; None otherwise."""
    return getattr(_impl, "path", None) if backend() == "ctypes" else None


def _from_environment() -> None:
    if not env_flag("PYCUDADRV_NVTX"):
        return
    try:
        enable()
    except LibraryUnavailableError as e:
        warnings.warn(f"PYCUDADRV_NVTX is set but NVTX ranges stay off: {e}", RuntimeWarning, stacklevel=2)


sys.modules[__name__].__class__ = _Module
_from_environment()
_notify()
