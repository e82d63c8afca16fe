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

Every exception pycudadrv raises on purpose derives from :class:`Error`.
"""
try:
    from pycudadrv import _driver
except ImportError as _e:  # pragma: no cover - a source tree that was never built
    import os as _os

    _here = _os.path.dirname(_os.path.abspath(__file__))
    raise ImportError(
        f"pycudadrv's compiled extensions are missing in {_here}: this is an unbuilt source tree. Build it in "
        "place with `python -m pip install -e .` (or run from outside the checkout to use an installed "
        f"pycudadrv). Original error: {_e}") from _e


def _check_extensions_are_ours() -> None:
    # An unbuilt clone imported while another pycudadrv is installed in editable mode: the import system
    # takes this tree's .py files and the other tree's compiled extensions (pip's editable finder serves
    # what the first one lacks), a mix that fails in odd places or silently runs other code.
    import os

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    found = os.path.realpath(os.path.dirname(os.path.abspath(_driver.__file__)))
    if found != here:
        raise ImportError(
            f"pycudadrv's compiled extensions were found in {found}, not beside this package's Python files in "
            f"{here}: this source tree was never built, and another pycudadrv (an editable install) lent its "
            "extensions. Build this tree in place with `python -m pip install -e .` (or `python setup.py "
            "build_ext --inplace`), or run from outside it to use the other installation.")


_check_extensions_are_ours()
del _check_extensions_are_ours

from pycudadrv import _errors, _device, _stream, _event, _host, _memory, _interop, _marshal, _kernel, _launch, _prepared, _module, _graph
from pycudadrv import _sequence, _loops, _env
from pycudadrv import nvrtc, link, triton, timestamps, dispatch, bench, profile, queue, aio, nvtx  # noqa: F401
from pycudadrv import _builder  # noqa: F401

# What a user calls. Everything else stays in its module (pycudadrv.nvrtc.cache_dir,
# pycudadrv.link.fatbin_entries, pycudadrv._marshal.PARAM_LIMIT_LARGE, ...).
from pycudadrv._errors import (
    Error, CudaError, OutOfMemoryError, CudaUnavailableError, NotSupportedError, ArgumentTypeError,
    ArgumentValueError, ArgumentIndexError, ClosedError, StateError, CaptureError,
    EventNotRecordedError, NotReadyError, GraphUpdateError, BufferInUseError,
    LibraryUnavailableError, NvrtcError, NvrtcUnavailableError, LinkError, LinkerUnavailableError,
    CudnnError, CudnnUnavailableError, HeaderNotFoundError)
from pycudadrv._driver import is_available, require, driver_version
from pycudadrv._device import (
    Device, context, device_count, get_current_device, select_devices, selected_devices)
from pycudadrv._stream import Stream
from pycudadrv._event import Event
from pycudadrv._host import HostBuffer
from pycudadrv._memory import Buffer
from pycudadrv._interop import asbuffer, data_pointer
from pycudadrv._marshal import pack_arguments
from pycudadrv._launch import (
    Function, LaunchConfig, set_release_gil, get_release_gil, set_launch_hook, get_launch_hook)
from pycudadrv._prepared import PreparedLaunch
from pycudadrv._module import Module, load_module, clear_module_cache, image_kind
from pycudadrv._graph import CapturedGraph, graph_memory_used
from pycudadrv._sequence import LaunchSequence
from pycudadrv._loops import DeviceLoop, Condition, when
from pycudadrv._builder import LaunchBuilder
from pycudadrv.nvrtc import compile, ObjectCode, nvrtc_version
from pycudadrv.link import Linker, build_fatbin
from pycudadrv.timestamps import Timestamps
from pycudadrv.queue import Queue, Submission, set_queue_defaults, get_queue_defaults, reset_queue_defaults
from pycudadrv._usage import BufferUsages
from pycudadrv._capabilities import DeviceInfo
from pycudadrv.triton import from_triton, TritonKernel
from pycudadrv.dispatch import Dispatch, Encoder
from pycudadrv._version import __version__
from pycudadrv.config import show_config

__all__ = [
    'ArgumentIndexError', 'ArgumentTypeError', 'ArgumentValueError', 'Buffer', 'BufferInUseError',
    'BufferUsages', 'CaptureError', 'CapturedGraph', 'ClosedError', 'Condition', 'CudaError',
    'CudaUnavailableError', 'CudnnError', 'CudnnUnavailableError', 'Device', 'DeviceInfo', 'DeviceLoop',
    'Dispatch', 'Encoder', 'Error', 'Event', 'EventNotRecordedError', 'Function', 'GraphUpdateError',
    'HeaderNotFoundError', 'HostBuffer', 'LaunchBuilder', 'LaunchConfig', 'LaunchSequence',
    'LibraryUnavailableError', 'LinkError', 'Linker', 'LinkerUnavailableError', 'Module',
    'NotReadyError', 'NotSupportedError', 'NvrtcError', 'NvrtcUnavailableError', 'ObjectCode',
    'OutOfMemoryError', 'PreparedLaunch', 'Queue', 'StateError', 'Stream', 'Submission', 'Timestamps',
    'TritonKernel', '__version__', 'aio', 'asbuffer', 'bench', 'build_fatbin', 'clear_module_cache',
    'compile', 'context', 'data_pointer', 'device_count', 'dispatch', 'driver_version', 'from_triton',
    'get_current_device', 'get_launch_hook', 'get_queue_defaults', 'get_release_gil',
    'graph_memory_used', 'image_kind', 'is_available', 'load_module', 'nvrtc_version', 'pack_arguments',
    'profile', 'require', 'reset_queue_defaults', 'select_devices', 'selected_devices',
    'set_launch_hook', 'set_queue_defaults', 'set_release_gil', 'show_config', 'when'
]
