"""Page-locked (pinned) host memory."""
import sys
from collections.abc import Sequence
from typing import Any, Literal, SupportsIndex, TypeAlias

import numpy as np
from numpy.typing import DTypeLike, NDArray
from typing_extensions import Self, disjoint_base

from pycudadrv._device import Device
from pycudadrv._stream import _DeviceLike

__all__ = ['HostBuffer', 'shape_and_nbytes']

#: ``shape`` arguments: an element count or a tuple of dimensions.
_ShapeLike: TypeAlias = SupportsIndex | Sequence[SupportsIndex]

def shape_and_nbytes(shape: _ShapeLike, dtype: DTypeLike | None) -> tuple[tuple[int, ...], np.dtype[Any] | None, int]: ...

@disjoint_base
class HostBuffer:
    """Page-locked (pinned) host memory (``cuMemHostAlloc``), exposed as a numpy array."""

    # Always raises ArgumentTypeError: objects come from ``HostBuffer.empty``.
    # No parameters, as at run time (object's __init__; __cinit__ refuses the call), so a type checker
    # flags `HostBuffer(1024)` too; docs/gen_api.py shows it as not constructed directly.
    def __init__(self) -> None: ...
    @property
    def device(self) -> Device: ...
    @staticmethod
    def empty(shape: _ShapeLike, dtype: DTypeLike = ..., *, device: _DeviceLike | None = None) -> HostBuffer: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def ptr(self) -> int: ...
    @property
    def array(self) -> NDArray[Any]: ...
    if sys.version_info >= (3, 12):
        # The buffer protocol (PEP 688): Python 3.12+ shows it as __buffer__.
        def __buffer__(self, flags: int, /) -> memoryview: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...

def _host_keep_count() -> int: ...
