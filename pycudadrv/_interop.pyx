# cython: language_level=3
"""Other libraries' device arrays: reading __cuda_array_interface__ and DLPack
safely, ordering them after their producer's stream, and asbuffer() to wrap
them as Buffers (over a foreign Allocation), zero-copy."""
from libc.stdint cimport uintptr_t, uint64_t
from cpython.pythread cimport PyThread_get_thread_ident
from pycudadrv._cuda cimport *
from pycudadrv._device cimport Device, get_device, as_device
from pycudadrv._stream cimport Stream, capture_info, handle_capture_info
from pycudadrv._ordering cimport ReadyEvent, ready_event
from pycudadrv._host cimport keep_until_done
from pycudadrv._alloc cimport Allocation, foreign
from pycudadrv._memory cimport Buffer, buffer_over
from pycudadrv._dlpack cimport import_capsule

import numpy as np
from pycudadrv._dlpack import KDL_CUDA, KDL_CUDA_MANAGED
from pycudadrv._env import foreign_sync_enabled
from pycudadrv._textargs import yes_no
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, CaptureError, CudaError, short_repr

__all__ = ["asbuffer", "data_pointer", "array_interface", "span"]


cdef object read_cai(object obj):
    try:
        return getattr(obj, "__cuda_array_interface__", None)
    except Exception as e:
        raise ArgumentTypeError(f"reading its __cuda_array_interface__ raised {type(e).__name__}: {e}") from e


cdef object cai_data_pointer(object cai):
    data = cai.get("data") if isinstance(cai, dict) else None
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ArgumentValueError("its __cuda_array_interface__ has no valid 'data': (pointer, read_only)")
    ptr = data[0]
    if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr < 0 or ptr >= 2**64:
        raise ArgumentValueError(f"its __cuda_array_interface__ data pointer {short_repr(ptr)} is not an address")
    return ptr


cdef inline bint _is_int(object v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


cdef tuple cai_geometry(object cai):
    """``(shape, strides or None, dtype)`` of a ``__cuda_array_interface__`` dict
    (``cai_data_pointer`` checked it is one), each checked: ``shape`` a tuple of
    non-negative ints (numpy ints too; returned as ints), ``typestr`` a numpy type string of at least one byte,
    ``strides`` None or one int per dimension (returned as ints). Raises ArgumentValueError."""
    if "shape" not in cai:
        raise ArgumentValueError("its __cuda_array_interface__ has no 'shape' (a tuple of ints)")
    shape = cai.get("shape")
    if not isinstance(shape, (tuple, list)) or any(not _is_int(s) for s in shape):
        raise ArgumentValueError(f"its __cuda_array_interface__ 'shape' must be a tuple of ints, got "
                                 f"{short_repr(shape)}")
    shape = tuple(int(n) for n in shape)
    for k, n in enumerate(shape):
        if n < 0:
            raise ArgumentValueError(f"its __cuda_array_interface__ shape {shape} has a negative extent at "
                                     f"dimension {k}")
    typestr = cai.get("typestr")
    if not isinstance(typestr, str):
        raise ArgumentValueError(f"its __cuda_array_interface__ 'typestr' must be a str such as '<f4', got "
                                 f"{short_repr(typestr)}")
    try:
        dt = np.dtype(typestr)
    except (TypeError, ValueError):
        raise ArgumentValueError(f"its __cuda_array_interface__ typestr {short_repr(typestr)} is not a numpy type "
                                 "string") from None
    if dt.itemsize == 0 or dt.hasobject:
        raise ArgumentValueError(f"its __cuda_array_interface__ typestr {short_repr(typestr)} is not a type of "
                                 "device data (zero-size elements or Python objects)")
    strides = cai.get("strides")
    if strides is not None:
        if not isinstance(strides, (tuple, list)) or any(not _is_int(s) for s in strides):
            raise ArgumentValueError(f"its __cuda_array_interface__ 'strides' must be None or a tuple of ints "
                                     f"(bytes), got {short_repr(strides)}")
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ArgumentValueError(f"its __cuda_array_interface__ strides {strides} gives {len(strides)} "
                                     f"stride(s) for the {len(shape)}-dimensional shape {shape}")
    return shape, strides, dt


cdef bint _c_contiguous(tuple shape, object strides, Py_ssize_t itemsize):
    if strides is None:
        return True
    expect = itemsize
    count = 1
    for s in shape:
        count *= s
    if count <= 1:
        return True
    for k in reversed(range(len(shape))):
        if shape[k] != 1 and strides[k] != expect:
            return False
        expect *= shape[k]
    return True


cdef tuple cai_extent(object cai):
    """``(ptr, lo, hi, contiguous, shape, strides, dtype)`` of a ``__cuda_array_interface__`` dict, every
    entry checked (cai_data_pointer, cai_geometry): the data pointer, the byte range ``[lo, hi)`` every
    element reaches (``lo == hi`` for no elements) in the 64-bit address space, whether it is
    C-contiguous, and the geometry. Raises ArgumentTypeError when it is not a dict, ArgumentValueError for
    a wrong entry."""
    if not isinstance(cai, dict):
        raise ArgumentTypeError(f"its __cuda_array_interface__ must be a dict, got {short_repr(cai)}")
    ptr = cai_data_pointer(cai)
    shape, strides, dt = cai_geometry(cai)
    count = 1
    for n in shape:
        count *= n
    if count == 0:
        return ptr, ptr, ptr, True, shape, strides, dt
    lo = hi = 0
    if strides is None:
        hi = count * dt.itemsize
    else:   # the extent the strides reach, either way
        for n, st in zip(shape, strides):
            if st < 0:
                lo += (n - 1) * st
            else:
                hi += (n - 1) * st
        hi += dt.itemsize
    if ptr + lo < 0 or ptr + hi > 1 << 64:
        raise ArgumentValueError(f"its __cuda_array_interface__ elements reach bytes [{ptr + lo:#x}, "
                                 f"{ptr + hi:#x}), outside the 64-bit address space (data pointer, shape and "
                                 "strides do not fit together)")
    return ptr, ptr + lo, ptr + hi, _c_contiguous(shape, strides, dt.itemsize), shape, strides, dt


def array_interface(obj, str what):
    """``(ptr, lo, hi, contiguous, shape, strides, dtype)`` of an object's ``__cuda_array_interface__``
    (see cai_extent), for Python callers (the MPI helpers, span). ``what`` names the caller in messages.
    Raises ArgumentTypeError for an object without the interface (or whose interface is not a dict),
    ArgumentValueError for a wrong entry: the same checks and errors as a launch's."""
    cai = read_cai(obj)
    if not isinstance(cai, dict):
        raise ArgumentTypeError(f"{what}: expected a pycudadrv Buffer (or a view, or an object with "
                                f"__cuda_array_interface__), got {type(obj).__name__}")
    try:
        return cai_extent(cai)
    except ArgumentValueError as e:
        raise ArgumentValueError(f"{what}: {type(obj).__name__}: {e}") from None


def span(obj, str what):
    """``(lo, hi)`` device addresses (bytes, ``hi`` exclusive) of a Buffer, a view, or an object with
    ``__cuda_array_interface__`` (every byte any element reaches, strides either way); None for an empty
    one: what the Queue and the MPI helpers track. ``what`` names the caller in messages; raises as
    :func:`array_interface`."""
    if isinstance(obj, Buffer):
        n = (<Buffer>obj)._nbytes
        return None if n == 0 else ((<Buffer>obj)._ptr, (<Buffer>obj)._ptr + n)
    ptr, lo, hi = array_interface(obj, what)[:3]
    return None if lo == hi else (lo, hi)


# Per device, a private stream a DLPack producer orders its work onto when the consumer's own
# stream cannot be named to it (the consumer is not known yet, or it is being captured).
cdef dict _sync_streams = {}


cdef Stream _sync_stream(Device dev):
    s = _sync_streams.get(dev.ordinal)
    if s is None:
        s = _sync_streams[dev.ordinal] = Stream(dev)
    return <Stream>s


cdef bint _capturing(Stream s) except -1:
    if s._capture is not None:
        return True
    return s._handle != NULL and capture_info(s, NULL, NULL) != CU_STREAM_CAPTURE_STATUS_NONE


cdef object _cai_stream(object cai, object obj):
    """The producer stream a CAI dict names: a CUstream handle (1: legacy default, 2:
    per-thread default), or None for "no ordering needed". ArgumentTypeError otherwise."""
    v = cai.get("stream")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 < v < 2**64:
        raise ArgumentTypeError(f"{type(obj).__name__}: its __cuda_array_interface__ 'stream' must be None or a "
                                f"CUstream handle (1: the legacy default stream, 2: per-thread; 0 is not allowed "
                                f"by CAI v3), got {short_repr(v)}")
    return int(v)


cdef int _release_capsule(object capsule, object obj) except -1:
    """Take over (and at once release) a capsule returned only for its stream ordering."""
    import_capsule(capsule, obj)
    return 0


cdef int _dlpack_order(object obj, Stream s, Device dev) except -1:
    """Ask a DLPack producer to order its work before `s` (__dlpack__(stream=s)); when `s`
    captures, onto the private stream instead, which `s` then waits for (an external node)."""
    cdef Stream target = _sync_stream(dev) if _capturing(s) else s
    _release_capsule(_call_dlpack(obj, int(<uintptr_t>target._handle) or 1, "DLPack argument"), obj)
    if target is not s:
        ready_event(target._handle, dev).wait_on(s)
    return 0


cdef int _check_producer_capture(uintptr_t h, Stream s, object obj) except -1:
    """Refuse a producer stream that is being captured when `s` is not in that capture: an
    event recorded there and waited for on `s` would pull `s` (and all its later work) into
    the capture, which then fails at its end (unjoined work)."""
    cdef cuuint64_t pid = 0, sid = 0
    if h == 1:
        return 0                      # the legacy default stream is never captured
    cdef CUstreamCaptureStatus st = handle_capture_info(<CUstream>h, &pid, NULL)
    if st == CU_STREAM_CAPTURE_STATUS_NONE:
        return 0
    # Both in one capture: the event wait joins them, as a fork does (without capture ids, from an
    # older driver, any two active captures are taken as one).
    if s is not None and s._handle != NULL and st == CU_STREAM_CAPTURE_STATUS_ACTIVE and \
            capture_info(s, &sid, NULL) == CU_STREAM_CAPTURE_STATUS_ACTIVE and sid == pid:
        return 0
    where = f"the launch stream {s!r}" if s is not None else "a stream outside it"
    raise CaptureError(f"{type(obj).__name__}: its __cuda_array_interface__ 'stream' 0x{h:x} is being captured "
                       f"into a graph and {where} is not part of that capture: waiting for it would pull the "
                       "stream into the capture. Use the array on the capturing stream, or after the capture ended")


cdef ReadyEvent _producer_ready(uintptr_t h, Stream s, object obj, Device dev):
    """The ready point of a CAI v3 producer stream `h` (for consumers on `s`; None: not known
    yet): refused while it is captured outside `s`'s capture, and an ArgumentTypeError naming
    the handle where the driver does not know it."""
    try:
        _check_producer_capture(h, s, obj)
        return ready_event(<CUstream>h, dev)
    except CudaError as e:
        raise ArgumentTypeError(f"{type(obj).__name__}: its __cuda_array_interface__ 'stream' 0x{h:x} is not a "
                                f"live stream of this context (the driver says: {e})") from e


cdef int order_foreign(object obj, object cai, Stream s, Device dev) except -1:
    if cai is not None and "stream" in cai:
        h = _cai_stream(cai, obj)          # checked even where nothing is ordered (a graph update)
        if s is None or not foreign_sync_enabled():
            return 0
        if h is not None and h != <uintptr_t>s._handle:
            _producer_ready(<uintptr_t>h, s, obj, dev).wait_on(s)
        return 0
    if s is None or not foreign_sync_enabled():
        return 0
    if callable(getattr(obj, "__dlpack__", None)):
        # No producer stream named (PyTorch's CAI is version 2): ask through DLPack.
        _dlpack_order(obj, s, dev)
    return 0


cdef object _call_dlpack(object obj, object request, str who):
    """obj.__dlpack__(stream=request); a producer older than DLPack 0.6 (no `stream` keyword) is
    asked without one, and orders nothing (its data is taken as ready, as with the
    PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC switch off). What the producer raises becomes an
    ArgumentTypeError naming it."""
    name = type(obj).__name__
    try:
        return obj.__dlpack__(stream=request)
    except TypeError as e:
        if "stream" not in str(e):
            raise ArgumentTypeError(f"{who}: {name}.__dlpack__(stream={request}) raised TypeError: {e}") from e
    except Exception as e:
        raise ArgumentTypeError(f"{who}: {name}.__dlpack__(stream={request}) raised {type(e).__name__}: {e}") from e
    try:
        return obj.__dlpack__()
    except Exception as e:
        raise ArgumentTypeError(f"{who}: {name}.__dlpack__() raised {type(e).__name__}: {e}") from e


cdef tuple _import_dlpack(object obj, object device, bint sync, Stream target, str who):
    """(keeper, pointer, nbytes, dtype, shape, device) of a DLPack object, C-contiguous. With
    `sync` the producer is asked to order its work before `target` (None: the private stream
    of the tensor's device), else not at all (stream=-1)."""
    cdef Device dev = as_device(device, who)
    if not callable(getattr(obj, "__dlpack__", None)):
        raise ArgumentTypeError(f"{who}: {type(obj).__name__}.__dlpack__ is not callable")
    name = type(obj).__name__
    try:
        dl_dev = obj.__dlpack_device__()
    except AttributeError:
        dl_dev = None
    except Exception as e:
        raise ArgumentTypeError(f"{who}: {name}.__dlpack_device__() raised {type(e).__name__}: {e}") from e
    if dl_dev is not None:
        try:
            dl_type, dl_id = int(dl_dev[0]), int(dl_dev[1])
        except (TypeError, ValueError, IndexError, OverflowError):
            raise ArgumentTypeError(f"{who}: {name}.__dlpack_device__() returned {short_repr(dl_dev)}, "
                                    "not (device_type, device_id)") from None
        if dl_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
            raise ArgumentTypeError(f"{who}: {name} lives on DLPack device {(dl_type, dl_id)}, not CUDA")
        if not 0 <= dl_id < 2**31:
            raise ArgumentTypeError(f"{who}: {name}.__dlpack_device__() names device {dl_id}, not a CUDA "
                                    "device ordinal")
        if device is None:
            dev = get_device(dl_id)
    if not sync:
        request = -1
    else:
        request = int(<uintptr_t>(target if target is not None else _sync_stream(dev))._handle) or 1
    capsule = _call_dlpack(obj, request, who)
    try:
        owner, ptr, dev_type, dev_id, dt, shape, strides = import_capsule(capsule, obj)
    except ArgumentTypeError as e:
        raise ArgumentTypeError(f"{who}: {name}: {e}") from None
    if dev_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ArgumentTypeError(f"{who}: DLPack tensor on device type {dev_type}, not CUDA")
    count = 1
    for n in shape:
        count *= n
    if strides is not None and count > 1:
        expect = 1
        for k in reversed(range(len(shape))):
            if shape[k] != 1 and strides[k] != expect:
                raise ArgumentTypeError(f"{who}: non-contiguous DLPack tensor (shape {shape}, strides "
                                        f"{strides} in elements); make it contiguous first (e.g. "
                                        "x.contiguous() in PyTorch, jnp.copy / cupy.ascontiguousarray)")
            expect *= shape[k]
    if count * dt.itemsize >= 2**64:
        raise ArgumentTypeError(f"{who}: DLPack tensor of shape {shape} and {dt} is more bytes than any device holds")
    return owner, ptr, count * dt.itemsize, dt, shape, get_device(dev_id)


# The owners of the DLPack capsules of the arguments being packed, as (thread id, owner): DLPack
# lets a producer free the memory in its capsule's deleter (an exported copy), so the launch that
# uses them keeps them, until it has run or for the life of the graph capturing it
# (settle_dlpack_owners). Each thread takes its own (another may pack while a launch runs
# without the GIL).
cdef list _owners = []
# Owners of launches on a stream another thread's capture kept from recording an event on:
# kept until the process ends (rare, and never freed under a running kernel).
cdef list _stranded = []


cdef list dlpack_owners():
    return _owners


cdef Py_ssize_t dlpack_mark() except -1:
    if not _owners:
        return 0
    me = PyThread_get_thread_ident()
    return sum([1 for t, o in _owners if t == me])


cdef tuple take_dlpack_owners(Py_ssize_t keep=0):
    if not _owners:
        return ()
    me = PyThread_get_thread_ident()
    cdef list mine = [], rest = []
    cdef Py_ssize_t seen = 0
    for t, o in _owners:
        if t == me:
            seen += 1
            if seen > keep:
                mine.append(o)
                continue
        rest.append((t, o))
    _owners[:] = rest
    return tuple(mine)


cdef int settle_dlpack_owners(Stream s, Py_ssize_t keep=0) except -1:
    owners = take_dlpack_owners(keep)
    if not owners:
        return 0
    if s._capture is not None:
        s._capture.hold_all(owners)
    elif not keep_until_done(s, owners):
        _stranded.append(owners)
    return 0


cdef uint64_t dlpack_pointer(object obj, Stream s, Device dev) except? 0:
    cdef Stream target = None
    if s is not None and foreign_sync_enabled():
        target = _sync_stream(dev) if _capturing(s) else s
    owner, ptr, nbytes, dt, shape, where = _import_dlpack(obj, dev, target is not None, target, "DLPack argument")
    if target is not None and target is not s:
        ready_event(target._handle, dev).wait_on(s)
    _owners.append((PyThread_get_thread_ident(), owner))     # the launch keeps it (its deleter may free it)
    return <uint64_t>ptr


cdef Buffer _from_dlpack(obj, device):
    sync = foreign_sync_enabled()
    owner, ptr, nbytes, dt, shape, dev = _import_dlpack(obj, device, sync, None, "asbuffer")
    cdef ReadyEvent ready = ready_event((<Stream>_sync_stream(dev))._handle, dev) if sync else None
    cdef Allocation a = foreign(<CUdeviceptr>ptr, nbytes, dev, owner, ready)
    return buffer_over(a, a.ptr, nbytes, dt, shape, None)


def asbuffer(obj, *, device=None):
    """Wrap a device array from another library as a Buffer, zero-copy,
    keeping it alive: anything exporting ``__cuda_array_interface__`` (CuPy,
    PyTorch, Numba) or ``__dlpack__`` (PyTorch, JAX, CuPy, ...).

    The data must be C-contiguous; the buffer records the object's dtype and
    shape. The producer's work queued so far is waited for by every stream
    that uses the buffer, without a host synchronisation: with CAI v3 an
    event recorded on the producer's ``stream``; with DLPack (and for an
    object whose CAI names no stream, such as a PyTorch tensor) the producer
    orders its work onto a private stream when asked (``__dlpack__(stream=)``),
    and an event there. Each stream waits once (at its first use); inside a
    capture the wait is an external event node. The
    ``PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC=0`` switch turns this off.

    Raises
    ------
    ArgumentTypeError
        ``obj`` exports neither protocol, lives on the host, or is not
        C-contiguous (strided memory is never treated as contiguous); its
        CAI is not a dict; a CAI ``stream`` that is not None or a stream
        handle.
    ArgumentValueError
        A CAI entry that is wrong (data pointer, shape, typestr, strides, the
        bytes they reach; a ``descr`` whose element size differs from its
        ``typestr``'s): the same check and error as a launch's.
    CaptureError
        The CAI ``stream`` is being captured into a graph (a wait for it from
        another stream would join that stream to the capture).

    A CAI array exported read-only (``data=(ptr, True)``) gives a Buffer
    whose ``readonly`` is True: pycudadrv's writes, fills and copies into it
    are refused.
    """
    if isinstance(obj, Buffer):
        return obj
    cai = read_cai(obj)
    if cai is None:
        if hasattr(obj, "__dlpack__"):
            return _from_dlpack(obj, device)
        raise ArgumentTypeError(f"{type(obj).__name__} exports neither __cuda_array_interface__ nor __dlpack__")
    return cai_buffer(obj, cai, device, False, "asbuffer")


cdef Buffer cai_buffer(object obj, object cai, object device, bint strided, str who):
    try:
        ptr, lo, hi, contiguous, shape, strides, dt = cai_extent(cai)
    except (ArgumentTypeError, ArgumentValueError) as e:
        raise type(e)(f"{who}: {type(obj).__name__}: {e}") from None
    try:
        descr = cai.get("descr")
        if descr is not None and isinstance(descr, list) and len(descr) > 1:
            rec = np.dtype(descr)
            if rec.itemsize != dt.itemsize:
                raise ArgumentValueError(f"its __cuda_array_interface__ 'descr' {rec} is {rec.itemsize} bytes an "
                                         f"element, its 'typestr' {cai.get('typestr')!r} {dt.itemsize}")
            dt = rec
        read_only = bool(cai["data"][1])
    except (ArgumentValueError, TypeError, ValueError) as e:
        raise ArgumentValueError(f"{who}: {type(obj).__name__}: {e}") from e
    if dt.itemsize == 0 or dt.hasobject:
        raise ArgumentTypeError(f"{who}: {type(obj).__name__}: its __cuda_array_interface__ 'descr' {dt} is not "
                                "a type of device data")
    if not contiguous and not strided:
        raise ArgumentTypeError(f"{who}: {type(obj).__name__} is not C-contiguous (shape {shape}, strides "
                                f"{strides} in bytes); make it contiguous first (e.g. "
                                "x.contiguous() in PyTorch, cupy.ascontiguousarray(x))")
    count = 1
    for n in shape:
        count *= n
    nbytes = count * dt.itemsize
    if not contiguous:
        # The bytes a strided array spans from its first element (every stride >= 0)
        if any(st < 0 for st in strides):
            raise ArgumentTypeError(f"{who}: {type(obj).__name__} has a negative stride (strides {strides} in "
                                    "bytes): its elements lie before its data pointer; pass a copy")
        nbytes = 0 if count == 0 else dt.itemsize + sum((n - 1) * st for n, st in zip(shape, strides))
    if nbytes >= 2**64:
        raise ArgumentTypeError(f"{who}: {type(obj).__name__}: shape {shape} of {dt} is {nbytes} "
                                "bytes, more than any device holds")
    try:
        producer = _cai_stream(cai, obj) if "stream" in cai else None
    except ArgumentTypeError as e:
        raise ArgumentTypeError(f"{who}: {e}") from None
    cdef Device dev = as_device(device, who)
    cdef ReadyEvent ready = None
    if foreign_sync_enabled():
        if producer is not None:          # CAI v3: the producer's work so far (its users are not known yet)
            try:
                ready = _producer_ready(<uintptr_t>producer, None, obj, dev)
            except ArgumentTypeError as e:
                raise ArgumentTypeError(f"{who}: {e}") from e.__cause__
        elif "stream" not in cai and callable(getattr(obj, "__dlpack__", None)):
            _release_capsule(_call_dlpack(obj, int(<uintptr_t>_sync_stream(dev)._handle) or 1, who), obj)
            ready = ready_event((<Stream>_sync_stream(dev))._handle, dev)
    cdef Allocation a = foreign(<CUdeviceptr>ptr, nbytes, dev, obj, ready)
    if read_only:
        a.set_read_only()
    if not contiguous:
        return buffer_over(a, a.ptr, nbytes, None, None, None)     # raw bytes: the caller has the geometry
    return buffer_over(a, a.ptr, nbytes, dt, shape, None)


def data_pointer(obj, *, strided=False):
    """The device address of ``obj`` (a Buffer or view, or any object with
    ``__cuda_array_interface__``) as an int, to pass explicitly where a kernel
    takes a pointer. Strided memory is refused unless ``strided=True``: the
    opt-in for kernels that index with the strides themselves.

    Raises ArgumentTypeError for other objects or (without ``strided``)
    non-contiguous ones, ArgumentValueError for a wrong __cuda_array_interface__ entry, ClosedError
    for a closed Buffer."""
    strided = yes_no(strided, "strided", "data_pointer")
    if isinstance(obj, Buffer):
        (<Buffer>obj).ensure_open()
        return (<Buffer>obj)._ptr
    try:
        cai = read_cai(obj)
    except ArgumentTypeError as e:
        raise ArgumentTypeError(f"data_pointer: {type(obj).__name__}: {e}") from e.__cause__
    if cai is None:
        raise ArgumentTypeError(f"data_pointer: {type(obj).__name__} has no __cuda_array_interface__")
    try:
        ptr, lo, hi, contiguous = cai_extent(cai)[:4]
    except (ArgumentTypeError, ArgumentValueError) as e:
        raise type(e)(f"data_pointer: {type(obj).__name__}: {e}") from None
    if not contiguous and not strided:
        raise ArgumentTypeError(f"data_pointer: {type(obj).__name__} is strided (strides {tuple(cai['strides'])}); "
                                "pass strided=True if the kernel handles the strides")
    return ptr


cdef bint is_own_value(object a):
    """A Buffer, None or a scalar: an argument that is not another library's array."""
    return a is None or type(a) is Buffer or isinstance(a, (int, float, complex, bytes, bytearray, memoryview,
                                                            np.generic))


cdef bint is_foreign_memory(object a):
    """Another library's array given as it is (not a Buffer, not a scalar)."""
    if is_own_value(a):
        return False
    return read_cai(a) is not None or hasattr(a, "__dlpack__")


cdef bint is_dlpack_only(object a) except -1:
    """An array that exports __dlpack__ but no __cuda_array_interface__ (JAX, some PyTorch uses)."""
    if is_own_value(a):
        return False
    try:
        if read_cai(a) is not None:
            return False
    except ArgumentTypeError:
        return False          # pack_arg reports it, naming the parameter
    return hasattr(a, "__dlpack__")
