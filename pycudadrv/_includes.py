"""The headers compile() gives NVRTC: where the CUDA device headers are, and a
clear error when a header a kernel ``#include``s is on none of those paths.

Before NVRTC runs, each ``#include`` of a CUDA header (``cuda_fp16.h``,
``cuda_bf16.h``, ``cooperative_groups.h``, ``mma.h``, ``cuda/...``,
``cub/...``, ...) outside any ``#if`` of the kernel source is looked up in the
in-memory headers and the ``-I`` directories, in NVRTC's order; one that is
found nowhere raises :class:`pycudadrv.HeaderNotFoundError` naming the
header, its source line and the directories searched. Any other header NVRTC
cannot open (its ``cannot open source file`` error) is reported the same way
after the compile. Pure Python.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from pycudadrv._errors import HeaderNotFoundError
from pycudadrv._paths import cuda_include_candidates

__all__ = ["device_include_dirs", "option_dirs", "check_source", "check_log", "CUDA_HEADER"]

#: The headers pycudadrv's include path is there to supply (the CUDA toolkit's device headers and CCCL).
CUDA_HEADER = re.compile(r"(cuda_\w+\.h|cuda\.h|cooperative_groups(\.h|/.*)|mma\.h|sm_\w+\.h|crt/.*|"
                         r"(vector|device)_\w+\.h|math_constants\.h|curand\w*\.h|(cuda|cub|thrust|nv)/.*)\Z")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*([<\"])([^>\"\n]+)[>\"]", re.M)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_OPEN = re.compile(r"^[ \t]*#[ \t]*if(n?def)?\b", re.M)
_CLOSE = re.compile(r"^[ \t]*#[ \t]*endif\b", re.M)
_LOG = re.compile(r"^(.*?)\((\d+)\): catastrophic error: (?:could not|cannot) open source file \"([^\"]+)\"", re.M)
_FIX = ("The CUDA device headers come with `pip install nvidia-cuda-runtime` (and CCCL's with "
        "`pip install nvidia-cuda-cccl`) or a CUDA toolkit under CUDA_HOME; or pass the directory as "
        "include_paths=[...], or the text as headers={...}.")


def device_include_dirs(nvrtc_path: str | None) -> list[str]:
    """The directories with the CUDA device headers and CCCL (see
    ``pycudadrv.nvrtc.default_include_dirs``), the ones beside the NVRTC
    library at ``nvrtc_path`` first."""
    beside = []
    if nvrtc_path and os.path.isabs(nvrtc_path):   # the headers that came with this NVRTC first
        beside.append(os.path.join(os.path.dirname(os.path.dirname(nvrtc_path)), "include"))
    cands = cuda_include_candidates(beside)

    def has(c: str, rel: str) -> bool:
        return os.path.isfile(os.path.join(c, rel))

    def cccl_dir(c: str) -> str | None:
        # CUDA 13 keeps CCCL (cuda/std, nv/target, cub, thrust) under include/cccl; older ones in include/
        for d in (os.path.join(c, "cccl"), c):
            if has(d, os.path.join("cuda", "std", "type_traits")):
                return d
        return None

    device = [c for c in cands if has(c, "cuda_fp16.h")]
    for c in device:
        cc = cccl_dir(c)
        if cc is not None:
            return [c] if cc == c else [c, cc]
    # An incomplete wheel set (no nvidia-cuda-cccl): device headers from one place, CCCL from another.
    other = [d for d in (cccl_dir(c) for c in cands) if d is not None]
    return device[:1] + other[:1]


def option_dirs(options: Sequence[str]) -> list[str]:
    """The ``-I`` directories of NVRTC ``options`` (``-Idir``, ``-I dir``,
    ``--include-path=dir``, ``--include-path dir``), in order."""
    out = []
    it = iter(options)
    for o in it:
        if o in ("-I", "--include-path"):
            out.append(next(it, ""))
        elif o.startswith("--include-path="):
            out.append(o.split("=", 1)[1])
        elif o.startswith("-I"):
            out.append(o[2:])
    return [d for d in out if d]


def _found(header: str, quoted: bool, name: str, headers: Mapping[str, str], dirs: Sequence[str]) -> bool:
    if header in headers:
        return True
    here = [os.path.dirname(name) or os.curdir] if quoted else []
    return any(os.path.isfile(os.path.join(d, header)) for d in [*here, *dirs])


def _error(header: str, where: str, text: str | None, dirs: Sequence[str], log: str, options: Sequence[str],
           version: tuple[int, int] | None, name: str, line: int) -> HeaderNotFoundError:
    searched = "; ".join(dirs) if dirs else "none: no directory with the CUDA headers was found"
    shown = f"\n  {line} | {text.strip()}" if text is not None else ""
    return HeaderNotFoundError(  # type: ignore[no-untyped-call,unused-ignore]
        f"compile: {where} includes {header!r}, which is in none of the include directories pycudadrv gives "
        f"NVRTC (searched, in order: {searched}). {_FIX}{shown}",
        header=header, line=line, searched=dirs, log=log, options=options, nvrtc_version=version, name=name)


def check_source(source: str, name: str, headers: Mapping[str, str], options: Sequence[str],
                 version: tuple[int, int] | None) -> None:
    """Raise HeaderNotFoundError for the first unconditional ``#include`` of
    a CUDA header (:data:`CUDA_HEADER`) found in neither ``headers`` nor the
    ``-I`` directories of ``options``; nothing else is looked at."""
    dirs = option_dirs(options)
    text = _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), source)
    lines = source.splitlines()
    depth, pos = 0, 0
    for m in _INCLUDE.finditer(text):
        chunk = text[pos:m.start()]
        depth += len(_OPEN.findall(chunk)) - len(_CLOSE.findall(chunk))
        pos = m.start()
        header = m.group(2).strip()
        if depth > 0 or not CUDA_HEADER.match(header):
            continue
        if not _found(header, m.group(1) == '"', name, headers, dirs):
            line = text.count("\n", 0, m.start()) + 1
            raise _error(header, f"{name} line {line}", lines[line - 1] if line <= len(lines) else None, dirs,
                         "", options, version, name, line)


def check_log(log: str, source: str, name: str, options: Sequence[str], version: tuple[int, int] | None) -> None:
    """Raise HeaderNotFoundError when NVRTC's ``log`` says a header could not
    be opened (the kernel source's line quoted when the include is in it)."""
    m = _LOG.search(log)
    if m is None:
        return
    file, line, header = m.group(1), int(m.group(2)), m.group(3)
    lines = source.splitlines()
    text = lines[line - 1] if file == name and 0 < line <= len(lines) else None
    raise _error(header, f"{file} line {line}", text, option_dirs(options), log, options, version, name, line)
