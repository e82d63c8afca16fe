"""Driver loader: open libcuda at first use, resolve every entry point with
cuGetProcAddress at the ABI version of the header we compiled against, and turn
CUresult codes into exceptions."""
from typing import Final

from _typeshed import ReadableBuffer

from pycudadrv._errors import CudaError as CudaError, CudaUnavailableError as CudaUnavailableError

__all__ = ['CudaError', 'CudaUnavailableError', 'LIBCUDA', 'MIN_DRIVER_VERSION', 'HEADER_CUDA_VERSION', 'is_available', 'require', 'driver_version', 'driver_library', 'fnv1a64']

#: The default name of the driver library; ``PYCUDADRV_LIBCUDA`` overrides it.
LIBCUDA: Final[str]
#: Oldest driver (CUDA version, 1000*major + 10*minor) pycudadrv runs on.
MIN_DRIVER_VERSION: Final[int]
#: CUDA version of the cuda.h this build was compiled against.
HEADER_CUDA_VERSION: Final[int]

def is_available() -> bool: ...
def require() -> None: ...
def driver_version() -> tuple[int, int]: ...
def driver_library() -> str: ...
def fnv1a64(data: ReadableBuffer) -> int: ...
