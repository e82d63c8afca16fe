"""Kernel handles: launch limits, function attributes by name, occupancy."""
from collections.abc import Callable, Sequence
from typing import Final, SupportsIndex, TypeAlias

from typing_extensions import disjoint_base

from pycudadrv._device import Device

__all__ = ['dims3', 'SETTABLE_FUNCTION_ATTRIBUTES', 'CACHE_PREFERENCES']

#: A grid, block or cluster size: an int, or 1 to 3 ints (missing ones are 1).
_Dims: TypeAlias = SupportsIndex | Sequence[SupportsIndex]

SETTABLE_FUNCTION_ATTRIBUTES: Final[tuple[str, ...]]
CACHE_PREFERENCES: Final[dict[str, int]]

def dims3(v: _Dims, what: str = "grid", allow_zero: bool = False) -> tuple[int, int, int]: ...

@disjoint_base
class KernelBase:
    """A kernel handle: its launch limits, attributes and occupancy."""

    @property
    def name(self) -> str: ...
    @property
    def device(self) -> Device: ...
    def attribute(self, name: str | int) -> int: ...
    @property
    def attributes(self) -> dict[str, int]: ...
    def set_attribute(self, name: str | int, value: int) -> None: ...
    def set_cache_preference(self, preference: str) -> None: ...
    def max_active_blocks_per_multiprocessor(self, block: _Dims, shared_mem_bytes: int = 0) -> int: ...
    def max_cooperative_grid(self, block: _Dims, shared_mem_bytes: int = 0) -> int: ...
    def max_potential_block_size(
        self, shared_mem_bytes: int | Callable[[int], int] = 0, block_size_limit: int = 0
    ) -> tuple[int, int]: ...
    def available_dynamic_shared_memory(self, num_blocks: int, block: _Dims) -> int: ...
