"""Modules: loading PTX/CUBIN/fatbin images through a per-context cache keyed
by the FNV-1a 64-bit hash of the image bytes, and looking up functions."""
from typing import Final, Literal, TypeAlias

from _typeshed import ReadableBuffer
from typing_extensions import disjoint_base

from pycudadrv._device import Device
from pycudadrv._launch import Function, _Signature
from pycudadrv._stream import _DeviceLike
from pycudadrv.nvrtc import ObjectCode

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
) -> Module: ...
def clear_module_cache() -> None: ...
def module_cache_size() -> int: ...

@disjoint_base
class Module:
    """A loaded CUDA module (``cuModuleLoadDataEx``)."""

    #: Name expression -> lowered (mangled) name, from ``compile(..., name_expressions=...)``.
    lowered_names: dict[str, str]
    # Always raises TypeError: objects come from ``load_module`` or ``compile(...).load()``.
    def __init__(self, *args: object, **kwargs: object) -> None: ...
    @property
    def device(self) -> Device: ...
    @property
    def kind(self) -> _ImageKind: ...
    @property
    def hash(self) -> int: ...
    @property
    def handle(self) -> int: ...
    def function_names(self) -> list[str] | None: ...
    def function(self, name: str, signature: _Signature | None = None) -> Function: ...
    def unload(self) -> None: ...
