# Function.launch: a descriptor and a bound-method type of pycudadrv's own (included by _launch.pyx).
#
# CPython's own method descriptor hands every call to launch_vector with the caller's argument
# array, except a call that comes with a dict of keywords -- fn.launch(g, b, *args, stream=s), a
# wrapper forwarding **kw, functools.partial, PyObject_Call from C -- which it first copies into a
# new array (PyVectorcall_Call: a heap block and a reference per argument; 0.25 us for 64 arguments
# on this project's hosts, more than the rest of the launch's own work). These types take such a call
# with the caller's tuple and dict as they are:
#
# * ``fn.launch(...)`` spelled in place builds no bound object: the descriptor is marked a method
#   descriptor, so CPython calls it with fn first in the caller's array (_descr_vc).
# * ``fn.launch`` as a value is a _BoundLaunch. Its vectorcall (_bound_vc) takes calls spelled out
#   (launch = fn.launch; launch(g, b, x, y, stream=s)). A call that reaches it with keyword names the
#   interpreter built a moment ago (PyVectorcall_Call's copy of a dict: a new tuple, a reference
#   count of one, tracked by the GC) marks the Function: this bound object and
#   every later one take their calls through tp_call (_bound_call), with the tuple and dict as
#   they come. A call spelled out then builds that tuple and dict (about 45 ns): the convention
#   follows the Function's callers, one way, never back. A call spelled out names a constant of its
#   code, which 3.11 and 3.12 borrow for the call: a reference count of one too when no other code
#   of its module names the same keywords; but a tuple of str is no longer tracked by the GC once
#   a collection has seen it, and before that it is a constant of the calling frame's code: the
#   check asks all three (the frame only when the first two say a dict's copy).

cdef extern from *:
    Py_ssize_t _refcnt "Py_REFCNT"(PyObject* o)
    int _gc_tracked "PyObject_GC_IsTracked"(PyObject* o)
    Py_ssize_t _dict_size "PyDict_GET_SIZE"(PyObject* d)
    PyObject* _dict_get "PyDict_GetItemWithError"(PyObject* d, PyObject* key) except? NULL


@cython.final
cdef class _LaunchDescriptor:
    """The descriptor ``Function.launch`` (see :meth:`Function.launch`)."""
    cdef void* _vc                  # _descr_vc: fn.launch(...) called in place, fn first

    def __get__(self, obj, objtype):
        if obj is None:
            return self
        if not isinstance(obj, Function):
            raise ArgumentTypeError(f"descriptor 'launch' of 'pycudadrv.Function' objects does not apply to a "
                                    f"'{type(obj).__name__}' object")
        return _bind_launch(<Function>obj)

    @property
    def __doc__(self):
        return _LAUNCH_DOC_TEXT

    @property
    def __name__(self):
        return "launch"

    @property
    def __qualname__(self):
        return "Function.launch"

    @property
    def __objclass__(self):
        return Function

    @property
    def __signature__(self):
        return _launch_signature(True)

    def __reduce__(self):
        return (getattr, (Function, "launch"))         # as a method descriptor: copy and pickle give it back

    def __repr__(self):
        return "<method 'launch' of 'pycudadrv.Function' objects>"


@cython.final
@cython.freelist(8)
cdef class _BoundLaunch:
    """``fn.launch``: :meth:`Function.launch` bound to one Function."""
    cdef void* _vc                  # _bound_vc, or NULL: the calls go to _bound_call (tuple and dict)
    cdef Function _fn
    cdef void* _spelled             # keyword names last found a constant of the caller (compared, never read)

    @property
    def __self__(self):
        return self._fn

    @property
    def __func__(self):
        return Function.__dict__["launch"]

    @property
    def __doc__(self):
        return _LAUNCH_DOC_TEXT

    @property
    def __name__(self):
        return "launch"

    @property
    def __qualname__(self):
        return "Function.launch"

    @property
    def __signature__(self):
        return _launch_signature(False)

    def __eq__(self, other):
        return isinstance(other, _BoundLaunch) and (<_BoundLaunch>other)._fn is self._fn

    def __hash__(self):
        return hash((id(self._fn), "launch"))

    def __reduce__(self):
        return (getattr, (self._fn, "launch"))         # as a bound method (pickles when its Function does)

    def __repr__(self):
        return f"<bound method Function.launch of {self._fn!r}>"


cdef _BoundLaunch _bind_launch(Function fn):
    cdef _BoundLaunch m = _BoundLaunch.__new__(_BoundLaunch)
    m._fn = fn
    m._vc = NULL if fn._launch_dict_calls else <void*>_bound_vc
    return m


cdef object _descr_vc(object self, PyObject** args, size_t nargsf, PyObject* kwnames):
    cdef Py_ssize_t n = pycudadrv_vectorcall_nargs(nargsf)
    if n < 1 or not isinstance(<object>args[0], Function):
        raise ArgumentTypeError("Function.launch(fn, grid, block, *args, ...) needs a Function first, got "
                                + ("nothing" if n < 1 else type(<object>args[0]).__name__))
    return launch_vector(<Function>args[0], args + 1, n - 1, kwnames)


cdef object _bound_vc(PyObject* self, PyObject** args, size_t nargsf, PyObject* kwnames):
    cdef PyObject* fn = <PyObject*>(<_BoundLaunch>self)._fn      # borrowed: self holds it
    if (kwnames != NULL and _refcnt(kwnames) == 1 and <void*>kwnames != (<_BoundLaunch>self)._spelled
            and _gc_tracked(kwnames)):
        if pycudadrv_is_caller_constant(kwnames):
            (<_BoundLaunch>self)._spelled = <void*>kwnames     # a call spelled out: not asked again
        else:
            (<Function>fn)._launch_dict_calls = True    # keyword names made for this call: a dict's copy
            (<_BoundLaunch>self)._vc = NULL
    return launch_vector(<Function>fn, args, pycudadrv_vectorcall_nargs(nargsf), kwnames)


cdef object _bound_call(object self, PyObject* args, PyObject* kwargs):
    """tp_call of _BoundLaunch: the caller's tuple `args` and dict `kwargs` (or NULL) as they are."""
    return _launch_run((<_BoundLaunch>self)._fn, pycudadrv_tuple_items(args), _tuple_size(args), NULL,
                       kwargs if kwargs != NULL and _dict_size(kwargs) else NULL)


cdef object _launch_dict_keywords(Function fn, _LaunchKw* kw, PyObject* kwargs):
    """The keywords of Function.launch from the caller's dict (stream= alone: one lookup). Returns
    what the caller holds for the launch's length: the values `kw` points at, owned (Python code the
    launch runs -- a grid's iteration, an int subclass's comparison -- could change the dict)."""
    cdef PyObject* value
    cdef tuple item
    if _dict_size(kwargs) == 1:
        value = _dict_get(kwargs, <PyObject*>_KW_STREAM)
        if value != NULL:
            kw.stream = value
            return <object>value
    items = (<dict>kwargs).items()
    held = list(items)              # (key, value) pairs of its own: nothing here is the dict's
    for item in held:
        _launch_keyword(fn, kw, item[0], <PyObject*>item[1])
    return held


cdef object _launch_signature(bint unbound):
    """inspect.Signature of Function.launch (with ``self`` when `unbound`)."""
    import inspect
    P = inspect.Parameter
    ps = [P("self", P.POSITIONAL_OR_KEYWORD)] if unbound else []
    ps += [P("grid", P.POSITIONAL_OR_KEYWORD), P("block", P.POSITIONAL_OR_KEYWORD), P("args", P.VAR_POSITIONAL),
           P("shared_mem_bytes", P.KEYWORD_ONLY, default=0), P("stream", P.KEYWORD_ONLY, default=None),
           P("cooperative", P.KEYWORD_ONLY, default=False), P("cluster", P.KEYWORD_ONLY, default=None),
           P("programmatic_dependent", P.KEYWORD_ONLY, default=False)]
    return inspect.Signature(ps, return_annotation=None)


def _dict_calls_for_tests(Function fn):
    """Whether ``fn``'s bound launch methods take their calls through tp_call (a dict call was seen):
    for the tests of the convention's switch."""
    return bool(fn._launch_dict_calls)


cdef int _install_launch() except -1:
    cdef _LaunchDescriptor d = _LaunchDescriptor.__new__(_LaunchDescriptor)
    cdef _BoundLaunch m = _BoundLaunch.__new__(_BoundLaunch)
    pycudadrv_enable_vectorcall(_LaunchDescriptor, d, &d._vc)
    pycudadrv_set_method_descriptor(_LaunchDescriptor)
    pycudadrv_enable_vectorcall(_BoundLaunch, m, &m._vc)
    pycudadrv_set_call(_BoundLaunch, <void*>_bound_call)
    d._vc = <void*>_descr_vc
    pycudadrv_set_type_attr(Function, "launch", d)
    pycudadrv_disallow_instantiation(_LaunchDescriptor)     # one made bare (no vectorcall, no Function)
    pycudadrv_disallow_instantiation(_BoundLaunch)          # would be called with _fn None: a crash
    return 0
