"""Where the CUDA headers are: the one search every part of pycudadrv uses.

``setup.py`` (building against ``cuda.h``), ``compile()`` (the device headers
NVRTC needs: ``cuda_fp16.h``, CCCL) and the benchmarks (the C floor includes
``cuda.h``) all look through :func:`cuda_include_candidates`, in this order:
``$CUDA_HOME/include``, ``$CUDA_PATH/include``, ``/usr/local/cuda/include``,
then the ``include`` folders of the ``nvidia-*`` wheels. Pure Python, no
driver and no built extension needed (setup.py loads this file by path).
"""
from __future__ import annotations

import glob
import os

__all__ = ["cuda_include_candidates", "find_cuda_include", "wheel_include_dirs"]


def wheel_include_dirs() -> list[str]:
    """``include`` folders of the installed ``nvidia-*`` wheels (their shared
    namespace package ``nvidia``), sorted; empty when none is installed."""
    try:
        import nvidia  # namespace package of the nvidia-* wheels
    except ImportError:
        return []
    out: list[str] = []
    for base in list(nvidia.__path__):
        out += sorted(glob.glob(os.path.join(base, "*", "include")))
    return out


def cuda_include_candidates(extra_first: list[str] | None = None) -> list[str]:
    """Every candidate include directory, in search order (existing or not)."""
    cands = list(extra_first or [])
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            cands.append(os.path.join(root, "include"))
    cands.append("/usr/local/cuda/include")
    cands += wheel_include_dirs()
    seen: set = set()
    return [c for c in cands if not (c in seen or seen.add(c))]


def find_cuda_include(require=("cuda.h", "cudaTypedefs.h")) -> str:
    """The first candidate directory holding every file of ``require``.

    Raises
    ------
    FileNotFoundError
        None does; the message lists where it looked and how to fix it
        (``CUDA_HOME`` or ``pip install nvidia-cuda-runtime``).
    """
    cands = cuda_include_candidates()
    for inc in cands:
        if all(os.path.isfile(os.path.join(inc, f)) for f in require):
            return inc
    raise FileNotFoundError(
        f"{' and '.join(require)} not found; looked in: " + ("; ".join(cands) or "(nowhere)")
        + ". Set CUDA_HOME to a CUDA toolkit or `pip install nvidia-cuda-runtime`.")
