"""Kernel-parameter marshalling and launches (generic and prepared)."""
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypeAlias

import numpy as np
from numpy.typing import DTypeLike
from typing_extensions import Self, disjoint_base

from pycudadrv._kernel import KernelBase, _Dims
from pycudadrv._memory import Buffer, _SupportsCudaArrayInterface, _SupportsDLPack
from pycudadrv._module import Module
from pycudadrv._builder import LaunchBuilder
from pycudadrv._prepared import PreparedLaunch
from pycudadrv._signature import Param
from pycudadrv._stream import Stream, _StreamLike

__all__ = ['Function', 'LaunchConfig', 'set_release_gil', 'get_release_gil', 'set_launch_hook', 'get_launch_hook']

#: A value accepted for one kernel parameter (see docs/kernel-parameters.md).
_KernelArg: TypeAlias = (
    Buffer
    | _SupportsCudaArrayInterface
    | _SupportsDLPack
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

_LayoutSource: TypeAlias = Literal["signature", "mangled+ptx", "source+ptx", "ptx", "mangled+cuFuncGetParamInfo",
                                  "source+cuFuncGetParamInfo", "cuFuncGetParamInfo", "unknown"]

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
class Function(KernelBase):
    """A kernel entry point of a loaded Module (``cuModuleGetFunction``)."""

    # Always raises ArgumentTypeError: objects come from ``Module.function(name)``.
    def __init__(self, *args: object, **kwargs: object) -> None: ...
    @property
    def module(self) -> Module: ...
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
    def launch_timed_ns(
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
    launch_timed = launch_timed_ns
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
    def builder(
        self,
        grid: _Dims,
        block: _Dims,
        *,
        shared_mem_bytes: int = 0,
        stream: _StreamLike | None = None,
        cooperative: bool = False,
        cluster: _Dims | None = None,
        programmatic_dependent: bool = False,
    ) -> LaunchBuilder: ...

def _timed(s: Stream, launch: Any, *args: Any, **kwargs: Any) -> int: ...
def _first_diff_for_tests(a: list[Any], b: list[Any], start: int) -> tuple[int, int]: ...
