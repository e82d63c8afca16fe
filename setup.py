"""Build pycudadrv's Cython extensions against the CUDA driver header (cuda.h).

Nothing links against libcuda: the driver is opened at run time. The header is
found, in order, from $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, then the
``nvidia-cuda-runtime`` wheel (a build requirement, so a machine with no CUDA
toolkit builds too).
"""
import glob
import os
import sys


def _has_header(inc):
    return bool(inc) and os.path.isfile(os.path.join(inc, "cuda.h")) and os.path.isfile(
        os.path.join(inc, "cudaTypedefs.h"))


def find_cuda_include():
    """Return the directory holding cuda.h, or raise RuntimeError saying where we looked."""
    tried = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            inc = os.path.join(root, "include")
            tried.append(f"${var}/include = {inc}")
            if _has_header(inc):
                return inc
    tried.append("/usr/local/cuda/include")
    if _has_header("/usr/local/cuda/include"):
        return "/usr/local/cuda/include"
    try:
        import nvidia  # namespace package of the nvidia-* wheels
        for base in list(nvidia.__path__):
            for inc in sorted(glob.glob(os.path.join(base, "*", "include"))):
                tried.append(inc)
                if _has_header(inc):
                    return inc
    except ImportError:
        tried.append("the nvidia-cuda-runtime wheel (not installed)")
    raise RuntimeError("pycudadrv: cuda.h not found; looked in: " + "; ".join(tried)
                       + ". Set CUDA_HOME or `pip install nvidia-cuda-runtime`.")


if __name__ == "__main__":
    from Cython.Build import cythonize
    from setuptools import Extension, setup

    here = os.path.dirname(os.path.abspath(__file__))
    cuda_inc = find_cuda_include()
    print(f"pycudadrv: building against {os.path.join(cuda_inc, 'cuda.h')}", file=sys.stderr)
    modules = ["_driver", "_device", "_stream", "_memory", "_launch", "_module", "_graph"]
    exts = [
        Extension(
            f"pycudadrv.{m}",
            [f"src/pycudadrv/{m}.pyx"],
            include_dirs=[os.path.join(here, "include"), cuda_inc],
            libraries=["dl"],
            extra_compile_args=["-O3", "-g0", "-Wno-unused-function"],
        )
        for m in modules
    ]
    setup(
        options={"build_ext": {"parallel": os.cpu_count() or 1}},
        ext_modules=cythonize(
            exts,
            language_level=3,
            include_path=["src"],
            compiler_directives={"embedsignature": True, "binding": False},
        ),
    )
