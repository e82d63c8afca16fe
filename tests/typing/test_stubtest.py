"""The stubs (pycudadrv/*.pyi) agree with the compiled modules: tests/typing/stubtest_check.py runs
``mypy.stubtest`` on every extension of the pycudadrv that ``import pycudadrv`` finds (here, the
in-place build; in .ci/run also the installed wheel), with tests/typing/stubtest_allowlist.txt.

So a parameter added to a .pyx method and not to its stub, a property or class left out of a stub, a
stub for a name the module no longer has, or a new extension without a stub fails. Skipped where
mypy is not installed (the ``test`` extra brings it).
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import pycudadrv

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("stubtest_check", HERE / "stubtest_check.py")
stubtest_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stubtest_check)


def test_every_compiled_module_has_a_stub_beside_it():
    pkg_dir = Path(pycudadrv.__file__).resolve().parent
    modules = stubtest_check.compiled_modules(pkg_dir)
    assert "pycudadrv._alloc" in modules and "pycudadrv._launch" in modules
    assert stubtest_check.missing_stubs(pkg_dir, modules) == []


def test_stubtest_finds_no_difference_between_the_stubs_and_the_extensions():
    pytest.importorskip("mypy.stubtest", reason="mypy is not installed (the `test` extra brings it)")
    out = subprocess.run([sys.executable, str(HERE / "stubtest_check.py")], capture_output=True, text=True)
    assert out.returncode == 0, f"stubtest found differences:\n{out.stdout}{out.stderr}"
    assert "Success: no issues found in" in out.stdout
