# cython: language_level=3
"""The range tracker of :class:`pycudadrv.Queue`: per byte range of device
memory, the last writer and, per lane, the latest reader since (a sorted list
of disjoint segments, the C twin of tests/queue_model.py's RangeTracker, its
reference model). What an access must wait for goes to
pycudadrv._lanes.add_dep."""
cimport cython
from libc.stdint cimport uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memmove
from cpython.object cimport PyObject
from pycudadrv._lanes cimport Submission, _Lane, DepList, add_dep
from pycudadrv._tracker cimport TrackHint

from pycudadrv._errors import StateError

__all__ = []

cdef enum:
    # Segments beyond which finished ones are dropped (then twice what is kept, at least this): small,
    # so that while the GPU keeps up the sorted list stays short (its inserts and bisects cheap);
    # a prune walk is amortised over at least as many submissions as it keeps.
    _PRUNE_MIN = 64


# Not tracked by the garbage collector: no cycle passes through a segment (Submissions do not reach the tracker).
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.no_gc
@cython.freelist(128)       # segments come and go with every new range written and every prune
@cython.auto_pickle(False)
cdef class _Seg:
    pass


cdef inline _Seg _new_seg(uint64_t lo, uint64_t hi, Submission writer, Submission reader):
    cdef _Seg s = _Seg.__new__(_Seg)
    s.lo = lo
    s.hi = hi
    s.writer = writer
    s.reader_a = reader
    return s


cdef extern from *:
    PyObject** _list_items "PySequence_Fast_ITEMS"(object seq)     # a list's items (borrowed)


cdef inline int _insert(list segs, Py_ssize_t i, _Seg seg) except -1:
    """Insert ``seg`` at ``i`` with one memmove (list.insert moves the items after ``i`` one at a time)."""
    cdef Py_ssize_t n = len(segs)
    cdef PyObject** items
    segs.append(seg)                    # the new reference, and room for it
    if i < n:
        items = _list_items(segs)
        memmove(items + i + 1, items + i, (n - i) * sizeof(PyObject*))
        items[i] = <PyObject*>seg
    return 0


cdef inline _Seg _copy_seg(_Seg seg, uint64_t lo, uint64_t hi):
    cdef _Seg s = _new_seg(lo, hi, seg.writer, seg.reader_a)
    s.reader_b = seg.reader_b
    if seg.rs is not None:
        s.rs = list(seg.rs)
    return s


cdef inline int _clear_readers(_Seg seg) except -1:
    seg.reader_a = None
    seg.reader_b = None
    seg.rs = None
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline Py_ssize_t _bisect(list segs, uint64_t x, bint at):
    """The number of segments that start before ``x`` (with ``at``: at or before it)."""
    cdef Py_ssize_t lo = 0, hi = len(segs), mid
    cdef uint64_t start
    if hi:
        start = (<_Seg>segs[hi - 1]).lo     # past the last start (memory newer than all tracked, mostly): no search
        if start < x or (at and start == x):
            return hi
    while lo < hi:
        mid = (lo + hi) >> 1
        start = (<_Seg>segs[mid]).lo
        if start < x or (at and start == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t _slot(uint64_t lo, Py_ssize_t cap):
    """The home slot of start address ``lo`` in an index of ``cap`` slots (a power of two): the address
    mixed (xor-shift, multiply, xor-shift) so that aligned addresses spread over the low bits."""
    cdef uint64_t x = lo >> 4
    x ^= x >> 31
    x *= <uint64_t>0x9E3779B97F4A7C15ULL
    x ^= x >> 29
    return <Py_ssize_t>(x & <uint64_t>(cap - 1))


cdef inline int _drop_finished_readers(_Seg seg) except -1:
    """Keep the readers of ``seg`` not seen complete, reader_a and reader_b first."""
    cdef Submission a = seg.reader_a, b = seg.reader_b
    cdef list more = None
    if a is not None and a.done:
        a = None
    if b is not None and b.done:
        b = None
    if seg.rs is not None:
        more = [r for r in seg.rs if not (<Submission>r).done]
    if a is None:
        a, b = b, None
    if more:
        if a is None:
            a = <Submission>more.pop(0)
        if b is None and more:
            b = <Submission>more.pop(0)
    seg.reader_a = a
    seg.reader_b = b
    seg.rs = more if more else None
    return 0


cdef inline int _add_reader(_Seg seg, Submission sub) except -1:
    """``sub`` reads the segment: it replaces the reader of its lane, or joins them after those seen
    complete are dropped (they order nothing). Replacing by lane alone kept a reader per lane ever seen:
    with a new Stream per submission reading shared memory, the list and every Stream (a Submission
    holds its lane, the lane its Stream) grew without end."""
    cdef list rs = seg.rs
    cdef Py_ssize_t k
    cdef _Lane lane = sub.lane
    if seg.reader_a is not None and seg.reader_a.lane is lane:
        seg.reader_a = sub
        return 0
    if seg.reader_b is not None and seg.reader_b.lane is lane:
        seg.reader_b = sub
        return 0
    if rs is not None:
        for k in range(len(rs)):
            if (<Submission>rs[k]).lane is lane:
                rs[k] = sub
                return 0
    if rs is not None or (seg.reader_a is not None and seg.reader_a.done) or (seg.reader_b is not None and seg.reader_b.done):
        _drop_finished_readers(seg)
    if seg.reader_a is None:
        seg.reader_a = sub
    elif seg.reader_b is None:
        seg.reader_b = sub
    elif seg.rs is None:
        seg.rs = [sub]
    else:
        seg.rs.append(sub)
    return 0


cdef inline int _reader_deps(Submission r, Submission me, DepList* deps, long long gen) except -1:
    if r is not None and not r.done and r is not me:
        add_dep(deps, gen, r)
    return 0


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.auto_pickle(False)
cdef class _Tracker:
    """Disjoint byte ranges ``[lo, hi)`` with the last writer and, per lane, the latest reader since
    (the C twin of tests/queue_model.py's RangeTracker, its reference model)."""

    def __cinit__(self):
        self.segs = []
        self.limit = _PRUNE_MIN

    def __dealloc__(self):
        free(self.keys)
        free(self.vals)

    # -- the index by start address (every change to `segs` keeps it in step) ----------------------
    cdef void* _find(self, uint64_t lo) noexcept:
        """The segment starting at ``lo`` (a borrowed pointer), or NULL."""
        cdef Py_ssize_t i, mask = self.cap - 1
        cdef void* v
        if self.count == 0:
            return NULL
        i = _slot(lo, self.cap)
        while True:
            v = self.vals[i]
            if v == NULL or self.keys[i] == lo:
                return v
            i = (i + 1) & mask

    cdef int _put(self, _Seg seg) except -1:
        """Index ``seg`` (held by ``segs``) by its start."""
        cdef Py_ssize_t i, k, mask, old_cap = self.cap, cap
        cdef uint64_t* old_keys = self.keys
        cdef void** old_vals = self.vals
        if 2 * (self.count + 1) > self.cap:
            cap = max(64, 2 * old_cap)
            self.keys = <uint64_t*>calloc(cap, sizeof(uint64_t))
            self.vals = <void**>calloc(cap, sizeof(void*))
            if self.keys == NULL or self.vals == NULL:
                free(self.keys)
                free(self.vals)
                self.keys = old_keys
                self.vals = old_vals
                raise MemoryError("Queue range tracker index")
            self.cap = cap
            mask = cap - 1
            for k in range(old_cap):
                if old_vals[k] != NULL:
                    i = _slot(old_keys[k], cap)
                    while self.vals[i] != NULL:
                        i = (i + 1) & mask
                    self.keys[i] = old_keys[k]
                    self.vals[i] = old_vals[k]
            free(old_keys)
            free(old_vals)
        mask = self.cap - 1
        i = _slot(seg.lo, self.cap)
        while self.vals[i] != NULL:
            if self.keys[i] == seg.lo:
                self.vals[i] = <void*>seg
                return 0
            i = (i + 1) & mask
        self.keys[i] = seg.lo
        self.vals[i] = <void*>seg
        self.count += 1
        return 0

    cdef int _drop(self, uint64_t lo):
        """Forget the segment starting at ``lo`` (backward-shift deletion: no tombstones)."""
        cdef Py_ssize_t i, j, k, mask = self.cap - 1
        if self.count == 0:
            return 0
        i = _slot(lo, self.cap)
        while True:
            if self.vals[i] == NULL:
                return 0
            if self.keys[i] == lo:
                break
            i = (i + 1) & mask
        self.vals[i] = NULL
        self.count -= 1
        j = i
        while True:
            j = (j + 1) & mask
            if self.vals[j] == NULL:
                return 0
            k = _slot(self.keys[j], self.cap)
            # Stays where it is when its home slot k lies cyclically in (i, j].
            if (i <= j and i < k <= j) or (i > j and (k > i or k <= j)):
                continue
            self.keys[i] = self.keys[j]
            self.vals[i] = self.vals[j]
            self.vals[j] = NULL
            i = j

    cdef int reset(self) except -1:
        """Forget every segment (the index keeps its capacity: a queue resets its tracker at each sync)."""
        self.version += 1
        self.removals += 1
        self._reindex([])
        self.segs = []
        self.limit = _PRUNE_MIN
        return 0

    cdef int _reindex(self, list segs) except -1:
        """Index exactly ``segs`` (about to become the segment list)."""
        cdef _Seg seg
        cdef Py_ssize_t k
        for k in range(self.cap):
            self.vals[k] = NULL
        self.count = 0
        for seg in segs:
            self._put(seg)
        return 0

    def __len__(self):
        return len(self.segs)

    cdef Submission _deps_of(self, _Seg seg, bint write, Submission me, DepList* deps, long long gen):
        cdef Submission w = seg.writer
        cdef Submission found = None
        cdef object r
        if w is not None and not w.done and w is not me:
            add_dep(deps, gen, w)
            found = w
        if write:
            _reader_deps(seg.reader_a, me, deps, gen)
            _reader_deps(seg.reader_b, me, deps, gen)
            if seg.rs is not None:
                for r in seg.rs:
                    _reader_deps(<Submission>r, me, deps, gen)
        return found

    cdef Submission collect(self, uint64_t lo, uint64_t hi, bint write, Submission me, DepList* deps,
                            long long gen, TrackHint* hint):
        """Hand :func:`add_dep` what an access of ``[lo, hi)`` must wait for; return the pending writer of
        its first overlapping segment that has one (or None). Changes nothing here; ``hint`` gets what
        :meth:`commit` of the same range can skip looking up again."""
        cdef list segs = self.segs
        cdef Py_ssize_t i, n
        cdef void* hit = self._find(lo)
        cdef _Seg seg
        cdef Submission found = None, f
        if hit != NULL and (<_Seg>hit).hi == hi:    # the same range again (a whole Buffer, mostly)
            hint.seg = hit
            hint.at = -1
            hint.stamp = self.removals
            return self._deps_of(<_Seg>hit, write, me, deps, gen)
        hint.seg = NULL
        n = len(segs)
        i = _bisect(segs, lo, True)
        if (i == 0 or (<_Seg>segs[i - 1]).hi <= lo) and (i == n or (<_Seg>segs[i]).lo >= hi):
            hint.at = i            # overlaps nothing tracked: nothing to wait for, one new segment at i
            hint.stamp = self.version
            return None
        hint.at = -1
        i -= 1
        if i < 0:
            i = 0
        while i < n:
            seg = <_Seg>segs[i]
            if seg.lo >= hi:
                break
            if seg.hi > lo:
                f = self._deps_of(seg, write, me, deps, gen)
                if found is None:
                    found = f
            i += 1
        return found

    cdef int _split(self, uint64_t x) except -1:
        cdef list segs = self.segs
        cdef Py_ssize_t i = _bisect(segs, x, True) - 1
        cdef _Seg seg, tail
        if i < 0:
            return 0
        seg = <_Seg>segs[i]
        if seg.lo == x or seg.hi <= x:
            return 0
        self.removals += 1      # `seg` is cut
        tail = _copy_seg(seg, x, seg.hi)
        _insert(segs, i + 1, tail)
        self._put(tail)
        seg.hi = x
        return 0

    cdef int commit(self, uint64_t lo, uint64_t hi, bint write, Submission sub, TrackHint* hint) except -1:
        """Record that ``sub`` reads (or writes) ``[lo, hi)``; ``hint`` (or NULL) is what :meth:`collect`
        found for the same range, used while nothing changed since that makes it stale."""
        cdef list segs = self.segs
        cdef Py_ssize_t n, i, j, k
        cdef void* hit
        cdef _Seg seg, gap
        cdef uint64_t pos
        cdef list new
        if hint != NULL:
            if hint.seg != NULL and hint.stamp == self.removals:
                hit = hint.seg          # still held by `segs`, its range unchanged
            elif hint.at >= 0 and hint.stamp == self.version:
                self.version += 1       # `segs` unchanged since: no overlap, and its place is known
                seg = _new_seg(lo, hi, sub, None) if write else _new_seg(lo, hi, None, sub)
                _insert(segs, hint.at, seg)
                self._put(seg)
                if len(segs) > self.limit:
                    self.prune()
                return 0
            else:
                hit = self._find(lo)
        else:
            hit = self._find(lo)
        if hit != NULL and (<_Seg>hit).hi == hi:    # the same range again (a whole Buffer, mostly)
            seg = <_Seg>hit
            if write:
                seg.writer = sub
                _clear_readers(seg)
            else:
                _add_reader(seg, sub)
            return 0
        self.version += 1
        n = len(segs)
        i = _bisect(segs, lo, True)
        if (i == 0 or (<_Seg>segs[i - 1]).hi <= lo) and (i == n or (<_Seg>segs[i]).lo >= hi):
            # Overlaps nothing tracked: one new segment.
            seg = _new_seg(lo, hi, sub, None) if write else _new_seg(lo, hi, None, sub)
            _insert(segs, i, seg)
            self._put(seg)
        else:
            self.removals += 1      # a write replaces what it covers
            self._split(lo)
            self._split(hi)
            i = _bisect(segs, lo, False)
            j = _bisect(segs, hi, False)
            if write:
                for k in range(i, j):
                    self._drop((<_Seg>segs[k]).lo)    # unindexed while `segs` still holds them
                seg = _new_seg(lo, hi, sub, None)
                segs[i:j] = [seg]
                self._put(seg)
            else:
                new = []
                pos = lo
                for k in range(i, j):
                    seg = <_Seg>segs[k]
                    if seg.lo > pos:
                        gap = _new_seg(pos, seg.lo, None, sub)
                        new.append(gap)
                        self._put(gap)
                    _add_reader(seg, sub)
                    new.append(seg)
                    pos = seg.hi
                if pos < hi:
                    gap = _new_seg(pos, hi, None, sub)
                    new.append(gap)
                    self._put(gap)
                segs[i:j] = new
        if len(segs) > self.limit:
            self.prune()
        return 0

    cdef int prune(self) except -1:
        """Drop what only finished submissions touched (a C walk: no list made per segment)."""
        cdef list keep = []
        cdef _Seg seg
        self.version += 1
        self.removals += 1
        for seg in self.segs:
            if seg.reader_a is not None:
                _drop_finished_readers(seg)
            if (seg.writer is None or seg.writer.done) and seg.reader_a is None:
                continue
            keep.append(seg)
        if len(keep) != len(self.segs):
            self._reindex(keep)     # else the index already holds exactly these
        self.segs = keep
        self.limit = max(<Py_ssize_t>_PRUNE_MIN, 2 * len(keep))
        return 0

    def _dump(self):
        """``[(lo, hi, writer seq or None, sorted reader seqs)]`` (tests compare it with the reference model);
        raises StateError if the index by start address is out of step with the segments."""
        cdef _Seg seg
        cdef Py_ssize_t k, held = 0
        for k in range(self.cap):
            held += self.vals[k] != NULL
        for seg in self.segs:
            if self._find(seg.lo) != <void*>seg:
                held = -1
        if held != self.count or self.count != len(self.segs):
            raise StateError(f"Queue range tracker: the index by start address is out of step with "
                                 f"the {len(self.segs)} segments ({self.count} indexed)")
        return [(seg.lo, seg.hi, None if seg.writer is None else seg.writer.seq,
                 sorted(r.seq for r in [seg.reader_a, seg.reader_b, *(seg.rs or ())] if r is not None)) for seg in self.segs]


