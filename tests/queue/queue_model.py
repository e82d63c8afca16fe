"""The reference model of the Queue's hazard bookkeeping, pure Python: disjoint byte ranges
``[lo, hi)`` of the (unified) device address space, each with the last submission that wrote it and,
per lane (stream), the latest submission that read it since. A submission is any object with ``seq``
(issue order), ``lane`` (hashable) and ``done``. The Queue runs its C twin (pycudadrv._tracker); the
tests check the two agree."""
from __future__ import annotations

from bisect import bisect_left, bisect_right


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
