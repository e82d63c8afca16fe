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

from pycudadrv._errors import *  # noqa: F401,F403
from pycudadrv._driver import *  # noqa: F401,F403
from pycudadrv._device import *  # noqa: F401,F403
from pycudadrv._stream import *  # noqa: F401,F403
from pycudadrv._event import *  # noqa: F401,F403
from pycudadrv._host import *  # noqa: F401,F403
from pycudadrv._memory import *  # noqa: F401,F403
from pycudadrv._usage import BufferUsages as BufferUsages
from pycudadrv._interop import *  # noqa: F401,F403
from pycudadrv._marshal import *  # noqa: F401,F403
from pycudadrv._kernel import *  # noqa: F401,F403
from pycudadrv._launch import *  # noqa: F401,F403
from pycudadrv._prepared import PreparedLaunch as PreparedLaunch
from pycudadrv._module import *  # noqa: F401,F403
from pycudadrv._graph import *  # noqa: F401,F403
from pycudadrv._sequence import *  # noqa: F401,F403
from pycudadrv._loops import *  # noqa: F401,F403
from pycudadrv._builder import *  # noqa: F401,F403
from pycudadrv._capabilities import DeviceInfo as DeviceInfo
from pycudadrv._attributes import DEVICE_ATTRIBUTES as DEVICE_ATTRIBUTES, FUNCTION_ATTRIBUTES as FUNCTION_ATTRIBUTES
from pycudadrv.nvrtc import *  # noqa: F401,F403
from pycudadrv.link import *  # noqa: F401,F403
from pycudadrv.triton import from_triton as from_triton, TritonKernel as TritonKernel
from pycudadrv.timestamps import *  # noqa: F401,F403
from pycudadrv.dispatch import Dispatch as Dispatch, Encoder as Encoder
from pycudadrv.queue import *  # noqa: F401,F403
from pycudadrv._version import __version__ as __version__
from pycudadrv.config import show_config as show_config

__all__ = sorted({*_errors.__all__, *_driver.__all__, *_device.__all__, *_stream.__all__, *_event.__all__, *_host.__all__,
                  *_memory.__all__, *_interop.__all__, *_marshal.__all__, *_kernel.__all__, *_launch.__all__, *_prepared.__all__, *_module.__all__,
                  *_graph.__all__, *_sequence.__all__, *_loops.__all__, *_builder.__all__, *nvrtc.__all__, *link.__all__, *timestamps.__all__,
                  *queue.__all__,
                  "Dispatch", "Encoder", "DeviceInfo", "BufferUsages", "DEVICE_ATTRIBUTES", "FUNCTION_ATTRIBUTES", "from_triton", "TritonKernel",
                  "show_config", "__version__", "bench", "profile", "dispatch", "aio"})
