"""Device memory: Buffer (device allocation or a view of one), pinned
HostBuffer, and asbuffer()."""
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, SupportsIndex, TypeAlias, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray
from typing_extensions import CapsuleType, Self, disjoint_base

from pycudadrv._device import Device
from pycudadrv._stream import Stream, _DeviceLike, _StreamLike

class _SupportsCudaArrayInterface(Protocol):
    @property
    def __cuda_array_interface__(self) -> Mapping[str, Any]: ...

class _SupportsDLPack(Protocol):
    def __dlpack__(self, *, stream: Any = ...) -> Any: ...

#: ``shape`` arguments: an element count or a tuple of dimensions.
_ShapeLike: TypeAlias = SupportsIndex | Sequence[SupportsIndex]
_ArrayT = TypeVar("_ArrayT", bound=np.ndarray[Any, Any])

def flush_deferred_frees() -> None: ...

@disjoint_base
class Buffer:
    """A device allocation, or a view of part of one."""

    #: Element type (None: raw bytes). Slicing and ``to_numpy()`` use it.
    dtype: np.dtype[Any] | None
    #: Element shape (None when ``dtype`` is None).
    shape: tuple[int, ...] | None
    # Always raises TypeError: objects come from ``Buffer.empty``/``zeros``/``from_numpy`` or ``asbuffer``.
    def __init__(self, *args: object, **kwargs: object) -> None: ...
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
    ) -> Buffer: ...
    @staticmethod
    def zeros(
        shape: _ShapeLike,
        dtype: DTypeLike | None = None,
        *,
        device: _DeviceLike | None = None,
        stream: _StreamLike | None = None,
        async_alloc: bool = True,
    ) -> Buffer: ...
    @staticmethod
    def from_numpy(
        array: ArrayLike,
        *,
        device: _DeviceLike | None = None,
        stream: _StreamLike | None = None,
        async_alloc: bool = True,
    ) -> Buffer: ...
    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def stream(self) -> Stream: ...
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
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...

def asbuffer(obj: _SupportsCudaArrayInterface | _SupportsDLPack, *, device: _DeviceLike | None = None) -> Buffer: ...

@disjoint_base
class HostBuffer:
    """Page-locked (pinned) host memory (``cuMemHostAlloc``), exposed as a numpy array."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    # Always raises TypeError: objects come from ``HostBuffer.empty``.
    def __init__(self, *args: object, **kwargs: object) -> None: ...
    @property
    def device(self) -> Device: ...
    @staticmethod
    def empty(shape: _ShapeLike, dtype: DTypeLike = ..., *, device: _DeviceLike | None = None) -> HostBuffer: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def ptr(self) -> int: ...
    @property
    def array(self) -> NDArray[Any]: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def close(self) -> None: ...
