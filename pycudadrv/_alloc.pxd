from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream, Capture, CaptureWork
from pycudadrv._ordering cimport ReadyEvent

# One device allocation and everything about its lifetime: who used it on which
# stream, what holds it (graphs, DLPack consumers), its free (ordered after every
# stream that used it, deferred while held or while a capture forbids it, or a
# graph memory free node when a capture allocated it), and its invalidation. Own
# memory (allocate) or another library's (foreign: the object kept alive and the
# producer's ready point). A Buffer is a view over one.
cdef class Allocation(CaptureWork):
    cdef CUdeviceptr ptr             # base address (0 once freed or for zero bytes)
    cdef size_t nbytes
    cdef readonly Device device
    cdef Stream stream               # frees and default copies are ordered on it
    cdef bint owned                  # frees its memory (allocate), else foreign
    cdef bint async_alloc            # cuMemAllocAsync / cuMemFreeAsync, else cuMemAlloc / cuMemFree
    cdef bint freed                  # closed: no new use (the free itself may still be pending)
    cdef str why                     # appended to "buffer is closed"
    cdef list users                  # streams other than `stream` that used the memory
    cdef Stream last_user            # the last one noted (the common case is one extra stream)
    cdef int holds                   # live graphs and DLPack exports that keep the memory
    cdef bint free_pending           # a free was asked for while held or exported
    cdef bint cai_exported           # __cuda_array_interface__ was read: freed with the last reference
    cdef Capture born_in             # the capture that allocated it (a graph memory node), or None
    cdef CUdeviceptr _to_free        # the pointer a deferred free will release
    cdef object keeper               # foreign: the object that owns the memory, kept alive
    cdef ReadyEvent ready            # foreign: its producer's work at consumption, or None
    cdef list ordered                # streams already ordered after `ready`
    cdef bint ready_captured         # a graph waits on `ready`: it lives as long as this allocation
    cdef bint read_only              # foreign memory its producer exported read-only (CAI data[1])
    cdef unsigned int usage          # BufferUsages bits given at creation (default: all); views share it
    # Creation order, process-wide from 1: a Queue that saw `stream` idle after allocation n was made
    # knows the allocation work of every allocation up to n there is done (one compare, no query).
    cdef unsigned long long serial
    # Nonzero when a launch must look closer before using the memory: freed, or a producer
    # to order after. One C test on the launch path (Buffer arguments pay nothing else).
    cdef bint attention
    cdef object __weakref__          # Module.unload finds the globals' allocations through a WeakSet

    cdef int ensure_live(self) except -1
    # Record that work on `s` uses the memory (frees wait for it). Cheap when `s` is the
    # allocation stream or the last one noted (the launch path tests those two itself first).
    cdef int note_use(self, Stream s) except -1
    # Make `s` wait for the producer of foreign memory (once per stream; nothing once done).
    cdef int order_on(self, Stream s) except -1
    # Use on `s`: open check, producer ordering, note the use.
    cdef int use_on(self, Stream s) except -1
    # `s` was just ordered after the producer by other means (the argument it came from was).
    cdef int mark_ordered(self, Stream s) except -1
    # Foreign memory its producer marked read-only: writes, fills and copies into it are refused.
    cdef int set_read_only(self) except -1
    cdef int add_hold(self) except -1
    cdef int release_hold(self) except -1
    # Free (owned) or let go (foreign) once nothing holds it; in_dealloc: the last Buffer is
    # gone, so an exported CAI no longer delays it.
    cdef int request_free(self, bint raise_errors, bint in_dealloc) except -1
    cdef int free_now(self, bint raise_errors) except -1
    cdef Capture _forbidding(self)
    # Closed from the outside (its module was unloaded): every view raises ClosedError naming why.
    cdef int invalidate(self, str why) except -1
    cdef int _update_attention(self) except -1

# Allocate `nbytes` on device `dev`, ordered on `s` (cuMemAllocAsync on the default
# pool; cuMemAlloc when not async_alloc); inside a capture of `s`, a graph memory node.
cdef Allocation allocate(size_t nbytes, Device dev, Stream s, bint async_alloc)
# Another library's (or a module's) memory at `ptr`: never freed here; `keeper` is kept
# alive; `ready` (or None) is the producer's work that consumers must wait for.
cdef Allocation foreign(CUdeviceptr ptr, size_t nbytes, Device dev, object keeper, ReadyEvent ready)
