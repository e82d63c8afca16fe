"""Kernel parameter layouts, from every source that can tell them. Pure Python
over the parameter kinds of :mod:`pycudadrv._marshal` (no driver needed).

A layout is a list of ``Param(kind, size, align, offset, const)``. ``kind`` is
a :class:`~pycudadrv._marshal.ParamKind`: which Python values a parameter
accepts and how they become bytes:

=========  ===========================================================
ANY        size known only (``cuFuncGetParamInfo``): int -> integer of
           that width, float -> IEEE float of that width (2, 4, 8),
           pointers need 8 bytes
INT/UINT   signed/unsigned integer of ``size`` bytes
INTEGER    integer of ``size`` bytes, either signedness (PTX ``.u``/``.s``/
           ``.b``, whose signedness is not reliable); 8-byte ones also take
           pointers (PTX gives pointers as ``.u64``)
FLOAT      IEEE float of ``size`` bytes (2 = half); ints are converted
POINTER    device pointer (8 bytes): Buffer, view, None, CAI object, int
BYTES      raw bytes (structs, arrays): numpy structured scalars or
           bytes-like values of exactly ``size`` bytes
=========  ===========================================================

``const`` is True for a pointer to const data (the kernel only reads through
it), False for a pointer it may write through, None when unknown or not a
pointer.

Sources, strictest first (:func:`merge_layout` combines them): an explicit
signature; the C++ mangled name of the kernel (``_Z...``: exact types, see
:func:`mangled_params`) or the ``extern "C"`` declaration in the source given
to ``compile()`` (:func:`source_params`); the PTX ``.entry`` (sizes, float or
integer); ``cuFuncGetParamInfo`` (sizes only).
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from pycudadrv._errors import ArgumentValueError
from pycudadrv._marshal import PARAM_LIMIT_CLASSIC, PARAM_LIMIT_LARGE, ParamKind

__all__ = ["Param", "ParamKind", "ptx_entries", "parse_signature", "mangled_params", "source_params",
           "merge_layout", "param_limit", "format_layout", "KIND_NAMES"]

ANY, INT, UINT, FLOAT, POINTER, BYTES, INTEGER = (ParamKind.ANY, ParamKind.INT, ParamKind.UINT, ParamKind.FLOAT,
                                                  ParamKind.POINTER, ParamKind.BYTES, ParamKind.INTEGER)
KIND_NAMES = {k: k.name.lower() for k in ParamKind}


class Param(NamedTuple):
    kind: int
    size: int
    align: int
    offset: int
    const: bool | None = None

    def describe(self) -> str:
        if self.kind == BYTES:
            return f"bytes[{self.size} bytes]"
        if self.kind == POINTER:
            return "const pointer" if self.const else "pointer"
        return f"{KIND_NAMES[self.kind]}{self.size * 8}"


def _place(items):
    """Assign offsets with natural alignment: items are (kind, size, align[, const])."""
    out, off = [], 0
    for it in items:
        kind, size, align = it[:3]
        const = it[3] if len(it) > 3 else None
        off = (off + align - 1) // align * align
        out.append(Param(kind, size, align, off, const))
        off += size
    return out


# --- PTX ------------------------------------------------------------------------------------

_PTX_TYPES = {"u": INTEGER, "s": INTEGER, "b": INTEGER, "f": FLOAT}
_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(([^)]*)\)", re.S)
_PARAM_RE = re.compile(
    r"\.param\s+(?:\.align\s+(\d+)\s+)?\.([usbf])(\d+)\s+(?:\.ptr\s+(?:\.\w+\s+)*)?"
    r"(?:\.align\s+(\d+)\s+)?[\w$%]+\s*(?:\[(\d+)\])?")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def ptx_entries(ptx: str) -> dict:
    """Map each ``.entry`` name in PTX text to its parameter layout.

    ``.param .u64 x`` -> INTEGER 8; ``.param .f32 x`` -> FLOAT 4; an array
    ``.param .align 8 .b8 x[16]`` -> BYTES 16 aligned to 8; ``.ptr`` params
    -> POINTER. Raises ArgumentValueError for a parameter it cannot read.
    """
    out = {}
    ptx = _strip_comments(ptx)
    for m in _ENTRY_RE.finditer(ptx):
        name, body = m.group(1), m.group(2)
        items = []
        for p in body.split(","):
            p = " ".join(p.split())
            if not p:
                continue
            pm = _PARAM_RE.search(p)
            if pm is None:
                raise ArgumentValueError(f"cannot parse PTX parameter {p!r} of .entry {name}")
            align_a, t, bits, align_b, count = pm.groups()
            if int(bits) not in (8, 16, 32, 64) or (t == "f" and int(bits) == 8):
                raise ArgumentValueError(f"unsupported PTX parameter type .{t}{bits} in .entry {name}: {p!r}")
            if (align_a or align_b) and int(align_a or align_b) not in (1, 2, 4, 8, 16, 32, 64, 128):
                raise ArgumentValueError(f"bad PTX .align in .entry {name}: {p!r}")
            size = int(bits) // 8
            if count is not None:
                if int(count) == 0:
                    raise ArgumentValueError(f"zero-length PTX parameter array in .entry {name}: {p!r}")
                items.append((BYTES, int(count) * size, int(align_a or align_b or size)))
            elif ".ptr" in p:
                items.append((POINTER, 8, 8))
            else:
                items.append((_PTX_TYPES[t], size, int(align_a or align_b or size)))
        out[name] = _place(items)
    return out


# --- C types ----------------------------------------------------------------------------------

_C_TYPES = {
    "bool": (UINT, 1), "char": (INT, 1), "signed char": (INT, 1), "unsigned char": (UINT, 1),
    "int8_t": (INT, 1), "uint8_t": (UINT, 1),
    "short": (INT, 2), "unsigned short": (UINT, 2), "int16_t": (INT, 2), "uint16_t": (UINT, 2),
    "int": (INT, 4), "unsigned": (UINT, 4), "unsigned int": (UINT, 4), "int32_t": (INT, 4), "uint32_t": (UINT, 4),
    "long": (INT, 8), "unsigned long": (UINT, 8), "long long": (INT, 8), "unsigned long long": (UINT, 8),
    "int64_t": (INT, 8), "uint64_t": (UINT, 8), "size_t": (UINT, 8), "ptrdiff_t": (INT, 8),
    "half": (FLOAT, 2), "__half": (FLOAT, 2), "float": (FLOAT, 4), "double": (FLOAT, 8),
    "__nv_bfloat16": (BYTES, 2, 2), "nv_bfloat16": (BYTES, 2, 2),
    "half2": (BYTES, 4, 4), "__half2": (BYTES, 4, 4), "__nv_bfloat162": (BYTES, 4, 4),
    "intptr_t": (INT, 8), "uintptr_t": (UINT, 8), "CUdeviceptr": (POINTER, 8),
    "cudaGraphConditionalHandle": (UINT, 8), "cudaGraphDeviceNode_t": (POINTER, 8),
    "char2": (BYTES, 2, 2), "uchar2": (BYTES, 2, 2), "char4": (BYTES, 4, 4), "uchar4": (BYTES, 4, 4),
    "short2": (BYTES, 4, 4), "ushort2": (BYTES, 4, 4), "short4": (BYTES, 8, 8), "ushort4": (BYTES, 8, 8),
    "int2": (BYTES, 8, 8), "uint2": (BYTES, 8, 8), "int3": (BYTES, 12, 4), "uint3": (BYTES, 12, 4),
    "int4": (BYTES, 16, 16), "uint4": (BYTES, 16, 16),
    "float2": (BYTES, 8, 8), "float3": (BYTES, 12, 4), "float4": (BYTES, 16, 16),
    "double2": (BYTES, 16, 16), "double3": (BYTES, 24, 8), "double4": (BYTES, 32, 16),
    "longlong2": (BYTES, 16, 16), "ulonglong2": (BYTES, 16, 16),
    "complex64": (BYTES, 8, 4), "complex128": (BYTES, 16, 8),
}

_QUALIFIERS = {"const", "volatile", "__restrict__", "restrict", "__restrict", "struct", "__grid_constant__"}
# Spellings of the same C integer type: word multiset (order-free) -> canonical name.
_INT_SPELLINGS = {
    ("int", "signed"): "int", ("signed",): "int", ("int", "short"): "short", ("short", "signed"): "short",
    ("int", "short", "signed"): "short", ("int", "short", "unsigned"): "unsigned short",
    ("int", "long"): "long", ("long", "signed"): "long", ("int", "long", "signed"): "long",
    ("int", "long", "unsigned"): "unsigned long", ("int", "long", "long"): "long long",
    ("long", "long", "signed"): "long long", ("int", "long", "long", "signed"): "long long",
    ("int", "long", "long", "unsigned"): "unsigned long long", ("char", "signed"): "signed char",
    ("int", "unsigned"): "unsigned int", ("unsigned",): "unsigned int",
    ("char", "unsigned"): "unsigned char", ("short", "unsigned"): "unsigned short",
    ("long", "unsigned"): "unsigned long", ("long", "long", "unsigned"): "unsigned long long",
}
_TYPE_WORDS = {"int", "char", "short", "long", "signed", "unsigned", "float", "double", "bool", "half", "void"}


def _c_type(text):
    """Parse one C parameter declaration ('const float* __restrict__ out',
    'unsigned long int n', 'int') into (kind, size, align, const), or None if
    it is not a C type we know."""
    s = text.replace("*", " * ").replace("&", " & ")
    words = s.split()
    if "&" in words:
        raise ArgumentValueError(f"reference parameter {text!r}: kernels take values or pointers")
    if "*" in words:
        first = words.index("*")
        base = [w for w in words[:first] if w not in _QUALIFIERS]
        if not base or not all(re.fullmatch(r"[A-Za-z_]\w*", w) for w in base):
            raise ArgumentValueError(f"cannot parse parameter {text!r}")
        # const before the first '*' qualifies the data pointed to (for T** only the innermost level counts)
        const = "const" in words[:first] and words.count("*") == 1
        return (POINTER, 8, 8, const)
    words = [w for w in words if w not in _QUALIFIERS]
    if "double" in words and "long" in words:
        raise ArgumentValueError(f"long double parameter {text!r} is not supported by CUDA kernels")
    for drop_name in (False, True):  # 'float x' -> 'float'
        if drop_name and (len(words) <= 1 or words[-1] in _TYPE_WORDS):
            break
        ws = words[:-1] if drop_name else words
        key = " ".join(ws)
        if key in _C_TYPES:
            v = _C_TYPES[key]
            return (v[0], v[1], v[2] if len(v) > 2 else v[1], None)
        canon = _INT_SPELLINGS.get(tuple(sorted(ws)))
        if canon is not None:
            v = _C_TYPES[canon]
            return (v[0], v[1], v[1], None)
    return None


def _one_type(t):
    if isinstance(t, str):
        if t.strip() in ("ptr", "pointer"):
            return (POINTER, 8, 8, None)
        if t.strip() == "void":
            raise ArgumentValueError("a kernel parameter cannot be void")
        ct = _c_type(t)
        if ct is not None:
            return ct
        s = t.strip()
        if not re.fullmatch(r"[A-Za-z][\w]*", s):
            raise ArgumentValueError(f"unknown parameter type {t!r} in signature")
        try:
            t = np.dtype(s)
        except TypeError:
            raise ArgumentValueError(f"unknown parameter type {t!r} in signature") from None
    elif not isinstance(t, (np.dtype, type)):
        raise ArgumentValueError(f"unknown parameter type {t!r} in signature (use a C type name or a numpy dtype)")
    dt = np.dtype(t)
    if dt.fields is not None or dt.kind == "V":
        return (BYTES, dt.itemsize, dt.alignment, None)
    if dt.kind == "c":
        return (BYTES, dt.itemsize, dt.itemsize // 2, None)
    kind = {"i": INT, "u": UINT, "b": UINT, "f": FLOAT}.get(dt.kind)
    if kind is None:
        raise ArgumentValueError(f"unsupported parameter dtype {dt} in signature")
    return (kind, dt.itemsize, dt.alignment, None)


def parse_signature(sig) -> list:
    """Layout from a user signature: a C-like string (``"float*, const float*,
    int, float"``) or a sequence of type names / numpy dtypes ("ptr" or any
    ``T*`` is a device pointer; structured dtypes are structs). Raises
    ArgumentValueError for a type it does not know."""
    if isinstance(sig, str):
        parts = [p.strip() for p in sig.split(",")] if sig.strip() else []
    elif isinstance(sig, (bytes, bytearray)):
        raise ArgumentValueError("a signature is a str or a sequence of types, not bytes")
    else:
        parts = list(sig)
    return _place([_one_type(p) for p in parts])


# --- C++ mangled names (Itanium ABI) -------------------------------------------------------------

_MANGLED_BUILTINS = {
    "b": (UINT, 1), "c": (INT, 1), "a": (INT, 1), "h": (UINT, 1), "s": (INT, 2), "t": (UINT, 2),
    "i": (INT, 4), "j": (UINT, 4), "l": (INT, 8), "m": (UINT, 8), "x": (INT, 8), "y": (UINT, 8),
    "f": (FLOAT, 4), "d": (FLOAT, 8), "w": (INT, 4), "n": (BYTES, 16), "o": (BYTES, 16), "v": (None, 0),
}
_MANGLED_BUILTINS_D = {"Dh": (FLOAT, 2), "Ds": (UINT, 2), "Di": (UINT, 4), "Du": (UINT, 1), "Dn": (POINTER, 8)}
_STD_SUBS = {"St": "std", "Sa": "std::allocator", "Sb": "std::basic_string", "Ss": "std::string",
             "Si": "std::istream", "So": "std::ostream", "Sd": "std::iostream"}


class _Unreadable(ArgumentValueError):
    """A mangled name this reader does not know (never escapes mangled_params)."""


class _Demangler:
    """Just enough of the Itanium C++ ABI to read a kernel's parameter types:
    builtins, pointers, cv-qualifiers, named types, nested names, template
    arguments and parameters, substitutions. Raises ValueError on anything else."""

    def __init__(self, s):
        self.s, self.i, self.subs, self.targs = s, 0, [], []

    def peek(self, n=1):
        return self.s[self.i:self.i + n]

    def eat(self, tok):
        if not self.s.startswith(tok, self.i):
            raise _Unreadable(f"expected {tok!r} at {self.i}")
        self.i += len(tok)

    def number(self):
        m = re.match(r"\d+", self.s[self.i:])
        if not m:
            raise _Unreadable(f"expected a number at {self.i}")
        self.i += len(m.group())
        return int(m.group())

    def source_name(self):
        n = self.number()
        name = self.s[self.i:self.i + n]
        if len(name) != n:
            raise _Unreadable("truncated name")
        self.i += n
        return name

    def seq_id(self):
        m = re.match(r"[0-9A-Z]*", self.s[self.i:])
        self.i += len(m.group())
        self.eat("_")
        return 0 if not m.group() else int(m.group(), 36) + 1

    def substitution(self):
        two = self.peek(2)
        if two in _STD_SUBS:
            self.i += 2
            return ("named", _STD_SUBS[two])
        self.eat("S")
        k = self.seq_id()
        if k >= len(self.subs):
            raise _Unreadable(f"substitution S{k} beyond the table")
        return self.subs[k]

    def template_param(self):
        self.eat("T")
        k = self.seq_id()
        if k >= len(self.targs):
            raise _Unreadable(f"template parameter T{k} unknown")
        return self.targs[k]

    def template_args(self):
        self.eat("I")
        args = []
        while self.peek() != "E":
            if self.peek() == "L":      # a literal: L <type> <value> E
                self.i += 1
                self.type_()
                while self.peek() != "E":
                    self.i += 1
                self.eat("E")
                args.append(("literal",))
            elif self.peek() == "X":
                raise _Unreadable("expression template arguments")
            elif self.peek() == "J":    # an argument pack
                self.i += 1
                while self.peek() != "E":
                    args.append(self.type_())
                self.eat("E")
            else:
                args.append(self.type_())
        self.eat("E")
        return args

    def unqualified(self):
        if self.peek().isdigit():
            return self.source_name()
        raise _Unreadable(f"unsupported name component at {self.i}")

    def name(self):
        """The function's name; returns whether it is a template (its return type comes first)."""
        if self.peek() == "N":
            self.i += 1
            while self.peek() in ("K", "V", "r"):
                self.i += 1
            is_template, parts = False, []
            while self.peek() != "E":
                substituted = False
                if self.peek() == "I":
                    self.targs = self.template_args()
                    parts[-1] += "<...>"
                    is_template = True
                elif self.peek() == "S":
                    parts.append(self.substitution()[1])
                    is_template, substituted = False, True
                else:
                    parts.append(self.unqualified())
                    is_template = False
                if self.peek() != "E" and not substituted:
                    self.subs.append(("named", "::".join(parts)))   # every prefix is a candidate
            self.eat("E")
            return is_template
        if self.peek(2) == "St":
            self.i += 2
        nm = self.unqualified()
        if self.peek() == "I":
            self.subs.append(("named", nm))                     # the template name is a candidate
            self.targs = self.template_args()
            return True
        return False

    def type_(self):
        c = self.peek()
        if c in _MANGLED_BUILTINS:
            self.i += 1
            return ("builtin", c)
        if self.peek(2) in _MANGLED_BUILTINS_D:
            t = ("builtin", self.peek(2))
            self.i += 2
            return t
        if self.peek(2) == "DF":        # _FloatN: DF16_ -> half
            self.i += 2
            bits = self.number()
            self.eat("_")
            t = ("float", bits)
            self.subs.append(t)
            return t
        if c in ("K", "V", "r"):
            quals = ""
            while self.peek() in ("K", "V", "r"):
                quals += self.peek()
                self.i += 1
            inner = self.type_()
            t = ("cv", "K" in quals, inner)
            self.subs.append(t)
            return t
        if c in ("P", "R", "O"):
            self.i += 1
            inner = self.type_()
            t = ("ptr" if c == "P" else "ref", inner)
            self.subs.append(t)
            return t
        if c == "T":
            t = self.template_param()
            self.subs.append(t)
            return t
        if c == "S":
            t = self.substitution()
            if self.peek() == "I":      # a substituted template name with arguments
                self.template_args()
                t = ("named", t[1] + "<...>")
                self.subs.append(t)
            return t
        if c == "N" or c.isdigit():
            if c == "N":
                self.i += 1
                parts = []
                while self.peek() != "E":
                    if self.peek() == "I":
                        self.template_args()
                        parts[-1] += "<...>"
                    else:
                        parts.append(self.substitution()[1] if self.peek() == "S" else self.unqualified())
                    self.subs.append(("named", "::".join(parts)))
                self.eat("E")
                return ("named", "::".join(parts))
            t = ("named", self.source_name())
            self.subs.append(t)
            if self.peek() == "I":
                self.template_args()
                t = ("named", t[1] + "<...>")
                self.subs.append(t)
            return t
        raise _Unreadable(f"unsupported type code {c!r} at {self.i}")


def _describe_mangled(t):
    """A demangled type -> (kind, size, align, const) or None when only the size would tell."""
    if t[0] == "builtin":
        code = t[1]
        if code == "v":
            return None
        kind, size = _MANGLED_BUILTINS.get(code) or _MANGLED_BUILTINS_D[code]
        return (kind, size, min(size, 16), None)
    if t[0] == "float":
        return (FLOAT, t[1] // 8, t[1] // 8, None) if t[1] in (16, 32, 64) else None
    if t[0] == "cv":
        d = _describe_mangled(t[2])
        return d
    if t[0] == "ptr":
        inner = t[1]
        return (POINTER, 8, 8, inner[0] == "cv" and inner[1])
    if t[0] == "named":
        v = _C_TYPES.get(t[1].rsplit("::", 1)[-1])
        if v is not None:
            return (v[0], v[1], v[2] if len(v) > 2 else v[1], None)
        return (BYTES, None, None, None)    # a struct: its size comes from PTX or the driver
    if t[0] == "literal":
        return None
    raise _Unreadable(f"unsupported parameter type {t!r}")


def mangled_params(name: str):
    """The parameter types of a C++ kernel from its mangled name (``_Z...``):
    a list of ``(kind, size or None, align or None, const)``, or None when
    the name is not mangled or uses what this reader does not know (the
    layout then comes from the PTX or the driver alone)."""
    if not name.startswith("_Z"):
        return None
    d = _Demangler(name)
    d.i = 2
    try:
        is_template = d.name()
        if is_template:
            d.type_()                     # a function template's return type
        params = []
        while d.i < len(d.s):
            if d.peek() == ".":           # a clone suffix (.constprop, ...)
                break
            params.append(d.type_())
        if params == [("builtin", "v")]:
            params = []
        return [_describe_mangled(p) for p in params]
    except (_Unreadable, KeyError, IndexError):
        return None


# --- extern "C" declarations in CUDA C++ source ------------------------------------------------

_KERNEL_RE = re.compile(r"__global__\s+(?:[\w:]+\s+)*?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                        r"([A-Za-z_]\w*)\s*\(([^)]*)\)", re.S)


def source_params(source: str) -> dict:
    """``{name: [(kind, size, align, const) or None, ...]}`` for each
    ``extern "C"`` kernel declared in CUDA C++ ``source`` (parameters whose
    type is not a plain C type, e.g. a typedef or a template parameter, are
    None: the PTX decides those). Kernels in templates or with C++ linkage
    are skipped (their mangled names carry their types)."""
    text = _strip_comments(source)
    text = re.sub(r'"(?:\\.|[^"\\])*"', lambda m: m.group(0) if m.group(0) == '"C"' else '""', text)
    extern_spans = []
    for m in re.finditer(r'extern\s+"C"\s*\{', text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        extern_spans.append((m.start(), j))
    out = {}
    for m in _KERNEL_RE.finditer(text):
        head = text[max(0, m.start() - 40):m.start()]
        in_block = any(a <= m.start() < b for a, b in extern_spans)
        if not (in_block or re.search(r'extern\s+"C"\s*$', head)):
            continue
        if re.search(r"template\s*<[^>]*>\s*(?:extern\s+\"C\"\s*)?$", head):
            continue
        params = [p.strip() for p in m.group(2).split(",")] if m.group(2).strip() else []
        if params == ["void"]:
            params = []
        decl = []
        for p in params:
            p = re.sub(r"\[[^\]]*\]", "", p).split("=")[0].strip()
            try:
                decl.append(_c_type(p))
            except ArgumentValueError:
                decl.append(None)
        out[m.group(1)] = decl
    return out


# --- combining them ------------------------------------------------------------------------------

def merge_layout(base, detail, detail_name: str):
    """``base`` (a PTX or ``cuFuncGetParamInfo`` layout) refined by ``detail``
    (from :func:`mangled_params` or :func:`source_params`): signedness, float
    or integer, pointer and const come from ``detail`` where its sizes agree.
    Returns ``(layout, used)``; ``used`` is False (and ``base`` unchanged)
    when the counts or a size disagree."""
    if detail is None or len(detail) != len(base):
        return base, False
    out = []
    for p, d in zip(base, detail):
        if d is None or d[0] is None:
            out.append(p)
            continue
        kind, size, _align, const = d
        if size is not None and size != p.size:
            return base, False
        if kind == BYTES or p.kind == BYTES:
            out.append(p)           # structs and vectors: the sizes say enough
        elif kind == POINTER and p.size == 8 and p.kind in (POINTER, INTEGER, ANY):
            out.append(Param(POINTER, 8, p.align, p.offset, const))
        elif kind in (INT, UINT) and p.kind in (INTEGER, ANY):
            out.append(Param(kind, p.size, p.align, p.offset, None))
        elif kind == FLOAT and p.kind in (FLOAT, ANY):
            out.append(Param(FLOAT, p.size, p.align, p.offset, None))
        elif kind == p.kind:
            out.append(p)
        else:
            return base, False
    return out, True


def param_limit(driver_version: int, cc_major: int) -> int:
    """Bytes of kernel parameters the driver accepts on this device."""
    return PARAM_LIMIT_LARGE if driver_version >= 12010 and cc_major >= 7 else PARAM_LIMIT_CLASSIC


def format_layout(layout) -> str:
    """``"#0 pointer @0, #1 int32 @8, ..."``: a layout for messages."""
    return ", ".join(f"#{i} {p.describe()} @{p.offset}" for i, p in enumerate(layout or ()))
