"""Device memory: Buffer (a device allocation or a view of one), its lifetime
and its copies."""
from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray
from typing_extensions import CapsuleType, Self, disjoint_base

from pycudadrv._device import Device
from pycudadrv._host import _ShapeLike
from pycudadrv._stream import Stream, _DeviceLike, _StreamLike
from pycudadrv._usage import BufferUsages

__all__ = ['Buffer']

class _SupportsCudaArrayInterface(Protocol):
    @property
    def __cuda_array_interface__(self) -> Mapping[str, Any]: ...

class _SupportsDLPack(Protocol):
    def __dlpack__(self, *, stream: Any = ...) -> Any: ...

_ArrayT = TypeVar("_ArrayT", bound=np.ndarray[Any, Any])

@disjoint_base
class Buffer:
    """A device allocation, or a view of part of one."""

    # Always raises ArgumentTypeError: objects come from ``Buffer.empty``/``zeros``/``from_numpy`` or ``asbuffer``.
    # No parameters, as at run time (object's __init__; __cinit__ refuses the call), so a type checker
    # flags `Buffer(1024)` too; docs/gen_api.py shows it as not constructed directly.
    def __init__(self) -> None: ...
    @property
    def device(self) -> Device: ...
    @staticmethod
    def empty(
        shape: _ShapeLike,
        dtype: DTypeLike | None = None,
        *,
        device: _DeviceLike | None = None,
        stream: _StreamLike | None = None,
        async_alloc: bool = True,
        usage: BufferUsages | None = None,
    ) -> Buffer: ...
    @staticmethod
    def zeros(
        shape: _ShapeLike,
        dtype: DTypeLike | None = None,
        *,
        device: _DeviceLike | None = None,
        stream: _StreamLike | None = None,
        async_alloc: bool = True,
        usage: BufferUsages | None = None,
    ) -> Buffer: ...
    @staticmethod
    def from_numpy(
        array: ArrayLike,
        *,
        device: _DeviceLike | None = None,
        stream: _StreamLike | None = None,
        async_alloc: bool = True,
        usage: BufferUsages | None = None,
    ) -> Buffer: ...
    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    #: Element type (None: raw bytes). Slicing and ``to_numpy()`` use it.
    @property
    def dtype(self) -> np.dtype[Any] | None: ...
    #: Element shape (None when ``dtype`` is None).
    @property
    def shape(self) -> tuple[int, ...] | None: ...
    def view(self, dtype: DTypeLike | None = None, shape: _ShapeLike | None = None) -> Buffer: ...
    @property
    def size(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def stream(self) -> Stream: ...
    @property
    def usage(self) -> BufferUsages: ...
    def _has_usage(self, needed: int) -> bool: ...
    def __len__(self) -> int: ...
    def write(self, data: ArrayLike, offset: int = 0, stream: _StreamLike | None = None) -> None: ...
    @overload
    def read(
        self,
        out: None = None,
        offset: int = 0,
        nbytes: int | None = None,
        stream: _StreamLike | None = None,
        synchronize: bool = True,
    ) -> NDArray[np.uint8]: ...
    @overload
    def read(
        self,
        out: _ArrayT,
        offset: int = 0,
        nbytes: int | None = None,
        stream: _StreamLike | None = None,
        synchronize: bool = True,
    ) -> _ArrayT: ...
    @overload
    def to_numpy(self, out: None = None, stream: _StreamLike | None = None) -> NDArray[Any]: ...
    @overload
    def to_numpy(self, out: _ArrayT, stream: _StreamLike | None = None) -> _ArrayT: ...
    def copy_to(
        self,
        dst: Buffer,
        nbytes: int | None = None,
        src_offset: int = 0,
        dst_offset: int = 0,
        stream: _StreamLike | None = None,
    ) -> None: ...
    def copy_from(
        self,
        src: Buffer,
        nbytes: int | None = None,
        src_offset: int = 0,
        dst_offset: int = 0,
        stream: _StreamLike | None = None,
    ) -> None: ...
    def fill(self, value: int | float | bool | np.generic[Any], stream: _StreamLike | None = None) -> None: ...
    def __getitem__(self, key: slice) -> Buffer: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def close(self) -> None: ...
    def _user_streams(self) -> list[Stream]: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...
