"""``mypy --strict`` accepts tests/typing/user_script.py, a user's script over the public API.

The package is taken as a user gets it (``--follow-imports=silent``: errors inside pycudadrv are
not the user's), so what fails here is what a typed user would see: an unannotated public function
(``no-untyped-call``), a name the package does not export, a wrong type in a stub. Skipped where
mypy is not installed (``.ci/run`` installs it and runs the same check on the installed wheel).
"""
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def test_the_typed_user_script_passes_mypy_strict():
    pytest.importorskip("mypy")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", "/dev/null",
         "--no-error-summary", str(HERE / "user_script.py")],
        capture_output=True, text=True, cwd=HERE.parent.parent)
    assert out.returncode == 0, f"mypy --strict found errors:\n{out.stdout}{out.stderr}"


def test_mypy_finds_pycudadrv_from_outside_the_checkout(tmp_path):
    """A user's script elsewhere on the disk, after the README's install (or a wheel's): mypy resolves
    ``import pycudadrv`` to its stubs, not to Any (an editable install through setuptools' import hook
    is invisible to mypy; the README installs in ``editable_mode=compat``)."""
    pytest.importorskip("mypy")
    script = tmp_path / "elsewhere.py"
    script.write_text("import pycudadrv as cd\n\n\ndef make() -> cd.Buffer:\n    return cd.Buffer.zeros(4)\n\n\n"
                      "reveal_type(cd.Buffer.zeros(4))\n")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", "/dev/null",
         "--no-error-summary", str(script)],
        capture_output=True, text=True, cwd=tmp_path)
    assert "pycudadrv._memory.Buffer" in out.stdout, (
        "mypy does not see pycudadrv from outside the checkout (an editable install made with an import hook? "
        f"install it as the README says, with --config-settings editable_mode=compat):\n{out.stdout}{out.stderr}")
    assert out.returncode in (0, 1) and "error" not in out.stdout, out.stdout
