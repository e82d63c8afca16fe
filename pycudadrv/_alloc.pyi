"""The owner of a device allocation (internal): allocate, the streams and graphs that used it,
the holds that keep it, its free, pool return, invalidation and foreign memory's keeper and
producer. Buffer (pycudadrv._memory) is the public view of one."""
from typing_extensions import disjoint_base

from pycudadrv._device import Device
from pycudadrv._stream import CaptureWork

__all__: list[str] = []

# Made only by pycudadrv's Buffer factories (with a private token; any other call raises ArgumentTypeError).
@disjoint_base
class Allocation(CaptureWork):
    """One device allocation (internal: Buffers are the public views of it)."""

    @property
    def device(self) -> Device: ...
