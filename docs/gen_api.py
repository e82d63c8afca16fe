#!/usr/bin/env python3
"""Generate docs/api.md from the docstrings of the built package.

    python -m pip install -e . && python docs/gen_api.py > docs/api.md

(or ``python setup.py -q build_ext --inplace`` for the in-place build). CI
regenerates it and fails when the committed page differs.

Signatures of the compiled (Cython) callables come from the first docstring
line that ``embedsignature`` writes; constructors, properties and attributes
of the compiled classes, which carry no such line, take their types from the
``.pyi`` stubs beside them. Python modules are read with ``inspect``. Nothing
here needs a GPU.
"""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root: the package built in place

import pycudadrv  # noqa: E402

PKG = os.path.dirname(pycudadrv.__file__)

# (title, module, names): every name in pycudadrv.__all__ must land in one section. With names None,
# the section takes the names of the module's own __all__ that are defined there (or are constants),
# in the module's order; a name already placed in an earlier section is not repeated.
SECTIONS = [
    ("Package", "pycudadrv._version", ["__version__"]),
    ("Errors", "pycudadrv._errors", None),
    ("Driver", "pycudadrv._driver", None),
    ("Devices", "pycudadrv._device", None),
    (None, "pycudadrv._capabilities", ["DeviceInfo"]),
    ("Streams and events", "pycudadrv._stream", None),
    (None, "pycudadrv._event", None),
    ("Host memory", "pycudadrv._host", None),
    ("Device memory", "pycudadrv._memory", None),
    (None, "pycudadrv._usage", None),
    ("Interop (foreign arrays and streams)", "pycudadrv._interop", None),
    ("Kernel parameters (marshalling)", "pycudadrv._marshal", None),
    ("Kernels", "pycudadrv._kernel", None),
    ("Launches", "pycudadrv._launch", None),
    (None, "pycudadrv._prepared", None),
    ("Launch builder", "pycudadrv._builder", None),
    ("Modules", "pycudadrv._module", None),
    ("Graphs", "pycudadrv._graph", None),
    ("Launch sequences", "pycudadrv._sequence", None),
    ("Device-side loops", "pycudadrv._loops", None),
    ("Attribute tables", "pycudadrv._attributes", ["DEVICE_ATTRIBUTES", "FUNCTION_ATTRIBUTES"]),
    ("Compilation (pycudadrv.nvrtc)", "pycudadrv.nvrtc", None),
    ("Compile cache", "pycudadrv._compile_cache", ["cache_dir", "cache_size", "clear_cache"]),
    ("Linking and fatbins (pycudadrv.link)", "pycudadrv.link", None),
    ("Triton kernels (pycudadrv.triton)", "pycudadrv.triton", None),
    ("Timing (pycudadrv.timestamps, pycudadrv.bench)", "pycudadrv.timestamps", None),
    (None, "pycudadrv.bench", None),
    ("Self-ordering queue (pycudadrv.queue)", "pycudadrv.queue", None),
    (None, "pycudadrv._lanes", ["Submission"]),
    ("Awaitable launches (pycudadrv.aio)", "pycudadrv.aio", None),
    ("cuDNN (pycudadrv.cudnn)", "pycudadrv.cudnn", None),
    ("MPI (pycudadrv.mpi)", "pycudadrv.mpi", None),
    (None, "pycudadrv._mpi_setup", None),
    ("Profiling and tracing (pycudadrv.profile)", "pycudadrv.profile", None),
    ("NVTX ranges (pycudadrv.nvtx)", "pycudadrv.nvtx", None),
    ("Configuration report (pycudadrv.config)", "pycudadrv.config", None),
    ("Shader-style dispatch (pycudadrv.dispatch)", "pycudadrv.dispatch", None),
]
# Public functions of the compiled modules that pycudadrv/__init__.py does not re-export.
EXTRA = {"pycudadrv.nvrtc": ["default_include_dirs"]}
CONSTANTS = {
    "enabled": "True while NVTX ranges are recorded (`pycudadrv.nvtx.enable()`, `PYCUDADRV_NVTX=1`); "
               "callers read `nvtx.enabled` before building a label, so off costs one attribute read.",
    "DOMAIN": "The NVTX domain of pycudadrv's ranges.",
    "__version__": "The package version (`pycudadrv/_version.py`, also the wheel's metadata).",
    "HEADER_CUDA_VERSION": "CUDA version of the `cuda.h` this build was compiled against (1000*major + 10*minor).",
    "MIN_DRIVER_VERSION": "Oldest driver pycudadrv runs on, as a CUDA version (1000*major + 10*minor).",
    "DEVICE_ATTRIBUTES": "`CU_DEVICE_ATTRIBUTE_*` name -> value, generated from `cuda.h`; "
                         "names accepted by `Device.attribute`.",
    "FUNCTION_ATTRIBUTES": "`CU_FUNC_ATTRIBUTE_*` name -> value, generated from `cuda.h`; "
                           "names accepted by `Function.attribute`.",
}
# Values that depend on the environment the page is generated in: shown as their default.
SHOWN = {"enabled": "False"}
# Dunder members worth listing (others are plumbing).
DUNDERS = {"__call__", "__getitem__", "__len__", "__sub__", "__enter__", "__cuda_array_interface__",
           "__cuda_stream__", "__dlpack__", "__dlpack_device__", "__float__"}


# --- stubs ------------------------------------------------------------------------------

PROTOCOLS = {
    "_SupportsCudaStream": "any object with a `__cuda_stream__()` method returning `(version, handle)`",
    "_SupportsCudaArrayInterface": "any object with a `__cuda_array_interface__` (CuPy, Numba, PyTorch, ...)",
    "_SupportsDLPack": "any object with `__dlpack__` (PyTorch, JAX, CuPy, ...)",
    "_LaunchHook": "an object with `before(fn, stream) -> token` and "
                   "`after(token, fn, stream, grid, block, shared_mem_bytes)`",
}


@functools.cache
def stub_aliases():
    """{name: definition} of the private type aliases and type variables of every stub."""
    aliases = {}
    for f in sorted(os.listdir(PKG)):
        if not f.endswith(".pyi"):
            continue
        for node in ast.parse(open(os.path.join(PKG, f)).read()).body:
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and ast.unparse(node.annotation) == "TypeAlias" and node.target.id.startswith("_")):
                aliases[node.target.id] = ast.unparse(node.value)
            elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                  and ast.unparse(node.value.func) == "TypeVar"):
                bound = [k for k in node.value.keywords if k.arg == "bound"]
                aliases[node.targets[0].id] = ("a type variable bound to " + ast.unparse(bound[0].value)
                                               if bound else "a type variable")
    return aliases


def public_type(t, cls=None):
    """Stub type text for the docs: private names lose their underscore, Self becomes the class."""
    if cls:
        t = re.sub(r"\bSelf\b", cls, t)
    return re.sub(r"\b_([A-Z]\w*)", r"\1", t)


def stub_info(module_name):
    """{class: {member: (kind, text)}} from the module's .pyi, kind in
    'property', 'attribute', 'new', 'method' ('refused' or 'bare' for a
    constructor declared (*args, **kwargs) or without parameters); text is a
    type (for a method, its return type; None when overloaded) or the
    constructor's signature."""
    path = os.path.join(PKG, module_name.rsplit(".", 1)[1] + ".pyi")
    if not os.path.exists(path):
        return {}
    tree = ast.parse(open(path).read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):  # module-level function: its return type under ""
            ret = None if any(ast.unparse(d) == "overload" for d in node.decorator_list) else node.returns
            out.setdefault("", {})[node.name] = ("function", public_type(ast.unparse(ret)) if ret else None)
        if not isinstance(node, ast.ClassDef):
            continue
        members = out.setdefault(node.name, {})

        def text(expr):
            return public_type(ast.unparse(expr), node.name)

        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                members[item.target.id] = ("attribute", text(item.annotation))
            elif isinstance(item, ast.FunctionDef):
                decos = {ast.unparse(d) for d in item.decorator_list}
                if "property" in decos:
                    members[item.name] = ("property", text(item.returns))
                elif item.name in ("__new__", "__init__"):
                    args = item.args
                    args.args = args.args[1:]  # drop cls / self
                    if not args.args and not args.kwonlyargs and args.vararg and args.kwarg:
                        # (*args, **kwargs): the runtime constructor only raises TypeError
                        members["__new__"] = ("refused", None)
                    elif item.name == "__init__" and not (args.args or args.kwonlyargs or args.vararg or args.kwarg):
                        # __init__(self): object's, of a class whose __cinit__ refuses every call (so a
                        # type checker flags any argument); render_class checks that Cls() raises TypeError
                        members["__new__"] = ("bare", f"{node.name}()")
                    else:
                        members["__new__"] = ("new", f"{node.name}({text(args)})")
                elif "overload" in decos or item.name in members:
                    members[item.name] = ("method", None, None)
                else:
                    args = item.args
                    if args.args and args.args[0].arg in ("self", "cls"):
                        args.args = args.args[1:]
                    members[item.name] = ("method", text(item.returns), text(args).replace(", /", ""))
    return out


# --- docstrings -> Markdown -------------------------------------------------------------

ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|exc):`~?([^`]+)`")


def inline(text):
    text = ROLE.sub(lambda m: f"``{m.group(1)}``", text)
    return re.sub(r"``(.+?)``", r"`\1`", text)


def to_markdown(doc):
    """Numpydoc-style docstring -> Markdown: section headings, parameter lists,
    doctest and literal blocks fenced, RST inline markup made Markdown."""
    lines = inspect.cleandoc(doc).splitlines()
    out, i, in_section, bullet_open = [], 0, False, False
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"[-=]{3,}", nxt.strip()) and len(nxt.strip()) >= len(line.strip()):
            out.append(f"**{line.strip()}**")
            out.append("")
            in_section = line.strip() in ("Parameters", "Returns", "Raises", "Warns", "Attributes")
            i += 2
            continue
        if line.lstrip().startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i].strip() if lines[i].lstrip().startswith((">>>", "...")) else lines[i])
                i += 1
            out += ["```python", *block, "```"]
            continue
        if line.rstrip().endswith("::") and i + 1 < len(lines):
            out.append(inline(line.rstrip()[:-1]))
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            indent = min(len(b) - len(b.lstrip()) for b in block if b.strip())
            out += ["", "```c", *[b[indent:] for b in block], "```", ""]
            continue
        if in_section and line.strip():
            if not line.startswith(" "):
                name, _, typ = line.partition(" : ")
                out.append(f"- `{name.strip()}`" + (f" ({inline(typ.strip())})" if typ else ""))
                bullet_open = True
            elif bullet_open:
                out[-1] += ": " + inline(line.strip())
                bullet_open = False
            else:
                out.append("  " + inline(line.strip()))
            i += 1
            continue
        if not line.strip():
            in_section = in_section and bool(nxt.startswith(" ") or (nxt and " : " in nxt))
        out.append(inline(line))
        i += 1
    return "\n".join(out).strip()


def split_signature(obj, name):
    """(signature line, docstring rest) of a compiled or Python callable."""
    doc = inspect.getdoc(obj) or ""
    first, _, rest = doc.partition("\n")
    if re.match(r"^[\w.]*\b" + re.escape(name) + r"\(.*\)(\s*->.*)?\s*$", first):
        return first.strip(), rest.strip()
    m = re.match(r"^\w+\.\w+\((?:self|cls)\b,?\s*(.*)\)(\s*->.*)?\s*$", first)
    if m:                                           # an alias's (pass_ = measure): the original's line, renamed
        return f"{name}({m.group(1)}){m.group(2) or ''}", rest.strip()
    return f"{name}{signature(obj)}", doc


def signature(obj):
    """The signature with annotations as written in the source (``from __future__ import
    annotations`` keeps them as text, the same on every Python version), the stubs' private
    aliases named as the alias table at the end names them; '(...)' if none."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    text = re.sub(r"(: |-> )'([^']*)'", r"\1\2", str(sig))
    text = re.sub(r'(: |-> )"([^"]*)"', r"\1\2", text)
    aliases = stub_aliases()  # a stub's alias (_DeviceLike) as the alias table names it (DeviceLike)
    return re.sub(r"\b_([A-Z]\w*)", lambda m: m.group(1) if m.group(0) in aliases else m.group(0), text)


# --- rendering --------------------------------------------------------------------------

def render_function(obj, name, qual, ret=None):
    sig, rest = split_signature(obj, name)
    if not sig.startswith(qual):
        sig = qual[: -len(name)] + sig if qual.endswith(name) else sig
    if ret and "->" not in sig:
        sig += f" -> {ret}"
    return [f"### `{qual}`", "", "```python", sig, "```", "", to_markdown(rest) if rest else "", ""]


def hidden_bases(cls):
    """The compiled bases of ``cls`` no user names (QueueCore, KernelBase, ...: defined in a private
    module, not exported), nearest first: their members are shown as ``cls``'s own."""
    return [k for k in cls.__mro__[1:]
            if k.__module__.startswith("pycudadrv._") and not hasattr(pycudadrv, k.__name__)]


def members(cls):
    """The members of ``cls`` and of its hidden bases; ``cls``'s own win."""
    out = {}
    for klass in reversed([cls] + hidden_bases(cls)):
        out.update(vars(klass))
    return out


def render_class(cls, stubs):
    qual = f"pycudadrv.{cls.__name__}" if hasattr(pycudadrv, cls.__name__) else f"{cls.__module__}.{cls.__name__}"
    info = dict(stubs.get(cls.__name__, {}))
    for klass in hidden_bases(cls):     # (their stubs' members; never their constructor)
        for key, what in stub_info(klass.__module__).get(klass.__name__, {}).items():
            if key != "__new__":
                info.setdefault(key, what)
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    out = [f"### class `{qual}`" + (f" ({', '.join(bases)})" if bases else ""), ""]
    refused = "__new__" in info and info["__new__"][0] == "refused"
    why = ""
    if "__new__" in info and info["__new__"][0] in ("refused", "bare"):
        try:
            cls()
        except TypeError as e:
            why = f' ("{e}")'
            refused = True
    if refused:
        out += [f"*Not constructed directly: `{cls.__name__}(...)` raises `TypeError`{why}.*", ""]
    elif "__new__" in info:
        out += ["```python", info["__new__"][1], "```", ""]
    elif not issubclass(cls, BaseException) and cls.__init__ is not object.__init__:
        out += ["```python", f"{cls.__name__}{signature(cls)}".removesuffix(" -> None"), "```", ""]
    doc = inspect.cleandoc(cls.__doc__ or "")
    if re.match(r"^" + cls.__name__ + r"\(.*\)$", doc.partition("\n")[0]):
        # embedsignature's constructor line; Cython 3.3 misplaces keyword-only
        # parameters in it, so the stub's constructor (above) is shown instead
        doc = doc.partition("\n")[2].strip()
    if doc:
        out += [to_markdown(doc), ""]
    own = members(cls)
    order = list(info) + [k for k in own if k not in info]
    for key in order:
        if key == "__new__" or key not in own:
            continue
        if key.startswith("_") and key not in DUNDERS:
            continue
        raw = own[key]
        kind = info.get(key, (None, None))[:2]
        if isinstance(raw, property) or kind[0] in ("property", "attribute") or type(raw).__name__ in (
                "getset_descriptor", "member_descriptor"):
            settable = kind[0] == "attribute" or (isinstance(raw, property) and raw.fset is not None)
            typ = kind[1] or (inspect.signature(raw.fget).return_annotation if isinstance(raw, property)
                              and raw.fget else None)
            typ = None if typ is inspect.Signature.empty else typ
            head = f"#### `{cls.__name__}.{key}`" + (f": `{typ}`" if typ else "")
            out += [head, "", "*" + ("attribute" if settable else "read-only property") + "*", ""]
            if getattr(raw, "__doc__", None) and not isinstance(raw, (int, str)):
                d = raw.__doc__
                if type(raw).__name__ == "member_descriptor" or re.fullmatch(r"\w+: \S+", d.strip()):
                    d = ""
                d = re.sub(r"^\s*\w+\.\w+: \S+\n", "", d)     # embedsignature's line of a base's property
                if d:
                    out += [to_markdown(d), ""]
            continue
        func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        if not callable(func):
            continue
        sig, rest = split_signature(getattr(cls, key), key)
        stub = info.get(key, (None, None, None))
        if type(raw).__name__ == "wrapper_descriptor" or sig.endswith("(...)"):
            # a C slot (no signature of its own): the stub's parameters, no generic slot text
            sig = f"{key}({stub[2] or ''})" if stub[0] == "method" else sig
            rest = "" if rest.startswith(("Return ", "Implement ")) else rest
        if not sig.startswith(cls.__name__ + "."):
            sig = f"{cls.__name__}.{re.sub(r'^[A-Za-z_]+[.]', '', sig)}"   # (a base's name: QueueCore.launch)
        sig = sig.replace("(self, /, ", "(").replace("(self, ", "(").replace("(self)", "()")
        if stub[0] == "method" and stub[1] and "->" not in sig:
            sig += f" -> {stub[1]}"
        prefix = "@staticmethod\n" if isinstance(raw, staticmethod) else ""
        out += [f"#### `{cls.__name__}.{key}`", "", "```python", prefix + sig, "```", ""]
        if rest:
            out += [to_markdown(rest), ""]
    return out


def qualify(name, mod, modname):
    """``pycudadrv.<name>`` when the package exports that very object, else ``<module>.<name>``."""
    if name in pycudadrv.__all__ and getattr(pycudadrv, name, None) is getattr(mod, name, None):
        return f"pycudadrv.{name}"
    return f"{modname}.{name}"


def main():
    seen = set()  # qualified names already rendered
    out = ["# API reference", "",
           "Generated by `docs/gen_api.py` from the docstrings of the built package "
           "(signatures from Cython's `embedsignature`; constructor, property and attribute "
           "types from the `.pyi` stubs). Regenerate it after changing a docstring:", "",
           "```sh", "python -m pip install -e . && python docs/gen_api.py > docs/api.md", "```", "",
           "CI regenerates this page and fails when it differs from the committed one.", "",
           "Everything in `pycudadrv.__all__` is importable as `pycudadrv.<name>`; the section "
           "headings name the module each object is defined in.", ""]
    toc = []
    body = []
    for title, modname, names in SECTIONS:
        try:
            mod = importlib.import_module(modname)
        except ImportError:  # a module this checkout does not have (yet)
            continue
        if names is None:
            names = [n for n in getattr(mod, "__all__", ())
                     if qualify(n, mod, modname) not in seen
                     and getattr(getattr(mod, n), "__module__", modname) == modname]
        if title:
            anchor = re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
            toc.append(f"- [{title}](#{anchor})")
            body += [f"## {title}", ""]
            if mod.__doc__:
                body += [to_markdown(mod.__doc__.split("\n\n")[0]), ""]
        names = list(names) + [n for n in EXTRA.get(modname, []) if n not in names]
        stubs = stub_info(modname)
        classes = [n for n in names if inspect.isclass(getattr(mod, n))]
        funcs = [n for n in names if callable(getattr(mod, n)) and n not in classes]
        consts = [n for n in names if n not in classes and n not in funcs]
        for n in consts:
            v = getattr(mod, n)
            shown = f"dict of {len(v)} entries" if isinstance(v, dict) else SHOWN.get(n, repr(v))
            qual = qualify(n, mod, modname)
            body += [f"### `{qual}`", "", f"`{shown}`. {CONSTANTS.get(n, '')}".rstrip(), ""]
            seen.add(qual)
        for n in classes:
            body += render_class(getattr(mod, n), stubs)
            seen.add(qualify(n, mod, modname))
        for n in funcs:
            qual = qualify(n, mod, modname)
            body += render_function(getattr(mod, n), n, qual, stubs.get("", {}).get(n, (None, None))[1])
            seen.add(qual)
    # Submodules in __all__ (bench, profile, ...) are documented by their own sections.
    missing = [n for n in pycudadrv.__all__
               if f"pycudadrv.{n}" not in seen and not inspect.ismodule(getattr(pycudadrv, n))]
    if missing:
        raise SystemExit(f"gen_api.py: names of pycudadrv.__all__ in no section: {missing}")
    glossary = ["## Type names used in this reference", "",
                "Constructor signatures and the types of properties and attributes come from the stubs; "
                "these names are private aliases there (`_Name`), written here without the underscore.", "",
                "| name | meaning |", "| --- | --- |"]
    aliases = stub_aliases()
    used = set()
    pending = "\n".join(body)
    while True:  # the aliases the text mentions, and those their definitions mention
        new = {n for n in list(aliases) + list(PROTOCOLS)
               if n not in used and re.search(r"\b" + n.lstrip("_") + r"\b", pending)}
        if not new:
            break
        used |= new
        pending = public_type("\n".join(aliases.get(n, "") for n in new))
    for name, definition in sorted(aliases.items()):
        if name not in used:
            continue
        shown = public_type(definition).replace("|", "\\|")
        glossary.append(f"| `{name.lstrip('_')}` | " + (shown if definition.startswith("a type variable")
                                                         else f"`{shown}`") + " |")
    for name, meaning in PROTOCOLS.items():
        if name in used:
            glossary.append(f"| `{name.lstrip('_')}` | {meaning} |")
    text = "\n".join(out + toc + ["- [Type names used in this reference](#type-names-used-in-this-reference)",
                                  ""] + body + [""] + glossary)
    print(re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n", end="")


if __name__ == "__main__":
    main()
