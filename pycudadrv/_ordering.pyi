"""Ordering after work queued elsewhere: a producer's ready point, the capture a stream is part
of, host memory kept alive until the copies that use it have run, and the allocation trace of
captures."""
from typing_extensions import disjoint_base

from pycudadrv._stream import Stream

__all__ = ['alloc_trace']

def alloc_trace(what: str, nbytes: int, stream: Stream | None = None) -> bool: ...
def _host_keep_count() -> int: ...

@disjoint_base
class ReadyEvent:
    """A point in a producer's stream that consumers wait for (internal)."""
