from typing import Any, final

from typing_extensions import disjoint_base

__all__ = ["TimestampsBase", "Pass", "PASS_CACHE_LIMIT"]

PASS_CACHE_LIMIT: int

@disjoint_base
class TimestampsBase:
    stream: Any
    _passes: list[list[Any]]
    @property
    def _open(self) -> list[list[Any]]: ...
    _nvtx_open: list[list[Any]]
    _requested: list[list[Any]]
    _req_end: Any
    _last_end: Any
    _old_events: dict[int, Any]
    _labels: dict[Any, Pass]
    def _give_back(self, events: list[Any], entries: list[list[Any]]) -> None: ...
    def measure(self, label: str) -> Pass: ...

@final
class Pass:
    @property
    def label(self) -> str: ...
    def __enter__(self) -> TimestampsBase: ...
    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool: ...
