from libc.stdint cimport uint64_t
from cpython.object cimport PyObject

# What a submission is (its label, and whether a fault report names it as a kernel).
cdef enum:
    RETIRE_EVERY = 16   # a Queue's submissions between checks of which completed (more while none did)

cdef enum:
    K_LAUNCH = 1        # "kernel 'name'"
    K_PREPARED = 2      # "kernel 'name' (prepared)"
    K_OTHER = 3         # the label as given (copies, fills, reads, allocations)
    K_OTHER_KERNEL = 4  # the label as given, a kernel all the same (dispatch, graph, cuDNN plan)

cdef class _Lane

# The lanes a submission depends on (borrowed pointers to _Lane: the queue holds its lanes).
ctypedef struct DepList:
    void** lanes
    Py_ssize_t n
    Py_ssize_t cap

# One piece of work of a Queue: its place in issue order, its stream (lane), the
# event recorded after it, and what it was (kind, name) for its label.
cdef class Submission:
    cdef readonly long long seq
    cdef readonly _Lane lane
    cdef public bint done
    cdef object _event             # recorded after it (pooled; None once recycled)
    cdef object _start             # timed: the timing event recorded before it, else None
    cdef bint _exposed             # .event was handed out: never recycled
    cdef bint _captured            # recorded into a graph: never run by itself
    cdef bint _kernel              # a kernel (launch, prepared, dispatch, graph, cuDNN plan), for fault reports
    cdef int _kind
    cdef object _name              # kernel name, or the whole label for other kinds
    cdef list _lanes               # its queue's lanes (what a fault report lists); not the queue itself

# A lane's ordering state in one mode of its queue: eager, or the capture in progress.
cdef class LaneMode:
    cdef Submission tail           # the last submission issued on the lane in this mode
    cdef long long* seen           # per producer lane index: the highest seq already waited for
    cdef Py_ssize_t nseen
    cdef long long load            # submissions issued on it in this mode (the capture's greedy choice)
    cdef bint joined               # the lane joined the capture (the capture mode's)
    cdef int reset(self) except -1  # nothing issued, waited for or joined in this mode

# A stream the queue issues on (a pool stream, or another one given by stream= or a
# Dispatch's encoder), with its in-flight submissions and its ordering state per mode.
cdef class _Lane:
    cdef readonly int index
    cdef readonly object stream
    cdef readonly bint owned
    cdef list inflight             # Submissions not yet seen complete, in issue order, from `head`
    cdef Py_ssize_t head
    cdef dict kw                   # {"stream": stream}: the keywords of a launch on it
    cdef LaneMode eager, capture
    cdef Submission dep            # the collection of one submission's dependencies
    cdef long long dep_gen

# A queue's recycled events (timing=False): a stack over a list that never shrinks (a pop and a push
# per submission, no reallocation of the list each time it empties).
cdef class _EventPool:
    cdef list items
    cdef Py_ssize_t n

cdef int pool_push(_EventPool p, object ev) except -1
cdef object pool_pop(_EventPool p)            # None when empty

# An allocation stream outside a queue's pool (mostly the device's default stream, where
# Buffer.from_numpy allocates and uploads): up to which Allocation.serial the allocation work made
# there is known done (the stream was seen idle) or ordered before a lane (the lane waited for it).
cdef class _AllocStream:
    cdef object stream
    cdef unsigned long long idle_upto
    cdef unsigned long long* upto     # per lane index
    cdef Py_ssize_t nupto
    # The submission being collected: the highest serial it uses there, and whether it also uses
    # memory of unknown creation order (not a pycudadrv Buffer: checked every time).
    cdef unsigned long long want
    cdef bint unknown

# The submission being collected uses memory of `r` made as Allocation.serial `serial` (0: unknown).
cdef inline int want_serial(_AllocStream r, unsigned long long serial) except -1:
    if serial == 0:
        r.unknown = True
    elif serial > r.want:
        r.want = serial
    return 0

# Nothing to note for memory of `r` (None: a pool stream) made as Allocation.serial `serial`: the stream
# was seen idle after it was made (serial known: a Buffer's); noting it would change no ordering decision.
cdef inline bint known_done(_AllocStream r, unsigned long long serial) noexcept:
    return r is None or (serial != 0 and serial <= r.idle_upto)

# The submission being collected (number `gen`) depends on `d`: the latest per lane counts, and each
# lane with one is listed once in `deps` (its `dep`).
cdef int add_dep(DepList* deps, long long gen, Submission d) except -1
cdef _Lane new_lane(int index, object stream, bint owned)
cdef extern from "Python.h":
    Py_ssize_t _list_len "PyList_GET_SIZE"(object lst)
cdef inline Py_ssize_t in_flight(_Lane lane) noexcept:     # (inflight: a list from new_lane on)
    return _list_len(lane.inflight) - lane.head
# The submissions of `lanes` not seen complete, in issue order.
cdef list pending_of(list lanes)
# Mark `lane`'s submissions up to `sub` (seen complete) done, recycling their events into `events`.
cdef int retire_to(_Lane lane, Submission sub, _EventPool events) except -1
# Query each lane (cuEventQuery: its tail first with tail_first, else its front; then the other end,
# then halves between) and retire what completed; returns how many submissions were retired.
cdef Py_ssize_t retire_fronts(list lanes, _EventPool events, bint tail_first=*) except -1
# Whether `lane` (an index) already has the allocation work `r.want` asks for behind it.
cdef bint alloc_ordered(_AllocStream r, int lane)
cdef int set_alloc_ordered(_AllocStream r, int lane) except -1
# What a lane (in mode `lm`) already waited for of producer lane `producer`: the highest seq.
cdef inline long long seen(LaneMode lm, int producer) noexcept:
    return lm.seen[producer] if producer < lm.nseen else 0
cdef int set_seen(LaneMode lm, int producer, long long seq) except -1

# The driver calls of a submission: C for pycudadrv's own Streams and Events, their Python methods else.
cdef int wait_event(object s, object ev) except -1          # cuStreamWaitEvent
cdef int record_event(object ev, object s, object launched=*) except -1     # cuEventRecord
cdef bint event_done(object ev) except -1                   # cuEventQuery (CaptureError where forbidden)
cdef bint stream_idle(object st) except -1                  # cuStreamQuery
cdef int wait_stream(object s, object st) except -1         # s waits for the work queued on st so far
cdef bint stream_closed(object st) except -1

# When a Queue next checks which submissions completed: `every` submissions after the last check (`base`,
# RETIRE_EVERY per stream asked up to `pool` streams, after a check that found work done and work running;
# up to 4 times it while checks find all of it done, up to 16 times while they find none done); `found`:
# the last check found work done (the next asks each stream's tail first).
cdef struct RetireClock:
    int every
    int base
    int pool
    bint found
# The periodic check: retire what completed on every lane with work in flight, then set `clock`.
cdef int retire_every(list lanes, _EventPool events, RetireClock* clock) except -1
# Drop the lanes' references to their Submissions (a closing queue breaks that cycle).
cdef int let_go(list lanes) except -1
