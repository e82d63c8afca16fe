"""Build pycudadrv's Cython extensions against the CUDA driver header (cuda.h).

Nothing links against libcuda (nor libdl: the driver is opened at run time
through ctypes, so the extensions need no glibc newer than 2.17). The header
is found by ``pycudadrv/_paths.py`` (loaded here by path, before anything is
built): $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, then the
``nvidia-cuda-runtime`` wheel (a build requirement, so a machine with no CUDA
toolkit builds too).
"""
import glob
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
    import sysconfig

    from Cython.Build import cythonize
    from setuptools import Extension, setup
    from setuptools.command.build_ext import build_ext

    cuda_inc = find_cuda_include()
    print(f"pycudadrv: building against {os.path.join(cuda_inc, 'cuda.h')}", file=sys.stderr)

    # An extension already built in place (by an earlier `pip install -e` or `setup.py build_ext
    # --inplace`, for this interpreter: its ABI tag is in the file name) that is newer than every input of
    # the build (the .pyx/.pxd/.pxi sources, include/, cuda.h, this file) is taken as it is instead of
    # being made again: the README's second install reuses the first's build. (Inside pip's isolated
    # build environment cythonize would remake every .c: its fresh Cython's own .pxd files are newer.)
    inputs = [f for pat in ("pycudadrv/*.pyx", "pycudadrv/*.pxd", "pycudadrv/*.pxi", "include/**/*.h")
              for f in glob.glob(os.path.join(HERE, pat), recursive=True)]
    newest = max(os.path.getmtime(f) for f in inputs + [os.path.join(cuda_inc, "cuda.h"), os.path.abspath(__file__)])
    suffix = sysconfig.get_config_var("EXT_SUFFIX")

    def built(m):
        """The in-place extension of module ``m`` when it can be reused, else None."""
        so = os.path.join(HERE, "pycudadrv", m + suffix)
        return so if os.path.exists(so) and os.path.getmtime(so) >= newest else None

    def extension(m, sources):
        return Extension(
            f"pycudadrv.{m}",
            sources,
            include_dirs=[os.path.join(HERE, "include"), cuda_inc],
            extra_compile_args=["-O3", "-g0", "-Wno-unused-function"] + (["-pthread"] if m in THREADED else []),
            extra_link_args=["-pthread"] if m in THREADED else [],
        )

    modules = [m for m in MODULES if os.path.exists(os.path.join(HERE, "pycudadrv", f"{m}.pyx"))]
    reused = {m: so for m in modules if (so := built(m)) is not None}
    exts = cythonize(
        [extension(m, [f"pycudadrv/{m}.pyx"]) for m in modules if m not in reused],
        nthreads=os.cpu_count() or 1,      # the .pyx -> .c step in parallel too, as the C compiles are
        language_level=3,
        include_path=[HERE],
        compiler_directives={"embedsignature": True, "binding": True},
    ) if len(reused) < len(modules) else []
    for m, so in reused.items():
        ext = extension(m, [so])
        ext.built_in_place = so
        exts.append(ext)

    class build_ext_reusing(build_ext):
        """build_ext that copies a reused in-place extension (``ext.built_in_place``) into the build."""

        def build_extension(self, ext):
            so = getattr(ext, "built_in_place", None)
            if so is None:
                return super().build_extension(ext)
            target = self.get_ext_fullpath(ext.name)
            if os.path.abspath(so) != os.path.abspath(target):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                self.copy_file(so, target)
            return None

    setup(
        cmdclass={"build_ext": build_ext_reusing},
        options={"build_ext": {"parallel": os.cpu_count() or 1}},
        ext_modules=exts,
    )
