"""Other libraries' device arrays: reading __cuda_array_interface__ and DLPack
safely, and asbuffer() to wrap them as Buffers, zero-copy."""
from pycudadrv._memory import Buffer, _SupportsCudaArrayInterface, _SupportsDLPack
from pycudadrv._stream import _DeviceLike

__all__ = ['asbuffer']

def asbuffer(obj: _SupportsCudaArrayInterface | _SupportsDLPack, *, device: _DeviceLike | None = None) -> Buffer: ...
