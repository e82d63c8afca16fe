"""pycudadrv: launch CUDA kernels from Python at the driver's own speed.

A Cython layer over the CUDA driver API (``cuda.h``). ``import pycudadrv``
never touches the driver; the first call that needs CUDA loads
``libcuda.so.1`` and raises :class:`CudaUnavailableError` if it cannot.

>>> import numpy as np, pycudadrv as cd
>>> mod = cd.compile(r'''
... extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
...     int i = blockIdx.x * blockDim.x + threadIdx.x;
...     if (i < n) y[i] = a * x[i] + y[i];
... }''').load()
>>> x = cd.Buffer.from_numpy(np.arange(4, dtype=np.float32))
>>> y = cd.Buffer.from_numpy(np.ones(4, dtype=np.float32))
>>> mod.function("saxpy").launch(1, 32, y, x, 2.0, 4)
>>> y.to_numpy()
array([1., 3., 5., 7.], dtype=float32)
"""
from pycudadrv._driver import (
    CudaError,
    CudaUnavailableError,
    HEADER_CUDA_VERSION,
    MIN_DRIVER_VERSION,
    driver_version,
    fnv1a64,
    is_available,
    require,
)
from pycudadrv._device import Device, device_count, get_current_device
from pycudadrv._stream import Event, Stream
from pycudadrv._memory import Buffer, HostBuffer, asbuffer
from pycudadrv._launch import (Function, LaunchConfig, NotSupportedError, PreparedLaunch, get_release_gil,
                               pack_arguments, set_release_gil)
from pycudadrv._module import Module, clear_module_cache, image_kind, load_module, module_cache_size
from pycudadrv._attributes import DEVICE_ATTRIBUTES, FUNCTION_ATTRIBUTES
from pycudadrv._graph import CapturedGraph, GraphUpdateError
from pycudadrv.nvrtc import NvrtcError, NvrtcUnavailableError, ObjectCode, compile, nvrtc_version
from pycudadrv.timestamps import Timestamps
from pycudadrv.dispatch import Dispatch, Encoder
from pycudadrv import bench, profile  # noqa: F401  (profile reads PYCUDADRV_PROFILE / PYCUDADRV_TRACE)

__version__ = "0.1.0"

__all__ = [
    "Buffer", "Dispatch", "Encoder", "HostBuffer", "CapturedGraph", "CudaError", "GraphUpdateError", "Timestamps", "CudaUnavailableError", "DEVICE_ATTRIBUTES", "Device", "Event", "FUNCTION_ATTRIBUTES",
    "Function", "HEADER_CUDA_VERSION", "LaunchConfig", "MIN_DRIVER_VERSION", "Module", "NotSupportedError",
    "NvrtcError", "NvrtcUnavailableError", "ObjectCode", "PreparedLaunch", "Stream", "asbuffer",
    "clear_module_cache", "compile", "device_count", "driver_version", "fnv1a64", "get_current_device",
    "image_kind", "is_available", "load_module", "module_cache_size", "nvrtc_version", "pack_arguments",
    "require", "get_release_gil", "set_release_gil",
]
