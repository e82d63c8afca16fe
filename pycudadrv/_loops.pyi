"""Device-side loops through conditional WHILE nodes."""
from typing import Any, Final

import numpy as np
from typing_extensions import Self, disjoint_base

from pycudadrv._graph import CapturedGraph
from pycudadrv._launch import Function
from pycudadrv._memory import Buffer
from pycudadrv._stream import Stream, _CaptureMode

__all__ = ['DeviceLoop', 'Condition', 'when', 'LOOP_DTYPES', 'LOOP_OPS']

LOOP_DTYPES: Final[dict[str, str]]
LOOP_OPS: Final[dict[str, str]]

class Condition:
    """``value[index] OP threshold`` on the device, the stopping rule of a DeviceLoop."""

    buffer: Buffer
    op: str
    threshold: np.generic[Any]
    index: int
    dtype: np.dtype[Any]
    def __init__(self, buffer: Buffer, op: str, threshold: float | int, index: int = 0) -> None: ...
    @property
    def kernel_name(self) -> str: ...

def when(buffer: Buffer, op: str, threshold: float | int, index: int = 0) -> Condition: ...
def loop_kernel(device: Any, name: str) -> Function: ...
def follows_kernel(stream: Stream) -> bool: ...
def patch_kernel_node(
    graph: CapturedGraph, node: int, fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int],
    shared_mem_bytes: int, args: Any,
) -> None: ...

@disjoint_base
class DeviceLoop(CapturedGraph):
    """A captured body run repeatedly on the GPU by one graph launch."""

    def __new__(
        cls,
        stream: Stream,
        mode: _CaptureMode = "thread_local",
        *,
        pdl: bool = False,
        times: int | None = None,
        until: Condition | None = None,
        max_iterations: int | None = None,
    ) -> Self: ...
    def __init__(
        self,
        stream: Stream,
        mode: _CaptureMode = "thread_local",
        *,
        pdl: bool = False,
        times: int | None = None,
        until: Condition | None = None,
        max_iterations: int | None = None,
    ) -> None: ...

    @property
    def times(self) -> int | None: ...
    @property
    def condition(self) -> Condition | None: ...
    @property
    def max_iterations(self) -> int: ...
    @property
    def iterations(self) -> int: ...
    @property
    def converged(self) -> bool: ...
