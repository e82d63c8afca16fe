"""Other libraries' device arrays: reading __cuda_array_interface__ and DLPack
safely, ordering them after their producer's stream, and asbuffer() to wrap
them as Buffers (over a foreign Allocation), zero-copy."""
from pycudadrv._memory import Buffer, _SupportsCudaArrayInterface, _SupportsDLPack
from pycudadrv._stream import _DeviceLike

__all__ = ['asbuffer', 'data_pointer']

def asbuffer(obj: _SupportsCudaArrayInterface | _SupportsDLPack, *, device: _DeviceLike | None = None) -> Buffer: ...
def data_pointer(obj: object, *, strided: bool = False) -> int: ...
