"""Other libraries' device arrays: reading __cuda_array_interface__ and DLPack
safely, ordering them after their producer's stream, and asbuffer() to wrap
them as Buffers (over a foreign Allocation), zero-copy."""
from typing import Any

import numpy as np

from pycudadrv._memory import Buffer, _SupportsCudaArrayInterface, _SupportsDLPack
from pycudadrv._stream import _DeviceLike

__all__ = ['asbuffer', 'data_pointer', 'array_interface', 'span']

def asbuffer(obj: _SupportsCudaArrayInterface | _SupportsDLPack, *, device: _DeviceLike | None = None) -> Buffer: ...
def data_pointer(obj: object, *, strided: bool = False) -> int: ...
def array_interface(
    obj: object, what: str
) -> tuple[int, int, int, bool, tuple[int, ...], tuple[int, ...] | None, np.dtype[Any]]: ...
def span(obj: object, what: str) -> tuple[int, int] | None: ...
