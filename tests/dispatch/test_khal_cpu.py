"""khal's remaining behaviours that need no GPU: BufferUsages and its argument
checks, PYCUDADRV_PROFILE=host, and profile mode's hooks (the serialised
host clock, a report that clears what it printed, trace and profile together),
driven with stand-in kernels and streams."""
import io
import os
import subprocess
import sys

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import _launch, profile
from pycudadrv._usage import ALL_BITS, INDIRECT_BIT, missing_usage, names, usage_bits


# --- BufferUsages ------------------------------------------------------------------------

def test_buffer_usages_are_khals_flags_with_webgpu_bit_values():
    U = cd.BufferUsages
    assert {m.name: m.value for m in (U.MAP_READ, U.MAP_WRITE, U.COPY_SRC, U.COPY_DST, U.INDEX, U.VERTEX,
                                      U.UNIFORM, U.STORAGE, U.INDIRECT, U.QUERY_RESOLVE)} == {
        "MAP_READ": 1, "MAP_WRITE": 2, "COPY_SRC": 4, "COPY_DST": 8, "INDEX": 16, "VERTEX": 32, "UNIFORM": 64,
        "STORAGE": 128, "INDIRECT": 256, "QUERY_RESOLVE": 512}
    assert U.ALL.value == ALL_BITS == 1023 and INDIRECT_BIT == 256
    assert U.STORAGE in U.ALL and U.INDIRECT in (U.STORAGE | U.INDIRECT)
    assert U.INDIRECT not in U.STORAGE | U.COPY_DST


def test_usage_names_read_as_the_flags_written():
    U = cd.BufferUsages
    assert names(ALL_BITS) == "ALL"
    assert names((U.STORAGE | U.COPY_DST).value) == "COPY_DST|STORAGE"
    assert names(0) == "none"


def test_no_usage_means_all_and_a_flag_set_is_its_bits():
    assert usage_bits(None, "Buffer.empty") == ALL_BITS
    assert usage_bits(cd.BufferUsages.STORAGE | cd.BufferUsages.INDIRECT, "Buffer.empty") == 128 + 256


@pytest.mark.parametrize("usage, shown", [(256, "int 256"), ("INDIRECT", "str 'INDIRECT'"), (True, "bool True")])
def test_a_usage_that_is_not_a_flag_set_is_refused_before_the_driver_is_asked(usage, shown):
    # Buffer.empty checks usage= before it looks at the device: this runs without a GPU.
    with pytest.raises(cd.ArgumentTypeError, match=f"Buffer.empty: usage must be a pycudadrv.BufferUsages .* got "
                                                   f"{shown}"):
        cd.Buffer.empty(16, usage=usage)


def test_an_empty_usage_is_refused():
    with pytest.raises(cd.ArgumentValueError, match="Buffer.empty: usage is empty"):
        cd.Buffer.empty(16, usage=cd.BufferUsages(0))
    with pytest.raises(cd.ArgumentValueError, match="Buffer.zeros: usage is empty"):
        cd.Buffer.zeros(4, "f4", usage=cd.BufferUsages(0))
    with pytest.raises(cd.ArgumentTypeError, match="Buffer.from_numpy: usage"):
        cd.Buffer.from_numpy(np.zeros(4, np.float32), usage="x")


def test_the_missing_usage_error_names_the_buffer_the_usage_needed_and_the_one_it_has():
    e = missing_usage("<Buffer 0x10>", INDIRECT_BIT, (cd.BufferUsages.STORAGE | cd.BufferUsages.COPY_DST).value,
                      "Dispatch of 'k', indirect=")
    assert isinstance(e, cd.ArgumentValueError)
    assert str(e).startswith("Dispatch of 'k', indirect=: '<Buffer 0x10>' needs usage INDIRECT, it has "
                             "COPY_DST|STORAGE")


# --- PYCUDADRV_PROFILE=host and both switches -----------------------------------------------

def _modes_at_import(**env):
    e = {k: v for k, v in os.environ.items() if k not in ("PYCUDADRV_PROFILE", "PYCUDADRV_TRACE")}
    e.update(env)
    r = subprocess.run([sys.executable, "-W", "always", "-c", "import pycudadrv as cd; print(cd.profile.mode())"],
                       capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), r.stderr


@pytest.mark.parametrize("env, expected", [
    ({"PYCUDADRV_PROFILE": "1"}, "('events', False)"),
    ({"PYCUDADRV_PROFILE": "events"}, "('events', False)"),
    ({"PYCUDADRV_PROFILE": " Host "}, "('host', False)"),
    ({"PYCUDADRV_TRACE": "1"}, "(None, True)"),
    ({"PYCUDADRV_PROFILE": "1", "PYCUDADRV_TRACE": "1"}, "('events', True)"),
    ({"PYCUDADRV_PROFILE": "host", "PYCUDADRV_TRACE": "yes"}, "('host', True)"),
    ({"PYCUDADRV_PROFILE": "0"}, "(None, False)"),
])
def test_profile_and_trace_switches_at_import(env, expected):
    assert _modes_at_import(**env)[0] == expected


def test_a_profile_value_that_is_neither_a_switch_nor_a_clock_warns_and_leaves_it_off():
    out, err = _modes_at_import(PYCUDADRV_PROFILE="hostclock")
    assert out == "(None, False)"
    assert "PYCUDADRV_PROFILE='hostclock' is not a switch (1/0, true/false, yes/no, on/off) or one of events, host" \
        in err


def test_the_configuration_report_takes_the_profile_clocks():
    from pycudadrv.config import value_problem

    assert value_problem("PYCUDADRV_PROFILE", "host") is None
    assert value_problem("PYCUDADRV_PROFILE", "Events") is None
    assert value_problem("PYCUDADRV_PROFILE", "on") is None
    assert "nor one of events, host" in value_problem("PYCUDADRV_PROFILE", "hostclock")


# --- profile mode's hooks, with stand-ins --------------------------------------------------

class _Fn:
    def __init__(self, name):
        self.name = name


class _Stream:
    """Records synchronisations; `fail` makes the next one raise a CudaError, as a faulting kernel does."""

    def __init__(self):
        self.calls = []
        self.fail = False

    def synchronize(self):
        self.calls.append("sync")
        if self.fail:
            self.fail = False
            raise cd.CudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered",
                               "cuStreamSynchronize")


def _launch_through(hook, fn, stream, grid=(2, 1, 1), block=(32, 1, 1)):
    """What issue_launch does around cuLaunchKernel: before, the launch, after."""
    tok = hook.before(fn, stream)
    stream.calls.append("launch")
    hook.after(tok, fn, stream, grid, block, 0)


@pytest.fixture
def clean_profile():
    prev = _launch.get_launch_hook()
    profile.disable()
    profile.reset()
    yield
    profile.disable()
    profile.reset()
    _launch.set_launch_hook(prev)


def test_the_host_clock_synchronises_before_and_after_each_launch(clean_profile):
    profile.enable(clock="host")
    assert profile.mode() == ("host", False) and _launch.get_launch_hook() is profile._profiler
    s = _Stream()
    for _ in range(2):
        _launch_through(_launch.get_launch_hook(), _Fn("k"), s)
    assert s.calls == ["sync", "launch", "sync"] * 2
    ms, calls = profile.stats()["k"]
    assert calls == 2 and ms >= 0 and profile.pending() == 0


def test_a_fault_under_the_host_clock_names_the_kernel(clean_profile):
    profile.enable("host")
    s = _Stream()
    tok = profile._profiler.before(_Fn("bad"), s)
    s.fail = True
    with pytest.raises(cd.CudaError, match=r"after kernel 'bad' grid=\(2, 1, 1\) block=\(32, 1, 1\) \(profile mode, "
                                           r"host clock\)") as ei:
        profile._profiler.after(tok, _Fn("bad"), s, (2, 1, 1), (32, 1, 1), 0)
    assert ei.value.code == 700
    assert "bad" not in profile.stats()


@pytest.mark.parametrize("clock, shown", [("wall", "'wall'"), (1, "int 1"), (None, "NoneType None")])
def test_enable_takes_one_of_the_two_clocks(clean_profile, clock, shown):
    err = cd.ArgumentValueError if isinstance(clock, str) else cd.ArgumentTypeError
    with pytest.raises(err, match=f"profile.enable: clock must be one of \\('events', 'host'\\), got .*{shown}"):
        profile.enable(clock)
    assert profile.mode() == (None, False)


def test_report_prints_the_table_then_forgets_it_unless_kept(clean_profile):
    profile.enable("host")
    s = _Stream()
    for name, n in (("a", 3), ("b", 1)):
        for _ in range(n):
            _launch_through(profile._profiler, _Fn(name), s)
    out = io.StringIO()
    text = profile.report(out, keep=True)
    assert out.getvalue() == text + "\n"
    head, cols, *rows = text.splitlines()
    assert head.startswith("pycudadrv profile: 2 kernel(s), ") and head.endswith(
        "ms total (host clock, serialised: sync, launch, sync)")
    assert cols.split() == ["kernel", "total", "ms", "calls", "us/call", "%"]
    assert sorted((r.split()[0], int(r.split()[2])) for r in rows) == [("a", 3), ("b", 1)]
    assert profile.stats()["a"][1] == 3                 # kept
    assert profile.report(io.StringIO()) == text        # printed again, then forgotten
    assert profile.stats() == {}
    out = io.StringIO()
    assert profile.report(out) == "" and out.getvalue() == ""   # nothing since: prints nothing
    _launch_through(profile._profiler, _Fn("a"), s)
    assert profile.stats()["a"][1] == 1                 # counting starts again from the report


def test_trace_and_profile_together_each_do_their_job(clean_profile):
    out = io.StringIO()
    profile.enable("host")
    profile.enable_trace(out)
    assert profile.mode() == ("host", True)
    hook = _launch.get_launch_hook()
    s = _Stream()
    for _ in range(2):
        _launch_through(hook, _Fn("k"), s)
    # timed (sync, launch, sync), then traced (print, sync), per launch
    assert s.calls == ["sync", "launch", "sync", "sync"] * 2
    assert out.getvalue().count("[pycudadrv trace] k grid=(2, 1, 1) block=(32, 1, 1) shared_mem_bytes=0") == 2
    assert profile.stats()["k"][1] == 2
    profile.disable_trace()
    assert profile.mode() == ("host", False) and _launch.get_launch_hook() is profile._profiler
    profile.enable_trace(out)
    profile.disable()
    assert profile.mode() == (None, False) and _launch.get_launch_hook() is None


def test_trace_first_then_profile_keeps_both(clean_profile):
    out = io.StringIO()
    profile.enable_trace(out)
    assert _launch.get_launch_hook().__class__.__name__ == "_Tracer"
    profile.enable("host")
    s = _Stream()
    _launch_through(_launch.get_launch_hook(), _Fn("k"), s)
    assert profile.mode() == ("host", True) and "[pycudadrv trace] k" in out.getvalue()
    assert profile.stats()["k"][1] == 1


def test_a_fault_with_both_on_is_named_by_the_first_synchronisation(clean_profile):
    profile.enable("host")
    profile.enable_trace(io.StringIO())
    hook = _launch.get_launch_hook()
    s = _Stream()
    tok = hook.before(_Fn("bad"), s)
    s.fail = True
    with pytest.raises(cd.CudaError, match="after kernel 'bad'"):
        hook.after(tok, _Fn("bad"), s, (1, 1, 1), (1, 1, 1), 0)


@pytest.mark.parametrize("bad", [5, "out.txt", object()])
def test_report_and_trace_refuse_a_file_without_write_and_change_nothing(clean_profile, bad):
    profile.enable("host")
    s = _Stream()
    _launch_through(profile._profiler, _Fn("k"), s)
    with pytest.raises(cd.ArgumentTypeError, match=r"profile.report: file must be None or a text file .*write"):
        profile.report(bad)
    assert profile.stats()["k"][1] == 1                  # not forgotten: nothing was printed
    with pytest.raises(cd.ArgumentTypeError, match=r"profile.enable_trace: out must be None or a text file .*write"):
        profile.enable_trace(bad)
    assert profile.mode() == ("host", False) and _launch.get_launch_hook() is profile._profiler
