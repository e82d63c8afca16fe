from libc.stdint cimport uint64_t
from cpython.object cimport PyObject
from pycudadrv._lanes cimport Submission, _Lane, LaneMode, DepList, _AllocStream, _EventPool, RetireClock
from pycudadrv._tracker cimport _Tracker, TrackHint

# One byte range [lo, hi) touched by a submission (the Queue's scratch list of them).
ctypedef struct QueueAccess:
    uint64_t lo
    uint64_t hi
    bint write
    TrackHint hint                 # what the tracker's collect found, for its commit

# What a queue orders by in one mode: the byte ranges and who last touched them; in the capture mode, the
# graph being captured, its fork event and the lanes that joined it (None / [] in the eager mode).
cdef class QueueMode:
    cdef readonly bint capturing
    cdef _Tracker tracker
    cdef object graph
    cdef object fork
    cdef list joined

cdef class QueueCore:
    cdef object _device
    cdef list _lanes
    cdef int _pool
    cdef bint _round_robin
    cdef int _rr
    cdef dict _foreign             # stream handle -> _Lane
    cdef list _free_index          # lane indices of dropped lanes of streams given with stream=, for reuse
    cdef int _next_index           # the next lane index never used
    cdef set _pool_ids             # id() of the pool streams
    cdef _EventPool _events         # recycled events (timing=False)
    cdef long long _seq
    cdef long long _gen
    cdef QueueMode _eager, _capture
    cdef QueueMode _mode           # the one in force: _eager, or _capture during Queue.capture()
    cdef dict _layouts             # Function -> (params, access bytes or None)
    cdef object _last_fn, _last_params, _last_acc
    cdef bint _closed
    cdef bint _ready               # __init__ ran (_setup)
    cdef readonly long long submissions
    cdef readonly long long waits
    cdef object _Buffer, _Stream, _Event   # the types the queue works with (its module's names at creation)
    cdef QueueAccess* _acc
    cdef Py_ssize_t _nacc, _cacc
    cdef list _fresh               # _AllocStreams the submission uses memory of ([:_nfresh])
    cdef Py_ssize_t _nfresh
    cdef int _building             # > 0 while a submission is being built (_begin refuses another)
    cdef unsigned long _builder    # the thread whose _begin started the access list being built
    cdef long long _begins         # submissions begun (_begin calls)
    cdef dict _alloc_streams       # id(stream) -> _AllocStream (allocation streams outside the pool)
    cdef DepList _deps             # lanes with a dependency of the submission being issued
    cdef int _countdown            # submissions until the next completion check
    cdef RetireClock _clock        # its interval: 16 per stream asked; doubled while checks find all done (to 4 times) or none (to 16 times)
    cdef object _memo_stream       # the last allocation stream looked up, and its _AllocStream (None: the pool's)
    cdef _AllocStream _memo_rec

    cdef int _check(self, str name) except -1
    cdef int _let_go(self) except -1
    cdef int _add(self, uint64_t lo, uint64_t hi, bint write, bint override) except -1
    cdef int _add_span(self, object sp, bint write, bint override) except -1
    cdef int _begin(self) except -1
    cdef int _sight(self, object st, unsigned long long serial) except -1
    cdef int _sight_buffer(self, object buf) except -1
    cdef object _param_access(self, object fn)
    cdef int _args_access(self, object fn, PyObject** args, Py_ssize_t nargs, str verb, str name) except -1
    cdef int _explicit_c(self, object reads, object writes, str what) except -1
    cdef _Lane _lane_of(self, object stream)
    cdef _Lane _choose(self, Submission first)
    cdef int _retire(self) except -1
    cdef int _drop_idle_lanes(self) except -1
    cdef Submission _issue(self, int kind, object name, object stream, object target, PyObject** args,
                           Py_ssize_t nargs, object grid, object block, dict kw, tuple keep, bint timed)
    cdef Submission _submit_kernel(self, int kind, object fn, str name, PyObject** args, Py_ssize_t nargs,
                                   str verb, object reads, object writes, object stream, object target, object grid,
                                   object block, dict kw, bint timed)
