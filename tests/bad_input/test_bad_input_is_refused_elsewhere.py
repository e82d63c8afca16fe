"""Launch sequences refuse what is not a launch with pycudadrv errors, and the objects of the thin
layer (Queue, Submission, LaunchSequence, Dispatch, Pass, Encoder, GpuFuture, DevicePolicy) made by
``Cls.__new__`` alone print and fail cleanly instead of leaking AttributeError or crashing."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import aio, dispatch, queue


def _child_env():
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(cd.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return env


# --- LaunchSequence: what is not a launch ------------------------------------------------

@pytest.mark.parametrize("items, shown", [([1, 2], "int"), ([None], "NoneType"), (["p"], "str")])
def test_a_launch_sequence_of_non_launches_names_the_position_and_the_type(items, shown):
    with pytest.raises(cd.ArgumentTypeError, match=f"LaunchSequence: item #0 must be a PreparedLaunch "
                                                   rf"\(fn.bind\(...\)\), got {shown}; use record\(\) and wait\(\)"):
        cd.LaunchSequence(items)


def test_adding_none_to_a_launch_sequence_is_an_argument_type_error():
    seq = cd.LaunchSequence()
    with pytest.raises(cd.ArgumentTypeError, match="item #0 must be a PreparedLaunch .*got NoneType"):
        seq.add(None)
    assert len(seq) == 0


def test_a_prepared_launch_not_made_by_bind_is_refused():
    with pytest.raises(cd.ArgumentTypeError, match=r"item #0 is a PreparedLaunch that was not made by "
                                                   r"Function.bind\(...\)"):
        cd.LaunchSequence().add(cd.PreparedLaunch.__new__(cd.PreparedLaunch))


def test_launches_that_are_not_iterable_are_an_argument_type_error():
    with pytest.raises(cd.ArgumentTypeError, match="LaunchSequence: launches must be an iterable of PreparedLaunch "
                                                   r"\(fn.bind\(...\)\), got int"):
        cd.LaunchSequence(5)


def test_record_and_wait_take_only_events_and_streams():
    seq = cd.LaunchSequence()
    with pytest.raises(cd.ArgumentTypeError, match="LaunchSequence.record: item #0: event must be a pycudadrv "
                                                   "Event, got NoneType"):
        seq.record(None)
    with pytest.raises(cd.ArgumentTypeError, match="LaunchSequence.wait: item #0: stream must be a pycudadrv "
                                                   "Stream, got int"):
        seq.wait(0, None)


@pytest.mark.parametrize("repeat, error, text", [
    ("2", cd.ArgumentTypeError, "repeat must be an int, got str"),
    (True, cd.ArgumentTypeError, "repeat must be an int, got bool"),
    (2.0, cd.ArgumentTypeError, "repeat must be an int, got float"),
    (-1, cd.ArgumentValueError, r"repeat must be in \[0, 2\*\*31\), got -1"),
    (2**31, cd.ArgumentValueError, r"repeat must be in \[0, 2\*\*31\), got 2147483648"),
])
def test_repeat_must_be_an_int_in_range(repeat, error, text):
    with pytest.raises(error, match="LaunchSequence.launch: " + text):
        cd.LaunchSequence().launch(repeat)


# --- objects made by __new__ ---------------------------------------------------------------

@pytest.mark.parametrize("cls, text", [
    (cd.LaunchSequence, "<LaunchSequence of 0 items (0 launches)>"),
    (cd.Queue, "<Queue not initialised (made by Queue.__new__)>"),
    (queue.Submission, "<Submission not initialised (made by Submission.__new__)>"),
    (dispatch.Dispatch, "<Dispatch not initialised (made by Dispatch.__new__)>"),
    (aio.GpuFuture, "<GpuFuture not initialised (made by GpuFuture.__new__)>"),
    (aio.DevicePolicy, "<DevicePolicy not initialised (made by DevicePolicy.__new__)>"),
])
def test_the_repr_of_an_object_made_by_new_says_so(cls, text):
    assert repr(cls.__new__(cls)) == text


def test_a_queue_made_by_new_is_a_state_error_naming_how_to_make_one_and_closes_as_a_no_op():
    q = cd.Queue.__new__(cd.Queue)
    with pytest.raises(cd.StateError, match=r"Queue: this Queue was made by Queue.__new__ without __init__, so it "
                                            r"holds nothing \(.* was asked for\); make one with Queue\(device, "
                                            r"streams=4\)"):
        q.stats()
    q.close()
    q.synchronize()
    assert not hasattr(q, "__setstate__")       # dunder probes (copy, pickle) stay AttributeErrors


def test_an_initialised_object_still_raises_attribute_error_for_a_missing_attribute():
    policy = aio.DevicePolicy.__new__(aio.DevicePolicy)
    policy._streams = []                       # what __init__ always sets: it counts as initialised
    with pytest.raises(AttributeError, match="'DevicePolicy' object has no attribute 'no_such_thing'") as info:
        policy.no_such_thing
    assert not isinstance(info.value, cd.Error)


WALK = r"""
import json, sys
import pycudadrv as cd
from pycudadrv import aio, dispatch, queue
C = {cls}
report = []
names = [n for n in dir(C) if not n.startswith("_")]
names += ["__repr__", "__str__", "__len__", "__call__", "__enter__", "__exit__", "__await__"]
for name in names:
    o = C.__new__(C)
    try:
        attr = getattr(o, name)
    except cd.Error:
        continue
    except AttributeError:
        if name.startswith("__"):
            continue          # the class has no such dunder
        raise
    if not callable(attr):
        continue
    for args in [(), (0,), (None,), (None, None)]:
        try:
            r = attr(*args)
            if hasattr(r, "__next__"):
                next(r, None)
        except cd.Error:
            pass
        except TypeError as e:                # a call with the wrong number of arguments is fine
            t = str(e)
            if not any(k in t for k in ("positional argument", "takes", "missing", "expected 0 arguments")):
                report.append(f"{{name}}{{args}}: TypeError: {{t}}")
        except BaseException as e:
            report.append(f"{{name}}{{args}}: {{type(e).__name__}}: {{e}}")
print(json.dumps(report))
"""


@pytest.mark.parametrize("cls", ["cd.LaunchSequence", "cd.Queue", "queue.Submission", "dispatch.Dispatch",
                                 "dispatch.Pass", "dispatch.Encoder", "aio.GpuFuture", "aio.DevicePolicy"])
def test_every_public_method_of_an_object_made_by_new_raises_only_pycudadrv_errors(cls):
    # In a child process: a crash (a segfault) shows as its exit status.
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(WALK.format(cls=cls))], capture_output=True,
                       text=True, timeout=300, env=_child_env())
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


# --- on the GPU ------------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_refused_add_leaves_the_sequence_as_it_was(rng):
    mod = cd.compile(r'''extern "C" __global__ void axpb(float* y, const float* x, float a, float b, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + b;
    }''').load()
    n = 1000
    s = cd.Stream()
    a = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(a, stream=s)
    y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)
    seq = cd.LaunchSequence([mod.function("axpb").bind(4, 256, y, x, 3.0, -0.5, n, stream=s)])
    with pytest.raises(cd.ArgumentTypeError, match="LaunchSequence: item #1 must be a PreparedLaunch .*got NoneType"):
        seq.add(None)
    assert len(seq) == 1
    seq()
    np.testing.assert_allclose(y.to_numpy(stream=s), 3.0 * a.astype(np.float64) - 0.5, rtol=1e-6, atol=1e-6)


def test_build_fatbin_entries_of_the_wrong_shape_are_argument_type_errors():
    from pycudadrv import link

    with pytest.raises(cd.ArgumentTypeError, match="entries must be a sequence"):
        link.build_fatbin(None)
    with pytest.raises(cd.ArgumentTypeError, match=r"entry #0 must be a \(kind, data, arch\) tuple"):
        link.build_fatbin([("ptx", b"x")])
    with pytest.raises(cd.ArgumentTypeError, match="entry #0's data must be bytes"):
        link.build_fatbin([("ptx", "text", "sm_90")])


def test_a_timestamps_pass_comes_only_from_measure():
    from pycudadrv._timing import Pass

    with pytest.raises(cd.ArgumentTypeError, match=r"Timestamps.measure\(label\)"):
        Pass()
    with pytest.raises(cd.ArgumentTypeError, match=r"Pass\(int, str\)"):
        Pass(1, "x")
