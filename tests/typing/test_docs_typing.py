"""The ```python blocks of README.md and docs/tutorial.md pass ``mypy --strict``, as a reader pasting
them into a typed project gets them.

Each page's blocks are joined in order into one module (what tests/package/test_docs.py runs) and checked
with the package taken as a user gets it (``--follow-imports=silent``). The one place a type error is
expected is the last statement of a ``# raises:`` block, which demonstrates a mistake
(``cd.Device(1.5)``); a module a ``# requires:`` marker names (torch) is taken as untyped. Any other
error fails, naming the page line. Skipped where mypy is not installed, or where the pages are not
beside the tests.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
_spec = importlib.util.spec_from_file_location("_docs_blocks", HERE.parent / "package" / "test_docs.py")
_docs = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_docs)   # the same block parser (fences, markers) that runs the pages

ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<text>.*)$", re.M)


def typed_module(page: str) -> tuple[str, dict[int, int], set[int], set[str]]:
    """The page's blocks as one module: its text, {module line: page line}, the module lines where a
    type error is a demonstrated mistake, and the modules ``# requires:`` names."""
    lines: list[str] = []
    page_line: dict[int, int] = {}
    expected: set[int] = set()
    requires: set[str] = set()
    for b in _docs.blocks(page):
        first = len(lines) + 1              # module line of the block's first line
        src = b.source.splitlines()
        for i, text in enumerate(src):
            lines.append(text)
            page_line[first + i] = b.line + 1 + i
        if b.raises is not None:
            last = ast.parse(b.source).body[-1]
            expected.update(range(first + last.lineno - 1, first + (last.end_lineno or last.lineno)))
        requires.update(b.requires)
    return "\n".join(lines) + "\n", page_line, expected, requires


@pytest.mark.parametrize("page", _docs.PAGES)
def test_the_pages_python_blocks_pass_mypy_strict(page, tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (the `test` extra brings it)")
    _docs._page_or_skip(page)
    text, page_line, expected, requires = typed_module(page)
    script = tmp_path / (Path(page).stem + "_blocks.py")
    script.write_text(text)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n" + "".join(f"[mypy-{m},{m}.*]\nfollow_imports = skip\nignore_missing_imports = True\n"
                                            for m in sorted(requires)))
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir",
                          "/dev/null", "--config-file", str(config), "--no-error-summary", "--show-error-codes",
                          str(script)], capture_output=True, text=True, cwd=ROOT)
    unexpected = [f"{page}:{page_line[int(m['line'])]}: {m['text']}" for m in ERROR.finditer(out.stdout)
                  if int(m["line"]) not in expected]
    assert not unexpected, "mypy --strict errors outside the demonstrated mistakes:\n" + "\n".join(unexpected)
    assert out.returncode in (0, 1) and not out.stderr.strip(), f"mypy failed to run:\n{out.stdout}{out.stderr}"
