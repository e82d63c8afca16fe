from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device

cdef class Stream:
    cdef CUstream _handle
    cdef readonly Device device
    cdef bint _owned
    cdef bint _closed
    cdef object _owner            # keeps a foreign stream's owner alive
    cdef Capture _capture         # the capture in progress on this stream, or None
    cdef CUevent _final           # recorded by close(): frees wait for the stream's last work

    cdef int ensure_open(self) except -1

cdef class Event:
    cdef CUevent _handle
    cdef readonly Device device
    cdef readonly bint timing
    cdef bint _recorded
    cdef bint _closed
    cdef _check_usable(self, str what)
    cdef int _record_on(self, Stream s) except -1   # record() once the stream is resolved

# The state of one stream capture in progress: what the graph must keep alive,
# which kernels were launched (and their graph nodes), the frees and host work
# the capture forbade until it ends, and the allocations made inside it (graph
# memory nodes, freed inside the graph when the capture ends). One object owns
# it; CapturedGraph and the device-loop builders take it over at end().
cdef class Capture:
    cdef readonly Stream stream
    cdef readonly str mode
    cdef CUstreamCaptureMode _mode
    cdef readonly object thread_id
    cdef readonly bint pdl           # consecutive kernels joined by programmatic edges
    cdef readonly bint body          # the body of a device-side loop: no allocation, no other stream
    cdef bint _active
    cdef readonly list held          # objects the graph keeps alive
    cdef readonly list kernels       # (node as int or None, fn, grid, block, shmem, args, devnode)
    cdef list _deferred              # objects whose _release_deferred() runs when the capture ends
    cdef list _allocations           # Buffers allocated inside: their _free_in_capture() runs at end
    cdef CUgraph _target             # the graph captured into (cuStreamBeginCaptureToGraph), or NULL
    cdef readonly list finalizers    # callables f(graph) run after the capture ends, before instantiation

    cdef int hold(self, object obj) except -1
    cdef int hold_all(self, tuple objs) except -1
    cdef int on_launch(self, object fn, const unsigned int* grid, const unsigned int* block, unsigned int shmem,
                       tuple args, CUgraphDeviceNode devnode) except -1
    cdef int defer(self, object obj) except -1
    cdef int on_alloc(self, object buf) except -1
    # Frees the allocations made inside, ends the capture and returns the graph
    # (NULL when it was discarded because `discard`); runs the deferred work.
    cdef CUgraph end(self, bint discard) except? NULL
    cdef object last_node(self)

# Begin a capture on `stream` (cuStreamBeginCapture, or ...ToGraph when target != NULL).
cdef Capture begin_capture(Stream stream, str mode, bint pdl, CUgraph target)
# Whether any capture is in progress (one C test; the launch path asks before the slower checks).
cdef bint captures_active() noexcept
# Raise CaptureError when a launch on `s` (not capturing) happens while a
# device-loop body is being captured on this thread: the work would not be part
# of the loop.
cdef int check_launch_outside_capture(Stream s) except -1

# Raise CaptureError if `what` (a host-synchronising or unsafe call) is illegal now
# because a capture is active: on `stream` itself, any global-mode capture, or a
# thread-local one on this thread.
cdef int check_not_capturing(Stream stream, str what) except -1
# The capture that forbids `stream`'s work right now (None if none does): the
# capture of `stream` itself, a global one, or a thread-local one of this thread.
cdef Capture forbidding_capture(Stream stream)

# The stream to use when the user passed `stream` (None -> the device's default).
cdef Stream resolve_stream(object stream, Device device)
# Make work queued from now on `consumer` wait for the work queued so far on
# `producer` (cuEventRecord + cuStreamWaitEvent; the producer's final event once
# it is closed); nothing when they are one stream.
cdef int order_after(Stream consumer, Stream producer) except -1
