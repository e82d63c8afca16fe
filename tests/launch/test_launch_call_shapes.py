"""Function.launch called every way Python calls a method: spelled out in place, through the bound
method fetched once, with *args, with keywords from a dict (the call CPython makes with a tuple and
a dict: the bound method then takes every later call that way), through functools.partial, and
unbound as Function.launch(fn, ...). Each shape twice, one after another on one Function and on a
fresh one, checked against NumPy float64 on fresh random input with poisoned outputs; the errors
of every path name the keyword. (Function.launch in pycudadrv/_launch.pyx)"""
import functools
import inspect

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import ArgumentTypeError
from pycudadrv._launch import Function

AXPB = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
ZERO = r"""
__device__ int hits;
extern "C" __global__ void zero() { if (threadIdx.x == 0 && blockIdx.x == 0) hits += 1; }
"""


def fresh_saxpy(tag):
    """A saxpy Function of its own (the module cache gives one image one Function): a module with a
    device variable named after `tag`."""
    name = "".join(c if c.isalnum() else "_" for c in tag)
    return cd.compile(AXPB + f"__device__ int tag_{name};\n").load().function("saxpy")


def many(n):
    params = ", ".join(["int* y"] + [f"int a{k}" for k in range(1, n + 1)])
    body = " ".join(f"y[{k - 1}] = a{k};" for k in range(1, n + 1))
    return f'extern "C" __global__ void many({params}) {{ if (threadIdx.x == 0 && blockIdx.x == 0) {{ {body} }} }}'


def _shapes():
    """(name, call(fn, y, x, a, n, s)) for every spelling of one launch of saxpy."""
    def grid(n):
        return (n + 127) // 128

    def spelled(fn, y, x, a, n, s):
        fn.launch(grid(n), 128, y, x, a, n, stream=s)

    def hoisted(fn, y, x, a, n, s):
        launch = fn.launch
        launch(grid(n), 128, y, x, a, n, stream=s)

    def splat(fn, y, x, a, n, s):
        args = (y, x, a, n)
        fn.launch(grid(n), 128, *args, stream=s)

    def hoisted_splat(fn, y, x, a, n, s):
        launch = fn.launch
        args = (y, x, a, n)
        launch(grid(n), 128, *args, stream=s)

    kept = []                       # [Function, its bound method, calls made through it]

    def kept_bound(fn, y, x, a, n, s):
        """One bound method per Function, kept across calls: spelled out, then (the next call) with
        *args and a dict, then spelled out again after its convention changed."""
        entry = next((e for e in kept if e[0] is fn), None)
        if entry is None:
            entry = [fn, fn.launch, 0]
            kept.append(entry)
        launch = entry[1]
        if entry[2] % 2 == 0:
            launch(grid(n), 128, y, x, a, n, stream=s)
        else:
            launch(grid(n), 128, *(y, x, a, n), stream=s)
        entry[2] += 1

    def kwdict(fn, y, x, a, n, s):
        fn.launch(grid(n), 128, y, x, a, n, **{"stream": s, "shared_mem_bytes": 0})

    def forwarded(fn, y, x, a, n, s):
        def wrapper(*args, **kw):
            return fn.launch(*args, **kw)
        wrapper(grid(n), 128, y, x, a, n, stream=s)

    def partial(fn, y, x, a, n, s):
        functools.partial(fn.launch, grid(n), 128, stream=s)(y, x, a, n)

    def unbound(fn, y, x, a, n, s):
        Function.launch(fn, grid(n), 128, y, x, a, n, stream=s)

    def unbound_splat(fn, y, x, a, n, s):
        Function.launch(*(fn, grid(n), 128, y, x, a, n), stream=s)

    def no_keywords(fn, y, x, a, n, s):
        s.synchronize()
        launch = fn.launch
        launch(*(grid(n), 128, y, x, a, n))         # the default stream; *args and no dict
        cd.Device(0).default_stream.synchronize()

    def call(fn, y, x, a, n, s):
        fn(grid(n), 128, y, x, a, n, stream=s)

    return [(f.__name__, f) for f in (spelled, hoisted, splat, hoisted_splat, kept_bound, kwdict, forwarded, partial, unbound,
                                       unbound_splat, no_keywords, call)]


SHAPES = _shapes()


def _check_one(fn, shape, rng, s):
    n = int(rng.integers(1, 2000))
    x = rng.standard_normal(n).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)      # fresh: a launch that did not run leaves it
    a = float(np.float32(rng.standard_normal()))
    y = cd.Buffer.from_numpy(y0)
    xb = cd.Buffer.from_numpy(x)
    shape(fn, y, xb, a, n, s)
    s.synchronize()
    want = np.float32(a) * x.astype(np.float64) + y0.astype(np.float64)
    np.testing.assert_allclose(y.to_numpy().astype(np.float64), want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", SHAPES, ids=[n for n, _ in SHAPES])
def test_each_call_shape_launches_right_twice_on_a_fresh_function(name, shape, rng):
    fn = fresh_saxpy(name)
    assert fn is not cd.compile(AXPB).load().function("saxpy")
    s = cd.Stream()
    for _ in range(2):
        _check_one(fn, shape, rng, s)


@pytest.mark.gpu
def test_every_shape_after_every_other_on_one_function(rng):
    """One Function through every shape in two orders: the bound method's convention changes at the
    first dict call and every shape still launches right after it."""
    fn = fresh_saxpy("every shape")
    s = cd.Stream()
    order = list(SHAPES)
    for _ in range(2):
        for name, shape in order:
            _check_one(fn, shape, rng, s)
        order = [order[k] for k in rng.permutation(len(order))]


@pytest.mark.gpu
def test_sixty_four_parameters_through_the_dict_path_and_spelled_after(rng):
    fn = cd.compile(many(64)).load().function("many")
    s = cd.Stream()
    launch = fn.launch
    for call in ("splat", "dict", "hoisted", "partial"):
        for _ in range(2):
            vals = rng.integers(-2 ** 31, 2 ** 31, size=64)
            y = cd.Buffer.from_numpy(np.full(64, -1, np.int32))
            args = [y] + [int(v) for v in vals]
            if call == "splat":
                fn.launch(1, 32, *args, stream=s)
            elif call == "dict":
                fn.launch(1, 32, *args, **{"stream": s})
            elif call == "hoisted":
                launch(1, 32, *args, stream=s)
            else:
                functools.partial(launch, 1, 32)(*args, stream=s)
            s.synchronize()
            np.testing.assert_array_equal(y.to_numpy(), vals)


@pytest.mark.gpu
def test_grid_and_block_as_dict_keywords_of_a_kernel_without_parameters():
    mod = cd.compile(ZERO).load()
    fn = mod.function("zero")
    hits = mod.get_global("hits", np.int32)
    hits.write(np.zeros(1, np.int32))
    s = cd.Stream()
    fn.launch(**{"grid": 1, "block": 32, "stream": s})
    fn.launch(*(), **{"grid": (1, 1, 1), "block": 32, "stream": s})
    launch = fn.launch
    launch(1, 32, stream=s)
    launch(*(1, 32))
    cd.Device(0).synchronize()
    assert hits.to_numpy().tolist() == [4]


@pytest.mark.gpu
@pytest.mark.parametrize("through", ["vector", "dict"])
def test_keyword_errors_name_the_keyword_on_either_path(through, rng):
    fn = cd.compile(AXPB).load().function("saxpy")
    s = cd.Stream()
    y = cd.Buffer.zeros(16, np.float32)
    x = cd.Buffer.zeros(16, np.float32)
    if through == "dict":
        fn.launch(1, 32, *(y, x, 1.0, 16), stream=s)        # the bound method now takes tuple and dict

    def go(*args, **kw):
        if through == "dict":
            return fn.launch(*args, **kw)
        return Function.launch(fn, *args, **kw)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        go(1, 32, y, x, 1.0, 16, bogus=1, stream=s)
    with pytest.raises(TypeError, match="multiple values for keyword argument 'grid'"):
        go(1, 32, y, x, 1.0, 16, grid=2)
    with pytest.raises(ArgumentTypeError, match=r"kernel 'saxpy' takes 4 arguments"):
        go(1, 32, y, x, 1.0, stream=s)
    with pytest.raises(TypeError, match="at least 2 positional arguments"):
        go(1, stream=s)
    with pytest.raises(cd.ArgumentValueError, match="shared_mem_bytes"):
        go(1, 32, y, x, 1.0, 16, shared_mem_bytes=-1, stream=s)
    _check_one(fn, dict(SHAPES)["spelled"], rng, s)          # nothing left half-done by the errors
    _check_one(fn, dict(SHAPES)["kwdict"], rng, s)


@pytest.mark.gpu
def test_the_bound_method_is_bound_to_its_function():
    fn = cd.compile(AXPB).load().function("saxpy")
    other = cd.compile(ZERO).load().function("zero")       # (the same source would be the same Function)
    m = fn.launch
    assert m.__self__ is fn and m.__name__ == "launch"
    assert m == fn.launch and m != other.launch and hash(m) == hash(fn.launch)
    assert "method launch of pycudadrv._launch.Function object" in repr(m)
    assert list(inspect.signature(m).parameters)[:3] == ["grid", "block", "args"]
    assert m.__doc__.startswith("Launch the kernel")


def test_launch_is_a_method_of_function_and_refuses_what_is_not_a_function():
    d = Function.__dict__["launch"]
    assert Function.launch is d and d.__name__ == "launch" and d.__qualname__ == "Function.launch"
    assert inspect.ismethoddescriptor(d) and callable(d)
    sig = inspect.signature(Function.launch)
    assert list(sig.parameters) == ["self", "grid", "block", "args", "shared_mem_bytes", "stream", "cooperative",
                                    "cluster", "programmatic_dependent"]
    assert sig.parameters["stream"].kind is inspect.Parameter.KEYWORD_ONLY
    assert inspect.getdoc(Function.launch).startswith("Launch the kernel (``cuLaunchKernel``")
    with pytest.raises(TypeError, match="'launch' for 'pycudadrv._launch.Function' objects doesn't apply to a 'object'"):
        Function.launch(object(), 1, 32)
    with pytest.raises(TypeError, match="needs an argument"):
        Function.launch()


NOT_FLAGS = ["no", "False", None, 2, -1, 1.0, [], np.int32(1)]


@pytest.mark.gpu
@pytest.mark.parametrize("bad", NOT_FLAGS, ids=repr)
def test_a_yes_no_keyword_that_is_not_a_bool_is_refused_at_every_entry(bad):
    """cooperative= and programmatic_dependent= (and a Queue's timed=) take True or False (a numpy
    bool, 1 or 0): a string such as "no" used to count as its truth value, a cooperative launch."""
    fn = fresh_saxpy("flags")
    s = cd.Stream()
    y = cd.Buffer.zeros(32, np.float32)
    x = cd.Buffer.zeros(32, np.float32)
    entries = {
        "launch": lambda **kw: fn.launch(1, 32, y, x, 1.0, 32, stream=s, **kw),
        "launch, dict": lambda **kw: fn.launch(1, 32, *(y, x, 1.0, 32), **dict(stream=s, **kw)),
        "bind": lambda **kw: fn.bind(1, 32, y, x, 1.0, 32, stream=s, **kw),
        "builder": lambda **kw: fn.builder(1, 32, stream=s, **kw),
        "LaunchConfig": lambda **kw: cd.LaunchConfig(fn, 1, 32, **kw),
    }
    for name, go in entries.items():
        for key in ("cooperative", "programmatic_dependent"):
            with pytest.raises(ArgumentTypeError, match=f"kernel 'saxpy': {key} must be True or False"):
                go(**{key: bad})
    with cd.Queue(streams=2) as q:
        p = fn.bind(1, 32, y, x, 1.0, 32)
        for name, go in {"launch": lambda: q.launch(fn, 1, 32, y, x, 1.0, 32, timed=bad),
                         "submit": lambda: q.submit(p, timed=bad),
                         "fill": lambda: q.fill(y, np.float32(0), timed=bad)}.items():
            with pytest.raises(ArgumentTypeError, match="timed must be True or False"):
                go()
        assert q.stats()["in_flight"] == [0, 0]          # nothing was submitted by the refused calls


@pytest.mark.gpu
@pytest.mark.parametrize("no", [False, np.False_, 0], ids=repr)
def test_false_a_numpy_false_and_zero_give_a_plain_launch(no, rng):
    fn = fresh_saxpy("plain")
    s = cd.Stream()
    for call in ("spelled", "dict"):
        n = 500
        x = rng.standard_normal(n).astype(np.float32)
        y0 = rng.standard_normal(n).astype(np.float32)
        y = cd.Buffer.from_numpy(y0)
        if call == "spelled":
            fn.launch(4, 128, y, cd.Buffer.from_numpy(x), 2.0, n, stream=s, cooperative=no, programmatic_dependent=no)
        else:
            fn.launch(4, 128, *(y, cd.Buffer.from_numpy(x), 2.0, n), **{"stream": s, "cooperative": no})
        s.synchronize()
        np.testing.assert_allclose(y.to_numpy().astype(np.float64), 2.0 * x.astype(np.float64) + y0, rtol=1e-6,
                                   atol=1e-6)
