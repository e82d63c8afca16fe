"""Check the stubs (pycudadrv/*.pyi) of the compiled modules against the modules with mypy.stubtest.

    python tests/typing/stubtest_check.py

It checks the pycudadrv that ``import pycudadrv`` finds (the in-place build from a checkout, the
installed wheel from elsewhere: .ci/run runs it so) and exits nonzero, saying why, when:

* a compiled module has no ``.pyi`` beside it: stubtest silently skips a private module (``_x``)
  it finds no stub for, so without this check a new extension would go unchecked;
* mypy, run from the same place, does not resolve every compiled module to that stub;
* stubtest reports a difference not in tests/typing/stubtest_allowlist.txt, or an allowlist entry
  that no longer matches anything.

Options for mypy: tests/typing/stubtest.ini. tests/typing/test_stubtest.py runs this under pytest.
"""
from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def compiled_modules(pkg_dir: Path) -> list[str]:
    """The extension modules in ``pkg_dir``, as ``pycudadrv._name``, sorted."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)   # ".cpython-311-x86_64-linux-gnu.so", ".so", ...
    return sorted({f"pycudadrv.{f.name.split('.')[0]}" for f in pkg_dir.iterdir() if f.name.endswith(suffixes)})


def missing_stubs(pkg_dir: Path, modules: list[str]) -> list[str]:
    """Compiled modules (and, in a checkout, .pyx sources) with no ``.pyi`` beside them."""
    names = {m.rsplit(".", 1)[1] for m in modules} | {f.stem for f in pkg_dir.glob("*.pyx")}
    return sorted(n for n in names if not (pkg_dir / f"{n}.pyi").is_file())


def main() -> int:
    import pycudadrv

    pkg_dir = Path(pycudadrv.__file__).resolve().parent
    installed = {Path(sysconfig.get_path(k)).resolve() for k in ("purelib", "platlib")}
    with tempfile.TemporaryDirectory() as empty:
        # Where mypy resolves `pycudadrv` to this very package: a checkout's root, or for an installed
        # one an empty directory (mypy finds it in site-packages; run from there it takes every
        # installed module for a user's own file and stops).
        return check(pkg_dir, Path(empty) if pkg_dir.parent in installed else pkg_dir.parent)


def check(pkg_dir: Path, where: Path) -> int:
    """Run the checks on the package in ``pkg_dir``, with mypy and stubtest run from ``where``."""
    modules = compiled_modules(pkg_dir)
    print(f"stubtest: {len(modules)} compiled modules of {pkg_dir}")
    if not modules:
        print(f"no compiled modules in {pkg_dir}: build the package first", file=sys.stderr)
        return 1
    missing = missing_stubs(pkg_dir, modules)
    if missing:
        print(f"compiled modules without a stub (stubtest would skip them silently): "
              f"{', '.join(n + '.pyi' for n in missing)}", file=sys.stderr)
        return 1
    # mypy sees each module through its stub (a module it cannot resolve is reported, not skipped).
    probe = "\n".join(f"import {m}" for m in modules)
    found = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--cache-dir", os.devnull,
                            "--no-error-summary", "-c", probe], cwd=where, capture_output=True, text=True)
    if found.returncode != 0:
        print(f"mypy does not resolve the compiled modules to their stubs:\n{found.stdout}{found.stderr}",
              file=sys.stderr)
        return 1
    out = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--mypy-config-file", str(HERE / "stubtest.ini"),
                          "--allowlist", str(HERE / "stubtest_allowlist.txt"), *modules],
                         cwd=where, capture_output=True, text=True)
    print(out.stdout + out.stderr, end="")
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())
