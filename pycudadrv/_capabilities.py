"""What a device can do, derived from its attributes: :class:`DeviceInfo`
(``Device.info``), as the zyx backend's device description has it.

Pure Python: :func:`derive` takes the attribute values (read by
``Device.info`` with ``cuDeviceGetAttribute``), so the rules are testable
without a GPU.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DeviceInfo", "derive", "ATTRIBUTES", "fp64_rate_class", "FP64_RATE_CLASSES"]

#: The ``CU_DEVICE_ATTRIBUTE_*`` values (lower-case, without the prefix) :func:`derive` reads.
ATTRIBUTES = (
    "compute_capability_major", "compute_capability_minor", "warp_size", "multiprocessor_count",
    "max_threads_per_block", "max_threads_per_multiprocessor", "max_registers_per_block",
    "max_registers_per_multiprocessor", "max_shared_memory_per_block", "max_shared_memory_per_block_optin",
    "max_shared_memory_per_multiprocessor", "single_to_double_precision_perf_ratio",
    "max_block_dim_x", "max_block_dim_y", "max_block_dim_z", "max_grid_dim_x", "max_grid_dim_y", "max_grid_dim_z",
)

#: FP64 rate classes by the FP32:FP64 throughput ratio: "full" up to 1:3 (data-centre parts: P100, V100,
#: A100, H100/H200, B200), "reduced" up to 1:16, "minimal" beyond (consumer parts: 1:32, 1:64).
FP64_RATE_CLASSES = (("full", 3), ("reduced", 16), ("minimal", None))

#: Registers one thread can address (255 since sm_30; the register file is 32-bit registers).
MAX_REGISTERS_PER_THREAD = 255
_REGISTER_BYTES = 4
# Where the driver reports no FP32:FP64 ratio (0): the known ratio of the architecture.
_FULL_FP64 = {(6, 0): 2, (7, 0): 2, (8, 0): 2, (9, 0): 2, (10, 0): 2, (3, 5): 3, (3, 7): 3}


def fp64_rate_class(ratio: int) -> str:
    """The class of an FP32:FP64 throughput ratio (``2`` -> ``"full"``,
    ``32`` -> ``"minimal"``; see :data:`FP64_RATE_CLASSES`)."""
    for name, limit in FP64_RATE_CLASSES:
        if limit is None or ratio <= limit:
            return name
    return FP64_RATE_CLASSES[-1][0]


@dataclass(frozen=True)
class DeviceInfo:
    """A device's capabilities (``Device.info``), read once from its attributes
    (``cuDeviceGetAttribute``); frozen.

    Attributes
    ----------
    compute_capability : tuple of int
        ``(major, minor)``, e.g. ``(9, 0)``; ``arch`` is ``"sm_90"``.
    tensor_cores : bool
        Tensor cores (``mma``/``wmma``): sm_70 and newer.
    bf16 : bool
        bfloat16 arithmetic and tensor-core bfloat16: sm_80 and newer.
    fp16 : bool
        Native half-precision arithmetic: sm_53 and newer.
    fp64_ratio : int
        FP32:FP64 throughput ratio (``2`` on an H200: FP64 at half the FP32
        rate), from ``SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO`` (where the driver
        reports 0: the architecture's known ratio, else 32 before sm_80 and 64
        from it).
    fp64_rate : {"full", "reduced", "minimal"}
        The class of ``fp64_ratio`` (:data:`FP64_RATE_CLASSES`).
    max_register_bytes_per_block, max_register_bytes_per_multiprocessor : int
        The register file one block, one SM can use, in bytes (32-bit
        registers x 4).
    max_register_bytes_per_thread : int
        Register bytes each thread of a block of ``max_threads_per_block``
        threads can have: registers per block / ``max_threads_per_block``,
        at most 255, times 4 (256 bytes on sm_90).
    max_registers_per_block, max_registers_per_multiprocessor : int
        The same, in 32-bit registers.
    warp_size, multiprocessor_count, max_threads_per_block, max_threads_per_multiprocessor : int
        As the attributes of those names.
    max_block, max_grid : tuple of int
        Largest block and grid, ``(x, y, z)``, in threads and blocks.
    max_shared_bytes_per_block, max_shared_bytes_per_block_optin, max_shared_bytes_per_multiprocessor : int
        Shared memory, in bytes (the opt-in limit needs
        ``shared_mem_bytes`` above 48 KiB to be requested per kernel).
    """

    compute_capability: tuple[int, int]
    arch: str
    tensor_cores: bool
    bf16: bool
    fp16: bool
    fp64_ratio: int
    fp64_rate: str
    warp_size: int
    multiprocessor_count: int
    max_threads_per_block: int
    max_threads_per_multiprocessor: int
    max_registers_per_block: int
    max_registers_per_multiprocessor: int
    max_register_bytes_per_block: int
    max_register_bytes_per_multiprocessor: int
    max_register_bytes_per_thread: int
    max_block: tuple[int, int, int]
    max_grid: tuple[int, int, int]
    max_shared_bytes_per_block: int
    max_shared_bytes_per_block_optin: int
    max_shared_bytes_per_multiprocessor: int


def derive(get: Callable[[str], int]) -> DeviceInfo:
    """The :class:`DeviceInfo` of a device whose attribute ``name`` (one of
    :data:`ATTRIBUTES`) is ``get(name)``."""
    cc = (int(get("compute_capability_major")), int(get("compute_capability_minor")))
    ratio = int(get("single_to_double_precision_perf_ratio"))
    if ratio <= 0:
        ratio = _FULL_FP64.get(cc, 64 if cc[0] >= 8 else 32)
    threads = int(get("max_threads_per_block"))
    regs_block = int(get("max_registers_per_block"))
    regs_sm = int(get("max_registers_per_multiprocessor"))
    per_thread = min(regs_block // threads, MAX_REGISTERS_PER_THREAD) if threads > 0 else 0
    return DeviceInfo(
        compute_capability=cc,
        arch=f"sm_{cc[0]}{cc[1]}",
        tensor_cores=cc[0] >= 7,
        bf16=cc[0] >= 8,
        fp16=cc >= (5, 3),
        fp64_ratio=ratio,
        fp64_rate=fp64_rate_class(ratio),
        warp_size=int(get("warp_size")),
        multiprocessor_count=int(get("multiprocessor_count")),
        max_threads_per_block=threads,
        max_threads_per_multiprocessor=int(get("max_threads_per_multiprocessor")),
        max_registers_per_block=regs_block,
        max_registers_per_multiprocessor=regs_sm,
        max_register_bytes_per_block=regs_block * _REGISTER_BYTES,
        max_register_bytes_per_multiprocessor=regs_sm * _REGISTER_BYTES,
        max_register_bytes_per_thread=per_thread * _REGISTER_BYTES,
        max_block=(int(get("max_block_dim_x")), int(get("max_block_dim_y")), int(get("max_block_dim_z"))),
        max_grid=(int(get("max_grid_dim_x")), int(get("max_grid_dim_y")), int(get("max_grid_dim_z"))),
        max_shared_bytes_per_block=int(get("max_shared_memory_per_block")),
        max_shared_bytes_per_block_optin=int(get("max_shared_memory_per_block_optin")),
        max_shared_bytes_per_multiprocessor=int(get("max_shared_memory_per_multiprocessor")),
    )
