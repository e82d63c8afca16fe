# cython: language_level=3
"""Modules: loading PTX/CUBIN/fatbin images through a per-context cache keyed
by the FNV-1a 64-bit hash of the image bytes, and looking up functions."""
cimport cython
from libc.stdint cimport uintptr_t, uint64_t
from libc.stdlib cimport malloc, free
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, get_device, current_device, as_device
from pycudadrv._launch cimport Function, make_function

import threading
from pycudadrv._driver import fnv1a64, CudaError
from pycudadrv import _signature

cdef dict _cache = {}     # (device ordinal, fnv1a64) -> Module
_cache_lock = threading.Lock()

ELF_MAGIC = b"\x7fELF"
FATBIN_MAGIC = b"\x50\xed\x55\xba"   # 0xBA55ED50, little-endian
LOG_BYTES = 16384


def image_kind(image):
    """``"cubin"`` (ELF, ``\\x7fELF``), ``"fatbin"`` (magic 0xBA55ED50) or
    ``"ptx"`` (text) from the first bytes of a module image.

    Raises ValueError for an empty image or binary data that is neither."""
    if isinstance(image, str):
        image = image.encode()
    b = bytes(image[:4])
    if not b.strip(b"\0"):
        raise ValueError("empty module image" if not b else "module image starts with NUL bytes: not PTX, "
                         "CUBIN or fatbin")
    if b == ELF_MAGIC:
        return "cubin"
    if b == FATBIN_MAGIC:
        return "fatbin"
    head = bytes(image[:4096])
    # PTX is text: no control characters but tab/CR/LF (UTF-8 in comments is allowed); NUL only at the end.
    if b"\0" in head.rstrip(b"\0") or any(c < 9 or 13 < c < 32 or c == 127 for c in head.rstrip(b"\0")):
        raise ValueError("module image is neither PTX text, a CUBIN (ELF) nor a fatbin: first bytes "
                         f"{bytes(image[:8])!r}")
    return "ptx"


def load_module(image, *, device=None, ptx=None):
    """Load a module image into a device's primary context, or return the
    cached module for the same bytes (``cuModuleLoadDataEx``).

    Parameters
    ----------
    image : bytes-like, str, or ObjectCode
        PTX text, CUBIN (ELF) or fatbin bytes, told apart by their first
        bytes; or the result of :func:`pycudadrv.compile`.
    device : Device or int, optional
        The current device by default.
    ptx : str, optional
        PTX of the same kernels, used only to learn parameter types when
        ``image`` is binary (``compile()`` passes it).

    The cache key is (device, FNV-1a 64 of the bytes); on a hash hit the bytes
    are compared too, so different images never share an entry.

    Raises
    ------
    ValueError
        The image is empty or not PTX/CUBIN/fatbin.
    CudaError
        The driver rejected the image; for PTX the message includes the JIT
        error log (e.g. ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION`` when the PTX is
        newer than the driver: compile to CUBIN for the device instead).
    """
    lowered = None
    if hasattr(image, "image") and hasattr(image, "target"):
        ptx = ptx if ptx is not None else getattr(image, "ptx", None)
        lowered = getattr(image, "lowered_names", None)
        image = image.image
    if isinstance(image, str):
        image = image.encode()
    data = bytes(image)
    kind = image_kind(data)
    cdef Device dev = as_device(device)
    h = fnv1a64(data)
    key = (dev.ordinal, h)
    mod = _cache.get(key)
    if mod is None or (<Module>mod).closed or (<Module>mod).image != data:
        with _cache_lock:
            mod = _cache.get(key)
            if mod is None or (<Module>mod).closed or (<Module>mod).image != data:
                mod = Module._load(data, kind, dev, h, ptx)
                _cache[key] = mod
    if lowered:
        (<Module>mod).lowered_names.update(lowered)
    return mod


def clear_module_cache():
    """Forget cached modules (modules already returned stay loaded)."""
    with _cache_lock:
        _cache.clear()


def module_cache_size():
    """Number of modules in the in-process cache."""
    return len(_cache)


# Fields must survive the GC clearing cycles: __dealloc__ reads them.
@cython.no_gc_clear
cdef class Module:
    """A loaded CUDA module. Get one from :func:`load_module` or
    ``compile(...).load()``; ``module.function(name)`` looks up a kernel."""

    def __init__(self, *args, **kwargs):
        raise TypeError("Modules come from pycudadrv.load_module(image) or compile(...).load()")

    @staticmethod
    def _load(bytes data, str kind, Device dev, h, ptx):
        cdef Module m = Module.__new__(Module)
        cdef pycudadrv_driver_api* d = driver()
        cdef bytes payload = data + b"\0" if kind == "ptx" else data
        cdef char* errlog = <char*>malloc(LOG_BYTES)
        cdef char* infolog = <char*>malloc(LOG_BYTES)
        cdef CUjit_option opts[4]
        cdef void* vals[4]
        cdef CUresult r
        cdef const char* p = payload
        if errlog == NULL or infolog == NULL:
            free(errlog)
            free(infolog)
            raise MemoryError()
        errlog[0] = 0
        infolog[0] = 0
        opts[0] = CU_JIT_ERROR_LOG_BUFFER
        vals[0] = errlog
        opts[1] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
        vals[1] = <void*><uintptr_t>LOG_BYTES
        opts[2] = CU_JIT_INFO_LOG_BUFFER
        vals[2] = infolog
        opts[3] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
        vals[3] = <void*><uintptr_t>LOG_BYTES
        try:
            dev.activate()
            with nogil:
                r = d.p_cuModuleLoadDataEx(&m.handle, p, 4, opts, vals)
            if r != CUDA_SUCCESS:
                log = errlog[:LOG_BYTES].split(b"\0", 1)[0].decode(errors="replace").strip()
                ctx = f"loading a {kind} image of {len(data)} bytes on device {dev.ordinal}"
                if log:
                    ctx += f"\nJIT error log:\n{log}"
                if r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
                    ctx += ("\nThe PTX is newer than this driver supports: compile to CUBIN for the device "
                            "(pycudadrv.compile(..., target='cubin'), the default) or update the driver.")
                raise make_error(r, "cuModuleLoadDataEx", ctx)
        finally:
            free(errlog)
            free(infolog)
        m.device = dev
        m.kind = kind
        m.hash = h
        m.image = data
        m._functions = {}
        m.lowered_names = {}
        m.closed = False
        if kind == "ptx":
            m.ptx_layouts = _signature.ptx_entries(data.decode(errors="replace"))
        elif ptx is not None:
            m.ptx_layouts = _signature.ptx_entries(ptx if isinstance(ptx, str) else bytes(ptx).decode())
        else:
            m.ptx_layouts = None
        return m

    @property
    def handle(self):
        """The ``CUmodule`` as an int."""
        return <uintptr_t>self.handle

    def function_names(self):
        """Names of the kernels the module exports, when the driver can tell
        (``cuModuleEnumerateFunctions`` + ``cuFuncGetName``, CUDA 12.4+) or the
        module came with PTX; else None."""
        cdef pycudadrv_driver_api* d = driver()
        cdef unsigned int n = 0, k
        cdef CUfunction* fs
        cdef const char* name
        if self.ptx_layouts is not None:
            return sorted(self.ptx_layouts)
        if d.p_cuModuleGetFunctionCount == NULL or d.p_cuModuleEnumerateFunctions == NULL or d.p_cuFuncGetName == NULL:
            return None
        self.device.activate()
        check(d.p_cuModuleGetFunctionCount(&n, self.handle), "cuModuleGetFunctionCount")
        fs = <CUfunction*>malloc(max(n, 1) * sizeof(CUfunction))
        try:
            check(d.p_cuModuleEnumerateFunctions(fs, n, self.handle), "cuModuleEnumerateFunctions")
            out = []
            for k in range(n):
                check(d.p_cuFuncGetName(&name, fs[k]), "cuFuncGetName")
                out.append((<bytes>name).decode())
        finally:
            free(fs)
        return sorted(out)

    def function(self, str name, signature=None):
        """The kernel ``name`` (``cuModuleGetFunction``), cached per module.

        ``name`` is the entry point's name, or a name expression given to
        ``compile(..., name_expressions=...)`` such as ``"axpy<float>"``
        (looked up through its lowered, mangled name).

        ``signature`` (optional) declares the parameter types; see
        :meth:`Function.set_signature`.

        Raises
        ------
        CudaError
            ``CUDA_ERROR_NOT_FOUND`` when the module has no such entry point;
            the message lists the entry points it exports when known.
        """
        if self.closed:
            raise ValueError("module is unloaded")
        name = self.lowered_names.get(name, name)
        fn = self._functions.get(name)
        if fn is not None and signature is None:
            return fn
        cdef pycudadrv_driver_api* d = driver()
        cdef CUfunction f = NULL
        cdef bytes bname = name.encode()
        self.device.activate()
        cdef CUresult r = d.p_cuModuleGetFunction(&f, self.handle, bname)
        if r != CUDA_SUCCESS:
            ctx = f"module ({self.kind}, {len(self.image)} bytes) has no entry point {name!r}"
            try:
                names = self.function_names()
            except Exception:
                names = None
            if names is not None:
                ctx += "; it exports: " + (", ".join(names) if names else "(nothing)")
            if names and "(" not in name and not name.startswith("_Z"):
                ctx += ("\n(C++ names are mangled: declare the kernel extern \"C\", or use "
                        "compile(..., name_expressions=[...]))")
            raise make_error(r, "cuModuleGetFunction", ctx)
        layout, source = self._layout_for(<uintptr_t>f, name)
        cdef Function fun = make_function(f, name, self, self.device, layout, source)
        if signature is not None:
            fun.set_signature(signature)
        else:
            self._functions[name] = fun
        return fun

    def _layout_for(self, size_t f_int, str name):
        cdef CUfunction f = <CUfunction><uintptr_t>f_int
        cdef pycudadrv_driver_api* d = driver()
        cdef size_t off = 0, size = 0, i = 0
        cdef CUresult r
        info = None
        if d.p_cuFuncGetParamInfo != NULL:
            info = []
            while True:
                r = d.p_cuFuncGetParamInfo(f, i, &off, &size)
                if r != CUDA_SUCCESS:
                    break
                info.append((off, size))
                i += 1
        ptx_layout = None if self.ptx_layouts is None else self.ptx_layouts.get(name)
        if ptx_layout is not None:
            if info is None or [(p.offset, p.size) for p in ptx_layout] == info:
                return ptx_layout, "ptx"
        if info is not None:
            return [_signature.Param(_signature.ANY, s, min(s, 8) if s in (1, 2, 4, 8) else 1, o)
                    for o, s in info], "cuFuncGetParamInfo"
        return None, "unknown"

    def unload(self):
        """Unload the module (``cuModuleUnload``) and drop it from the cache.
        Its functions become unusable. A second call is a no-op."""
        if self.closed:
            return
        self.closed = True
        with _cache_lock:
            key = (self.device.ordinal, self.hash)
            if _cache.get(key) is self:
                del _cache[key]
        self.device.activate()
        check(driver().p_cuModuleUnload(self.handle), "cuModuleUnload")

    def __repr__(self):
        state = "unloaded" if self.closed else "loaded"
        return (f"<Module {self.kind}, {len(self.image)} bytes, fnv1a64=0x{self.hash:016x}, "
                f"device {self.device.ordinal}, {state}>")
