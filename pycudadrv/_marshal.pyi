"""Kernel-parameter marshalling: parameter kinds and layouts, the argument
arena, and the value-to-bytes rules."""
import enum
from collections.abc import Sequence
from typing import Any, Final

from typing_extensions import disjoint_base

from pycudadrv._device import Device
from pycudadrv._signature import Param

__all__ = ['ParamKind', 'ParamLayout', 'pack_arguments', 'PARAM_LIMIT_CLASSIC', 'PARAM_LIMIT_LARGE', 'FLOAT32_MAX']

PARAM_LIMIT_CLASSIC: Final[int]
PARAM_LIMIT_LARGE: Final[int]
FLOAT32_MAX: Final[float]

class ParamKind(enum.IntEnum):
    ANY = 0
    INT = 1
    UINT = 2
    FLOAT = 3
    POINTER = 4
    BYTES = 5
    INTEGER = 6
    BOOL = 7
    BFLOAT16 = 8

@disjoint_base
class ParamLayout:
    """A kernel's parameter layout as the marshaller uses it (internal)."""

    @property
    def n(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def device(self) -> Device: ...
    @property
    def source(self) -> str: ...

def pack_arguments(
    layout: str | Sequence[Any] | Sequence[Param], args: Sequence[Any], name: str = "kernel"
) -> tuple[list[bytes], list[int], bool]: ...
