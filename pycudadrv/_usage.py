"""Buffer usages: what a buffer was made for, as khal's ``BufferUsages`` records.

A :class:`BufferUsages` flag set is given when a buffer is allocated
(``Buffer.empty/zeros/from_numpy(..., usage=...)``), read back as
``Buffer.usage`` and shared by every view of the allocation. The default is
:attr:`BufferUsages.ALL`, so code that never names a usage is never refused.
pycudadrv checks one usage: an indirect dispatch's count buffer must have
``INDIRECT`` (``Dispatch.dispatch(indirect=...)``); copies, fills and kernel
arguments are not checked (khal's CUDA backend checks none). Pure Python.
"""
from __future__ import annotations

import enum
import inspect
from typing import Any

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError

__all__ = ["BufferUsages"]


class BufferUsages(enum.Flag):
    """What a buffer may be used for (khal's ``BufferUsages``, WebGPU's bit values).

    Combine with ``|``; test with ``in`` or ``&``. ``ALL`` (every usage) is
    the default of every allocation, and of another library's memory
    (``asbuffer``). Only ``INDIRECT`` is checked by pycudadrv (the count
    buffer of an indirect dispatch); the others are metadata that travel with
    the buffer, as in khal's CUDA backend.
    """

    MAP_READ = 1 << 0
    MAP_WRITE = 1 << 1
    COPY_SRC = 1 << 2
    COPY_DST = 1 << 3
    INDEX = 1 << 4
    VERTEX = 1 << 5
    UNIFORM = 1 << 6
    STORAGE = 1 << 7
    INDIRECT = 1 << 8
    QUERY_RESOLVE = 1 << 9
    ALL = (1 << 10) - 1


# Shown as BufferUsages(value) (an int of the bits, or a member), not Enum's functional-API signature.
BufferUsages.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("value", inspect.Parameter.POSITIONAL_OR_KEYWORD)])

#: The bits of :attr:`BufferUsages.ALL` (the C default of an allocation's usage).
ALL_BITS: int = BufferUsages.ALL.value
#: The bit of :attr:`BufferUsages.INDIRECT` (checked by an indirect dispatch).
INDIRECT_BIT: int = BufferUsages.INDIRECT.value


def names(bits: int) -> str:
    """``bits`` as ``"STORAGE|COPY_DST"`` (``"ALL"``; ``"none"`` for 0)."""
    if bits == ALL_BITS:
        return "ALL"
    return "|".join(m.name for m in BufferUsages if m is not BufferUsages.ALL and m.value & bits
                    and m.name is not None) or "none"


def usage_bits(usage: Any, who: str) -> int:
    """The bits of ``usage`` (a BufferUsages; None: ALL) for a buffer made by
    ``who``. ArgumentTypeError for anything else (a plain int, a string),
    ArgumentValueError for an empty set (a buffer nothing may use)."""
    if usage is None:
        return ALL_BITS
    if not isinstance(usage, BufferUsages):
        raise ArgumentTypeError(f"{who}: usage must be a pycudadrv.BufferUsages flag set (e.g. "
                                f"BufferUsages.STORAGE | BufferUsages.INDIRECT) or None (ALL), got "
                                f"{type(usage).__name__} {usage!r:.40}")
    if not usage.value:
        raise ArgumentValueError(f"{who}: usage is empty; give at least one BufferUsages flag, or None for ALL")
    return int(usage.value)


def missing_usage(buf: Any, needed: int, has: int, who: str) -> ArgumentValueError:
    """The error of ``who`` using ``buf`` for something its usage does not allow."""
    return ArgumentValueError(f"{who}: {buf!r} needs usage {names(needed)}, it has {names(has)} (the usage is "
                              "fixed when the allocation is made: Buffer.empty/zeros/from_numpy(..., usage=...))")
