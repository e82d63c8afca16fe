"""Reading pycudadrv's environment variables, with one rule for every switch.

A switch (``PYCUDADRV_PROFILE``, ``PYCUDADRV_TRACE``, ``PYCUDADRV_CACHE``,
``PYCUDADRV_INDIRECT_SYNC``, ...) is on for ``1``, ``true``, ``yes``, ``on``
and off for ``0``, ``false``, ``no``, ``off`` (any case, surrounding blanks
ignored); unset or empty means its default. Any other value is not guessed:
it warns once, naming the variable and the value, and the default applies.
Pure Python.
"""
from __future__ import annotations

import os
import sys
import warnings

__all__ = ["env_flag", "env_choice", "env_word", "env_int", "foreign_sync_enabled", "debug_log", "ENVIRONMENT_VARIABLES"]

_TRUE = frozenset(("1", "true", "yes", "on"))
_FALSE = frozenset(("0", "false", "no", "off"))
_warned: set = set()

#: Every variable pycudadrv reads, with what it does (``show_config()`` lists those set).
ENVIRONMENT_VARIABLES = {
    "PYCUDADRV_LIBCUDA": "path of the CUDA driver library (default libcuda.so.1)",
    "PYCUDADRV_NVRTC": "path of libnvrtc (no fallback when set)",
    "PYCUDADRV_NVJITLINK": "path of libnvJitLink (no fallback when set)",
    "PYCUDADRV_NVFATBIN": "path of libnvfatbin (no fallback when set)",
    "PYCUDADRV_CACHE": "0 disables the on-disk compile cache",
    "PYCUDADRV_CACHE_DIR": "directory of the on-disk compile cache",
    "PYCUDADRV_CACHE_MAX_BYTES": "size limit of the compile cache in bytes (least recently used entries go first)",
    "PYCUDADRV_PROFILE": "1 (or events): per-kernel time table at exit; host: serialised host-clock timing",
    "PYCUDADRV_TRACE": "1: synchronise and print after every launch (with PYCUDADRV_PROFILE, both)",
    "PYCUDADRV_NVTX": "1: NVTX ranges for passes, dispatches and profiled launches",
    "PYCUDADRV_PERSISTENT_BLOCKS": "blocks of a persistent indirect dispatch",
    "PYCUDADRV_INDIRECT_SYNC": "1: indirect dispatch reads the counts back (debug)",
    "PYCUDADRV_INDIRECT_TRACE": "1: print the kernel of every indirect dispatch",
    "PYCUDADRV_GRAPH_DOT": "path: write every instantiated graph as DOT (a {n} in the path is numbered)",
    "PYCUDADRV_ALLOC_TRACE": "1: report allocations and host uploads attempted while a stream captures",
    "PYCUDADRV_DEVICES": "comma-separated device ordinals pycudadrv may use (empty: an error)",
    "PYCUDADRV_DEBUG": "1: log the driver's load (or why it failed), cuInit, devices and cuDNN's load at start",
    "PYCUDADRV_CUDNN": "0 turns the cuDNN integration off",
    "PYCUDADRV_CUDNN_PATH": "path of libcudnn.so.9 (no fallback when set)",
    "PYCUDADRV_MPI_CUDA_AWARE": "1/0: pycudadrv.mpi treats the MPI library as CUDA-aware or not (unset: detect)",
    "PYCUDADRV_QUEUE_STREAMS": "streams of a Queue made without streams= (1 to 1024; default 4)",
    "PYCUDADRV_QUEUE_POLICY": "stream choice of a Queue made without policy=: greedy (default) or round_robin",
    "PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC": "0: do not order another library's arrays after their producer's stream "
                                           "(CuPy's CUPY_CUDA_ARRAY_INTERFACE_SYNC, Numba's NUMBA_...); default on",
    "PYCUDADRV_AIO_COMPLETION": "pycudadrv.aio's completion mode at import: loop (default) or blocking "
                                "(any case)",
}


def _warn_once(name: str, value: str, what: str, default: object = None) -> None:
    key = (name, value)
    if key in _warned:
        return
    _warned.add(key)
    named = "" if default is None else f" {default!r}"
    warnings.warn(f"{name}={value!r} is not {what}; using the default{named}", RuntimeWarning, stacklevel=3)


def _switch(name: str, choices: tuple[str, ...] = ()) -> str | bool | None:
    """The value of ``name`` read as a switch: None when unset or blank, one of
    ``choices`` (lower case) when given, True/False for a switch word, and
    anything else warns once (naming what is accepted) and gives None."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    v = raw.strip().lower()
    if v in choices:
        return v
    if v in _TRUE or v in _FALSE:
        return v in _TRUE
    what = "a switch (use 1/0, true/false, yes/no, on/off)" if not choices else \
        f"a switch (1/0, true/false, yes/no, on/off) or one of {', '.join(choices)}"
    _warn_once(name, raw, what)
    return None


def env_flag(name: str, default: bool = False) -> bool:
    """The switch ``name`` (see the module docstring for the accepted values)."""
    v = _switch(name)
    return default if v is None else bool(v)


def env_choice(name: str, choices: tuple[str, ...]) -> str | bool:
    """A switch that also takes one of the words ``choices`` (any case): the
    word (lower case) when one is given, else :func:`env_flag`'s value; any
    other value warns once, naming both kinds, and gives False."""
    v = _switch(name, choices)
    return False if v is None else v


def env_int(name: str, default: int | None = None, minimum: int | None = None,
            maximum: int | None = None) -> int | None:
    """The integer ``name``; unset or empty gives ``default``; a value that is
    not an integer, or is below ``minimum`` or above ``maximum``, warns once
    and gives ``default``."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = int(raw.strip(), 0)
    except ValueError:
        _warn_once(name, raw, "an integer")
        return default
    if minimum is not None and v < minimum:
        _warn_once(name, raw, f"an integer >= {minimum}")
        return default
    if maximum is not None and v > maximum:
        _warn_once(name, raw, f"an integer <= {maximum}")
        return default
    return v


def env_word(name: str, choices: tuple[str, ...], default: str) -> str:
    """The word ``name``, one of ``choices`` (surrounding blanks ignored, any
    case); unset or empty gives ``default``; another value warns once and gives
    ``default``."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    v = raw.strip().lower()
    if v in choices:
        return v
    _warn_once(name, raw, "one of " + ", ".join(choices), default)
    return default


_foreign_sync: bool | None = None


def foreign_sync_enabled(refresh: bool = False) -> bool:
    """Whether memory from another library is ordered after its producer's stream
    (``PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC``, on unless set to an off value; read
    once, or again with ``refresh``)."""
    global _foreign_sync
    if _foreign_sync is None or refresh:
        _foreign_sync = env_flag("PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC", True)
    return _foreign_sync


def debug_log(what: str, text: str) -> None:
    """With ``PYCUDADRV_DEBUG`` on: one line ``[pycudadrv] what: text`` on
    stderr (the startup log: the driver's load, ``cuInit``, the devices,
    cuDNN). Never raises: a log that cannot be written is dropped."""
    if not env_flag("PYCUDADRV_DEBUG"):
        return
    try:
        print(f"[pycudadrv] {what}: {text}", file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 -- a closed stderr must not turn a log line into a failure
        pass
