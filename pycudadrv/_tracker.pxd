from libc.stdint cimport uint64_t
from pycudadrv._lanes cimport Submission, DepList

# What collect found for one access, handed to commit of the same access (the one submission's
# collect-then-commit): the segment of an exact hit (borrowed; valid while `removals` is unchanged:
# no segment dropped or cut since), or where a range overlapping nothing goes in `segs` (valid while
# `version` is unchanged: no change to `segs` at all since). seg NULL and at -1: nothing known.
ctypedef struct TrackHint:
    void* seg
    Py_ssize_t at
    unsigned long long stamp

cdef class _Seg:
    cdef uint64_t lo, hi
    cdef Submission writer         # the last writer, or None
    # The latest reader per lane since that write: two inline (reader_a, reader_b), then the list `rs`
    # (None until a third lane).
    cdef Submission reader_a, reader_b
    cdef list rs

# Disjoint byte ranges of device memory, sorted, each with its last writer and readers since.
cdef class _Tracker:
    cdef list segs
    cdef Py_ssize_t limit
    # An index of segs by start address (open addressing, linear probing; borrowed pointers to the
    # _Seg objects `segs` holds): the exact hit of a range seen before (a whole Buffer again) in a
    # few instructions, instead of bisecting the list.
    cdef uint64_t* keys
    cdef void** vals
    cdef Py_ssize_t cap, count
    cdef unsigned long long version    # bumped by every change to `segs` (its list, not the fields of its segments)
    cdef unsigned long long removals   # bumped by every change that drops a segment or cuts its range

    cdef int _put(self, _Seg seg) except -1
    cdef int _drop(self, uint64_t lo)
    cdef void* _find(self, uint64_t lo) noexcept   # the _Seg starting at lo (borrowed), or NULL
    cdef int _reindex(self, list segs) except -1

    cdef Submission _deps_of(self, _Seg seg, bint write, Submission me, DepList* deps, long long gen)
    # Hand add_dep what an access of [lo, hi) must wait for; return the pending writer of its
    # first overlapping segment that has one (or None); fill `hint` for the commit of the same range.
    cdef Submission collect(self, uint64_t lo, uint64_t hi, bint write, Submission me, DepList* deps,
                            long long gen, TrackHint* hint)
    cdef int _split(self, uint64_t x) except -1
    # Record that `sub` reads (or writes) [lo, hi).
    # `hint`: what collect said of the same range (NULL: nothing).
    cdef int commit(self, uint64_t lo, uint64_t hi, bint write, Submission sub, TrackHint* hint) except -1
    # Forget every segment.
    cdef int reset(self) except -1
    # Drop what only finished submissions touched.
    cdef int prune(self) except -1
