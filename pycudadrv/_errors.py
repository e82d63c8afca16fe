"""Every exception pycudadrv raises on purpose, defined in one place.

All of them derive from :class:`Error`, so ``except pycudadrv.Error`` catches
whatever pycudadrv raised deliberately; each also derives from the builtin a
Python programmer would expect (``TypeError`` for a value of the wrong kind,
``ValueError`` for one out of range, ``RuntimeError`` for a failed call, ...),
so code written against the builtins keeps working.

Errors that come from a driver (or NVRTC, nvJitLink, cuDNN) call carry that
call's result code in ``.code``; it survives every re-raise because pycudadrv
always raises ``from`` the original error. Pure Python: importable without a
driver or a built extension.
"""
from __future__ import annotations

__all__ = [
    "Error", "CudaError", "OutOfMemoryError", "CudaUnavailableError", "NotSupportedError",
    "ArgumentTypeError", "ArgumentValueError", "ArgumentIndexError", "ClosedError", "StateError",
    "CaptureError", "EventNotRecordedError", "NotReadyError", "GraphUpdateError", "BufferInUseError",
    "LibraryUnavailableError", "NvrtcError", "NvrtcUnavailableError", "LinkError", "LinkerUnavailableError",
    "CudnnError", "CudnnUnavailableError", "HeaderNotFoundError",
]

#: ``CUDA_ERROR_OUT_OF_MEMORY``: a CudaError with this code is also a MemoryError.
CUDA_ERROR_OUT_OF_MEMORY = 2


class Error(Exception):
    """Base class of every exception pycudadrv raises on purpose.

    ``code`` is the result code of the library call behind the error (a
    ``CUresult``, ``nvrtcResult``, ...) or None when pycudadrv refused the
    request itself."""

    code: int | None = None


class CudaError(Error, RuntimeError):
    """A CUDA driver call failed.

    Attributes
    ----------
    code : int
        The ``CUresult`` value.
    name : str
        Its name, e.g. ``"CUDA_ERROR_INVALID_VALUE"``.
    description : str
        The driver's text for it (``cuGetErrorString``).
    call : str
        The driver function that failed, e.g. ``"cuMemAlloc"``.
    context : str
        What pycudadrv was doing (kernel, grid, block, ...), may be empty.
    """

    def __new__(cls, code=0, *args, **kwargs):
        # CUDA_ERROR_OUT_OF_MEMORY is also a MemoryError, whatever made it.
        if cls is CudaError and code == CUDA_ERROR_OUT_OF_MEMORY:
            cls = OutOfMemoryError
        return super().__new__(cls)

    def __init__(self, code, name, description, call, context=""):
        self.code = int(code)
        self.name = name
        self.description = description
        self.call = call
        self.context = context
        msg = f"{name} ({self.code}): {description} [in {call}]"
        if context:
            msg += f"\n{context}"
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.code, self.name, self.description, self.call, self.context))


class OutOfMemoryError(CudaError, MemoryError):
    """``CUDA_ERROR_OUT_OF_MEMORY``: device (or pinned host) memory is exhausted.
    The message gives the bytes asked for and the bytes free where known."""


class CudaUnavailableError(CudaError):
    """CUDA cannot be used here: the driver library is missing, there is no
    device, or the driver is older than pycudadrv supports. The message says
    which, with the versions involved; ``code``/``name`` hold the driver's
    result when a driver call (``cuInit``) said so, else -1 / ``"unavailable"``."""

    def __new__(cls, *args, **kwargs):
        return Exception.__new__(cls)

    def __init__(self, message, code=-1, name="unavailable", call="", context=""):
        self.code = int(code)
        self.name = name
        self.description = message
        self.call = call
        self.context = context
        RuntimeError.__init__(self, message)

    def __reduce__(self):
        return (type(self), (self.description, self.code, self.name, self.call, self.context))


class NotSupportedError(Error, RuntimeError):
    """The device, driver or library cannot do what was asked (thread-block
    clusters below sm_90, conditional graph nodes on an old driver, ...).
    ``code`` is the driver's result when a driver call said so."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code

    def __reduce__(self):
        return (type(self), (self.args[0], self.code))


class ArgumentTypeError(Error, TypeError):
    """A value of the wrong type, kind or width: the message names the kernel
    or function, the parameter, what it takes and what was given."""


class ArgumentValueError(Error, ValueError):
    """A value outside what is allowed (a range, a limit, a size): the message
    names the limit and the value."""


class ArgumentIndexError(Error, IndexError):
    """An index outside ``[0, count)``; the message gives both."""


class ClosedError(Error, ValueError):
    """An object used after ``close()`` (a buffer, a view of a closed buffer,
    a stream, an event, an unloaded module's function, a closed graph)."""


class StateError(Error, RuntimeError):
    """An object used in a state that forbids the call (a graph before its
    capture ended, an event never recorded, results read inside an open pass)."""


class EventNotRecordedError(StateError, ValueError):
    """An event used (waited on, queried, timed) before it was ever recorded."""


class CaptureError(StateError):
    """A call that would invalidate, or cannot be part of, a stream capture
    in progress (a host synchronisation, pageable host memory, an allocation
    outside the capture); the message says how to do it instead."""


class NotReadyError(StateError):
    """The GPU has not finished the work whose results were asked for
    without blocking (``Timestamps.read(blocking=False)``)."""


class GraphUpdateError(Error, RuntimeError):
    """The driver refused to update an instantiated graph; the message says
    why and ``code`` holds the driver's result (None when pycudadrv refused
    before asking the driver)."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code

    def __reduce__(self):
        return (type(self), (self.args[0], self.code))


class BufferInUseError(Error, BufferError):
    """Memory cannot be released while views of it are alive (numpy arrays
    over a :class:`HostBuffer`)."""


class LibraryUnavailableError(Error, RuntimeError):
    """An NVIDIA library pycudadrv loads at run time (NVRTC, nvJitLink,
    nvFatbin, cuDNN, NVTX) is missing or too old; the message names the
    library, where it was looked for and the pip package that provides it."""


class NvrtcUnavailableError(LibraryUnavailableError):
    """NVRTC (libnvrtc) could not be found; the message lists where we looked."""


class NvrtcError(Error, RuntimeError):
    """Compilation failed. ``.log`` is NVRTC's full log (with line numbers),
    ``.options`` the options used, ``.nvrtc_version`` the compiler version;
    ``code`` the ``nvrtcResult``."""

    def __init__(self, message, log="", options=(), nvrtc_version=None, name="kernel.cu", code=None):
        self.log = log
        self.options = tuple(options)
        self.nvrtc_version = nvrtc_version
        self.name = name
        self.code = code
        ver = ".".join(str(v) for v in nvrtc_version) if nvrtc_version else "?"
        text = f"{message} (NVRTC {ver}, options: {' '.join(self.options) or '(none)'})"
        if log:
            text += f"\n--- compile log of {name} ---\n{log.rstrip()}"
        super().__init__(text)

    def __reduce__(self):
        return (_rebuild_nvrtc_error, (self.args[0], self.log, self.options, self.nvrtc_version, self.name,
                                       self.code))


def _rebuild_nvrtc_error(text, log, options, version, name, code=None):
    e = NvrtcError.__new__(NvrtcError)
    RuntimeError.__init__(e, text)
    e.log, e.options, e.nvrtc_version, e.name, e.code = log, options, version, name, code
    return e


class HeaderNotFoundError(NvrtcError):
    """A header the kernel ``#include``s is in none of the include directories
    compile() gives NVRTC. ``.header`` is its name, ``.line`` the source line
    number of the ``#include``, ``.searched`` the directories, in NVRTC's order."""

    def __init__(self, message, header="", line=0, searched=(), log="", options=(), nvrtc_version=None,
                 name="kernel.cu", code=None):
        self.header, self.line, self.searched, self._message = header, line, tuple(searched), message
        super().__init__(message, log, options, nvrtc_version, name, code)

    def __reduce__(self):
        return (HeaderNotFoundError, (self._message, self.header, self.line, self.searched, self.log, self.options,
                                      self.nvrtc_version, self.name, self.code))


class LinkerUnavailableError(LibraryUnavailableError):
    """nvJitLink (link-time optimisation) or nvFatbin (multi-architecture
    fatbins) could not be found; the message says where we looked."""


class LinkError(Error, RuntimeError):
    """nvJitLink or nvFatbin refused the inputs; ``.log`` holds the linker's
    error log and ``code`` its result."""

    def __init__(self, message, log="", code=None):
        self.log = log
        self.code = code
        super().__init__(message + (f"\n--- link log ---\n{log.rstrip()}" if log else ""))

    def __reduce__(self):
        e = (self.args[0].split("\n--- link log ---")[0], self.log, self.code)
        return (type(self), e)


class CudnnUnavailableError(LibraryUnavailableError):
    """cuDNN cannot be used: not installed (``pip install nvidia-cudnn-cu13``
    or ``pycudadrv[cudnn]``), too old, or switched off (``PYCUDADRV_CUDNN=0``)."""


class CudnnError(Error, RuntimeError):
    """A cuDNN call failed; ``code`` is the ``cudnnStatus_t``, ``name`` its
    name, ``call`` the function."""

    def __init__(self, message, code=None, name="", call=""):
        self.code = code
        self.name = name
        self.call = call
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.args[0], self.code, self.name, self.call))


def short_repr(v: object, limit: int = 60) -> str:
    """``repr(v)`` cut to ``limit`` characters, for error messages; never raises (a broken
    ``__repr__``, an int too long to print)."""
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001 -- a message must never fail
        return f"<{type(v).__name__} object>"
    return r if len(r) <= limit else r[:limit] + "..."
