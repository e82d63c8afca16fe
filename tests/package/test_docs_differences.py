"""docs/differences.md: the one table of seed behaviours pycudadrv does in another way on purpose.
It is a page of the site (in mkdocs.yml's nav, linked from the overview), and every row names the
seed (khal, zyx or cuda-async), what the seed does, what pycudadrv does and why. CPU only; reads the
checkout's docs."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "differences.md"
SEEDS = ("khal", "zyx", "cuda-async")
HEADER = ["seed", "the seed", "pycudadrv", "why"]

needs_docs = pytest.mark.skipif(not (PAGE.parent.is_dir() and (ROOT / "mkdocs.yml").is_file()),
                                reason="the checkout's docs/ and mkdocs.yml are not beside these tests")


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_rows(text):
    """The rows of the page's table (after its header and separator), as lists of cells. A cell may
    hold `|` only inside backticks, which the page does not need, so a plain split is exact."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and _cells(line) == HEADER)
    assert re.fullmatch(r"\|(\s*-+\s*\|)+", lines[start + 1].replace(" ", "")), "no separator under the header"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    return rows


@needs_docs
def test_the_page_exists_and_is_in_the_nav_and_the_overview():
    assert PAGE.is_file()
    nav = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^\s+- [^:\n]+: differences\.md\s*$", nav, re.M), "differences.md is not in mkdocs.yml's nav"
    assert "](differences.md)" in (ROOT / "docs" / "index.md").read_text()


@needs_docs
def test_every_row_names_a_seed_what_each_side_does_and_a_reason():
    rows = table_rows(PAGE.read_text())
    assert len(rows) >= 20
    bad = [r for r in rows if len(r) != 4 or r[0] not in SEEDS or not all(r)]
    assert bad == [], f"rows without 4 filled cells or a known seed: {bad}"
    short = [r[1][:50] for r in rows if len(r[3].split()) < 8]
    assert short == [], f"rows whose reason is too short to be one: {short}"
    assert {r[0] for r in rows} == set(SEEDS), "every seed has at least one row"


@needs_docs
def test_rows_are_grouped_by_seed_and_not_repeated():
    rows = table_rows(PAGE.read_text())
    order = [r[0] for r in rows]
    assert order == sorted(order, key=SEEDS.index), "rows of one seed together, in the order khal, zyx, cuda-async"
    assert len({r[1] for r in rows}) == len(rows), "a seed behaviour listed twice"


def test_the_row_reader_reads_a_table_and_rejects_a_missing_separator():
    text = "x\n\n| seed | the seed | pycudadrv | why |\n|---|---|---|---|\n| zyx | a | b | c d |\n\nafter\n"
    assert table_rows(text) == [["zyx", "a", "b", "c d"]]
    with pytest.raises(AssertionError):
        table_rows(text.replace("|---|---|---|---|\n", ""))
