"""Checks of the text arguments that compile(), the Linker and build_fatbin take
(options, include paths, name expressions, switches): one rule and one message
for each, before any library sees them. Pure Python."""
from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError

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


def _bool(v: Any, what: str, who: str) -> bool:
    """``v`` as a bool when it is one (numpy's too); anything else, even a truthy "no", is an ArgumentTypeError."""
    if isinstance(v, bool) or type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_"):
        return bool(v)
    raise ArgumentTypeError(f"{who}: {what} must be True or False, got {v!r}")


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
    for s in out:
        if not isinstance(s, str) or "\0" in s:
            raise ArgumentTypeError(f"{who}: {what} must be strings without NUL bytes, got {s!r}")
        _encodable(s, f"{what} entry {s!r}", who)
    return out
