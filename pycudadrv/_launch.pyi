"""Kernel-parameter marshalling and launches (generic and prepared)."""
from collections.abc import Sequence
from typing import Any, Literal, Protocol, SupportsIndex, TypeAlias

import numpy as np
from numpy.typing import DTypeLike
from typing_extensions import Self, disjoint_base

from pycudadrv._device import Device
from pycudadrv._memory import Buffer, _SupportsCudaArrayInterface
from pycudadrv._module import Module
from pycudadrv._signature import Param
from pycudadrv._stream import Stream, _StreamLike

#: A grid, block or cluster size: an int, or 1 to 3 ints (missing ones are 1).
_Dims: TypeAlias = SupportsIndex | Sequence[SupportsIndex]

#: A value accepted for one kernel parameter (see docs/kernel-parameters.md).
_KernelArg: TypeAlias = (
    Buffer
    | _SupportsCudaArrayInterface
    | None
    | bool
    | int
    | float
    | complex
    | np.generic[Any]
    | bytes
    | bytearray
    | memoryview
)

#: A signature: ``"float*, const float*, int"`` or a sequence of type names / numpy dtypes.
_Signature: TypeAlias = str | Sequence[str | DTypeLike]

_LayoutSource: TypeAlias = Literal["signature", "ptx", "cuFuncGetParamInfo", "unknown"]

class _LaunchHook(Protocol):
    def before(self, fn: Function, stream: Stream, /) -> object: ...
    def after(
        self,
        token: Any,
        fn: Function,
        stream: Stream,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem_bytes: int,
        /,
    ) -> object: ...

def set_launch_hook(hook: _LaunchHook | None) -> _LaunchHook | None: ...
def get_launch_hook() -> _LaunchHook | None: ...
def set_release_gil(flag: bool) -> bool: ...
def get_release_gil() -> bool: ...

class NotSupportedError(RuntimeError):
    """The device or driver cannot do what was asked (e.g. thread-block clusters below sm_90)."""

@disjoint_base
class LaunchConfig:
    """Grid, block, dynamic shared memory and launch attributes, validated once."""

    def __init__(
        self,
        fn: Function,
        grid: _Dims,
        block: _Dims,
        shared_mem_bytes: int = 0,
        *,
        cooperative: bool = False,
        cluster: _Dims | None = None,
        programmatic_dependent: bool = False,
    ) -> None: ...
    @property
    def grid(self) -> tuple[int, int, int]: ...
    @property
    def block(self) -> tuple[int, int, int]: ...
    @property
    def shared_mem_bytes(self) -> int: ...

@disjoint_base
class Function:
    """A kernel entry point of a loaded Module (``cuModuleGetFunction``)."""

    # Always raises TypeError: objects come from ``Module.function(name)``.
    def __init__(self, *args: object, **kwargs: object) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def module(self) -> Module: ...
    @property
    def device(self) -> Device: ...
    @property
    def layout_source(self) -> _LayoutSource: ...
    def set_signature(self, signature: _Signature) -> Self: ...
    @property
    def param_layout(self) -> list[Param] | None: ...
    @property
    def num_params(self) -> int | None: ...
    @property
    def max_threads_per_block(self) -> int: ...
    @property
    def static_shared_bytes(self) -> int: ...
    @property
    def handle(self) -> int: ...
    def attribute(self, name: str | int) -> int: ...
    def launch(
        self,
        grid: _Dims,
        block: _Dims,
        *args: _KernelArg,
        shared_mem_bytes: int = 0,
        stream: _StreamLike | None = None,
        cooperative: bool = False,
        cluster: _Dims | None = None,
        programmatic_dependent: bool = False,
    ) -> None: ...
    def __call__(
        self,
        grid: _Dims,
        block: _Dims,
        *args: _KernelArg,
        shared_mem_bytes: int = 0,
        stream: _StreamLike | None = None,
        cooperative: bool = False,
        cluster: _Dims | None = None,
        programmatic_dependent: bool = False,
    ) -> None: ...
    def launch_timed(
        self,
        grid: _Dims,
        block: _Dims,
        *args: _KernelArg,
        shared_mem_bytes: int = 0,
        stream: _StreamLike | None = None,
        cooperative: bool = False,
        cluster: _Dims | None = None,
        programmatic_dependent: bool = False,
    ) -> int: ...
    def bind(
        self,
        grid: _Dims,
        block: _Dims,
        *args: _KernelArg,
        shared_mem_bytes: int = 0,
        stream: _StreamLike | None = None,
        cooperative: bool = False,
        cluster: _Dims | None = None,
        programmatic_dependent: bool = False,
    ) -> PreparedLaunch: ...

@disjoint_base
class PreparedLaunch:
    """A launch of one kernel with its configuration and argument storage
    prepared once (``fn.bind(grid, block, *args, ...)``)."""

    def __init__(
        self,
        fn: Function,
        grid: _Dims,
        block: _Dims,
        *args: _KernelArg,
        shared_mem_bytes: int = 0,
        stream: _StreamLike | None = None,
        cooperative: bool = False,
        cluster: _Dims | None = None,
        programmatic_dependent: bool = False,
    ) -> None: ...
    def __call__(self, *args: _KernelArg) -> None: ...
    def launch(self) -> None: ...
    def launch_timed(self) -> int: ...
    def set_arg(self, index: int, value: _KernelArg) -> None: ...
    @property
    def function(self) -> Function: ...
    @property
    def stream(self) -> Stream: ...
    @property
    def args(self) -> tuple[_KernelArg, ...] | None: ...
    def param_bytes(self) -> list[bytes]: ...
    @property
    def spilled(self) -> bool: ...

def pack_arguments(
    layout: _Signature | Sequence[Param], args: Sequence[_KernelArg], name: str = "kernel"
) -> tuple[list[bytes], list[int], bool]: ...
def _timed(s: Stream, launch: Any, *args: Any, **kwargs: Any) -> int: ...
