"""Build pycudadrv's Cython extensions against the CUDA driver header (cuda.h).

Nothing links against libcuda (nor libdl: the driver is opened at run time
through ctypes, so the extensions need no glibc newer than 2.17). The header
is found by ``pycudadrv/_paths.py`` (loaded here by path, before anything is
built): $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, then the
``nvidia-cuda-runtime`` wheel (a build requirement, so a machine with no CUDA
toolkit builds too).
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

#: The compiled modules, in layering order (tests/package/test_layout.py checks the imports).
MODULES = ["_driver", "_device", "_stream", "_event", "_channel", "_waiter", "_ordering", "_host", "_alloc", "_dlpack", "_memory", "_interop", "_marshal", "_kernel", "_launch", "_prepared", "_tritonlaunch", "_module",
           "_graph", "_sequence", "_loops", "_timing", "_builder", "_lanes", "_tracker", "_queue", "_cudnn"]

#: Modules that start native threads (pthreads; libpthread is linked, as glibc < 2.34 needs).
THREADED = {"_channel", "_waiter"}


def _paths():
    spec = importlib.util.spec_from_file_location("_pycudadrv_paths", os.path.join(HERE, "pycudadrv", "_paths.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def find_cuda_include():
    """The directory holding cuda.h and cudaTypedefs.h; RuntimeError saying where it looked."""
    try:
        return _paths().find_cuda_include()
    except FileNotFoundError as e:
        raise RuntimeError(f"pycudadrv: {e}") from None


if __name__ == "__main__":
    from Cython.Build import cythonize
    from setuptools import Extension, setup

    cuda_inc = find_cuda_include()
    print(f"pycudadrv: building against {os.path.join(cuda_inc, 'cuda.h')}", file=sys.stderr)
    exts = [
        Extension(
            f"pycudadrv.{m}",
            [f"pycudadrv/{m}.pyx"],
            include_dirs=[os.path.join(HERE, "include"), cuda_inc],
            extra_compile_args=["-O3", "-g0", "-Wno-unused-function"] + (["-pthread"] if m in THREADED else []),
            extra_link_args=["-pthread"] if m in THREADED else [],
        )
        for m in MODULES if os.path.exists(os.path.join(HERE, "pycudadrv", f"{m}.pyx"))
    ]
    setup(
        options={"build_ext": {"parallel": os.cpu_count() or 1}},
        ext_modules=cythonize(
            exts,
            language_level=3,
            include_path=[HERE],
            compiler_directives={"embedsignature": True, "binding": True},
        ),
    )
