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
