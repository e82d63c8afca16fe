# cython: language_level=3
"""Modules: loading PTX/CUBIN/fatbin images through a per-context cache keyed
by the FNV-1a 64-bit hash of the image bytes (and of what else decides the
parameter layouts), looking up functions and module globals."""
cimport cython
from libc.stdint cimport uintptr_t, uint64_t
from libc.stdlib cimport malloc, free
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, check, make_error, Lifetime, warn_dealloc_failure
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device, as_device
from pycudadrv._stream cimport Stream
from pycudadrv._stream cimport destroy_handle, DESTROY_MODULE
from pycudadrv._alloc cimport Allocation, foreign
from pycudadrv._memory cimport Buffer, buffer_over
from pycudadrv._launch cimport Function, make_function

import json
import re
import threading
import weakref
import numpy as np
from pycudadrv._driver import fnv1a64
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, ClosedError, short_repr
from pycudadrv import _signature

__all__ = ["Module", "load_module", "clear_module_cache", "module_cache_size", "image_kind"]

cdef dict _cache = {}     # (device ordinal, fnv1a64 of the image, fnv1a64 of the layout info) -> Module
_cache_lock = threading.Lock()

ELF_MAGIC = b"\x7fELF"
FATBIN_MAGIC = b"\x50\xed\x55\xba"   # 0xBA55ED50, little-endian
LOG_BYTES = 16384
_PTX_GLOBAL_RE = re.compile(r"\.(?:global|const)\s+(?:\.align\s+\d+\s+)?\.[a-z]+\d+\s+([A-Za-z_$%][\w$%]*)\s*"
                            r"(?:\[(\d*)\])?")


# Modules are made only by Module._load (which passes this token).
cdef object _TOKEN = object()


cdef bytes _image_bytes(object image, str where):
    """The bytes of a module image given as bytes-like or str (PTX text)."""
    if isinstance(image, str):
        try:
            return image.encode()
        except UnicodeEncodeError as e:
            raise ArgumentValueError(f"{where}: the PTX text cannot be encoded as UTF-8 ({e})") from None
    try:
        return bytes(memoryview(image))
    except TypeError:
        raise ArgumentTypeError(f"{where}: a module image is bytes-like (CUBIN, fatbin, PTX) or a str (PTX) or an "
                                f"ObjectCode, got {type(image).__name__}") from None


def image_kind(image):
    """``"cubin"`` (ELF, ``\\x7fELF``), ``"fatbin"`` (magic 0xBA55ED50) or
    ``"ptx"`` (text) from the first bytes of a module image (bytes-like, or
    a str of PTX).

    Raises ArgumentTypeError for anything else, ArgumentValueError for an
    empty image, binary data that is neither, or text that is not PTX (no
    ``.version`` directive, which every PTX module has: a file path, say,
    whose file was meant to be read)."""
    if not isinstance(image, (bytes, str)) and hasattr(image, "target") and hasattr(image, "image"):
        image = image.image         # an ObjectCode
    if not isinstance(image, (bytes, str)):
        image = _image_bytes(image, "image_kind")
    text = image
    if isinstance(image, str):
        image = image[:4096].encode(errors="surrogatepass")
    b = bytes(image[:4])
    if not b.strip(b"\0"):
        raise ArgumentValueError("empty module image" if not b else "module image starts with NUL bytes: not "
                                 "PTX, CUBIN or fatbin")
    if b == ELF_MAGIC:
        if len(image) < 64:
            raise ArgumentValueError(f"module image is a truncated ELF file ({len(image)} bytes; an ELF header alone "
                                     "is 64): not a CUBIN")
        return "cubin"
    if b == FATBIN_MAGIC:
        return "fatbin"
    head = bytes(image[:4096])
    # PTX is text: no control characters but tab/CR/LF (UTF-8 in comments is allowed); NUL only at the end.
    if b"\0" in head.rstrip(b"\0") or any(c < 9 or 13 < c < 32 or c == 127 for c in head.rstrip(b"\0")):
        raise ArgumentValueError("module image is neither PTX text, a CUBIN (ELF) nor a fatbin: first bytes "
                                 f"{bytes(image[:8])!r}")
    if not isinstance(text, (str, bytes)):
        text = bytes(text)
    if (".version" if isinstance(text, str) else b".version") not in text:
        shown = short_repr(text)
        looks_like_path = len(text) < 4096 and ("\n" if isinstance(text, str) else b"\n") not in text
        raise ArgumentValueError(f"module image {shown} is text but not PTX (it has no .version directive)"
                                 + ("; it looks like a file path: pass the file's contents "
                                    "(open(path, 'rb').read())" if looks_like_path else ""))
    return "ptx"


_PUNCT_SPACE = re.compile(r"\s*([<>,()*&\[\]:])\s*")


def _spelling(expr):
    """A C++ name expression without the spaces the compiler ignores (around < > , ( ) * & [ ] :)."""
    return _PUNCT_SPACE.sub(r"\1", " ".join(expr.split()))


def lowered_name(dict lowered, name):
    """The mangled name a compile() name expression was lowered to, for ``name`` spelled as given to
    compile() or in any spelling the compiler takes for the same expression (``"reduce6<int, 256, false>"``
    and ``"reduce6<int,256,false>"``); ``name`` itself when it is no such expression."""
    got = lowered.get(name)
    if got is not None or not lowered or not isinstance(name, str):
        return name if got is None else got
    want = _spelling(name)
    for expr, mangled in lowered.items():
        if _spelling(expr) == want:
            return mangled
    return name


def _layout_info(ptx, source_decls):
    """The bytes, besides the image, that decide the parameter layouts (part of the cache key)."""
    if ptx is not None and not isinstance(ptx, (bytes, bytearray)):
        ptx = str(ptx).encode(errors="surrogatepass")
    decls = json.dumps(sorted((k, [list(p) if p else None for p in v]) for k, v in (source_decls or {}).items()),
                       default=int)
    return (bytes(ptx) if ptx else b"") + b"\0" + decls.encode()


def load_module(image, *, device=None, ptx=None, source_decls=None):
    """Load a module image into a device's primary context, or return the
    cached module for the same bytes (``cuModuleLoadDataEx``).

    Parameters
    ----------
    image : bytes-like, str, or ObjectCode
        PTX text, CUBIN (ELF) or fatbin bytes, told apart by their first
        bytes; or the result of :func:`pycudadrv.compile` / a link.
    device : Device or int, optional
        The current device by default.
    ptx : str, optional
        PTX of the same kernels, used only to learn parameter types when
        ``image`` is binary (``compile()`` passes it).
    source_decls : dict, optional
        Declared parameter types of ``extern "C"`` kernels (``compile()``
        passes what its source declares), for signedness and constness.

    The cache key is (device, FNV-1a 64 of the bytes, FNV-1a 64 of what else
    decides the layouts: the PTX and the declarations); on a hash hit the
    bytes are compared too, so different images, or the same CUBIN with and
    without its PTX, never share an entry.

    Raises
    ------
    ArgumentTypeError
        ``image`` is not bytes-like, a str or an ObjectCode; ``ptx`` or
        ``source_decls`` of the wrong type.
    ArgumentValueError
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
        source_decls = source_decls if source_decls is not None else getattr(image, "source_decls", None)
        image = image.image
    data = _image_bytes(image, "load_module")
    if ptx is not None and not isinstance(ptx, (str, bytes, bytearray)):
        raise ArgumentTypeError(f"load_module: ptx must be the PTX text (str or bytes) or None, got "
                                f"{type(ptx).__name__}")
    if source_decls is not None and not isinstance(source_decls, dict):
        raise ArgumentTypeError(f"load_module: source_decls must be a dict (ObjectCode.source_decls) or None, got "
                                f"{type(source_decls).__name__}")
    kind = image_kind(data)
    cdef Device dev = as_device(device, "load_module")
    info = _layout_info(ptx, source_decls)
    key = (dev.ordinal, fnv1a64(data), fnv1a64(info))
    mod = _cache.get(key)
    if mod is None or (<Module>mod)._life.ended or (<Module>mod).image != data or (<Module>mod)._layout_info != info:
        with _cache_lock:
            mod = _cache.get(key)
            if mod is None or (<Module>mod)._life.ended or (<Module>mod).image != data \
                    or (<Module>mod)._layout_info != info:
                mod = Module._load(data, kind, dev, key[1], ptx, source_decls, info)
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
@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.no_gc_clear
cdef class Module:
    """A loaded CUDA module. Get one from :func:`load_module` or
    ``compile(...).load()``; ``module.function(name)`` looks up a kernel,
    ``module.get_global(name)`` a ``__device__`` or ``__constant__`` variable."""

    def __cinit__(self, *args, **kwargs):
        if len(args) != 1 or args[0] is not _TOKEN:
            raise ArgumentTypeError("Modules come from pycudadrv.load_module(image) or compile(...).load()")

    @staticmethod
    def _load(bytes data, str kind, Device dev, h, ptx, source_decls, bytes info):
        cdef Module m = Module.__new__(Module, _TOKEN)
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
                r = d.p_cuModuleLoadDataEx(&m._handle, p, 4, opts, vals)
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
        m._layout_info = info
        m._functions = {}
        m._globals = weakref.WeakSet()
        m.lowered_names = {}
        m._life = Lifetime("module")
        m.source_decls = dict(source_decls) if source_decls else None
        text = data.decode(errors="replace") if kind == "ptx" else (
            None if ptx is None else (ptx if isinstance(ptx, str) else bytes(ptx).decode(errors="replace")))
        m._ptx_text = text
        m.ptx_layouts = _signature.ptx_entries(text) if text is not None else None
        return m

    @property
    def handle(self):
        """The ``CUmodule`` as an int."""
        return <uintptr_t>self._handle

    @property
    def closed(self):
        """Whether :meth:`unload` was called."""
        return self._life.ended

    cdef int _ensure_open(self) except -1:
        if self._life.ended:
            raise ClosedError("module is unloaded")
        return 0

    def function_names(self):
        """Names of the kernels the module exports, when the driver can tell
        (``cuModuleEnumerateFunctions`` + ``cuFuncGetName``, CUDA 12.4+) or the
        module came with PTX; else None."""
        cdef pycudadrv_driver_api* d = driver()
        cdef unsigned int n = 0, k
        cdef CUfunction* fs
        cdef const char* name
        self._ensure_open()
        if self.ptx_layouts is not None:
            return sorted(self.ptx_layouts)
        if d.p_cuModuleGetFunctionCount == NULL or d.p_cuModuleEnumerateFunctions == NULL or d.p_cuFuncGetName == NULL:
            return None
        self.device.activate()
        check(d.p_cuModuleGetFunctionCount(&n, self._handle), "cuModuleGetFunctionCount")
        fs = <CUfunction*>malloc(max(n, 1) * sizeof(CUfunction))
        try:
            check(d.p_cuModuleEnumerateFunctions(fs, n, self._handle), "cuModuleEnumerateFunctions")
            out = []
            for k in range(n):
                check(d.p_cuFuncGetName(&name, fs[k]), "cuFuncGetName")
                out.append((<bytes>name).decode())
        finally:
            free(fs)
        return sorted(out)

    def global_names(self):
        """Names of the module's ``__device__`` and ``__constant__`` variables
        when its PTX is known (the driver cannot list them), else None."""
        if self._ptx_text is None:
            return None
        return sorted({m.group(1) for m in _PTX_GLOBAL_RE.finditer(_signature._strip_comments(self._ptx_text))})

    def get_global(self, str name, dtype=None):
        """A Buffer over the module's ``__device__`` or ``__constant__``
        variable ``name`` (``cuModuleGetGlobal``): ``nbytes`` is its size;
        with ``dtype`` it is typed (a 1-D array of that many elements). Write
        it with ``write``/``fill``/``copy_from`` as any Buffer (kernels launched
        afterwards see the new value). The Buffer keeps the module alive and
        is closed by :meth:`unload`. A C++ variable is found through its name
        expression given to ``compile()`` or its mangled name.

        Raises
        ------
        ArgumentValueError
            No such global (the message lists the module's globals when its
            PTX is known), or ``dtype`` does not divide its size.
        ClosedError
            The module was unloaded.
        """
        self._ensure_open()
        name = lowered_name(self.lowered_names, name)
        cdef pycudadrv_driver_api* d = driver()
        cdef CUdeviceptr ptr = 0
        cdef size_t nbytes = 0
        cdef bytes bname = name.encode()
        self.device.activate()
        cdef CUresult r = d.p_cuModuleGetGlobal(&ptr, &nbytes, self._handle, bname)
        if r == CUDA_ERROR_NOT_FOUND:
            names = self.global_names()
            known = ("it has: " + (", ".join(names) if names else "(none)")) if names is not None else \
                "the driver cannot list a module's globals and its PTX was not kept"
            raise ArgumentValueError(f"module has no __device__/__constant__ variable {name!r}; {known}") \
                from make_error(r, "cuModuleGetGlobal")
        check(r, "cuModuleGetGlobal")
        dt = np.dtype(dtype) if dtype is not None else None
        if dt is not None and nbytes % dt.itemsize:
            raise ArgumentValueError(f"global {name!r} has {nbytes} bytes, not a whole number of {dt} elements")
        cdef Allocation a = foreign(ptr, nbytes, self.device, self, None)
        self._globals.add(a)
        return buffer_over(a, ptr, nbytes, dt, (nbytes // dt.itemsize,) if dt is not None else None, None)

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
        ClosedError
            The module was unloaded.
        """
        self._ensure_open()
        name = lowered_name(self.lowered_names, name)
        fn = self._functions.get(name)
        if fn is not None and signature is None:
            return fn
        cdef pycudadrv_driver_api* d = driver()
        cdef CUfunction f = NULL
        cdef bytes bname = name.encode()
        self.device.activate()
        cdef CUresult r = d.p_cuModuleGetFunction(&f, self._handle, bname)
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
        cdef Function fun = make_function(f, name, self, self.device, layout, source, self._life)
        if signature is not None:
            fun.set_signature(signature)
        else:
            self._functions[name] = fun
        return fun

    def _layout_for(self, size_t f_int, str name):
        """The strictest layout known for entry ``name``, and which sources gave it."""
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
            if r != CUDA_ERROR_INVALID_VALUE:
                info = None     # not "index past the last parameter": the driver could not tell
        base, src = None, "unknown"
        ptx_layout = None if self.ptx_layouts is None else self.ptx_layouts.get(name)
        if ptx_layout is not None and (info is None or [(p.offset, p.size) for p in ptx_layout] == info):
            base, src = ptx_layout, "ptx"
        elif info is not None:
            base = [_signature.Param(_signature.ANY, s, min(s, 8) if s in (1, 2, 4, 8) else 1, o) for o, s in info]
            src = "cuFuncGetParamInfo"
        if base is None:
            return None, src
        detail, dname = _signature.mangled_params(name), "mangled"
        if detail is None and self.source_decls is not None and name in self.source_decls:
            detail, dname = self.source_decls[name], "source"
        merged, used = _signature.merge_layout(base, detail, dname)
        return merged, (f"{dname}+{src}" if used else src)

    def unload(self):
        """Unload the module (``cuModuleUnload``) and drop it from the cache.
        Its functions and globals become unusable (ClosedError), and so do
        the graphs captured with its kernels (their ``launch()`` raises
        ClosedError). A second call is a no-op."""
        if self._life.ended:
            return
        self._life.ended = True
        for obj in list(self._globals):
            (<Allocation>obj).invalidate("its module was unloaded")
        self._globals = weakref.WeakSet()
        with _cache_lock:
            for key, mod in list(_cache.items()):
                if mod is self:
                    del _cache[key]
        # Deferred to its end while a capture forbids it (the driver would invalidate the capture).
        destroy_handle(DESTROY_MODULE, <void*>self._handle, self.device, True)

    def __repr__(self):
        if self._life is None or self.device is None or self.image is None:
            return "<Module (not loaded)>"
        state = "unloaded" if self._life.ended else "loaded"
        return (f"<Module {self.kind}, {len(self.image)} bytes, fnv1a64=0x{self.hash:016x}, "
                f"device {self.device.ordinal}, {state}>")
