"""Where a CUDA toolkit's headers and libraries are: the one search every part of pycudadrv uses.

``setup.py`` (building against ``cuda.h``), ``compile()`` (the device headers
NVRTC needs: ``cuda_fp16.h``, CCCL) and the benchmarks (the C floor includes
``cuda.h``) all look through :func:`cuda_include_candidates`, in this order:
each toolkit root's ``include`` and ``targets/<arch>-linux/include``
(the roots: ``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``,
``/opt/cuda``), the ``include`` folders of the ``nvidia-*`` wheels, then
``/usr/include`` (a distribution's toolkit package). NVRTC, nvJitLink and
nvFatbin are looked for in :func:`library_dirs` after the wheels. Pure
Python, no driver and no built extension needed (setup.py loads this file
by path).
"""
from __future__ import annotations

import glob
import os
import platform

__all__ = ["cuda_include_candidates", "find_cuda_include", "wheel_include_dirs", "toolkit_roots", "library_dirs"]

#: Where a CUDA toolkit is installed when no environment variable says (NVIDIA's installers; Arch and
#: others use /opt/cuda).
TOOLKIT_ROOTS = ("/usr/local/cuda", "/opt/cuda")


def _target() -> str:
    """The ``targets/`` folder of a toolkit for this machine (``x86_64-linux``, ``sbsa-linux``)."""
    m = platform.machine()
    return "sbsa-linux" if m == "aarch64" else f"{m}-linux"


def toolkit_roots() -> list[str]:
    """``$CUDA_HOME``, ``$CUDA_PATH`` (where set), then :data:`TOOLKIT_ROOTS`."""
    roots = [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return roots + [r for r in TOOLKIT_ROOTS if r not in roots]


def library_dirs() -> list[str]:
    """Directories a toolkit's shared libraries may be in, in search order: each root's ``lib64`` and
    ``targets/<arch>-linux/lib``, then the system's (``/usr/lib/<arch>-linux-gnu``, ``/usr/lib64``,
    ``/usr/lib``: a distribution's package)."""
    m = platform.machine()
    out = []
    for root in toolkit_roots():
        out += [os.path.join(root, "lib64"), os.path.join(root, "targets", _target(), "lib")]
    return out + [f"/usr/lib/{m}-linux-gnu", f"/lib/{m}-linux-gnu", "/usr/lib64", "/usr/lib"]


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
    for root in toolkit_roots():
        cands += [os.path.join(root, "include"), os.path.join(root, "targets", _target(), "include")]
    cands += wheel_include_dirs()
    cands.append("/usr/include")
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
