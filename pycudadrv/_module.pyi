"""Modules: loading PTX/CUBIN/fatbin images through a per-context cache keyed
by the FNV-1a 64-bit hash of the image bytes, and looking up functions."""
from typing import Any, Final, Literal, TypeAlias

from numpy.typing import DTypeLike

from _typeshed import ReadableBuffer
from typing_extensions import disjoint_base

from pycudadrv._device import Device
from pycudadrv._launch import Function, _Signature
from pycudadrv._memory import Buffer
from pycudadrv._stream import _DeviceLike
from pycudadrv.nvrtc import ObjectCode

__all__ = ['Module', 'load_module', 'clear_module_cache', 'module_cache_size', 'image_kind']

_ImageKind: TypeAlias = Literal["cubin", "fatbin", "ptx"]

ELF_MAGIC: Final[bytes]
FATBIN_MAGIC: Final[bytes]
LOG_BYTES: Final[int]

def image_kind(image: str | bytes | bytearray | memoryview) -> _ImageKind: ...
def load_module(
    image: ReadableBuffer | str | ObjectCode,
    *,
    device: _DeviceLike | None = None,
    ptx: str | bytes | None = None,
    source_decls: dict[str, Any] | None = None,
) -> Module: ...
def clear_module_cache() -> None: ...
def module_cache_size() -> int: ...

@disjoint_base
class Module:
    """A loaded CUDA module (``cuModuleLoadDataEx``)."""

    #: Name expression -> lowered (mangled) name, from ``compile(..., name_expressions=...)``.
    lowered_names: dict[str, str]
    # Always raises ArgumentTypeError: objects come from ``load_module`` or ``compile(...).load()``.
    # No parameters, as at run time (object's __init__; __cinit__ refuses the call), so a type checker
    # flags `Module(image)` too; docs/gen_api.py shows it as not constructed directly.
    def __init__(self) -> None: ...
    @property
    def device(self) -> Device: ...
    @property
    def kind(self) -> _ImageKind: ...
    @property
    def hash(self) -> int: ...
    @property
    def handle(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def function_names(self) -> list[str] | None: ...
    def global_names(self) -> list[str] | None: ...
    def get_global(self, name: str, dtype: DTypeLike | None = None) -> Buffer: ...
    def function(self, name: str, signature: _Signature | None = None) -> Function: ...
    def unload(self) -> None: ...
def lowered_name(lowered: dict[str, str], name: str) -> str: ...
