"""Objects made by ``Cls.__new__`` without ``__init__``: a pycudadrv error instead of an AttributeError.

The Python classes of the thin layer (Queue, Submission, Dispatch, ...) define
``__getattr__`` as ``raise missing(self, name, sentinel, how)``. Python calls
``__getattr__`` only when the normal lookup failed, so it costs nothing on any
path that works. Pure Python, no driver.
"""
from __future__ import annotations

from typing import Any

from pycudadrv._errors import StateError

__all__ = ["initialised", "missing"]


def initialised(obj: Any, sentinel: str) -> bool:
    """Whether ``obj.__init__`` ran: ``sentinel`` is an attribute (or slot) it always sets."""
    try:
        object.__getattribute__(obj, sentinel)
    except AttributeError:
        return False
    return True


def missing(obj: Any, name: str, sentinel: str, how: str) -> Exception:
    """The error for ``obj.name`` where the normal lookup failed: an AttributeError as usual for an
    initialised object (or a dunder name, which ``copy``, ``pickle`` and ``hasattr`` probe), else a
    StateError saying the object was never initialised and how to make one (``how``)."""
    cls = type(obj).__name__
    if name.startswith("__") or initialised(obj, sentinel):
        return AttributeError(f"'{cls}' object has no attribute '{name}'")
    return StateError(f"{cls}: this {cls} was made by {cls}.__new__ without __init__, so it holds nothing (.{name} "
                      f"was asked for); make one with {how}")
