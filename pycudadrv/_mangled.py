"""Reading the parameter types of a C++ kernel from its mangled name
(Itanium C++ ABI, ``_Z...``): just enough of the grammar for kernel
signatures. Pure Python; :func:`pycudadrv._signature.mangled_params` turns
what it reads into parameter kinds."""
from __future__ import annotations

import re
from typing import Any

from pycudadrv._errors import ArgumentValueError
from pycudadrv._marshal import ParamKind

__all__ = ["Demangler", "Unreadable", "MANGLED_BUILTINS", "MANGLED_BUILTINS_D"]

INT, UINT, FLOAT, POINTER, BOOL = ParamKind.INT, ParamKind.UINT, ParamKind.FLOAT, ParamKind.POINTER, ParamKind.BOOL

MANGLED_BUILTINS = {
    "b": (BOOL, 1), "c": (INT, 1), "a": (INT, 1), "h": (UINT, 1), "s": (INT, 2), "t": (UINT, 2),
    "i": (INT, 4), "j": (UINT, 4), "l": (INT, 8), "m": (UINT, 8), "x": (INT, 8), "y": (UINT, 8),
    "f": (FLOAT, 4), "d": (FLOAT, 8), "w": (INT, 4), "n": (INT, 16), "o": (UINT, 16), "v": (None, 0),
}
MANGLED_BUILTINS_D = {"Dh": (FLOAT, 2), "Ds": (UINT, 2), "Di": (UINT, 4), "Du": (UINT, 1), "Dn": (POINTER, 8)}
_DIGITS_RE = re.compile(r"\d+")
_SEQ_ID_RE = re.compile(r"[0-9A-Z]*")
_STD_SUBS = {"St": "std", "Sa": "std::allocator", "Sb": "std::basic_string", "Ss": "std::string",
             "Si": "std::istream", "So": "std::ostream", "Sd": "std::iostream"}


#: A demangled type: ("builtin", code), ("named", name), ("ptr", inner), ("cv", const, inner), ...
Type = tuple[Any, ...]


class Unreadable(ArgumentValueError):
    """A mangled name this reader does not know (never escapes mangled_params)."""


class Demangler:
    """Just enough of the Itanium C++ ABI to read a kernel's parameter types:
    builtins, pointers, cv-qualifiers, named types, nested names, template
    arguments and parameters, substitutions. Raises Unreadable on anything
    else, on numbers or nesting beyond any real name's, and at the end of the text."""

    MAX_DEPTH = 64      # nested types/template arguments: real kernels stay far below

    def __init__(self, s: str) -> None:
        self.s, self.i, self.depth = s, 0, 0
        self.subs: list[Type] = []
        self.targs: list[Type] = []

    def peek(self, n: int = 1) -> str:
        return self.s[self.i:self.i + n]

    def eat(self, tok: str) -> None:
        if not self.s.startswith(tok, self.i):
            raise Unreadable(f"expected {tok!r} at {self.i}")
        self.i += len(tok)

    def number(self) -> int:
        m = _DIGITS_RE.match(self.s, self.i)
        if not m:
            raise Unreadable(f"expected a number at {self.i}")
        if len(m.group()) > 9:
            raise Unreadable(f"a length of {len(m.group())} digits at {self.i}")
        self.i = m.end()
        return int(m.group())

    def source_name(self) -> str:
        n = self.number()
        name = self.s[self.i:self.i + n]
        if len(name) != n:
            raise Unreadable("truncated name")
        self.i += n
        return name

    def seq_id(self) -> int:
        m = _SEQ_ID_RE.match(self.s, self.i)
        if m is None or len(m.group()) > 9:
            raise Unreadable(f"an unreadable sequence id at {self.i}")
        self.i = m.end()
        self.eat("_")
        return 0 if not m.group() else int(m.group(), 36) + 1

    def substitution(self) -> Type:
        two = self.peek(2)
        if two in _STD_SUBS:
            self.i += 2
            return ("named", _STD_SUBS[two])
        self.eat("S")
        k = self.seq_id()
        if k >= len(self.subs):
            raise Unreadable(f"substitution S{k} beyond the table")
        return self.subs[k]

    def template_param(self) -> Type:
        self.eat("T")
        k = self.seq_id()
        if k >= len(self.targs):
            raise Unreadable(f"template parameter T{k} unknown")
        return self.targs[k]

    def template_args(self) -> list[Type]:
        self.eat("I")
        args = []
        while self.peek() != "E":
            if self.peek() == "L":      # a literal: L <type> <value> E
                self.i += 1
                self.type_()
                end = self.s.find("E", self.i)
                if end < 0:
                    raise Unreadable(f"unterminated literal at {self.i}")
                self.i = end + 1
                args.append(("literal",))
            elif self.peek() == "X":
                raise Unreadable("expression template arguments")
            elif self.peek() == "J":    # an argument pack
                self.i += 1
                while self.peek() != "E":
                    args.append(self.type_())
                self.eat("E")
            else:
                args.append(self.type_())
        self.eat("E")
        return args

    def unqualified(self) -> str:
        if self.peek().isdigit():
            return self.source_name()
        raise Unreadable(f"unsupported name component at {self.i}")

    def name(self) -> bool:
        """The function's name; returns whether it is a template (its return type comes first)."""
        if self.peek() == "N":
            self.i += 1
            while self.peek() in ("K", "V", "r"):
                self.i += 1
            is_template, parts = False, list[str]()
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
                    self.subs.append(("named", parts[-1]))   # every prefix is a candidate (its last part decides)
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

    def type_(self) -> Type:
        self.depth += 1
        if self.depth > self.MAX_DEPTH:
            raise Unreadable(f"types nested more than {self.MAX_DEPTH} deep")
        try:
            return self._type()
        finally:
            self.depth -= 1

    def _type(self) -> Type:
        c = self.peek()
        t: Type
        if c in MANGLED_BUILTINS:
            self.i += 1
            return ("builtin", c)
        if self.peek(2) in MANGLED_BUILTINS_D:
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
                parts: list[str] = []
                while self.peek() != "E":
                    if self.peek() == "I":
                        self.template_args()
                        parts[-1] += "<...>"
                    else:
                        parts.append(self.substitution()[1] if self.peek() == "S" else self.unqualified())
                    self.subs.append(("named", parts[-1] if parts else ""))
                self.eat("E")
                return ("named", parts[-1] if parts else "")
            t = ("named", self.source_name())
            self.subs.append(t)
            if self.peek() == "I":
                self.template_args()
                t = ("named", t[1] + "<...>")
                self.subs.append(t)
            return t
        raise Unreadable(f"unsupported type code {c!r} at {self.i}")
