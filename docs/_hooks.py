"""MkDocs hooks of the pycudadrv site (``hooks:`` in mkdocs.yml).

* ``on_config``: nav entries whose page does not exist yet are dropped (with an
  INFO line), so mkdocs.yml can list the guides other work adds (compile.md,
  graphs.md, ...) before they land, and ``mkdocs build --strict`` still passes.
  Every benchmark (``bench/NAME.py``) gets an entry under "Benchmarks".
* ``on_files``: ``bench/results/*.png`` are published under the same path, so a
  benchmark page shows its latest plot without a copy in ``docs/``; a benchmark
  without a written page (``docs/bench-NAME.md``) gets one made from its
  docstring.
* ``on_page_markdown``: in ``bench-NAME.md``, the line ``<!-- bench-results -->``
  becomes the latest results of ``bench/results/NAME.json``: when and where it
  ran, whether the targets were met, its ``summary`` (and ``targets``) as tables,
  then the plot.
"""
from __future__ import annotations

import ast
import json
import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.pycudadrv")
PLACEHOLDER = "<!-- bench-results -->"


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def _benchmarks(root: Path) -> list[str]:
    """Names of the benchmark scripts, ``bench/NAME.py`` (helpers start with ``_``)."""
    return sorted(p.stem for p in (root / "bench").glob("*.py") if not p.name.startswith("_"))


def _exists(page: str, docs: Path, root: Path) -> bool:
    if (docs / page).is_file():
        return True
    m = re.fullmatch(r"bench-(\w+)\.md", page)
    return bool(m) and (root / "bench" / f"{m.group(1)}.py").is_file()


def _pages(entry: Any) -> set[str]:
    if isinstance(entry, str):
        return {entry}
    if isinstance(entry, dict):
        return set().union(*(_pages(v) for v in entry.values())) if entry else set()
    if isinstance(entry, list):
        return set().union(*(_pages(e) for e in entry)) if entry else set()
    return set()


def _keep(entry: Any, docs: Path, root: Path) -> Any:
    """The nav entry without pages that do not exist; None when nothing is left."""
    if isinstance(entry, str):
        if entry.endswith(".md") and "://" not in entry and not _exists(entry, docs, root):
            log.info("nav: %s does not exist yet, left out", entry)
            return None
        return entry
    if isinstance(entry, dict):
        out = {}
        for title, value in entry.items():
            kept = _keep(value, docs, root)
            if kept not in (None, []):
                out[title] = kept
        return out or None
    if isinstance(entry, list):
        return [k for k in (_keep(e, docs, root) for e in entry) if k is not None]
    return entry


def on_config(config: Any) -> Any:
    nav = config.get("nav")
    if nav:
        root = _root(config)
        listed = _pages(nav)
        section = next((e for e in nav if isinstance(e, dict) and "Benchmarks" in e), None)
        if section is None:
            section = {"Benchmarks": []}
            nav.append(section)
        for name in _benchmarks(root):
            if f"bench-{name}.md" not in listed:
                section["Benchmarks"].append({name.replace("_", " ").capitalize(): f"bench-{name}.md"})
        config["nav"] = _keep(nav, Path(config["docs_dir"]), root)
    return config


def _docstring_markdown(script: Path) -> str:
    """The benchmark's docstring as Markdown: underlined headings become headings,
    ``literal`` becomes `literal`, brackets outside code are escaped."""
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    lines = doc.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if lines[i].strip() and re.fullmatch(r"[-=]{3,}", nxt.strip()):
            out += [f"## {lines[i].strip()}", ""]
            i += 2
            continue
        line = re.sub(r"``(.+?)``", r"`\1`", lines[i])
        # outside code spans, brackets are text (``kernel[grid](...)`` in bold is no link)
        parts = re.split(r"(`[^`]*`)", line)
        out.append("".join(p if p.startswith("`") else p.replace("[", "\\[").replace("]", "\\]") for p in parts))
        i += 1
    return "\n".join(out).strip()


def on_files(files: Any, config: Any) -> Any:
    root = _root(config)
    for png in sorted((root / "bench" / "results").glob("*.png")):
        files.append(File.generated(config, f"bench/results/{png.name}", abs_src_path=str(png)))
    docs = Path(config["docs_dir"])
    for name in _benchmarks(root):
        if not (docs / f"bench-{name}.md").is_file():
            text = (f"# Benchmark: {name.replace('_', ' ')}\n\n{_docstring_markdown(root / 'bench' / f'{name}.py')}\n\n"
                    f"```sh\npython bench/{name}.py\n```\n\n## Latest results\n\n{PLACEHOLDER}\n")
            files.append(File.generated(config, f"bench-{name}.md", content=text))
    return files


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        text = "yes" if v else "no"
    elif v is None:
        text = "n/a"
    elif isinstance(v, float):
        text = f"{v:.4g}"
    elif isinstance(v, dict):
        text = ", ".join(f"{k}: {_cell(x)}" for k, x in v.items())
    else:
        text = str(v)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(title: str, rows: dict, head: tuple[str, str]) -> list[str]:
    out = [f"**{title}**", "", f"| {head[0]} | {head[1]} |", "| --- | --- |"]
    out += [f"| `{k}` | {_cell(v)} |" for k, v in rows.items()]
    return out + [""]


def render_results(name: str, root: Path) -> str:
    """Markdown for the latest results of benchmark ``name``."""
    js, png = root / "bench" / "results" / f"{name}.json", root / "bench" / "results" / f"{name}.png"
    lines = []
    if not js.is_file():
        lines += [f"No results yet: run `python bench/{name}.py` on a GPU machine.", ""]
    else:
        d = json.loads(js.read_text())
        dev = d.get("device") or {}
        where = f"{dev.get('name', '?')} ({dev.get('arch', '?')})" if isinstance(dev, dict) else str(dev)
        ran = (f"Latest run (`bench/results/{name}.json`): {d.get('timestamp', '?')} on {where}, driver CUDA "
               f"{d.get('driver_version', '?')}, pycudadrv {d.get('pycudadrv_version', '?')}")
        if d.get("nvrtc_version"):
            ran += f", NVRTC {d['nvrtc_version']}"
        lines += [ran + ".", ""]
        if "passed" in d:
            lines += [f"Targets met: **{_cell(bool(d['passed']))}**.", ""]
        if isinstance(d.get("summary"), dict):
            lines += _table("Summary", d["summary"], ("key", "value"))
        if isinstance(d.get("targets"), dict):
            lines += _table("Targets", d["targets"], ("target", "value"))
        if isinstance(d.get("target_results"), dict):
            lines += _table("Target results", d["target_results"], ("target", "met"))
    if png.is_file():
        lines += [f"![{name}: latest plot](bench/results/{name}.png)", ""]
    else:
        lines += ["No plot from the latest run.", ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    if PLACEHOLDER in markdown and src.startswith("bench-") and src.endswith(".md"):
        markdown = markdown.replace(PLACEHOLDER, render_results(src[len("bench-"):-len(".md")], _root(config)))
    return markdown
