#!/usr/bin/env python3
"""Run the ``>>>`` examples of a Markdown page and compare (or, with
``--update``, rewrite) the output printed under each.

An example's expected output is the lines after it up to the next ``>>>``, a
blank line or the end of the code block. A value is compared with its
``repr``; an exception with ``<ExceptionClassName>: <message>``, where the
class name shown is the builtin the error also is (TypeError, ValueError,
...), so the page reads as a Python user expects. Needs no GPU.

Usage: ``python tools/doc_examples.py docs/kernel-parameters.md [--update]``;
exits 1 listing the examples whose output differs.
"""
from __future__ import annotations

import sys

BUILTINS = (TypeError, ValueError, IndexError, RuntimeError, MemoryError, BufferError, AttributeError, KeyError)


def shown(exc: BaseException) -> str:
    name = next((b.__name__ for b in BUILTINS if isinstance(exc, b)), type(exc).__name__)
    return f"{name}: {exc}"


def run(path: str, update: bool = False) -> list[str]:
    lines = open(path, encoding="utf-8").read().split("\n")
    ns: dict = {}
    out, bad, i, in_code = [], [], 0, False
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_code = not in_code
        if not (in_code and line.startswith(">>> ")):
            out.append(line)
            i += 1
            continue
        src = [line[4:]]
        out.append(line)
        i += 1
        while i < len(lines) and lines[i].startswith("... "):
            src.append(lines[i][4:])
            out.append(lines[i])
            i += 1
        expected = []
        while i < len(lines) and lines[i] and not lines[i].startswith((">>> ", "```")):
            expected.append(lines[i])
            i += 1
        code = "\n".join(src)
        try:
            try:
                value = eval(compile(code, path, "eval"), ns)
                got = [] if value is None else repr(value).split("\n")
            except SyntaxError:
                exec(compile(code, path, "exec"), ns)
                got = []
        except Exception as e:  # noqa: BLE001 -- the page documents these
            got = [shown(e)]
        if update:
            out.extend(got)
        else:
            out.extend(expected)
            if got != expected:
                bad.append(f"{path}: {code!r}\n  expected: {expected}\n  got:      {got}")
    if update:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(out))
    return bad


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--update"]
    problems = [p for a in args for p in run(a, "--update" in sys.argv)]
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)
