"""Every ```python block of README.md and docs/tutorial.md runs as written, in order, in one namespace
per page (what a reader pasting them one after the other gets).

Markers, as comment lines inside a block:

* ``# raises: ErrorName`` or ``# raises: ErrorName: text`` -- the block's last statement must raise
  an exception of that class (or one derived from it) whose message contains ``text``; every
  statement before it must not raise.
* ``# requires: module`` -- the block is skipped where ``module`` cannot be imported (names it
  would have defined then count as missing, and a later block needing one is skipped too).

On the GPU machine every block must run (``test_page_runs_on_a_gpu``). Without a GPU
(``test_page_runs_as_far_as_a_cpu_can``) a block that needs CUDA -- it raises
CudaUnavailableError, or uses a name only such a block defines -- is skipped, and every other block
must still do what it says.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pycudadrv

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/tutorial.md"]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
RAISES = re.compile(r"^\s*#\s*raises:\s*(\w+)(?::\s*(.+?))?\s*$", re.M)
REQUIRES = re.compile(r"^\s*#\s*requires:\s*([\w.]+)\s*$", re.M)


@dataclass
class Block:
    page: str
    line: int          # line of the opening fence, 1-based
    source: str
    raises: tuple[str, str | None] | None = None
    requires: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text()
    out = []
    for m in FENCE.finditer(text):
        src = m.group(1)
        b = Block(page, text.count("\n", 0, m.start()) + 1, src)
        r = RAISES.findall(src)
        if len(r) > 1:
            raise AssertionError(f"{b.where}: more than one '# raises:' marker in one block")
        if r:
            b.raises = (r[0][0], r[0][1] or None)
        b.requires = REQUIRES.findall(src)
        out.append(b)
    return out


def _page_or_skip(page: str) -> None:
    if not (ROOT / page).is_file():
        pytest.skip(f"{page} is not beside the tests (run them from a checkout or with the pages copied)")


def exception_class(name: str) -> type[BaseException] | None:
    obj = getattr(pycudadrv, name, None) or getattr(builtins, name, None)
    return obj if isinstance(obj, type) and issubclass(obj, BaseException) else None


def assigned_names(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


class Skip(Exception):
    """This block cannot run here (the reason is the message)."""


def run_statements(b: Block, ns: dict) -> None:
    """Execute ``b`` statement by statement; a '# raises:' block's last statement must raise."""
    tree = ast.parse(b.source, filename=b.where)
    stmts = tree.body
    if b.raises is None:
        exec(compile(tree, b.where, "exec"), ns)
        return
    name, text = b.raises
    cls = exception_class(name)
    if cls is None:
        raise AssertionError(f"{b.where}: '# raises: {name}' names no exception of pycudadrv or builtins")
    if stmts:
        exec(compile(ast.Module(body=stmts[:-1], type_ignores=[]), b.where, "exec"), ns)
    last = ast.Module(body=stmts[-1:], type_ignores=[])
    try:
        exec(compile(last, b.where, "exec"), ns)
    except cls as e:
        if text is not None and text not in str(e):
            raise AssertionError(f"{b.where}: raised {type(e).__name__} as documented, but its message\n  {e}\n"
                                 f"does not contain the documented text\n  {text}") from e
        return
    raise AssertionError(f"{b.where}: the block should raise {name} (its '# raises:' marker) but raised nothing")


def run_page(page: str, *, gpu: bool) -> tuple[list[str], list[str]]:
    """Run every block of ``page`` in order; returns (blocks run, blocks skipped with why)."""
    ns: dict = {"__name__": "__docs__"}
    missing: set[str] = set()      # names that skipped blocks would have defined
    ran, skipped = [], []
    for b in blocks(page):
        try:
            for mod in b.requires:
                try:
                    importlib.import_module(mod)
                except ImportError as e:
                    raise Skip(f"needs {mod} ({e})") from None
            try:
                run_statements(b, ns)
            except NameError as e:
                if e.name in missing:
                    raise Skip(f"uses {e.name!r}, defined by a block skipped earlier") from None
                raise
            except pycudadrv.CudaUnavailableError as e:
                if gpu:
                    raise
                raise Skip(f"needs CUDA ({e})") from None
        except Skip as why:
            missing |= assigned_names(b.source)
            skipped.append(f"{b.where}: {why}")
            continue
        except AssertionError:
            raise
        except Exception as e:
            raise AssertionError(f"{b.where}: the block raised {type(e).__name__}: {e}\n--- block ---\n{b.source}") \
                from e
        ran.append(b.where)
    return ran, skipped


@pytest.mark.parametrize("page", PAGES)
def test_every_block_parses_and_its_markers_are_valid(page):
    _page_or_skip(page)
    found = blocks(page)
    assert found, f"{page} has no ```python block"
    for b in found:
        ast.parse(b.source, filename=b.where)
        if b.raises is not None:
            assert exception_class(b.raises[0]) is not None, f"{b.where}: unknown exception {b.raises[0]}"


def test_the_tutorial_shows_errors_as_raises_blocks():
    _page_or_skip("docs/tutorial.md")
    marked = [b for b in blocks("docs/tutorial.md") if b.raises]
    assert {b.raises[0] for b in marked} >= {"ArgumentTypeError", "ArgumentValueError"}


@pytest.mark.gpu
@pytest.mark.parametrize("page", PAGES)
def test_page_runs_on_a_gpu(page, capsys):
    _page_or_skip(page)
    ran, skipped = run_page(page, gpu=True)   # only '# requires:' blocks (and what needs them) may skip
    assert ran
    print(f"{page}: {len(ran)} blocks ran, {len(skipped)} skipped:\n  " + "\n  ".join(skipped))


@pytest.mark.parametrize("page", PAGES)
def test_page_runs_as_far_as_a_cpu_can(page):
    _page_or_skip(page)
    if pycudadrv.is_available():
        pytest.skip("a GPU is present: test_page_runs_on_a_gpu runs every block")
    ran, skipped = run_page(page, gpu=False)
    print(f"{page}: {len(ran)} blocks ran, {len(skipped)} skipped:\n  " + "\n  ".join(skipped))


# --- the site ---------------------------------------------------------------------------------------

def _setting(path: str, pattern: str) -> str:
    _page_or_skip(path)
    m = re.search(pattern, (ROOT / path).read_text(), re.M)
    assert m is not None, f"{path} has no line matching {pattern!r}"
    return m.group(1)


def test_the_site_url_is_the_documentation_url_of_the_package():
    site_url = _setting("mkdocs.yml", r"^site_url:\s*(\S+)\s*$")
    assert site_url == _setting("pyproject.toml", r'^Documentation\s*=\s*"([^"]+)"\s*$')
    assert site_url.startswith("https://") and site_url.endswith("/")


def test_the_404_page_links_from_the_site_root_so_they_work_at_any_depth(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    root = "/" + _setting("mkdocs.yml", r"^site_url:\s*(\S+)\s*$").split("://", 1)[1].partition("/")[2]
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stderr
    links = re.findall(r'(?:href|src)="([^"#]+)"', (tmp_path / "site" / "404.html").read_text())
    local = [u for u in links if not u.startswith(("http://", "https://", "mailto:", "data:"))]
    assert local and all(u.startswith(root) for u in local), local


def test_the_readme_links_work_on_the_package_index_page():
    """PyPI shows README.md without the repository around it: a relative link (docs/queue.md) leads
    nowhere there. Every link is absolute, and each one into the documentation site names a page
    docs/ has."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links
    relative = [u for u in links if not u.startswith(("https://", "http://", "mailto:", "#"))]
    assert relative == []
    site = "https://pycudadrv.github.io/pycudadrv/"
    for u in links:
        if u.startswith(site):
            page = u[len(site):].split("#", 1)[0].strip("/") or "index"
            assert (ROOT / "docs" / f"{page}.md").is_file(), u
