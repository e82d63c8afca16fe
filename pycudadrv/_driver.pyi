"""Driver loader: dlopen libcuda at first use, resolve every entry point with
cuGetProcAddress at the ABI version of the header we compiled against, and turn
CUresult codes into exceptions."""
from typing import Final

from _typeshed import ReadableBuffer

#: The default name of the driver library; ``PYCUDADRV_LIBCUDA`` overrides it.
LIBCUDA: Final[str]
#: Oldest driver (CUDA version, 1000*major + 10*minor) pycudadrv runs on.
MIN_DRIVER_VERSION: Final[int]
#: CUDA version of the cuda.h this build was compiled against.
HEADER_CUDA_VERSION: Final[int]

class CudaUnavailableError(RuntimeError):
    """CUDA cannot be used here: the driver library is missing, there is no
    device, or the driver is older than pycudadrv supports."""

class CudaError(RuntimeError):
    """A CUDA driver call failed."""

    #: The ``CUresult`` value.
    code: int
    #: Its name, e.g. ``"CUDA_ERROR_INVALID_VALUE"``.
    name: str
    #: The driver's text for it (``cuGetErrorString``).
    description: str
    #: The driver function that failed, e.g. ``"cuMemAlloc"``.
    call: str
    #: What pycudadrv was doing (kernel, grid, block, ...); may be empty.
    context: str
    def __init__(self, code: int, name: str, description: str, call: str, context: str = "") -> None: ...
    def __reduce__(self) -> tuple[type[CudaError], tuple[int, str, str, str, str]]: ...

def is_available() -> bool: ...
def require() -> None: ...
def driver_version() -> tuple[int, int]: ...
def fnv1a64(data: ReadableBuffer) -> int: ...
def _check_code(code: int, call: str = "test") -> None: ...
