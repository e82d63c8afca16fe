"""cuDNN matmul through the backend API (compiled); public entry: pycudadrv.cudnn."""
from typing import Any

from typing_extensions import disjoint_base

from pycudadrv._device import Device
from pycudadrv._memory import Buffer
from pycudadrv._stream import Stream

__all__ = ['MatmulPlan']

ENTRY_POINTS: tuple[str, ...]
NUMERICAL_NOTES: dict[int, str]
BEHAVIOR_NOTES: dict[int, str]
ALIGNMENT: int

def bind(addresses: dict[str, int | None]) -> None: ...
def engine_rejection(dtype: str, compute_dtype: str, allow_tf32: bool, tf32_override: bool,
                     numerical_notes: list[str] | None, behavior_notes: list[str] | None) -> str | None: ...
def no_engine_message(label: str, version: tuple[int, int, int], device: int, strict_float32: bool,
                      tf32_override: bool, considered: list[str], why: str = "") -> str: ...

@disjoint_base
class MatmulPlan:
    """A cuDNN matmul ``out = a @ b`` planned once (pycudadrv.cudnn.matmul_plan)."""

    device: Device
    dtype: str
    compute_dtype: str
    allow_tf32: bool
    #: NVIDIA_TF32_OVERRIDE=0 was in effect when the plan was built (float32 plans without TF32 only).
    tf32_override: bool
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    batch: int
    m: int
    n: int
    k: int
    workspace_nbytes: int
    #: The engine in use: "engine" (global index), "numerical_notes", "behavior_notes", "heuristic",
    #: "rank", "workspace_nbytes", "precision_check" (float32 without TF32) and "autotune_ms" when autotuned.
    engine: dict[str, Any] | None
    #: One line per engine config the heuristics offered: used, skipped (why) or refused by cuDNN.
    engines_considered: list[str]
    # Always raises TypeError: plans come from pycudadrv.cudnn.matmul_plan().
    def __init__(self, *args: object, **kwargs: object) -> None: ...
    def __call__(self, a: Any, b: Any, out: Any, stream: Stream | Any | None = None) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def flops(self) -> int: ...
    @property
    def workspace(self) -> Buffer | None: ...
    def __enter__(self) -> "MatmulPlan": ...
    def __exit__(self, *exc: object) -> bool: ...
    @staticmethod
    def _create(device: Device | int | None, dtype: str, compute_dtype: str, allow_tf32: bool, tf32_override: bool,
                a_dims: tuple[int, int, int], b_dims: tuple[int, int, int], c_dims: tuple[int, int, int],
                a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...],
                accepted: tuple[Any, ...], candidates: int) -> "MatmulPlan": ...
    def _candidates(self) -> list[dict[str, Any]]: ...
    def _try_candidate(self, i: int) -> None: ...
    def _keep_candidate(self, i: int) -> None: ...
    def _keep_candidates(self, keep: list[int]) -> None: ...
    def _annotate_candidate(self, i: int, key: str, value: Any) -> None: ...
    def _raw_handles(self, a: Any, b: Any, out: Any, stream: Stream | Any | None = None) -> tuple[int, int, int]: ...
