"""Who touched which bytes of device memory, pure Python (no driver): the
byte range of a Buffer, a view or a CAI object (:func:`span`, what the Queue
tracks), and :class:`RangeTracker`, the reference model of the Queue's hazard
bookkeeping (the Queue itself runs its C twin in pycudadrv._queue; the tests
check the two agree).

A tracker holds disjoint byte ranges ``[lo, hi)`` of the (unified) device
address space; each has the last submission that wrote it and, per lane
(stream), the latest submission that read it since. A submission is any
object with ``seq`` (issue order), ``lane`` (hashable) and ``done``.
:func:`span` gives the range of a Buffer, a view or a CAI object."""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError
from pycudadrv._memory import Buffer

__all__ = ["RangeTracker", "span"]


def span(obj, what):
    """``(lo, hi)`` device addresses (bytes, ``hi`` exclusive) of a Buffer, a
    view, or an object with ``__cuda_array_interface__``; None for an empty one.

    For a CAI object the range covers every byte any element reaches: from
    ``data`` plus the most negative stride steps to the last element's end
    (C-contiguous when ``strides`` is None). ``what`` names the caller in
    messages.

    Raises
    ------
    ArgumentTypeError
        No Buffer and no ``__cuda_array_interface__`` dict; in the dict, a
        ``data`` pointer, ``shape`` or ``strides`` entry that is not an int, a
        ``shape`` or ``strides`` that is not a tuple, or a ``typestr`` that is
        missing or not a str.
    ArgumentValueError
        A negative ``shape`` entry, ``strides`` of another length than
        ``shape``, a ``typestr`` numpy cannot read (or of zero-size
        elements), or a range outside ``[0, 2**64)``.
    """
    if isinstance(obj, Buffer):
        n = obj.nbytes
        if n == 0:
            return None
        lo = obj.ptr
        return (lo, lo + n)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if not isinstance(cai, dict):
        raise ArgumentTypeError(f"{what}: expected a pycudadrv Buffer (or a view, or an object with "
                                f"__cuda_array_interface__), got {type(obj).__name__}")
    name = f"{what}: {type(obj).__name__}'s __cuda_array_interface__"
    data = cai.get("data")
    if not isinstance(data, (tuple, list)) or not data or not _is_int(data[0]):
        raise ArgumentTypeError(f"{name} has no valid data pointer: 'data' must be (pointer, read_only) with an int "
                                f"pointer, got {_show(data)}")
    ptr = int(data[0])
    shape = _ints(cai, "shape", name, required=True)
    for k, n in enumerate(shape):
        if n < 0:
            raise ArgumentValueError(f"{name}: shape {shape} has a negative extent at dimension {k}")
    typestr = cai.get("typestr")
    if not isinstance(typestr, str):
        raise ArgumentTypeError(f"{name}: 'typestr' must be a str such as '<f4', got {_show(typestr)}")
    try:
        itemsize = np.dtype(typestr).itemsize
    except (TypeError, ValueError) as err:
        raise ArgumentValueError(f"{name}: typestr {typestr!r} is not a numpy type string ({err})") from err
    if itemsize == 0:
        raise ArgumentValueError(f"{name}: typestr {typestr!r} has zero-size elements")
    strides = _ints(cai, "strides", name, required=False)
    if strides is not None and len(strides) != len(shape):
        raise ArgumentValueError(f"{name}: strides {strides} gives {len(strides)} stride(s) for the "
                                 f"{len(shape)}-dimensional shape {shape}")
    if any(n == 0 for n in shape):
        return None
    lo = hi = 0
    if strides is None:
        hi = itemsize
        for n in shape:
            hi *= n
    else:   # the extent the strides reach, either way
        for n, st in zip(shape, strides):
            if st < 0:
                lo += (n - 1) * st
            else:
                hi += (n - 1) * st
        hi += itemsize
    if ptr + lo < 0 or ptr + hi > 1 << 64:
        raise ArgumentValueError(f"{name}: the elements reach bytes [{ptr + lo:#x}, {ptr + hi:#x}), outside the "
                                 "64-bit address space (data pointer, shape and strides do not fit together)")
    return (ptr + lo, ptr + hi)


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _ints(cai, key, name, required):
    """``cai[key]`` as a tuple of Python ints (None when absent or None and not ``required``)."""
    v = cai.get(key)
    if v is None and not required:
        return None
    if key not in cai:
        raise ArgumentTypeError(f"{name} has no '{key}' (a tuple of ints)")
    if not isinstance(v, (tuple, list)) or not all(_is_int(x) for x in v):
        raise ArgumentTypeError(f"{name}: '{key}' must be a tuple of ints, got {_show(v)}")
    return tuple(int(x) for x in v)


def _show(v):
    """``repr(v)`` for a message, at most 80 characters."""
    try:
        text = repr(v)
    except Exception:        # noqa: BLE001 -- a foreign object's repr, or an int too long to print
        text = f"a {type(v).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


class RangeTracker:
    """Disjoint byte ranges ``[lo, hi)`` of device memory, each with the last
    submission that wrote it and, per lane, the latest that read it since."""

    __slots__ = ("starts", "segs", "limit")

    def __init__(self):
        self.starts = []        # sorted segment starts
        self.segs = {}          # start -> [end, writer or None, {lane: reader}]
        self.limit = 1024       # prune finished segments beyond this many

    def __len__(self):
        return len(self.starts)

    @staticmethod
    def _deps_of(seg, write, me, deps):
        found = None
        w = seg[1]
        if w is not None and not w.done and w is not me:
            cur = deps.get(w.lane)
            if cur is None or cur.seq < w.seq:
                deps[w.lane] = w
            found = w
        if write:
            for r in seg[2].values():
                if not r.done and r is not me:
                    cur = deps.get(r.lane)
                    if cur is None or cur.seq < r.seq:
                        deps[r.lane] = r
        return found

    def collect(self, lo, hi, write, me, deps):
        """Add to ``deps`` ({lane: latest Submission}) what an access of
        ``[lo, hi)`` must wait for; return the pending writer of its first
        overlapping segment (or None). Changes nothing."""
        segs = self.segs
        seg = segs.get(lo)
        if seg is not None and seg[0] == hi:
            return self._deps_of(seg, write, me, deps)
        starts = self.starts
        i = bisect_right(starts, lo) - 1
        if i < 0:
            i = 0
        found = None
        n = len(starts)
        while i < n:
            s = starts[i]
            if s >= hi:
                break
            seg = segs[s]
            if seg[0] > lo:
                f = self._deps_of(seg, write, me, deps)
                if found is None:
                    found = f
            i += 1
        return found

    def _split(self, x):
        starts = self.starts
        i = bisect_right(starts, x) - 1
        if i < 0:
            return
        s = starts[i]
        if s == x:
            return
        seg = self.segs[s]
        if seg[0] <= x:
            return
        self.segs[x] = [seg[0], seg[1], dict(seg[2])]
        seg[0] = x
        starts.insert(i + 1, x)

    @staticmethod
    def _add_reader(readers, sub):
        """``sub`` replaces the reader of its lane, or joins them after those seen complete are dropped."""
        if sub.lane not in readers:
            for lane in [lane for lane, r in readers.items() if r.done]:
                del readers[lane]
        readers[sub.lane] = sub

    def commit(self, lo, hi, write, sub):
        """Record that ``sub`` reads (or writes) ``[lo, hi)``."""
        segs = self.segs
        seg = segs.get(lo)
        if seg is not None and seg[0] == hi:
            if write:
                seg[1] = sub
                seg[2] = {}
            else:
                self._add_reader(seg[2], sub)
            return
        self._split(lo)
        self._split(hi)
        starts = self.starts
        i = bisect_left(starts, lo)
        j = bisect_left(starts, hi)
        if write:
            for s in starts[i:j]:
                del segs[s]
            starts[i:j] = [lo]
            segs[lo] = [hi, sub, {}]
        else:
            new = []
            pos = lo
            for s in starts[i:j]:
                if s > pos:
                    new.append(pos)
                    segs[pos] = [s, None, {sub.lane: sub}]
                seg = segs[s]
                self._add_reader(seg[2], sub)
                new.append(s)
                pos = seg[0]
            if pos < hi:
                new.append(pos)
                segs[pos] = [hi, None, {sub.lane: sub}]
            starts[i:j] = new
        if len(starts) > self.limit:
            self.prune()

    def prune(self):
        """Drop what only finished submissions touched."""
        keep = []
        segs = self.segs
        for s in self.starts:
            seg = segs[s]
            readers = seg[2]
            if readers:
                for k in [k for k, r in readers.items() if r.done]:
                    del readers[k]
            w = seg[1]
            if (w is None or w.done) and not readers:
                del segs[s]
            else:
                keep.append(s)
        self.starts = keep
        self.limit = max(1024, 2 * len(keep))
