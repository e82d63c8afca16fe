# cython: language_level=3, boundscheck=False, wraparound=False
"""TritonLaunchBase: the hot half of pycudadrv.triton.TritonKernel.launch -- Triton's launcher
arguments mapped onto the kernel's parameters in C, per (grid, stream) plan an arena of its own,
launched through _launch's issue_launch."""
cimport cython
from libc.stdlib cimport calloc, free
from libc.stdint cimport uint32_t
from cpython.object cimport PyObject

from pycudadrv._stream cimport Stream, resolve_stream
from pycudadrv._interop cimport dlpack_owners, settle_dlpack_owners
from pycudadrv._marshal cimport (ParamLayout, ParamSpec, marshal_cached, pycudadrv_arena, pycudadrv_arena_init,
                                 pycudadrv_arena_release, pycudadrv_arena_layout, pycudadrv_arena_at,
                                 pycudadrv_argcache, pycudadrv_argcache_zero, pycudadrv_argcache_init,
                                 pycudadrv_argcache_release)
from pycudadrv._launch cimport Function, LaunchConfig, issue_launch, launch_releases_gil

from pycudadrv._errors import ArgumentTypeError, ArgumentValueError

__all__ = ["TritonLaunchBase"]

cdef list _dl_owners = dlpack_owners()

cdef extern from *:
    PyObject** _seq_items "PySequence_Fast_ITEMS"(object t)       # a tuple's items (borrowed)


cdef enum:
    _DIV16 = 1          # the parameter was specialised as divisible by 16: its bytes' low 4 bits must be 0
    _DIV16_INT = 2      # ... an integer parameter, checked for Python ints only (as the Python path does)
    _PLAN_LIMIT = 16    # (grid, stream) plans kept per kernel; beyond, the cache starts again


cdef inline bint _same_grid(object g, object last):
    """`g` is the very grid `last` was (the same object, or an equal int or tuple of ints,
    never a bool: True == 1 must not find the plan of grid 1)."""
    cdef Py_ssize_t k
    if g is last:
        return True
    if type(g) is int:
        return type(last) is int and g == last
    if type(g) is not tuple or type(last) is not tuple or len(<tuple>g) != len(<tuple>last):
        return False
    for k in range(len(<tuple>g)):
        if type((<tuple>g)[k]) is not int or type((<tuple>last)[k]) is not int or (<tuple>g)[k] != (<tuple>last)[k]:
            return False
    return True


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
@cython.no_gc_clear
cdef class _LaunchPlan:
    """One (grid, stream) of a TritonLaunchBase: the validated configuration and the argument
    arena, which keeps the bytes of unchanged scalars between launches (only immutable scalars
    are kept, never memory: a plan holds no Buffer alive)."""
    cdef LaunchConfig lc
    cdef Stream s
    cdef pycudadrv_arena arena
    cdef pycudadrv_argcache args    # the objects packed last (owned scalars, borrowed Buffer addresses)
    cdef int n
    cdef unsigned long version # the function's layout version the arena was laid out for

    def __cinit__(self):
        pycudadrv_arena_init(&self.arena)
        pycudadrv_argcache_zero(&self.args)
        self.n = 0

    def __dealloc__(self):
        pycudadrv_argcache_release(&self.args)
        pycudadrv_arena_release(&self.arena)


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class TritonLaunchBase:
    """The launch half of :class:`pycudadrv.triton.TritonKernel` (internal base class).

    ``launch`` keeps one prepared configuration per (grid, stream) -- validated once, with
    an argument arena whose unchanged scalars keep their bytes -- and maps Triton's
    arguments (every one, or only the non-constexpr ones) onto the kernel's parameters
    in C. What this path does not handle (scratch memory, tuple or bf16 arguments, a
    changed constexpr, a broken divisibility, an empty grid, ...) goes to the Python
    path, which checks and raises exactly as before."""
    cdef Function _fn
    cdef bint _fast
    cdef Py_ssize_t _n_all, _n_rt, _np
    cdef Py_ssize_t* _src_all          # per kernel parameter: index into every-argument args, or -1 (null)
    cdef Py_ssize_t* _src_rt           # the same for runtime-only args
    cdef int* _pflags
    cdef tuple _const_pos, _const_want, _const_simple
    cdef object _last_grid, _last_stream
    cdef _LaunchPlan _last
    cdef dict _plans

    def __cinit__(self, *args, **kwargs):
        self._fast = False
        self._src_all = self._src_rt = NULL
        self._pflags = NULL
        self._plans = {}

    def __dealloc__(self):
        free(self._src_all)
        free(self._src_rt)
        free(self._pflags)

    def _init_fast(self, fn, src_all, src_rt, Py_ssize_t n_all, Py_ssize_t n_rt, div16, div16_int, const_pos,
                   const_want, const_simple):
        """Set the C half up (called by TritonKernel.__init__): parameter k takes argument
        ``src_all[k]`` of every-argument calls, ``src_rt[k]`` of runtime-only calls (-1:
        null); ``div16`` / ``div16_int`` list the parameters checked for divisibility;
        ``const_*`` the top-level constexprs checked when every argument is given; ``n_all``
        and ``n_rt`` the two argument counts. With ``fn`` None every launch takes the Python
        path."""
        self._fast = False
        self._plans = {}
        self._last = None
        self._last_grid = self._last_stream = None
        if fn is None:
            return
        cdef Py_ssize_t k, n = len(src_all)
        free(self._src_all)
        free(self._src_rt)
        free(self._pflags)
        self._src_all = <Py_ssize_t*>calloc(max(n, 1), sizeof(Py_ssize_t))
        self._src_rt = <Py_ssize_t*>calloc(max(n, 1), sizeof(Py_ssize_t))
        self._pflags = <int*>calloc(max(n, 1), sizeof(int))
        if self._src_all == NULL or self._src_rt == NULL or self._pflags == NULL:
            raise MemoryError()
        for k in range(n):
            self._src_all[k] = src_all[k]
            self._src_rt[k] = src_rt[k]
            self._pflags[k] = (_DIV16 if k in div16 else 0) | (_DIV16_INT if k in div16_int else 0)
        self._fn = <Function?>fn
        self._np = n
        self._n_all = n_all
        self._n_rt = n_rt
        self._const_pos, self._const_want, self._const_simple = tuple(const_pos), tuple(const_want), tuple(const_simple)
        self._fast = fn.num_params == n

    cdef _LaunchPlan _plan(self, object grid, tuple args, object stream):
        """The plan of (grid, stream), made on first use; None when the Python path must launch."""
        cdef Function fn = self._fn
        g = self._launch_grid(grid, args)               # validates and normalises (raises as before)
        if g[0] == 0 or g[1] == 0 or g[2] == 0:
            return None
        key = (g, stream)
        cdef _LaunchPlan plan
        try:
            plan = self._plans.get(key)
        except TypeError:                               # an unhashable stream object: the Python path
            return None
        if plan is None or plan.version != fn._layout_version:
            plan = _LaunchPlan.__new__(_LaunchPlan)
            plan.lc = LaunchConfig(fn, g, self.block, self.shared_mem_bytes, cooperative=self.cooperative,
                                   cluster=self.cluster, programmatic_dependent=self.programmatic_dependent)
            plan.s = <Stream>fn.device.default_stream if stream is None else resolve_stream(stream, fn.device)
            plan.n = self._np
            plan.version = fn._layout_version
            if pycudadrv_argcache_init(&plan.args, plan.n) != 0 or (plan.n and pycudadrv_arena_layout(
                    &plan.arena, <const unsigned char*>&fn.layout.specs[0].size, sizeof(ParamSpec),
                    <uint32_t>plan.n) != 0):
                raise MemoryError("kernel argument arena")
            if len(self._plans) >= _PLAN_LIMIT:
                self._plans.clear()
            self._plans[key] = plan
        if not callable(grid):                          # a grid computed from the arguments is computed each time
            self._last, self._last_grid, self._last_stream = plan, grid, stream
        return plan

    cdef bint _constants_match(self, tuple args):
        """The constexprs given (every argument) equal the compiled ones, as far as C can
        tell; False sends the launch to the Python path (which raises, or unwraps)."""
        cdef Py_ssize_t j
        for j in range(len(self._const_pos)):
            got = args[<Py_ssize_t>self._const_pos[j]]
            want = self._const_want[j]
            t = type(got)
            if got is None:
                if want is not None:
                    return False
            elif t is not int and t is not float and t is not bool and t is not str:
                return False
            elif want is None:
                return False
            elif self._const_simple[j] and (t is not type(want) or got != want):
                return False
        return True

    def launch(self, grid, *args, stream=None):
        """Launch on ``stream`` (the device's default stream by default) as
        Triton would: ``grid`` in programs (1 to 3 ints, or a callable of the
        arguments by name; x is multiplied by ``num_ctas``); a grid with a zero
        dimension launches nothing, as in Triton. ``args`` are every argument
        of the Triton function in order, or only the non-constexpr ones.

        One configuration per (grid, stream) is validated once and kept
        (``cuLaunchKernel``/``cuLaunchKernelEx`` then runs with an argument
        arena whose unchanged scalars keep their bytes; Buffers are re-read
        each launch, so a closed one raises ClosedError naming the kernel and
        the parameter, and none is kept alive). Scratch memory, when the
        kernel needs it, is allocated on the stream for this launch and freed
        after it (stream-ordered).

        Raises as :meth:`TritonConvention.kernel_args` (argument count,
        constexpr, divisibility) and :meth:`pycudadrv.Function.launch`."""
        cdef _LaunchPlan plan
        cdef Function fn = self._fn
        cdef Py_ssize_t k, n = len(args)
        cdef const Py_ssize_t* src
        cdef PyObject** items
        cdef unsigned char* slot
        cdef void** kp
        if not self._fast or launch_releases_gil() or fn._busy:   # released around the driver call, the plan's arena
            return self._launch_py(grid, args, stream)    # could be repacked by another thread; busy: a launch
        #                                                   made while this function's arguments are packed
        if n == self._n_rt:
            src = self._src_rt
        elif n == self._n_all:
            if not self._constants_match(args):
                return self._launch_py(grid, args, stream)
            src = self._src_all
        else:
            return self._launch_py(grid, args, stream)      # raises: the argument count
        plan = self._last
        if plan is None or not _same_grid(grid, self._last_grid) or (
                stream is not self._last_stream and not (type(stream) is int and type(self._last_stream) is int
                                                         and stream == self._last_stream)):
            plan = self._plan(grid, args, stream)
            if plan is None:
                return self._launch_py(grid, args, stream)
        if fn._module_life.ended:
            fn.ensure_loaded()
        if plan.version != fn._layout_version:           # set_signature since: lay the plans out again
            self._plans.clear()
            self._last = None
            return self.launch(grid, *args, stream=stream)
        cdef Stream s = plan.s
        if s._closed:
            s.ensure_open()
        cdef LaunchConfig lc = plan.lc
        fn._busy = True         # Python code run while packing (a CAI property) that launches this function
        try:                    # again packs apart (Function.launch), never in this plan's arena
            items = _seq_items(args)
            for k in range(plan.n):         # parameter k takes args[src[k]], None where src[k] < 0
                plan.args.gather[k] = <void*>items[src[k]] if src[k] >= 0 else <void*>None
            kp = marshal_cached(&plan.arena, fn.layout, <PyObject**>plan.args.gather, plan.n, &plan.args, s)
            for k in range(plan.n):
                if self._pflags[k]:
                    slot = pycudadrv_arena_at(&plan.arena, <uint32_t>k)
                    if slot[0] & 15 and (self._pflags[k] & _DIV16_INT == 0 or
                                         (src[k] >= 0 and type(args[src[k]]) is int)):
                        fn._busy = False
                        return self._launch_py(grid, args, stream)     # raises, naming the argument
            fn.device.activate()
            issue_launch(fn, lc.grid, lc.block, lc.shared_mem_bytes, s, kp, lc,
                         args if s._capture is None else self._kernel_args(args), False)
        finally:
            fn._busy = False
        if _dl_owners:
            settle_dlpack_owners(s)

    def __getitem__(self, grid):
        """``tk[grid](*args, stream=None)``: the same as :meth:`launch`, spelled as Triton's."""
        def runner(*args, stream=None):
            self.launch(grid, *args, stream=stream)
        return runner
