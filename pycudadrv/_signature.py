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
BOOL       C++ ``bool`` (1 byte): True, False, a numpy bool, 0 or 1 (2 is
           refused, never packed as the byte 2)
BFLOAT16   ``__nv_bfloat16`` (2 bytes): a Python float or int is rounded to
           bfloat16 (to nearest, ties to even); an ``ml_dtypes.bfloat16``
           scalar or 2 raw bytes go as they are; ``np.float16`` is refused
           (its bits mean another number)
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

import bisect
import re
from typing import NamedTuple

import numpy as np

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError
from pycudadrv._mangled import MANGLED_BUILTINS, MANGLED_BUILTINS_D, Demangler, Unreadable
from pycudadrv._marshal import PARAM_LIMIT_CLASSIC, PARAM_LIMIT_LARGE, ParamKind

__all__ = ["Param", "ParamKind", "ptx_entries", "parse_signature", "mangled_params", "source_params",
           "merge_layout", "param_limit", "format_layout", "as_layout", "check_layout", "KIND_NAMES"]

ANY, INT, UINT, FLOAT, POINTER, BYTES, INTEGER = (ParamKind.ANY, ParamKind.INT, ParamKind.UINT, ParamKind.FLOAT,
                                                  ParamKind.POINTER, ParamKind.BYTES, ParamKind.INTEGER)
BOOL, BFLOAT16 = ParamKind.BOOL, ParamKind.BFLOAT16
KIND_NAMES = {k: k.name.lower() for k in ParamKind}


class Param(NamedTuple):
    kind: int
    size: int
    align: int
    offset: int
    const: bool | None = None

    def describe(self) -> str:
        if self.kind == BOOL:
            return "bool"
        if self.kind == BFLOAT16:
            return "bfloat16"
        if self.kind == BYTES:
            return f"bytes[{self.size} bytes]"
        if self.kind == POINTER:
            return "const pointer" if self.const else "pointer"
        return f"{KIND_NAMES[ParamKind(self.kind)]}{self.size * 8}"


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
# The parameter list stops at the first parenthesis, so an unclosed one costs one scan to the next.
_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(([^()]*)\)", re.S)
_PARAM_RE = re.compile(
    r"\.param\s+(?:\.align\s+(\d+)\s+)?\.([usbf])(\d+)\s+(?:\.ptr\s+(?:\.\w+\s+)*)?"
    r"(?:\.align\s+(\d+)\s+)?[\w$%]+\s*(?:\[(\d+)\])?")
# A comment; an unterminated block comment runs to the end (one scan, never one per "/*").
_COMMENT_RE = re.compile(r"//[^\n]*|/\*(?:.*?\*/|.*)", re.S)


def _strip_comments(text: str) -> str:
    """``text`` with every ``//`` and ``/* */`` comment replaced by a space (linear time)."""
    return _COMMENT_RE.sub(" ", text)


def _small_int(digits: str, what: str, where: str) -> int:
    if len(digits) > 6:
        raise ArgumentValueError(f"{what} {digits[:20]}{'...' if len(digits) > 20 else ''} is too large in {where}")
    return int(digits)


def _check_text(text, who: str, name: str, what: str) -> None:
    """Raise ArgumentTypeError unless ``text`` (the parameter ``name`` of ``who``, holding ``what``) is a str."""
    if isinstance(text, str):
        return
    hint = f"; decode bytes first ({name}.decode())" if isinstance(text, (bytes, bytearray, memoryview)) else ""
    raise ArgumentTypeError(f"{who}: {name} must be {what} as a str{hint}, got {type(text).__name__} "
                            f"{_bounded_repr(text)}")


_PTX_DIRECTIVE_RE = re.compile(r"(?:^|\s)\.(?:version|target|address_size|entry|func|visible|extern|weak|global|const|"
                               r"shared|local)\b")


def ptx_entries(ptx: str) -> dict:
    """Map each ``.entry`` name in PTX text to its parameter layout.

    ``.param .u64 x`` -> INTEGER 8; ``.param .f32 x`` -> FLOAT 4; an array
    ``.param .align 8 .b8 x[16]`` -> BYTES 16 aligned to 8; ``.ptr`` params
    -> POINTER. Linear in the length of the text. Raises
    ArgumentTypeError when ``ptx`` is not a str (bytes included: decode
    them first), ArgumentValueError for a parameter it cannot read or for
    text that is not PTX (no directive such as ``.version`` or ``.entry``
    outside comments: a file path, say).
    """
    _check_text(ptx, "ptx_entries", "ptx", "PTX text")
    out = {}
    text = ptx
    ptx = _strip_comments(ptx)
    if ptx.strip() and _PTX_DIRECTIVE_RE.search(ptx) is None:
        raise ArgumentValueError(f"ptx_entries: {_bounded_repr(text)} is not PTX text (no directive such as "
                                 ".version, .target or .entry)")
    for m in _ENTRY_RE.finditer(ptx):
        name, body = m.group(1), m.group(2)
        items = []
        for p in body.split(","):
            p = " ".join(p.split())
            if not p:
                continue
            pm = _PARAM_RE.search(p)
            if pm is None:
                raise ArgumentValueError(f"cannot parse PTX parameter {p[:200]!r} of .entry {name}")
            where = f".entry {name}: {p[:200]!r}"
            align_a, t, bits, align_b, count = pm.groups()
            nbits = _small_int(bits, "PTX parameter width", where)
            if nbits not in (8, 16, 32, 64) or (t == "f" and nbits == 8):
                raise ArgumentValueError(f"unsupported PTX parameter type .{t}{bits} in .entry {name}: {p[:200]!r}")
            align = _small_int(align_a or align_b or "0", "PTX .align", where)
            if (align_a or align_b) and align not in (1, 2, 4, 8, 16, 32, 64, 128):
                raise ArgumentValueError(f"bad PTX .align in {where}")
            size = nbits // 8
            if count is not None:
                n = _small_int(count, "PTX parameter array length", where)
                if n == 0:
                    raise ArgumentValueError(f"zero-length PTX parameter array in {where}")
                items.append((BYTES, n * size, align or size))
            elif ".ptr" in p:
                items.append((POINTER, 8, 8))
            else:
                items.append((_PTX_TYPES[t], size, align or size))
        out[name] = _place(items)
    return out


# --- C types ----------------------------------------------------------------------------------

_C_TYPES = {
    "bool": (BOOL, 1), "char": (INT, 1), "signed char": (INT, 1), "unsigned char": (UINT, 1),
    "int8_t": (INT, 1), "uint8_t": (UINT, 1),
    "short": (INT, 2), "unsigned short": (UINT, 2), "int16_t": (INT, 2), "uint16_t": (UINT, 2),
    "int": (INT, 4), "unsigned": (UINT, 4), "unsigned int": (UINT, 4), "int32_t": (INT, 4), "uint32_t": (UINT, 4),
    "long": (INT, 8), "unsigned long": (UINT, 8), "long long": (INT, 8), "unsigned long long": (UINT, 8),
    "int64_t": (INT, 8), "uint64_t": (UINT, 8), "size_t": (UINT, 8), "ptrdiff_t": (INT, 8),
    "half": (FLOAT, 2), "__half": (FLOAT, 2), "float": (FLOAT, 4), "double": (FLOAT, 8),
    "__nv_bfloat16": (BFLOAT16, 2, 2), "nv_bfloat16": (BFLOAT16, 2, 2),
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
    "__int128": (INT, 16), "signed __int128": (INT, 16), "__int128_t": (INT, 16),
    "unsigned __int128": (UINT, 16), "__uint128_t": (UINT, 16),
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
    ("__int128", "signed"): "__int128", ("__int128", "unsigned"): "unsigned __int128",
}
_TYPE_WORDS = {"int", "char", "short", "long", "signed", "unsigned", "float", "double", "bool", "half", "void",
               "__int128"}
_WORD_RE = re.compile(r"[A-Za-z_]\w*")


def _c_type(text):
    """Parse one C parameter declaration ('const float* __restrict__ out',
    'unsigned long int n', 'int') into (kind, size, align, const), or None if
    it is not a C type we know. An array parameter ('int x[4]') is a pointer,
    as C adjusts it."""
    s = text.replace("*", " * ").replace("&", " & ")
    words = s.split()
    if "&" in words:
        raise ArgumentValueError(f"reference parameter {text[:200]!r}: kernels take values or pointers")
    if "[" in text:
        head, _, rest = text.partition("[")
        if "(" in text or not rest.rstrip().endswith("]"):
            raise ArgumentValueError(f"cannot parse parameter {text[:200]!r}")
        words = head.replace("*", " * ").split() + ["*"]
    if "*" in words:
        first = words.index("*")
        base = [w for w in words[:first] if w not in _QUALIFIERS]
        if not base or not all(_WORD_RE.fullmatch(w) for w in base):
            raise ArgumentValueError(f"cannot parse parameter {text[:200]!r}")
        # const before the first '*' qualifies the data pointed to (for T** only the innermost level counts)
        const = "const" in words[:first] and words.count("*") == 1
        return (POINTER, 8, 8, const)
    words = [w for w in words if w not in _QUALIFIERS]
    if "double" in words and "long" in words:
        raise ArgumentValueError(f"long double parameter {text[:200]!r} is not supported by CUDA kernels")
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


def _dtype_type(dt, what):
    """(kind, size, align, const) of a numpy dtype used as a parameter type."""
    if dt.hasobject:
        raise ArgumentValueError(f"unsupported parameter dtype {dt} in signature: it holds Python objects")
    if dt.kind in "fc" and dt.itemsize > (8 if dt.kind == "f" else 16):
        raise ArgumentValueError(f"parameter type {what} is {dt} (long double, {dt.itemsize} bytes): CUDA kernels "
                                 "have no long double; use double")
    if dt.itemsize == 0:
        raise ArgumentValueError(f"parameter type {what} has 0 bytes: a kernel parameter has at least one")
    if dt.name == "bfloat16" and dt.itemsize == 2:      # ml_dtypes.bfloat16
        return (BFLOAT16, 2, 2, None)
    if dt.fields is not None or dt.kind == "V":
        return (BYTES, dt.itemsize, dt.alignment, None)
    if dt.kind == "c":
        return (BYTES, dt.itemsize, dt.itemsize // 2, None)
    kind = {"i": INT, "u": UINT, "b": BOOL, "f": FLOAT}.get(dt.kind)
    if kind is None:
        raise ArgumentValueError(f"unsupported parameter dtype {dt} in signature")
    return (kind, dt.itemsize, dt.alignment, None)


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
            raise ArgumentValueError(f"unknown parameter type {t[:200]!r} in signature")
        if s == "uint":
            raise ArgumentValueError("parameter type 'uint' is ambiguous: 32 bits where CUDA code typedefs it as "
                                     "unsigned int, 64 as numpy's uint; write 'unsigned int' or 'uint32' (or "
                                     "'uint64')")
        try:
            dt = np.dtype(s)
        except TypeError:
            raise ArgumentValueError(f"unknown parameter type {t!r} in signature") from None
        return _dtype_type(dt, repr(t))
    if not isinstance(t, (np.dtype, type)):
        raise ArgumentValueError(f"unknown parameter type {_bounded_repr(t)} in signature (use a C type name or a "
                                 "numpy dtype)")
    if isinstance(t, type) and t in _ABSTRACT_SCALARS:
        raise ArgumentValueError(f"unknown parameter type {t!r} in signature: an abstract numpy scalar type has "
                                 "no size (use a concrete one, such as np.float32)")
    try:
        dt = np.dtype(t)
    except (TypeError, ValueError) as e:
        raise ArgumentValueError(f"unknown parameter type {t!r} in signature ({e})") from None
    return _dtype_type(dt, repr(t))


# numpy's abstract scalar types: np.dtype() of these is an error in numpy 2 and a deprecated
# 0-byte void in numpy 1.x; refused by name on both.
_ABSTRACT_SCALARS = (np.generic, np.number, np.integer, np.signedinteger, np.unsignedinteger, np.inexact,
                     np.floating, np.complexfloating, np.flexible, np.character)


def _bounded_repr(v, limit=60):
    """repr(v) cut to ``limit`` characters; never raises (huge ints, broken __repr__)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 128:
        return f"an int of {v.bit_length()} bits"
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001 -- a message must never fail
        return f"<{type(v).__name__} object>"
    return r if len(r) <= limit else r[:limit] + "..."


def parse_signature(sig) -> list:
    """Layout from a user signature: a C-like string (``"float*, const float*,
    int, float"``) or a sequence of type names / numpy dtypes ("ptr" or any
    ``T*`` is a device pointer, as is an array parameter ``T x[N]``;
    structured dtypes are structs). Raises ArgumentTypeError for a signature
    that is neither a str nor a sequence, ArgumentValueError for a type it
    does not know."""
    if isinstance(sig, str):
        parts = [p.strip() for p in sig.split(",")] if sig.strip() else []
    elif isinstance(sig, (bytes, bytearray)):
        raise ArgumentValueError("a signature is a str or a sequence of types, not bytes")
    elif isinstance(sig, (np.dtype, dict)) or not hasattr(sig, "__iter__"):
        raise ArgumentTypeError(f"a signature is a str or a sequence of types (e.g. [\"float*\", np.int32]), got "
                                f"{type(sig).__name__} {_bounded_repr(sig)}")
    else:
        parts = list(sig)
    return _place([_one_type(p) for p in parts])


# --- C++ mangled names (Itanium ABI; the reader is pycudadrv._mangled) ---------------------------

def _describe_mangled(t):
    """A demangled type -> (kind, size, align, const) or None when only the size would tell."""
    if t[0] == "builtin":
        code = t[1]
        if code == "v":
            return None
        kind, size = MANGLED_BUILTINS.get(code) or MANGLED_BUILTINS_D[code]
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
    raise Unreadable(f"unsupported parameter type {t!r}")


def mangled_params(name: str):
    """The parameter types of a C++ kernel from its mangled name (``_Z...``):
    a list of ``(kind, size or None, align or None, const)``, or None when
    the name is not mangled or uses what this reader does not know (the
    layout then comes from the PTX or the driver alone). Linear in the
    length of the name; never raises for a str."""
    if not isinstance(name, str) or not name.startswith("_Z"):
        return None
    d = Demangler(name)
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
    except (Unreadable, KeyError, IndexError, ValueError, RecursionError):
        return None


# --- extern "C" declarations in CUDA C++ source ------------------------------------------------

# `extern "C"` right before `__global__`, or with attributes between them
# (`extern "C" __launch_bounds__(128) __global__ ...`, as NVIDIA's samples write). The attributes are
# literal alternatives (no nested quantifier can backtrack), so the search stays linear.
_EXTERN_C_HEAD = re.compile(r'extern\s+"C"\s*(?:__(?:launch_bounds|maxnreg|cluster_dims|block_size|noinline|'
                            r'forceinline|inline)__\s*(?:\([^()]*\)\s*)?)*$')
# Between __global__ and void at most 8 words (static, inline, __noinline__, __launch_bounds__(...), ...);
# the parameter list ends at the first parenthesis, brace or semicolon. Both bounds keep every match
# attempt short, so the scan is linear in the length of the source.
_KERNEL_RE = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^()]*\)\s*|[\w:]+\s+){0,8}?void\s+"
                        r"(?:__launch_bounds__\s*\([^()]*\)\s*)?([A-Za-z_]\w*)\s*\(([^(){};]*)\)")
# Comments, preprocessor lines, raw strings, strings and character literals, in one pass; an unterminated
# one runs to the end of its line (strings, characters) or of the text (comments, raw strings).
_LEX_RE = re.compile(r"""
    //[^\n]*
  | /\*(?:.*?\*/|.*)
  | ^[ \t]*\#(?:[^\\\n]|\\.)*
  | (?<![\w'])(?:u8|[uUL])?R"([^()\\\s"]{0,16})\((?:.*?\)\1"|.*)
  | "(?:[^"\\\n]|\\.)*"?
  | (?<![\w'])(?:u8|[uUL])?'(?:[^'\\\n]|\\.)*'?
""", re.S | re.M | re.X)
_BRACE_RE = re.compile(r'extern\s+"C"\s*(\{)?|[{}]')


# `typedef unsigned int uint;` and `using real = float;` of a plain C type (bounded: linear scan).
_TYPEDEF_RE = re.compile(r"\btypedef\s+([A-Za-z_][\w \t\n*]{0,120}?)\s*\b([A-Za-z_]\w*)\s*;")
_USING_RE = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*([A-Za-z_][\w \t\n*]{0,120}?)\s*;")


def _typedefs(text):
    """``{name: type text}`` of the source's typedefs and aliases of plain C types; a name defined twice
    differently (``#if`` branches) is left out."""
    seen: dict[str, str] = {}
    clash: set[str] = set()
    pairs = [(m.group(2), m.group(1)) for m in _TYPEDEF_RE.finditer(text)] + \
            [(m.group(1), m.group(2)) for m in _USING_RE.finditer(text)]
    for name, body in pairs:
        body = " ".join(body.split())
        if name in seen and seen[name] != body:
            clash.add(name)
        seen[name] = body
    return {k: v for k, v in seen.items() if k not in clash}


def _resolve_typedefs(decl, typedefs):
    """``decl`` ('uint n') with its type words that are typedef names replaced by their types ('unsigned int
    n'), through chains of typedefs (8 deep at most); the parameter name (the last word) is kept."""
    if not typedefs:
        return decl
    for _ in range(8):
        words = decl.replace("*", " * ").split()
        last = len(words) - 1 if len(words) > 1 and _WORD_RE.fullmatch(words[-1]) else len(words)
        out = [typedefs.get(w, w) if k < last else w for k, w in enumerate(words)]
        if out == words:
            return decl
        decl = " ".join(out)
    return decl


def _lex_out(m):
    t = m.group(0)
    if t == '"C"':
        return t            # extern "C" must stay readable
    return '""' if t.endswith('"') and not t.startswith(("/", "#")) else " "


def _extern_c_depths(text):
    """``(positions, depths)``: from ``positions[k]`` on, ``depths[k]`` ``extern "C" { }`` blocks enclose the
    text (one pass over the braces)."""
    stack, depth = [], 0
    positions, depths = [0], [0]
    for m in _BRACE_RE.finditer(text):
        tok = m.group(0)
        if tok == "}":
            if stack and stack.pop():
                depth -= 1
                positions.append(m.end())
                depths.append(depth)
        elif tok == "{" or m.group(1):
            c = tok != "{"
            stack.append(c)
            if c:
                depth += 1
                positions.append(m.end())
                depths.append(depth)
    return positions, depths


def source_params(source: str) -> dict:
    """``{name: [(kind, size, align, const) or None, ...]}`` for each
    ``extern "C"`` kernel declared in CUDA C++ ``source`` (a typedef or
    ``using`` alias of a plain C type in the source is resolved to it:
    ``typedef unsigned int uint;`` makes ``uint n`` an unsigned 32-bit
    integer; parameters of other types, e.g. a struct or a template
    parameter, are None: the PTX decides those). Kernels in templates or with C++ linkage
    are skipped (their mangled names carry their types). So is a kernel
    declared more than once with different parameter types (``#if``/``#else``
    branches, which this reader does not evaluate): its layout comes from the
    PTX alone. Comments, string literals and preprocessor lines are never
    read as declarations. Linear in the length of ``source`` (n log n for
    the ``extern "C"`` block look-up). Raises ArgumentTypeError when
    ``source`` is not a str (bytes included: decode them first)."""
    _check_text(source, "source_params", "source", "CUDA C++ text")
    text = _LEX_RE.sub(_lex_out, source)
    typedefs = _typedefs(text)
    positions, depths = _extern_c_depths(text)
    out: dict[str, list] = {}
    conflicting: set[str] = set()
    for m in _KERNEL_RE.finditer(text):
        head = text[max(0, m.start() - 200):m.start()]
        in_block = depths[bisect.bisect_right(positions, m.start()) - 1] > 0
        if not (in_block or _EXTERN_C_HEAD.search(head)):
            continue
        if re.search(r"template\s*<[^<>]*>\s*(?:extern\s+\"C\"\s*)?$", head):
            continue
        params = [p.strip() for p in m.group(2).split(",")] if m.group(2).strip() else []
        if params == ["void"]:
            params = []
        decl = []
        for p in params:
            try:
                decl.append(_c_type(_resolve_typedefs(p.split("=")[0].strip(), typedefs)))
            except ArgumentValueError:
                decl.append(None)
        name = m.group(1)
        if name in out and out[name] != decl:
            conflicting.add(name)
        out[name] = decl
    for name in conflicting:
        del out[name]
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
        if kind in (INT, UINT) and size == 16 and p.kind == BYTES:
            out.append(Param(kind, 16, p.align, p.offset, None))   # __int128: PTX gives .b8[16]
        elif kind in (BOOL, BFLOAT16) and p.kind in (BYTES, INT, UINT, INTEGER, ANY):
            out.append(Param(kind, p.size, p.align, p.offset, None))   # PTX: .u8 / .b8[2]; the declaration says more
        elif kind == BYTES or p.kind == BYTES:
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


def _is_param(x) -> bool:
    return hasattr(x, "kind") and hasattr(x, "size") and hasattr(x, "offset")


def as_layout(layout, kernel: str = "kernel") -> list:
    """A layout from what :func:`pycudadrv.pack_arguments` takes: a signature
    string, a sequence of type names / numpy dtypes (see
    :func:`parse_signature`), or a list of Params (returned as given, checked
    later by :func:`check_layout`). Raises ArgumentTypeError for anything
    else or for a list that mixes Params and type names."""
    if not isinstance(layout, (str, bytes, bytearray)):
        if isinstance(layout, (dict, np.dtype)) or not hasattr(layout, "__iter__"):
            raise ArgumentTypeError(f"kernel '{kernel}': a layout is a signature string, a sequence of type names "
                                    f"or numpy dtypes, or a list of Param; got {type(layout).__name__} "
                                    f"{_bounded_repr(layout)}")
        layout = list(layout)
        params = [_is_param(x) for x in layout]
        if params and any(params) and not all(params):
            raise ArgumentTypeError(f"kernel '{kernel}': the layout mixes Param entries and type names (entry "
                                    f"#{params.index(not params[0])} differs from entry #0); give one or the other")
        if params and params[0]:
            return layout
    return parse_signature(layout)


# The sizes a parameter of each kind can have (ANY and BYTES: any size).
_KIND_SIZES = {INT: (1, 2, 4, 8, 16), UINT: (1, 2, 4, 8, 16), INTEGER: (1, 2, 4, 8), FLOAT: (2, 4, 8), POINTER: (8,),
               BOOL: (1,), BFLOAT16: (2,)}


def check_layout(layout, kernel: str, limit: int) -> list:
    """``layout`` as a list, each entry checked: a Param whose kind is a
    ParamKind (0..6) and whose size (1 .. ``limit`` bytes, one the kind can
    have: 8 for POINTER, 2/4/8 for FLOAT, ...) and offset
    (0 .. 2**63-1; where the parameters end is checked against ``limit``
    when the layout is set) are ints, never a float truncated or a bool.
    ``limit`` is the driver's parameter space in bytes. Raises ArgumentTypeError for
    an entry or field of the wrong type, ArgumentValueError for one out of
    range (naming the kernel, the parameter, the field and the limit)."""
    if isinstance(layout, (str, bytes, bytearray, dict)) or not hasattr(layout, "__iter__"):
        raise ArgumentTypeError(f"kernel '{kernel}': a layout is a list of Param, got {type(layout).__name__}")
    layout = list(layout)
    for k, prm in enumerate(layout):
        if not _is_param(prm):
            raise ArgumentTypeError(f"kernel '{kernel}': layout entry #{k} is {_bounded_repr(prm)}, not a "
                                    "Param(kind, size, align, offset)")
        where = f"kernel '{kernel}': parameter #{k} of the layout"
        for what in ("kind", "size", "offset"):
            v = getattr(prm, what)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise ArgumentTypeError(f"{where}: {what} must be an int, got {_bounded_repr(v)}")
        if not ANY <= prm.kind <= BFLOAT16:
            raise ArgumentValueError(f"{where}: kind {_bounded_repr(prm.kind)} is not a ParamKind (0..8): "
                                     f"{_bounded_repr(prm, 120)}")
        if prm.size <= 0:
            raise ArgumentValueError(f"{where} has {prm.size} bytes: a kernel parameter has at least one")
        sizes = _KIND_SIZES.get(prm.kind)
        if sizes is not None and prm.size not in sizes:
            allowed = ", ".join(map(str, sizes[:-1])) + (" or " if len(sizes) > 1 else "") + str(sizes[-1])
            raise ArgumentValueError(f"{where}: {KIND_NAMES[ParamKind(prm.kind)]} parameters have {allowed} "
                                     f"bytes, not {_bounded_repr(prm.size)}")
        if prm.size > limit:
            raise ArgumentValueError(f"{where} is {_bounded_repr(prm.size)} bytes, beyond the driver's limit of "
                                     f"{limit} bytes for all of a kernel's parameters together")
        if not 0 <= prm.offset < 2**63:
            raise ArgumentValueError(f"{where}: offset {_bounded_repr(prm.offset)} is outside [0, 2**63) (and "
                                     f"the parameters must end within the driver's limit of {limit} bytes)")
    return layout


def param_limit(driver_version: int, cc_major: int) -> int:
    """Bytes of kernel parameters the driver accepts on this device."""
    return PARAM_LIMIT_LARGE if driver_version >= 12010 and cc_major >= 7 else PARAM_LIMIT_CLASSIC


def format_layout(layout) -> str:
    """``"#0 pointer @0, #1 int32 @8, ..."``: a layout for messages."""
    return ", ".join(f"#{i} {p.describe()} @{p.offset}" for i, p in enumerate(layout or ()))
