from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream, Capture

cdef class Buffer:
    cdef CUdeviceptr _ptr
    cdef size_t _nbytes
    cdef readonly Device device
    cdef Stream _stream          # the allocation's stream: its frees and default copies are ordered on it
    cdef Buffer _root            # the allocation a view points into (self for owners and foreign wrappers)
    cdef object _owner           # the parent of a view, or the foreign object kept alive (asbuffer)
    cdef bint _owned             # frees its memory (a root made by empty/zeros/from_numpy)
    cdef bint _async_alloc
    cdef bint _closed
    cdef object _dtype
    cdef object _shape
    cdef str _closed_why         # appended to "buffer is closed" (e.g. allocated inside a capture)
    # --- lifetime state, kept on the root only ---
    cdef list _users             # streams other than _stream that used the memory since allocation
    cdef Stream _last_user       # the last one noted (the common case is one extra stream)
    cdef int _holds              # live graphs and DLPack exports that keep the memory
    cdef bint _free_pending      # closed while held or exported: freed when the last hold goes
    cdef bint _cai_exported      # __cuda_array_interface__ was read: the free waits for the last reference
    cdef Capture _born_in        # the capture that allocated it (a graph memory node), or None

    # Raises ClosedError (naming why) if this buffer or the allocation it views was closed.
    cdef int ensure_open(self) except -1
    # Record that work on `s` uses the memory (frees wait for it). Cheap when `s`
    # is the allocation stream or the last one noted.
    cdef int note_use(self, Stream s) except -1
    # A graph (or export) keeps the allocation; release_hold() lets it go and
    # frees the memory when close() asked for it meanwhile.
    cdef int add_hold(self) except -1
    cdef int release_hold(self) except -1
    cdef _host_view(self, obj, bint writable, name)
    cdef Stream _copy_stream(self, object stream)
    cdef int _release(self, bint raise_errors, bint in_dealloc) except -1

# A new, empty Buffer for a factory to fill in (Buffer() and Buffer.__new__ are refused).
cdef Buffer new_buffer()
