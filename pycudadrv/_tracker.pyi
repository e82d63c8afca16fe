"""The range tracker of pycudadrv.Queue (compiled): per byte range, the last writer and the readers since."""
from typing_extensions import final

__all__: list[str] = []

@final
class _Seg: ...

@final
class _Tracker:
    def __len__(self) -> int: ...
    def _dump(self) -> list[tuple[int, int, int | None, list[int]]]: ...
