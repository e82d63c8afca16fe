"""MkDocs hooks of the pycudadrv site (``hooks:`` in mkdocs.yml).

* ``on_config``: nav entries whose page does not exist yet are dropped (with an
  INFO line), so mkdocs.yml can list the guides other work adds (compile.md,
  graphs.md, ...) before they land, and ``mkdocs build --strict`` still passes.
* ``on_files``: ``bench/results/*.png`` are published under the same path, so a
  benchmark page shows its latest plot without a copy in ``docs/``.
* ``on_page_markdown``: in ``bench-NAME.md``, the line ``<!-- bench-results -->``
  becomes the latest results of ``bench/results/NAME.json``: when and where it
  ran, whether the targets were met, its ``summary`` (and ``targets``) as tables,
  then the plot.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.pycudadrv")
PLACEHOLDER = "<!-- bench-results -->"


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def _keep(entry: Any, docs: Path) -> Any:
    """The nav entry without pages that do not exist; None when nothing is left."""
    if isinstance(entry, str):
        if entry.endswith(".md") and "://" not in entry and not (docs / entry).is_file():
            log.info("nav: %s does not exist yet, left out", entry)
            return None
        return entry
    if isinstance(entry, dict):
        out = {}
        for title, value in entry.items():
            kept = _keep(value, docs)
            if kept not in (None, []):
                out[title] = kept
        return out or None
    if isinstance(entry, list):
        return [k for k in (_keep(e, docs) for e in entry) if k is not None]
    return entry


def on_config(config: Any) -> Any:
    if config.get("nav"):
        config["nav"] = _keep(config["nav"], Path(config["docs_dir"]))
    return config


def on_files(files: Any, config: Any) -> Any:
    for png in sorted((_root(config) / "bench" / "results").glob("*.png")):
        files.append(File.generated(config, f"bench/results/{png.name}", abs_src_path=str(png)))
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
