"""Ordering after work queued elsewhere: a producer's ready point, the capture a stream is part
of and the allocation trace of captures."""
from typing_extensions import disjoint_base

from pycudadrv._stream import Stream

__all__ = ['alloc_trace']

def alloc_trace(what: str, nbytes: int, stream: Stream | None = None) -> bool: ...

@disjoint_base
class ReadyEvent:
    """A point in a producer's stream that consumers wait for (internal)."""
