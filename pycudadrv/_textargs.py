"""Checks of the arguments that compile(), the Linker, build_fatbin and Stream()
take (options, include paths, name expressions, switches, a stream's priority): one
rule and one message for each, before any library sees them. Pure Python."""
from __future__ import annotations

import operator
import os
import shlex
from collections.abc import Mapping
from typing import Any

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, short_repr

__all__: list[str] = []


def _encodable(s: str, what: str, who: str) -> None:
    """Refuse a str that UTF-8 cannot encode (a lone surrogate such as '\\ud800'), naming where it is."""
    try:
        s.encode()
    except UnicodeEncodeError as e:
        line = s.count("\n", 0, e.start) + 1
        col = e.start - (s.rfind("\n", 0, e.start) + 1) + 1
        raise ArgumentValueError(f"{who}: {what} holds {s[e.start:e.end]!r} at index {e.start} (line {line}, "
                                 f"column {col}), a lone surrogate that UTF-8 cannot encode for the library; "
                                 "remove it (text read with errors='surrogateescape' makes these)") from None


def yes_no(v: Any, what: str, who: str) -> bool:
    """The one rule for every yes/no argument of pycudadrv (``async_alloc=``, ``synchronize=``,
    ``wait=``, ``cooperative=``, ``pdl=``, ``timed=``, ...): True or False, a numpy bool, or the
    ints 0 and 1. Anything else (a string such as "no", None, 2, an array) is an ArgumentTypeError
    naming ``who``, the parameter and the value, never its truth value."""
    if v is True or v is False:
        return v
    if type(v) is int and (v == 0 or v == 1):
        return v == 1
    if type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_"):
        return bool(v)
    raise ArgumentTypeError(f"{who}: {what} must be True or False (or a numpy bool, 0 or 1), got "
                            f"{type(v).__name__} {short_repr(v)}")


def _relocatable(opts: tuple[str, ...] | list[str]) -> bool:
    """Whether NVRTC ``opts`` ask for relocatable device code (the last ``-rdc=`` wins; ``-dc`` implies it):
    device functions without a kernel are then meant for the linker."""
    rdc = False
    for o in opts:
        if o in ("-dc", "--device-c"):
            rdc = True
        elif o.startswith(("-rdc=", "--relocatable-device-code=")):
            rdc = o.split("=", 1)[1] == "true"
    return rdc


def _strings(v: Any, what: str, split: bool = False, who: str = "compile") -> tuple[str, ...]:
    if v is None:              # as headers=None: nothing given
        return ()
    if isinstance(v, str):
        if not split:
            out: tuple[str, ...] = (v,)
        else:
            try:
                out = tuple(shlex.split(v))
            except ValueError as e:
                raise ArgumentValueError(f"{who}: {what}={v!r} cannot be split like a shell command line "
                                         f"({e}); pass a list of strings instead") from None
    elif isinstance(v, (Mapping, set, frozenset, bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"{who}: {what} must be a sequence of strings (or one string), not a "
                                f"{type(v).__name__}" + (": write e.g. ['-DNAME=value', '-std=c++17']"
                                                         if isinstance(v, Mapping) else ""))
    else:
        try:
            out = tuple(v)
        except TypeError:
            raise ArgumentTypeError(f"{who}: {what} must be a sequence of strings, got {type(v).__name__}") \
                from None
    if what == "include_paths":     # directories: a pathlib.Path is one too
        out = tuple(os.fspath(s) if isinstance(s, os.PathLike) else s for s in out)
    for s in out:
        if not isinstance(s, str):
            raise ArgumentTypeError(f"{who}: {what} must be strings, got {type(s).__name__} {short_repr(s)}"
                                    + (" (decode bytes first)" if isinstance(s, (bytes, bytearray)) else ""))
        if "\0" in s:
            raise ArgumentTypeError(f"{who}: {what} must be strings without NUL bytes, got {s!r}")
        _encodable(s, f"{what} entry {s!r}", who)
    return out


def stream_arguments(args: tuple, kwargs: dict) -> tuple:
    """``(device, nonblocking, priority)`` from Stream()'s arguments, checked without the driver:
    one positional argument at most, no unknown keyword, a priority that is an int (never a bool)."""
    if len(args) > 1:
        raise ArgumentTypeError(f"Stream() takes the device as its only positional argument (nonblocking= and "
                                f"priority= are keywords), got {len(args)} positional arguments")
    if args and "device" in kwargs:
        raise ArgumentTypeError("Stream() got the device twice: positionally and as device=")
    device = args[0] if args else kwargs.pop("device", None)
    nonblocking = kwargs.pop("nonblocking", True)
    priority = kwargs.pop("priority", 0)
    if kwargs:
        names = ", ".join(repr(k) for k in kwargs)
        raise ArgumentTypeError(f"Stream() got an unexpected keyword argument{'s' if len(kwargs) > 1 else ''} "
                                f"{names}; it takes device, nonblocking= and priority=")
    if isinstance(priority, bool) or type(priority).__module__ == "numpy" and type(priority).__name__ in (
            "bool", "bool_"):
        raise ArgumentTypeError(f"Stream: priority must be an int (lower numbers are higher priority, 0 is the "
                                f"default), got the bool {priority!r}")
    try:
        priority = operator.index(priority)
    except TypeError:
        raise ArgumentTypeError(f"Stream: priority must be an int (lower numbers are higher priority, 0 is the "
                                f"default), got {type(priority).__name__} {short_repr(priority)}") from None
    return device, yes_no(nonblocking, "nonblocking", "Stream"), priority
