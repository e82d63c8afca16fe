from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device

cdef class Capture

cdef class Stream:
    cdef CUstream _handle
    cdef readonly Device device
    cdef bint _owned
    cdef bint _closed
    cdef object _owner            # keeps a foreign stream's owner alive
    cdef Capture _capture         # the capture in progress on this stream, or None
    cdef CUevent _final           # recorded by close(): frees wait for the stream's last work
    cdef CUevent _last_use        # another library's stream: recorded after each piece of pycudadrv work on it

    cdef int ensure_open(self) except -1
    # After work was queued on a stream pycudadrv does not own: record _last_use, so a later
    # free waits for that work without touching the stream (which its library may destroy).
    cdef int mark_use(self) except -1

# The fields of an event that streams read (Stream.wait); the class is pycudadrv._event.Event.
cdef class EventBase:
    cdef CUevent _handle
    cdef readonly Device device
    cdef readonly bint timing
    cdef bint _recorded
    cdef bint _closed

# Work a capture runs when it ends, typed (no method is called by name): what was
# allocated inside it (graph memory nodes) gets capture_ending() before
# cuStreamEndCapture (discard: the capture is thrown away); what the capture
# forbade until it ends (a free, a handle's destruction) gets capture_ended() after.
cdef class CaptureWork:
    cdef int capture_ending(self, Capture c, bint discard) except -1
    cdef int capture_ended(self) except -1

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
    cdef list _deferred              # CaptureWork whose capture_ended() runs when the capture ends
    cdef list _allocations           # CaptureWork allocated inside: capture_ending() runs before the end
    cdef readonly unsigned long long capture_id   # the driver's id of this capture (0 when unknown)
    cdef CUgraph _target             # the graph captured into (cuStreamBeginCaptureToGraph), or NULL
    cdef readonly list finalizers    # callables f(graph) run after the capture ends, before instantiation
    cdef readonly list body_waits    # a loop body's foreign ready events: waited for in front of the loop

    cdef int hold(self, object obj) except -1
    cdef int hold_all(self, tuple objs) except -1
    cdef int on_launch(self, object fn, const unsigned int* grid, const unsigned int* block, unsigned int shmem,
                       tuple args, CUgraphDeviceNode devnode) except -1
    cdef int defer(self, CaptureWork w) except -1
    cdef int on_alloc(self, CaptureWork w) except -1
    # Frees the allocations made inside, ends the capture and returns the graph
    # (NULL when it was discarded because `discard`); runs the deferred work.
    cdef CUgraph end(self, bint discard) except? NULL
    cdef object last_node(self)

# Whether `s` is capturing (cuStreamGetCaptureInfo, or cuStreamIsCapturing on an older driver); the
# capture's id in cid[0] (0 when unknown) and the one node captured work depends on now (or NULL) in
# last[0], for the pointers that are not NULL.
cdef CUstreamCaptureStatus capture_info(Stream s, cuuint64_t* cid, CUgraphNode* last) except? -1
# The same for a raw handle (another library's stream).
cdef CUstreamCaptureStatus handle_capture_info(CUstream h, cuuint64_t* cid, CUgraphNode* last) except? -1

# Begin a capture on `stream` (cuStreamBeginCapture, or ...ToGraph when target != NULL).
cdef Capture begin_capture(Stream stream, str mode, bint pdl, CUgraph target)
# Whether any capture is in progress (one C test; the launch path asks before the slower checks).
cdef bint captures_active() noexcept
# The captures in progress (the list itself: read it, never change it).
cdef list active_captures()
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

# Destroy a driver handle now, or, while a capture forbids it on this thread (the driver
# would invalidate the capture), when that capture ends. kind: one of the DESTROY_* below.
cdef enum:
    DESTROY_STREAM = 1
    DESTROY_EVENT = 2
    DESTROY_GRAPH = 3
    DESTROY_GRAPH_EXEC = 4
    DESTROY_MODULE = 5
cdef int destroy_handle(int kind, void* handle, Device device, bint raise_errors) except -1

# The stream to use when the user passed `stream` (None -> the device's default).
cdef Stream resolve_stream(object stream, Device device)
# Make work queued from now on `consumer` wait for the work queued so far on
# `producer` (cuEventRecord + cuStreamWaitEvent; the producer's final event once
# it is closed); nothing when they are one stream.
cdef int order_after(Stream consumer, Stream producer) except -1
# Make `consumer` wait for pycudadrv's work on `producer`, later than when it was queued (a free):
# order_after for pycudadrv's streams; for another library's stream, its last-use event, never the
# stream itself (its library may have destroyed it since).
cdef int order_after_uses(Stream consumer, Stream producer) except -1
