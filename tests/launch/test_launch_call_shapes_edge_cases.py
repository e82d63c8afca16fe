"""Ways of calling Function.launch that broke an earlier hand-made descriptor: a hoisted bound method
called spelled out, copy and pickle as on CPython's method types, and a dict of keywords changed while
the launch runs cannot free what the launch still reads. Crash-prone cases run in a child process."""
import copy
import gc
import pickle

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv._launch import Function

from _children import run_child
from _children import fresh_saxpy as _fresh


def fresh_saxpy(tag):
    return _fresh("brk", tag)


def _child(code):
    """Run ``code`` (after the imports above) in a child interpreter; its (returncode, output)."""
    return run_child("import gc, sys\nimport numpy as np\nimport pycudadrv as cd\nfrom pycudadrv._launch import Function\n",
                     code)


def _saxpy_args(rng, n=300):
    x = rng.standard_normal(n).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)
    a = float(np.float32(rng.standard_normal()))
    return x, y0, a, cd.Buffer.from_numpy(y0), cd.Buffer.from_numpy(x)


def _want(a, x, y0):
    return np.float32(a) * x.astype(np.float64) + y0.astype(np.float64)


@pytest.mark.gpu
def test_a_hoisted_bound_method_called_spelled_out_and_from_a_dict_launches_right(rng):
    """``launch = fn.launch; launch(g, b, ..., stream=s)`` in a function of its own, then a call with
    a dict of keywords: both launch the kernel with the same values."""
    for keywords in ("stream=s", "stream=s, shared_mem_bytes=0", "shared_mem_bytes=0, stream=s, cluster=None"):
        fn = fresh_saxpy(keywords)
        ns = {}
        exec(f"def hot(launch, g, y, x, a, n, s):\n    launch(g, 128, y, x, a, n, {keywords})\n", ns)
        gc.collect()
        s = cd.Stream()
        launch = fn.launch
        for _ in range(2):
            x, y0, a, y, xb = _saxpy_args(rng)
            ns["hot"](launch, 3, y, xb, a, 300, s)
            s.synchronize()
            np.testing.assert_allclose(y.to_numpy().astype(np.float64), _want(a, x, y0), rtol=1e-6, atol=1e-6)
        x, y0, a, y, xb = _saxpy_args(rng)
        fn.launch(3, 128, *(y, xb, a, 300), **{"stream": s})
        s.synchronize()
        np.testing.assert_allclose(y.to_numpy().astype(np.float64), _want(a, x, y0), rtol=1e-6, atol=1e-6)


def test_function_launch_copies_and_pickles_as_a_method():
    d = Function.__dict__["launch"]
    assert copy.copy(d) is d and copy.deepcopy(d) is d
    assert pickle.loads(pickle.dumps(d)) is d


@pytest.mark.gpu
def test_the_bound_method_copies_and_reduces_as_a_bound_method():
    fn = fresh_saxpy("copy")
    m = fn.launch
    assert copy.copy(m) == m and copy.copy(m).__self__ is fn
    assert m.__reduce__() == (getattr, (fn, "launch"))


@pytest.mark.gpu
@pytest.mark.parametrize("what", ["stream", "cluster", "grid_block"])
def test_a_keyword_dict_changed_during_the_launch_frees_nothing_the_launch_reads(what):
    """The dict of a tuple-and-dict call changed by Python code the launch runs (an int subclass's
    comparison, an iterable grid), reached through gc.get_referrers: the value the launch read
    from it (a stream, a cluster, the block) must stay alive until the launch is done with it."""
    rc, out = _child(f"""
        what = {what!r}
        fn = cd.compile(SAXPY).load().function("saxpy")
        y = cd.Buffer.zeros(64, np.float32)
        x = cd.Buffer.zeros(64, np.float32)
        fn.launch(1, 64, *(y, x, 1.0, 64), **{{"stream": cd.Stream()}})      # now tuple and dict

        def churn():
            return [[k] for k in range(3000)], [cd.Stream() for _ in range(20)]

        def the_dict(marker):
            return next(r for r in gc.get_referrers(marker) if type(r) is dict and marker in r.values())

        class Shm(int):
            def __ge__(self, other):
                d = the_dict(self)
                d["stream"] = d["cluster"] = None
                churn()
                return True

        class Grid:
            def __iter__(self):
                the_dict(self)["block"] = 64
                churn()
                return iter([1])

        for _ in range(3):
            try:
                if what == "stream":
                    fn.launch(1, 64, y, x, 1.0, 64, **{{"stream": cd.Stream(), "shared_mem_bytes": Shm(0)}})
                elif what == "cluster":
                    fn.launch(1, 64, y, x, 1.0, 64, **{{"cluster": list(range(1, 2)), "shared_mem_bytes": Shm(0)}})
                else:
                    fn.launch(**{{"grid": Grid(), "block": list(range(64, 65))}})
            except cd.Error as e:
                print("raised", type(e).__name__)
        cd.Device(0).synchronize()
        print("done")
    """)
    assert rc == 0 and "done" in out, out
