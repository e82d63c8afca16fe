"""DLPack capsules (internal): export device memory, take over imported tensors (the
unversioned "dltensor" ABI). Buffer.__dlpack__ and asbuffer() are the public side."""
from typing import Final

__all__ = ['KDL_CUDA', 'KDL_CUDA_MANAGED']

#: DLPack device types of the memory pycudadrv exports or accepts (``kDLCUDA``, ``kDLCUDAManaged``).
KDL_CUDA: Final[int]
KDL_CUDA_MANAGED: Final[int]
