"""``mypy --strict`` rejects each mistake in tests/typing/negative.py with the error code written at the
end of its line (``# expect: code``), and reports nothing else.

A lost annotation shows up here as a missing error: ``ObjectCode.load() -> Any`` let every call on the
Module and its Functions through. The package is taken as a user gets it (``--follow-imports=silent``).
Skipped where mypy is not installed (``.ci/run`` installs it; this test runs there against the
installed wheel too).
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "negative.py"
EXPECT = re.compile(r"#\s*expect:\s*([\w-]+(?:\s*,\s*[\w-]+)*)\s*$")
ERROR = re.compile(r"^[^:\n]+:(\d+): error: .*\[([\w-]+)\]$", re.M)


def expected_errors() -> set[tuple[int, str]]:
    """(line, error code) for every ``# expect:`` marker of the sample."""
    out = set()
    for n, line in enumerate(SAMPLE.read_text().splitlines(), 1):
        m = EXPECT.search(line)
        if m:
            out |= {(n, code.strip()) for code in m.group(1).split(",")}
    return out


def test_the_sample_marks_the_mistakes_a_newcomer_makes():
    codes = {code for _, code in expected_errors()}
    assert len(expected_errors()) >= 20
    assert {"arg-type", "call-arg", "attr-defined", "assignment", "call-overload"} <= codes


def test_mypy_strict_reports_exactly_the_expected_errors_of_the_negative_sample():
    pytest.importorskip("mypy", reason="mypy is not installed (the `test` extra brings it)")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", "/dev/null",
         "--no-error-summary", "--show-error-codes", "--hide-error-context", str(SAMPLE)],
        capture_output=True, text=True, cwd=HERE.parent.parent)
    assert not out.stderr.strip(), f"mypy failed to run:\n{out.stderr}"
    got = {(int(line), code) for line, code in ERROR.findall(out.stdout)}
    want = expected_errors()
    lines = SAMPLE.read_text().splitlines()
    missing = [f"negative.py:{n}: [{code}] not reported: {lines[n - 1].strip()}" for n, code in sorted(want - got)]
    extra = [f"negative.py:{n}: [{code}] reported but not expected: {lines[n - 1].strip()}"
             for n, code in sorted(got - want)]
    assert not missing and not extra, "\n".join(missing + extra) + f"\n\nmypy's output:\n{out.stdout}"
