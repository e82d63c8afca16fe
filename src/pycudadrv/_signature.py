"""Kernel parameter layouts: from PTX ``.entry`` signatures or from a
signature the user writes. Pure Python (no driver needed).

A layout is a list of ``Param(kind, size, align, offset)``. ``kind`` tells
which Python values a parameter accepts and how they become bytes:

=========  ===========================================================
ANY        size known only (``cuFuncGetParamInfo``): int -> integer of
           that width, float -> IEEE float of that width (2, 4, 8),
           pointers need 8 bytes
INT/UINT   signed/unsigned integer of ``size`` bytes (explicit signatures)
INTEGER    integer of ``size`` bytes, either signedness (PTX ``.u``/``.s``/
           ``.b``, whose signedness is not reliable); 8-byte ones also take
           pointers (PTX gives pointers as ``.u64``)
FLOAT      IEEE float of ``size`` bytes (2 = half); ints are converted
POINTER    device pointer (8 bytes): Buffer, view, None, CAI object, int
BYTES      raw bytes (structs, arrays): numpy structured scalars or
           bytes-like values of exactly ``size`` bytes
=========  ===========================================================
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

ANY, INT, UINT, FLOAT, POINTER, BYTES, INTEGER = range(7)
KIND_NAMES = {ANY: "any", INT: "int", UINT: "uint", FLOAT: "float", POINTER: "pointer", BYTES: "bytes",
              INTEGER: "integer"}

#: Classic parameter space limit (bytes) and the one of CUDA 12.1+ drivers on Volta+.
PARAM_LIMIT_CLASSIC = 4096
PARAM_LIMIT_LARGE = 32764


class Param(NamedTuple):
    kind: int
    size: int
    align: int
    offset: int

    def describe(self) -> str:
        return f"{KIND_NAMES[self.kind]}{self.size * 8 if self.kind != BYTES else ''}" + (
            f"[{self.size} bytes]" if self.kind == BYTES else "")


def _place(items):
    """Assign offsets with natural alignment: items are (kind, size, align)."""
    out, off = [], 0
    for kind, size, align in items:
        off = (off + align - 1) // align * align
        out.append(Param(kind, size, align, off))
        off += size
    return out


_PTX_TYPES = {"u": INTEGER, "s": INTEGER, "b": INTEGER, "f": FLOAT}
_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(([^)]*)\)", re.S)
_PARAM_RE = re.compile(
    r"\.param\s+(?:\.align\s+(\d+)\s+)?\.([usbf])(\d+)\s+(?:\.ptr\s+(?:\.\w+\s+)*)?"
    r"(?:\.align\s+(\d+)\s+)?[\w$%]+\s*(?:\[(\d+)\])?")


def _strip_ptx_comments(ptx: str) -> str:
    ptx = re.sub(r"/\*.*?\*/", " ", ptx, flags=re.S)
    return re.sub(r"//[^\n]*", "", ptx)


def ptx_entries(ptx: str) -> dict:
    """Map each ``.entry`` name in PTX text to its parameter layout.

    ``.param .u64 x`` -> INTEGER 8; ``.param .f32 x`` -> FLOAT 4; an array
    ``.param .align 8 .b8 x[16]`` -> BYTES 16 aligned to 8; ``.ptr`` params
    -> POINTER.
    """
    out = {}
    ptx = _strip_ptx_comments(ptx)
    for m in _ENTRY_RE.finditer(ptx):
        name, body = m.group(1), m.group(2)
        items = []
        for p in body.split(","):
            p = " ".join(p.split())
            if not p:
                continue
            pm = _PARAM_RE.search(p)
            if pm is None:
                raise ValueError(f"cannot parse PTX parameter {p!r} of .entry {name}")
            align_a, t, bits, align_b, count = pm.groups()
            if int(bits) not in (8, 16, 32, 64) or (t == "f" and int(bits) == 8):
                raise ValueError(f"unsupported PTX parameter type .{t}{bits} in .entry {name}: {p!r}")
            if (align_a or align_b) and int(align_a or align_b) not in (1, 2, 4, 8, 16, 32, 64, 128):
                raise ValueError(f"bad PTX .align in .entry {name}: {p!r}")
            size = int(bits) // 8
            if count is not None:
                if int(count) == 0:
                    raise ValueError(f"zero-length PTX parameter array in .entry {name}: {p!r}")
                n = int(count) * size
                items.append((BYTES, n, int(align_a or align_b or size)))
            elif ".ptr" in p:
                items.append((POINTER, 8, 8))
            else:
                kind = _PTX_TYPES[t]
                items.append((kind, size, int(align_a or align_b or size)))
        out[name] = _place(items)
    return out


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
    "char2": (BYTES, 2, 2), "uchar2": (BYTES, 2, 2), "char4": (BYTES, 4, 4), "uchar4": (BYTES, 4, 4),
    "short2": (BYTES, 4, 4), "ushort2": (BYTES, 4, 4), "short4": (BYTES, 8, 8), "ushort4": (BYTES, 8, 8),
    "int2": (BYTES, 8, 8), "uint2": (BYTES, 8, 8), "int3": (BYTES, 12, 4), "uint3": (BYTES, 12, 4),
    "int4": (BYTES, 16, 16), "uint4": (BYTES, 16, 16),
    "float2": (BYTES, 8, 8), "float3": (BYTES, 12, 4), "float4": (BYTES, 16, 16),
    "double2": (BYTES, 16, 16), "double3": (BYTES, 24, 8), "double4": (BYTES, 32, 16),
    "longlong2": (BYTES, 16, 16), "ulonglong2": (BYTES, 16, 16),
    "complex64": (BYTES, 8, 4), "complex128": (BYTES, 16, 8),
}

_QUALIFIERS = {"const", "volatile", "__restrict__", "restrict", "__restrict", "struct"}
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
    'unsigned long int n', 'int') into (kind, size, align), or None if it is
    not a C type we know."""
    s = text.replace("*", " * ").replace("&", " & ")
    words = s.split()
    if "&" in words:
        raise ValueError(f"reference parameter {text!r}: kernels take values or pointers")
    if "*" in words:
        base = [w for w in words[:words.index("*")] if w not in _QUALIFIERS]
        if not base or not all(re.fullmatch(r"[A-Za-z_]\w*", w) for w in base):
            raise ValueError(f"cannot parse parameter {text!r}")
        return (POINTER, 8, 8)
    words = [w for w in words if w not in _QUALIFIERS]
    if "double" in words and "long" in words:
        raise ValueError(f"long double parameter {text!r} is not supported by CUDA kernels")
    for drop_name in (False, True):  # 'float x' -> 'float'
        if drop_name and (len(words) <= 1 or words[-1] in _TYPE_WORDS):
            break
        ws = words[:-1] if drop_name else words
        key = " ".join(ws)
        if key in _C_TYPES:
            v = _C_TYPES[key]
            return (v[0], v[1], v[2] if len(v) > 2 else v[1])
        canon = _INT_SPELLINGS.get(tuple(sorted(ws)))
        if canon is not None:
            v = _C_TYPES[canon]
            return (v[0], v[1], v[1])
    return None


def _one_type(t):
    if isinstance(t, str):
        if t.strip() in ("ptr", "pointer"):
            return (POINTER, 8, 8)
        if t.strip() == "void":
            raise ValueError("a kernel parameter cannot be void")
        ct = _c_type(t)
        if ct is not None:
            return ct
        s = t.strip()
        if not re.fullmatch(r"[A-Za-z][\w]*", s):
            raise ValueError(f"unknown parameter type {t!r} in signature")
        try:
            t = np.dtype(s)
        except TypeError:
            raise ValueError(f"unknown parameter type {t!r} in signature") from None
    elif not isinstance(t, (np.dtype, type)):
        raise ValueError(f"unknown parameter type {t!r} in signature (use a C type name or a numpy dtype)")
    dt = np.dtype(t)
    if dt.fields is not None or dt.kind == "V":
        return (BYTES, dt.itemsize, dt.alignment)
    if dt.kind == "c":
        return (BYTES, dt.itemsize, dt.itemsize // 2)
    kind = {"i": INT, "u": UINT, "b": UINT, "f": FLOAT}.get(dt.kind)
    if kind is None:
        raise ValueError(f"unsupported parameter dtype {dt} in signature")
    return (kind, dt.itemsize, dt.alignment)


def parse_signature(sig) -> list:
    """Layout from a user signature: a C-like string (``"float*, const float*,
    int, float"``) or a sequence of type names / numpy dtypes ("ptr" or any
    ``T*`` is a device pointer; structured dtypes are structs)."""
    if isinstance(sig, str):
        parts = [p.strip() for p in sig.split(",")] if sig.strip() else []
    elif isinstance(sig, (bytes, bytearray)):
        raise ValueError("a signature is a str or a sequence of types, not bytes")
    else:
        parts = list(sig)
    return _place([_one_type(p) for p in parts])


def param_limit(driver_version: int, cc_major: int) -> int:
    """Bytes of kernel parameters the driver accepts on this device."""
    return PARAM_LIMIT_LARGE if driver_version >= 12010 and cc_major >= 7 else PARAM_LIMIT_CLASSIC


def format_layout(layout) -> str:
    return ", ".join(f"#{i} {p.describe()} @{p.offset}" for i, p in enumerate(layout))
