from collections.abc import Sequence
from typing import Any

from typing_extensions import disjoint_base

from pycudadrv._launch import Function

__all__ = ['TritonLaunchBase']

@disjoint_base
class TritonLaunchBase:
    """The launch half of :class:`pycudadrv.triton.TritonKernel` (internal base class)."""

    def _init_fast(
        self,
        fn: Function | None,
        src_all: Sequence[int],
        src_rt: Sequence[int],
        n_all: int,
        n_rt: int,
        div16: Sequence[int],
        div16_int: Sequence[int],
        const_pos: Sequence[int],
        const_want: Sequence[Any],
        const_simple: Sequence[bool],
    ) -> None: ...
    def launch(self, grid: Any, *args: Any, stream: Any = None) -> None: ...
    def __getitem__(self, grid: Any) -> Any: ...
