"""pycudadrv.aio: awaitable launches, events, streams and queue submissions.

The first part runs anywhere, on a pretend GPU whose events the test
completes (and whose host functions it runs from another thread, as the
driver does); the second part (marked gpu) runs real kernels."""
import asyncio
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import _waiter, aio

from _fakes import GPU, FakeDevice, FakeEvent, FakeKernel, FakeStream, complete


# --- a pretend GPU (tests/_fakes.py) and the waiter thread it completes through -----------------

class FlagWaiter:
    """The device waiter for fake events: the process's test waiter thread (pycudadrv._waiter), which
    spins on each event's host flag instead of calling cuEventSynchronize."""

    def __init__(self):
        self.submitted = []

    def submit(self, ev, channel, token):
        self.submitted.append(token)
        _waiter.waiter_for(None).submit_flag(ev.flag.ctypes.data, channel, token)


MODES = ["loop", "blocking"]


@pytest.fixture(params=MODES)
def fake(request, monkeypatch):
    GPU.reset()
    monkeypatch.setattr(aio, "Event", FakeEvent)
    monkeypatch.setattr(aio, "Stream", FakeStream)
    for name in ("_events", "_policies"):
        monkeypatch.setattr(aio, name, {})
    GPU.waiter = FlagWaiter()
    monkeypatch.setattr(aio, "_waiter_for", lambda device: GPU.waiter)
    prev = aio.set_completion(request.param)
    yield request.param
    aio.set_completion(**prev)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


# --- completion (CPU) ---------------------------------------------------------------------------

def test_awaiting_a_stream_point_resumes_when_the_gpu_finishes(fake):
    async def main():
        s = FakeStream()
        fut = aio.wait(s)
        assert not fut.done()
        loop = asyncio.get_running_loop()
        ev = fut.event
        loop.call_later(0.02, complete, ev)
        await fut
        return fut.done()
    assert run(main()) is True


def test_many_pending_futures_each_complete_once_their_work_does(fake):
    async def main():
        streams = [FakeStream() for _ in range(4)]
        futs = [aio.wait(streams[k % 4]) for k in range(100)]
        events = [f.event for f in futs]
        loop = asyncio.get_running_loop()
        order = []

        async def one(k):
            await futs[k]
            order.append(k)
        tasks = [asyncio.ensure_future(one(k)) for k in range(100)]
        loop.call_later(0.01, complete, *events[:50])
        await asyncio.sleep(0.05)
        first = sorted(order)
        loop.call_later(0.01, complete, *events[50:])
        await asyncio.gather(*tasks)
        return first, sorted(order)
    first, done = run(main())
    assert first == list(range(50)) and done == list(range(100))


def test_a_fault_raises_in_the_awaiting_task_only(fake):
    async def main():
        s = FakeStream()
        fut = aio.wait(s)
        ticks = 0

        async def ticker():
            nonlocal ticks
            for _ in range(10):
                await asyncio.sleep(0.002)
                ticks += 1
            return "ticked"

        async def waiter():
            await fut
        GPU.fault = cd.CudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered",
                                 "cuEventQuery")
        complete(fut.event)                   # the driver skips host functions after a fault
        return await asyncio.gather(waiter(), ticker(), return_exceptions=True)
    err, other = run(main())
    assert other == "ticked"
    assert isinstance(err, cd.CudaError) and err.code == 700
    assert "asynchronous error of work queued on" in str(err)


def test_cancelling_the_awaiting_task_keeps_the_work_and_its_arguments_until_it_finishes(fake):
    class Arg:
        pass

    async def main():
        s = FakeStream()
        arg = Arg()
        ref = weakref.ref(arg)
        ev = FakeEvent().record(s)
        fut = aio.GpuFuture("kernel 'k'", s, ev, (arg,), ordered=True)
        del arg
        task = asyncio.ensure_future(_await(fut))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gc.collect()
        alive_while_running = ref() is not None and not fut.done()
        complete(ev)
        await asyncio.sleep(0.03)
        gc.collect()
        return alive_while_running, fut.done(), ref() is None
    assert run(main()) == (True, True, True)


async def _await(fut):
    await fut


def test_the_loop_runs_other_tasks_while_work_is_pending(fake):
    async def main():
        s = FakeStream()
        fut = aio.wait(s)
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, complete, fut.event)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while not fut.done():
                await asyncio.sleep(0.001)
                ticks += 1
        await asyncio.gather(_await(fut), ticker())
        return ticks
    assert run(main()) >= 20


def test_an_event_and_a_finished_future_can_be_awaited(fake):
    async def main():
        s = FakeStream()
        ev = FakeEvent().record(s)
        fut = aio.wait(ev)
        assert aio.wait(fut) is fut
        asyncio.get_running_loop().call_later(0.01, complete, ev)
        await fut
        await fut                          # a second await returns at once
        return fut.done()
    assert run(main())


def test_result_blocks_and_raises_the_fault(fake):
    s = FakeStream()
    fut = aio.wait(s)
    assert fut.result() is None and fut.done()
    fut2 = aio.wait(s)
    GPU.fault = cd.CudaError(719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", "cuEventQuery")
    assert isinstance(fut2.exception(), cd.CudaError)
    with pytest.raises(cd.CudaError, match="CUDA_ERROR_LAUNCH_FAILED"):
        fut2.result()


def test_bad_arguments_are_refused(fake):
    with pytest.raises(cd.ArgumentTypeError, match="aio.wait: expected an Event, a Stream"):
        aio.wait(42)
    with pytest.raises(cd.StateError, match="never recorded"):
        aio.wait(FakeEvent())
    with pytest.raises(cd.ArgumentValueError, match="mode must be one of"):
        aio.set_completion("busy")
    with pytest.raises(cd.ArgumentValueError, match="mode must be one of"):
        aio.set_completion("spin")                     # (a mode of earlier versions)
    with pytest.raises(cd.ArgumentValueError, match="streams must be an int >= 1"):
        aio.DevicePolicy(streams=0)
    with pytest.raises(cd.ArgumentTypeError, match="next_stream"):
        aio.set_policy(object())
    prev = aio.get_completion()
    for bad in (None, 1, b"loop"):
        with pytest.raises(cd.ArgumentValueError, match="mode must be one of"):
            aio.set_completion(bad)
    assert aio.get_completion() == prev
    try:
        aio.set_completion(" Blocking ")               # any case, as PYCUDADRV_AIO_COMPLETION
        assert aio.get_completion() == {"mode": "blocking"}
    finally:
        aio.set_completion(**prev)
    for bad in (None, object()):
        with pytest.raises(cd.ArgumentTypeError, match="aio.submit takes a PreparedLaunch"):
            aio.submit(bad)
        with pytest.raises(cd.ArgumentTypeError, match="aio.launch takes a Function"):
            aio.launch(bad, 1, 1)


def test_the_default_policy_takes_its_streams_in_turn(fake):
    p = aio.DevicePolicy(streams=3)
    got = [p.next_stream() for _ in range(7)]
    assert got == [p.streams[k % 3] for k in range(7)] and len(set(map(id, p.streams))) == 3


# --- the waiter thread (CPU: the test waiter spins on host flags) ------------------------------

def test_the_default_mode_is_loop_and_the_environment_chooses_another(monkeypatch):
    script = "from pycudadrv import aio; print(aio.get_completion()['mode'])"
    for value, want in ((None, "loop"), ("blocking", "blocking"), (" Blocking ", "blocking"), ("busy", "loop"),
                        ("spin", "loop")):
        env = {k: v for k, v in os.environ.items() if k != "PYCUDADRV_AIO_COMPLETION"}
        if value is not None:
            env["PYCUDADRV_AIO_COMPLETION"] = value
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_child_env(env))
        assert r.returncode == 0 and r.stdout.strip() == want, r.stderr
        assert ("is not one of loop, blocking" in r.stderr) == (value in ("busy", "spin"))
        assert ("using the default 'loop'" in r.stderr) == (value in ("busy", "spin"))


def _child_env(env=None):
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cd.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_the_waiter_modes_hand_each_armed_event_to_the_waiter_thread(fake):
    if fake != "blocking":
        pytest.skip(f"checks the waiter-thread mode (blocking); this run is the {fake!r} mode")

    async def main():
        s = FakeStream()
        futs = [aio.wait(s) for _ in range(3)]
        asyncio.get_running_loop().call_later(0.01, complete, *[f.event for f in futs])
        await asyncio.gather(*futs)
        return [f.done() for f in futs]
    assert run(main()) == [True, True, True]
    assert len(set(GPU.waiter.submitted)) == 3          # one token per wait


def test_a_task_awaiting_the_waiter_resumes_in_the_loop_iteration_that_reads_the_completion(fake):
    # The channel's reader steps the awaiting task itself: no second loop iteration (and no second
    # epoll_wait) between the eventfd becoming readable and the coroutine's next line.
    if fake != "blocking":
        pytest.skip(f"checks the waiter-thread mode (blocking); this run is the {fake!r} mode")

    async def main():
        loop = asyncio.get_running_loop()
        ticks, seen = [0], []

        def tick():                     # runs once per loop iteration
            ticks[0] += 1
            loop.call_soon(tick)
        loop.call_soon(tick)
        s = FakeStream()
        for k in range(3):
            fut = aio.wait(s)
            if k == 0:                  # the reader registered for the channel: note the iteration it runs in
                handle = loop._selector.get_key(aio._completer(loop).channel.fileno()).data[0]
                read = handle._callback
                handle._callback = lambda: (seen.append(("read", ticks[0])), read())
            loop.call_later(0.005, complete, fut.event)
            await fut
            seen.append(("resumed", ticks[0]))
        return seen
    seen = run(main())
    assert [what for what, _ in seen] == ["read", "resumed"] * 3
    assert [t for _, t in seen[0::2]] == [t for _, t in seen[1::2]]


def _count_selects(loop):
    """Wrap ``loop``'s selector: returns the list of timeouts it is polled with from now on."""
    timeouts, select = [], loop._selector.select

    def counted(timeout=None):
        timeouts.append(timeout)
        return select(timeout)
    loop._selector.select = counted
    return timeouts


def test_the_loop_mode_keeps_the_loop_awake_only_while_an_await_is_pending(fake):
    # "loop": the poller runs every iteration while a future is pending (the selector is polled with
    # timeout 0, other tasks run), and is not scheduled once nothing is (the loop sleeps again).
    if fake != "loop":
        pytest.skip(f"checks the loop mode's poller; this run is the {fake!r} mode")

    async def main():
        loop = asyncio.get_running_loop()
        poller = aio._completer(loop).poller
        out = []
        for _ in range(2):                       # twice: the poller stops and starts again
            timeouts = _count_selects(loop)
            fut = aio.wait(FakeStream())
            loop.call_later(0.01, complete, fut.event)
            pending = poller.count
            await fut
            busy = list(timeouts)
            await asyncio.sleep(0.01)            # idle: one sleeping select, not a spin
            idle = timeouts[len(busy):]
            del loop._selector.select
            out.append((pending, poller.count, busy, idle))
        return out
    for pending, after, busy, idle in run(main()):
        assert pending == 1 and after == 0
        assert len(busy) > 10 and busy.count(0) >= len(busy) - 2     # polled, not slept, while pending
        assert 1 <= len(idle) <= 3 and max(idle) > 0.005              # then the loop sleeps


def test_a_loop_left_unclosed_with_an_await_pending_is_freed_with_what_the_future_kept(fake):
    # A loop stopped (never closed, never run again) while a task awaits a GpuFuture: once the user
    # drops it, gc frees the loop, its completer and what the future keeps alive (the launch's
    # arguments). The completer must not hold the loop alive from a global table (its pending
    # futures' waiters reference the loop: a WeakKeyDictionary value reaching its own key).
    class Kept:
        pass
    refs = []
    for _ in range(2):
        loop = asyncio.new_event_loop()
        kept = Kept()

        events = []

        async def main():
            fut = aio._new_future("work", FakeStream(), kept)
            events.append(fut.event)
            await fut
        task = loop.create_task(main())
        loop.run_until_complete(asyncio.sleep(0.005))
        assert not task.done()
        complete(*events)                        # the GPU finishes; the loop never runs again
        refs.append((weakref.ref(loop), weakref.ref(kept)))
        task._log_destroy_pending = False        # (asyncio's "Task was destroyed" warning: expected here)
        del loop, kept, task, main, events
    gc.collect()
    assert [(w_loop() is None, w_kept() is None) for w_loop, w_kept in refs] == [(True, True)] * 2


def test_the_loop_mode_lets_other_tasks_run_and_finishes_a_stream_s_futures_in_order(fake):
    if fake != "loop":
        pytest.skip(f"checks the loop mode's poller; this run is the {fake!r} mode")

    async def main():
        loop = asyncio.get_running_loop()
        ticks = [0]

        async def ticker():
            while True:
                ticks[0] += 1
                await asyncio.sleep(0)
        t = loop.create_task(ticker())
        s = FakeStream()
        futs = [aio.wait(s) for _ in range(4)]
        loop.call_later(0.005, complete, futs[0].event, futs[1].event)
        await futs[1]
        ticks_at_1 = ticks[0]
        early = [f.done() for f in futs]
        loop.call_later(0.005, complete, futs[2].event, futs[3].event)
        await asyncio.gather(*futs)
        t.cancel()
        return ticks_at_1, early, [f.done() for f in futs]
    ticks_at_1, early, final = run(main())
    assert ticks_at_1 > 10                                    # the ticker ran while the loop polled
    assert early == [True, True, False, False] and final == [True] * 4


def test_the_breakdown_stamps_of_a_wake_up_are_taken_only_while_timing_is_on(fake):
    if fake != "blocking":
        pytest.skip(f"checks the waiter-thread mode (blocking); this run is the {fake!r} mode")

    async def one():
        fut = aio.wait(FakeStream())
        asyncio.get_running_loop().call_later(0.002, complete, fut.event)
        t0 = time.monotonic_ns()
        await fut
        t1 = time.monotonic_ns()
        await asyncio.sleep(0.002)      # (the waiter stamps t_signal just after its write woke us)
        return t0, aio._completer(asyncio.get_running_loop()).channel._timestamps(), t1

    async def main():
        got = [await one()]
        prev = _waiter._set_timing(True)
        try:
            got += [await one(), await one()]
        finally:
            _waiter._set_timing(prev)
        return prev, got
    prev, got = run(main())
    assert prev is False and got[0][1] == (0, 0, 0)
    for t0, (t_wait, t_signal, t_reader), t1 in got[1:]:
        assert t0 < t_wait <= t_signal and t_wait <= t_reader <= t1


def test_a_future_awaited_by_two_tasks_and_then_again_resolves_all_of_them(fake):
    async def main():
        s = FakeStream()
        fut = aio.wait(s)
        asyncio.get_running_loop().call_later(0.01, complete, fut.event)
        got = await asyncio.gather(_await(fut), _await(fut), _await(fut))
        await fut
        return got, fut.done()
    assert run(main()) == ([None, None, None], True)


def test_two_event_loops_on_two_threads_each_get_their_own_completions(fake):
    results = {}

    def one(name, delay):
        async def main():
            s = FakeStream()
            futs = [aio.wait(s) for _ in range(5)]
            asyncio.get_running_loop().call_later(delay, complete, *[f.event for f in futs])
            await asyncio.gather(*futs)
            return threading.current_thread().name, all(f.done() for f in futs)
        results[name] = run(main())
    threads = [threading.Thread(target=one, args=(f"t{k}", 0.005 * (k + 1)), name=f"t{k}") for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == {"t0": ("t0", True), "t1": ("t1", True)}


def test_a_loop_closed_with_futures_pending_leaves_them_pending_and_another_loop_can_await_them(fake):
    async def arm():
        s = FakeStream()
        return aio.wait(s)
    fut = run(arm())                         # armed in a loop that is gone now
    assert not fut.done() and "pending" in repr(fut)
    complete(fut.event)

    async def again():
        await fut
        return fut.done()
    assert run(again()) is True


def test_closed_loops_do_not_keep_their_descriptors(fake):
    if fake != "blocking":
        pytest.skip(f"checks the completion channel (blocking); the {fake!r} mode has none")

    async def one():
        s = FakeStream()
        fut = aio.wait(s)
        asyncio.get_running_loop().call_soon(complete, fut.event)
        await fut
    run(one())
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(30):
        run(one())
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before + 2


def test_a_closed_loop_is_freed_with_futures_pending_and_after_plain_awaits(fake):
    loops = []

    async def arm(pending):
        loops.append(weakref.ref(asyncio.get_running_loop()))
        fut = aio.wait(FakeStream())
        if not pending:
            asyncio.get_running_loop().call_soon(complete, fut.event)
        try:
            await asyncio.wait_for(fut, 0.02 if pending else 5)   # pending: the awaiting task is cancelled
        except asyncio.TimeoutError:
            pass
        return fut
    futs = [run(arm(True)) for _ in range(3)]
    assert not any(f.done() for f in futs)
    gc.collect()
    assert [r() for r in loops] == [None] * 3      # nothing of aio keeps a closed loop (or its channel)
    complete(*(f.event for f in futs))

    async def again():
        for f in futs:
            await f
    run(again())
    del loops[:]
    for _ in range(5):
        run(arm(False))
    gc.collect()
    assert [r() for r in loops] == [None] * 5


def test_a_channel_hands_over_tokens_and_failures_in_order():
    w = _waiter.Waiter(None)
    ch = _waiter.Channel()
    flags = np.zeros(3, np.int32)
    for k in range(3):
        w.submit_flag(flags.ctypes.data + 4 * k, ch, 10 + k)
    flags[0], flags[1] = 1, 700                 # the third still pending: the waiter waits in order
    deadline = time.time() + 10
    got = []
    while len(got) < 2 and time.time() < deadline:
        got += ch.take()
        time.sleep(0.001)
    assert got == [10, (11, 700)] and w.pending == 1
    flags[2] = 1
    while len(got) < 3 and time.time() < deadline:
        got += ch.take()
        time.sleep(0.001)
    assert got == [10, (11, 700), 12] and w.pending == 0 and w.completed == 3
    assert w.stop(1.0) and not w.running
    ch.close()
    ch.close()                                  # a second close is a no-op
    assert ch.take() == [] and ch.closed
    with pytest.raises(cd.ClosedError, match="channel is closed"):
        w.submit_flag(flags.ctypes.data, ch, 1)
    with pytest.raises(cd.ArgumentValueError, match="NULL"):
        w.submit_flag(0, _waiter.Channel(), 1)


def test_waits_submitted_from_several_threads_at_once_all_come_back():
    w = _waiter.Waiter(None)
    flags = np.ones(4 * 300, np.int32)             # already "done": the thread reports at once
    chans = [_waiter.Channel() for _ in range(4)]
    errors = []

    def submit(t):
        try:
            for k in range(300):
                w.submit_flag(flags.ctypes.data + 4 * (300 * t + k), chans[t], 300 * t + k)
        except Exception as e:          # noqa: BLE001 -- reported below
            errors.append(e)
    threads = [threading.Thread(target=submit, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    got = [[] for _ in range(4)]
    deadline = time.time() + 20
    while sum(map(len, got)) < 1200 and time.time() < deadline:
        for t in range(4):
            got[t] += chans[t].take()
        time.sleep(0.001)
    assert errors == []
    assert [sorted(g) for g in got] == [list(range(300 * t, 300 * (t + 1))) for t in range(4)]
    assert w.stop(2.0)


WAITER_SCRIPT = r"""
import os, sys, time, numpy as np
from pycudadrv import _waiter
w = _waiter.waiter_for(None)
ch = _waiter.Channel()
flags = np.zeros(2, np.int32)
w.submit_flag(flags.ctypes.data, ch, 1)
flags[0] = 1
t0 = time.time()
while ch.take() != [1]:
    assert time.time() - t0 < 10
    time.sleep(0.001)
if sys.argv[1] == "fork":
    pid = os.fork()
    if pid == 0:                       # the child: no thread; a new waiter starts on the first wait
        w2 = _waiter.waiter_for(None)
        ok = w2 is not w and not w2.running and w2.pending == 0
        try:
            w.submit_flag(flags.ctypes.data, ch, 2)
            ok = False
        except Exception as e:
            ok = ok and type(e).__name__ == "StateError"
        ch2 = _waiter.Channel()
        flags[1] = 1
        w2.submit_flag(flags.ctypes.data + 4, ch2, 3)
        t0 = time.time()
        while ch2.take() != [3]:
            if time.time() - t0 > 10:
                os._exit(3)
            time.sleep(0.001)
        os._exit(0 if ok and w2.running else 2)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), "parent running", w.running)
elif sys.argv[1] == "stuck":
    w.submit_flag(flags.ctypes.data + 4, ch, 2)      # never set: the thread is stuck in it at exit
    print("stuck", w.pending)
else:
    print("idle", w.running)
"""


@pytest.mark.parametrize("case", ["idle", "stuck", "fork"])
def test_the_waiter_thread_stops_at_exit_and_restarts_in_a_forked_child(case):
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", WAITER_SCRIPT, case], capture_output=True, text=True, timeout=60,
                       env=_child_env())
    assert r.returncode == 0, r.stdout + r.stderr
    want = {"idle": "idle True", "stuck": "stuck 1", "fork": "child 0 parent running True"}[case]
    assert r.stdout.strip() == want
    assert time.time() - t0 < 30                 # no hang at interpreter exit


# --- lazy futures (CPU) -------------------------------------------------------------------------

@pytest.fixture
def lazy_fake(fake, monkeypatch):
    monkeypatch.setattr(aio, "Device", FakeDevice)
    return fake


def test_a_lazy_launch_runs_at_its_first_await_and_only_once(lazy_fake):
    fn = FakeKernel(record=True)

    async def main():
        fut = aio.launch(fn, 4, 256, "y", "x", lazy=True)
        assert fn.calls == [] and fut.stream is None and not fut.done()
        assert "deferred" in repr(fut)
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, lambda: complete(fut._event))
        await asyncio.gather(_await(fut), _await(fut))
        await fut
        return fut
    fut = run(main())
    assert len(fn.calls) == 1 and fn.calls[0][:3] == (4, 256, ("y", "x")) and fut.done()
    assert fn.calls[0][3] is fut.stream and isinstance(fut.stream, FakeStream)


def test_submit_submits_a_lazy_future_once_and_result_submits_one_too(lazy_fake):
    fn = FakeKernel(record=True)
    fut = aio.launch(fn, 1, 32, 1.0, lazy=True)
    assert fut.submit() is fut and fut.submit() is fut and len(fn.calls) == 1
    fut2 = aio.launch(fn, 1, 32, 2.0, lazy=True)
    assert fut2.result() is None and len(fn.calls) == 2
    eager = aio.launch(fn, 1, 32, 3.0)
    assert len(fn.calls) == 3 and eager.submit() is eager and len(fn.calls) == 3


def test_a_lazy_launch_error_comes_back_through_the_future_at_every_await(lazy_fake):
    err = cd.ArgumentValueError("kernel 'k': grid (0, 1, 1) out of range")
    fn = FakeKernel(record=True, fail=err)
    fut = aio.launch(fn, 0, 32, lazy=True)          # no error here

    async def main():
        got = []
        for _ in range(2):
            try:
                await fut
            except cd.ArgumentValueError as e:
                got.append(e)
        return got
    got = run(main())
    assert got == [err, err] and len(fn.calls) == 1 and "failed" in repr(fut)
    with pytest.raises(cd.ArgumentValueError, match="out of range"):
        fut.result()
    with pytest.raises(cd.ArgumentValueError):
        aio.launch(fn, 0, 32)                       # the eager form raises at the call, as before
    bad = aio.launch(object(), 1, 1, lazy=True)
    with pytest.raises(cd.ArgumentTypeError, match="aio.launch takes a Function"):
        run(_await(bad))
    bad_p = aio.submit(None, lazy=True)
    with pytest.raises(cd.ArgumentTypeError, match="aio.submit takes a PreparedLaunch"):
        bad_p.result()


def test_a_lazy_launch_takes_its_stream_from_the_policy_at_submission_and_raises_its_errors(lazy_fake):
    class Broken:
        def next_stream(self):
            raise cd.StateError("policy: no stream left")
    fn = FakeKernel(record=True)
    futs = [aio.launch(fn, 1, 32, lazy=True) for _ in range(2)]
    prev = aio.set_policy(Broken(), fn.device)
    try:
        with pytest.raises(cd.StateError, match="no stream left"):
            run(_await(futs[0]))
    finally:
        aio.set_policy(prev, fn.device)
    futs[1].submit()
    assert fn.calls[0][3] is prev.streams[0]


def test_a_lazy_launch_keeps_its_arguments_alive_until_the_work_is_done(lazy_fake):
    class Arg:
        pass
    fn = FakeKernel(record=True)
    arg = Arg()
    ref = weakref.ref(arg)
    fut = aio.launch(fn, 1, 32, arg, lazy=True)
    del arg
    gc.collect()
    assert ref() is not None                       # held before submission
    fut.submit()
    gc.collect()
    assert ref() is not None and not fut.done()    # and while the work runs
    complete(fut._event)
    assert fut.done()
    fn.calls.clear()                               # (the fake function's own record of the call)
    gc.collect()
    assert ref() is None


def test_wait_takes_anything_with_the_submission_protocol(fake):
    class Work:
        def __init__(self, stream, event, done=False):
            self.label, self.stream, self.done, self._ev = "work #1", stream, done, event

        @property
        def event(self):
            return self._ev

    async def main():
        s = FakeStream()
        ev = FakeEvent().record(s)
        w = Work(s, ev)
        fut = aio.wait(w)
        assert fut.label == "work #1" and fut.stream is s
        asyncio.get_running_loop().call_later(0.01, complete, ev)
        await fut
        done = aio.wait(Work(s, None, done=lambda: True))
        await done
        return fut.done(), done.done()
    assert run(main()) == (True, True)


def test_aio_does_not_import_queue():
    import pycudadrv.aio as m
    src = open(m.__file__, encoding="utf-8").read()
    assert "pycudadrv.queue" not in src and "import queue" not in src


# --- on the GPU ---------------------------------------------------------------------------------

KERNELS = r"""
__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void affine(float* y, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
// One block: wait `ns` nanoseconds, then copy `in` to `out`.
extern "C" __global__ void spin_copy(float* out, const float* in, long long ns, int n) {
    unsigned long long t0 = now_ns();
    if (threadIdx.x == 0) { while (now_ns() - t0 < (unsigned long long)ns) { } }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}
"""
MS = 1_000_000


@pytest.fixture(scope="module")
def mod():
    return cd.compile(KERNELS).load()


@pytest.fixture(params=MODES)
def mode(request):
    prev = aio.set_completion(request.param)
    yield request.param
    aio.set_completion(**prev)


@pytest.mark.gpu
def test_many_concurrent_awaited_launches_give_the_numpy_values(mod, rng, mode):
    n, count = 1024, 64
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(count)]
    coef = rng.uniform(-2, 2, size=(count, 2)).astype(np.float32)
    x_d = [cd.Buffer.from_numpy(x) for x in xs]
    y_d = [cd.Buffer.from_numpy(np.full(n, np.nan, np.float32)) for _ in range(count)]
    cd.Device(0).synchronize()
    fn = mod.function("affine")

    async def one(k):
        fut = aio.launch(fn, (n + 255) // 256, 256, y_d[k], x_d[k], float(coef[k, 0]), float(coef[k, 1]), n)
        await fut
        return y_d[k].to_numpy(stream=fut.stream)

    async def main():
        return await asyncio.gather(*(one(k) for k in range(count)))
    got = asyncio.run(main())
    assert len({id(s) for s in aio.policy().streams}) == 4
    for k in range(count):
        ref = coef[k, 0].astype(np.float64) * xs[k] + coef[k, 1]
        np.testing.assert_allclose(got[k], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_events_streams_prepared_launches_and_queue_submissions_can_be_awaited(mod, rng, mode):
    n = 2048
    x_h = rng.standard_normal(n).astype(np.float32)
    fn = mod.function("affine")

    async def main():
        with cd.Queue(streams=2) as q:
            x = q.from_numpy(x_h)
            y = q.from_numpy(np.full(n, np.nan, np.float32))
            z = q.from_numpy(np.full(n, np.nan, np.float32))
            await q.launch(fn, n // 256, 256, y, x, 2.0, 1.0, n)            # y = 2x + 1
            s = cd.Stream()
            p = fn.bind(n // 256, 256, z, y, -1.0, 0.5, n, stream=s)         # z = -y + 1/2
            await aio.submit(p)
            ev = cd.Event(timing=False).record(s)
            await aio.wait(ev)
            await aio.wait(s)
            return z.to_numpy(stream=s)
    got = asyncio.run(main())
    np.testing.assert_allclose(got, -(2 * x_h.astype(np.float64) + 1) + 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_the_event_loop_stays_responsive_while_a_kernel_runs(mod, rng, mode):
    x = cd.Buffer.from_numpy(rng.standard_normal(256).astype(np.float32))
    y = cd.Buffer.from_numpy(np.full(256, np.nan, np.float32))
    cd.Device(0).synchronize()

    async def main():
        fut = aio.launch(mod.function("spin_copy"), 1, 256, y, x, 100 * MS, 256)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while not fut.done():
                await asyncio.sleep(0.001)
                ticks += 1
        await asyncio.gather(fut, ticker())
        return ticks
    assert asyncio.run(main()) >= 20          # the loop ran other work throughout the 100 ms kernel
    np.testing.assert_array_equal(y.to_numpy(), x.to_numpy())


@pytest.mark.gpu
def test_cancelling_the_awaiting_task_lets_the_kernel_finish_on_live_buffers(mod, rng, mode):
    x_h = rng.standard_normal(4096).astype(np.float32)
    y = cd.Buffer.from_numpy(np.full(4096, np.nan, np.float32))
    cd.Device(0).synchronize()

    async def main():
        x = cd.Buffer.from_numpy(x_h)
        cd.Device(0).synchronize()
        fut = aio.launch(mod.function("spin_copy"), 1, 256, y, x, 30 * MS, 4096)
        del x                                           # only the future holds it now
        task = asyncio.ensure_future(_await(fut))
        await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gc.collect()
        for _ in range(8):                              # memory the pool could hand out again
            cd.Buffer.empty(4096, np.float32, stream=fut.stream).fill(np.float32(-7.0), stream=fut.stream)
        await aio.wait(fut.stream)
        return fut.done()
    assert asyncio.run(main())
    np.testing.assert_array_equal(y.to_numpy(), x_h)


FAULT_SCRIPT = r"""
import asyncio, json, sys
import numpy as np
import pycudadrv as cd
from pycudadrv import aio
aio.set_completion(sys.argv[1])
mod = cd.compile(r'''
extern "C" __global__ void wild_write(float* y, long long offset) {
    y[offset] = 1.0f;            // far outside any allocation: CUDA_ERROR_ILLEGAL_ADDRESS
}''').load()
y = cd.Buffer.zeros(256, np.float32)
cd.Device(0).synchronize()

async def faulty():
    await aio.launch(mod.function("wild_write"), 1, 1, y, 1 << 40)

async def bystander():
    n = 0
    for _ in range(20):
        await asyncio.sleep(0.005)
        n += 1
    return n

async def main():
    return await asyncio.gather(faulty(), bystander(), return_exceptions=True)

a, b = asyncio.run(main())
print(json.dumps({"faulty": type(a).__name__, "message": str(a), "bystander": b}))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("completion", MODES)
def test_a_faulting_awaited_launch_raises_in_its_task_only(completion):
    # A fault poisons the CUDA context for the rest of the process: run it in a subprocess.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cd.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(FAULT_SCRIPT), completion], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["faulty"] == "CudaError" and got["bystander"] == 20
    assert "kernel 'wild_write'" in got["message"]


@pytest.mark.gpu
def test_each_mode_twice_after_a_queue_submission_and_a_graph_launch(mod, rng):
    n = 2048
    fn = mod.function("affine")
    prev = aio.get_completion()

    async def main(x_h, a, b):
        with cd.Queue(streams=2) as q:
            x = q.from_numpy(x_h)
            y = q.from_numpy(np.full(n, np.nan, np.float32))
            await q.launch(fn, n // 256, 256, y, x, a, b, n)                # y = a x + b
            s = cd.Stream()
            z = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)
            await aio.wait(q.launch(fn, 1, 1, y, y, 1.0, 0.0, 1))        # one more submission, awaited
            with s.capture() as g:
                fn.launch(n // 256, 256, z, y, -1.0, 0.5, n, stream=s)     # z = -y + 1/2
            g.launch(s)
            await aio.wait(s)                                              # after a graph launch
            w = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32), stream=s)
            await aio.launch(fn, n // 256, 256, w, z, 2.0, 0.0, n, stream=s)   # w = 2 z
            return z.to_numpy(stream=s), w.to_numpy(stream=s)
    try:
        for m in MODES:
            aio.set_completion(m)
            for _ in range(2):
                x_h = rng.standard_normal(n).astype(np.float32)
                a, b = (float(v) for v in rng.uniform(-2, 2, 2).astype(np.float32))
                z, w = asyncio.run(main(x_h, a, b))
                ref = -(np.float64(a) * x_h + b) + 0.5
                np.testing.assert_allclose(z, ref, rtol=1e-5, atol=1e-5, err_msg=m)
                np.testing.assert_allclose(w, 2 * ref, rtol=1e-5, atol=1e-5, err_msg=m)
    finally:
        aio.set_completion(**prev)


@pytest.mark.gpu
@pytest.mark.parametrize("completion", ["blocking"])
def test_the_waiter_thread_reports_pending_work_and_sleeps_after(mod, rng, completion):
    from pycudadrv import _waiter
    x_h = rng.standard_normal(256).astype(np.float32)
    x = cd.Buffer.from_numpy(x_h)
    y = cd.Buffer.from_numpy(np.full(256, np.nan, np.float32))
    cd.Device(0).synchronize()
    w = _waiter.waiter_for(cd.Device(0))
    prev = aio.set_completion(completion)

    async def main():
        s = cd.Stream()
        gate = threading.Event()
        s.launch_host_func(lambda: gate.wait(10))      # the stream's later work stays pending until the gate opens
        fut = aio.launch(mod.function("affine"), 1, 256, y, x, 1.0, 0.0, 256, stream=s)      # y = x
        asyncio.get_running_loop().call_later(0.02, gate.set)
        pending_at_await = not fut.done()
        await fut
        return pending_at_await
    try:
        for _ in range(2):
            before = w.completed
            y.fill(np.float32(np.nan))
            cd.Device(0).synchronize()
            assert asyncio.run(main()) is True
            assert w.completed - before >= 1 and w.running    # the waiter thread reported it
            t0 = time.time()
            while w.pending and time.time() - t0 < 10:
                time.sleep(0.001)
            assert w.pending == 0                        # idle: nothing queued, the thread sleeps
            np.testing.assert_array_equal(y.to_numpy(), x_h)
    finally:
        aio.set_completion(**prev)


@pytest.mark.gpu
def test_the_loop_mode_polls_only_while_a_kernel_is_pending(mod, rng):
    n = 256
    fn = mod.function("affine")
    prev = aio.set_completion("loop")

    async def main(y, x, a, b):
        loop = asyncio.get_running_loop()
        s = cd.Stream()
        gate = threading.Event()
        s.launch_host_func(lambda: gate.wait(10))      # the kernel stays pending until the gate opens
        fut = aio.launch(fn, 1, n, y, x, a, b, n, stream=s)
        poller = aio._completer(loop).poller
        pending = (poller.count, fut.done())
        loop.call_later(0.02, gate.set)
        await fut
        return pending, poller.count, y.to_numpy(stream=s)
    try:
        for _ in range(2):
            x_h = rng.standard_normal(n).astype(np.float32)
            a, b = (float(v) for v in rng.uniform(-2, 2, 2).astype(np.float32))
            x = cd.Buffer.from_numpy(x_h)
            y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
            cd.Device(0).synchronize()
            pending, after, got = asyncio.run(main(y, x, a, b))
            assert pending == (1, False) and after == 0
            np.testing.assert_allclose(got, np.float64(a) * x_h + b, rtol=1e-5, atol=1e-5)
    finally:
        aio.set_completion(**prev)


@pytest.mark.gpu
@pytest.mark.parametrize("capture_mode", ["thread_local", "global"])
def test_a_loop_mode_await_pending_through_a_capture_leaves_the_capture_valid(mod, rng, capture_mode):
    # The poller must not call cuEventQuery while a capture forbids it (the driver would invalidate
    # the capture): it waits until the capture ends, then finishes the future.
    n = 256
    fn = mod.function("affine")
    x_h = rng.standard_normal(n).astype(np.float32)
    x = cd.Buffer.from_numpy(x_h)
    y = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    z = cd.Buffer.from_numpy(np.full(n, np.nan, np.float32))
    cd.Device(0).synchronize()
    prev = aio.set_completion("loop")

    async def main():
        s, s2 = cd.Stream(), cd.Stream()
        gate = threading.Event()
        s.launch_host_func(lambda: gate.wait(10))
        fut = aio.launch(fn, 1, n, y, x, 2.0, 1.0, n, stream=s)          # y = 2x + 1, pending
        with s2.capture(mode=capture_mode) as graph:
            fn.launch(1, n, z, x, -1.0, 0.5, n, stream=s2)                 # z = -x + 0.5, captured
            gate.set()
            for _ in range(50):
                await asyncio.sleep(0)                                    # the poller runs meanwhile
            during = fut.done()
        await fut
        graph.launch(s2)
        return during, y.to_numpy(stream=s), z.to_numpy(stream=s2)
    try:
        during, got_y, got_z = asyncio.run(main())
    finally:
        aio.set_completion(**prev)
    assert during is False                   # (not asked during the capture)
    np.testing.assert_allclose(got_y, 2.0 * x_h.astype(np.float64) + 1.0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_z, -x_h.astype(np.float64) + 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_a_loop_mode_await_of_an_event_closed_while_pending_raises_the_closed_error(mod):
    n = 256
    y = cd.Buffer.zeros(n, np.float32)
    prev = aio.set_completion("loop")

    async def main():
        s = cd.Stream()
        gate = threading.Event()
        s.launch_host_func(lambda: gate.wait(10))
        mod.function("affine").launch(1, n, y, y, 1.0, 1.0, n, stream=s)
        ev = cd.Event()
        ev.record(s)
        fut = aio.wait(ev)
        await asyncio.sleep(0)
        ev.close()
        gate.set()
        try:
            await fut
        except cd.ClosedError as e:
            return e
        return None
    try:
        for _ in range(2):
            err = asyncio.run(main())
            assert isinstance(err, cd.ClosedError) and "closed" in str(err)
    finally:
        aio.set_completion(**prev)
    cd.Device(0).synchronize()


@pytest.mark.gpu
def test_two_loops_on_two_threads_await_kernels_with_the_spin_waiter(mod, rng):
    n = 1024
    fn = mod.function("affine")
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    out = {}

    def one(k):
        x = cd.Buffer.from_numpy(xs[k])
        ys = [cd.Buffer.from_numpy(np.full(n, np.nan, np.float32)) for _ in range(8)]
        cd.Device(0).synchronize()

        async def main():
            futs = [aio.launch(fn, n // 256, 256, ys[j], x, float(j), float(k), n) for j in range(8)]
            await asyncio.gather(*futs)
            return [ys[j].to_numpy(stream=futs[j].stream) for j in range(8)]
        out[k] = asyncio.run(main())
    prev = aio.set_completion("blocking")
    try:
        threads = [threading.Thread(target=one, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        aio.set_completion(**prev)
    for k in range(2):
        for j in range(8):
            np.testing.assert_allclose(out[k][j], j * xs[k].astype(np.float64) + k, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_a_lazy_launch_runs_once_at_its_first_await(mod, rng, mode):
    n = 1024
    y_h = rng.standard_normal(n).astype(np.float32)
    a, b = 1.5, -0.25
    y = cd.Buffer.from_numpy(y_h)
    s = cd.Stream()
    cd.Device(0).synchronize()

    async def main():
        fut = aio.launch(mod.function("affine"), n // 256, 256, y, y, a, b, n, stream=s, lazy=True)   # y = a y + b
        s.synchronize()
        untouched = y.to_numpy(stream=s)
        await asyncio.gather(fut, fut)
        await fut                                      # awaited three times: run once
        return untouched, y.to_numpy(stream=s)
    untouched, got = asyncio.run(main())
    np.testing.assert_array_equal(untouched, y_h)
    np.testing.assert_allclose(got, a * y_h.astype(np.float64) + b, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_a_lazy_launch_raises_its_launch_errors_at_the_await(mod, mode):
    y = cd.Buffer.zeros(256, np.float32)
    fn = mod.function("affine")

    async def main():
        few = aio.launch(fn, 1, 256, y, lazy=True)                        # too few arguments
        huge = aio.launch(fn, 1, 4096, y, y, 1.0, 0.0, 256, lazy=True)    # block beyond the device's limit
        errs = []
        for fut in (few, huge):
            try:
                await fut
            except cd.Error as e:
                errs.append(e)
        ok = aio.launch(fn, 1, 256, y, y, 1.0, 0.0, 256, lazy=True)
        await ok
        return errs, ok.done()
    errs, ok = asyncio.run(main())
    assert isinstance(errs[0], cd.ArgumentTypeError) and "affine" in str(errs[0])
    assert isinstance(errs[1], cd.ArgumentValueError) and "4096" in str(errs[1])
    assert ok


FORK_SCRIPT = r"""
import asyncio, os, sys
import numpy as np
import pycudadrv as cd
from pycudadrv import _waiter, aio
aio.set_completion("blocking")
s = cd.Stream()
y = cd.Buffer.zeros(1024, np.float32, stream=s)

async def main():
    await aio.wait(s)
asyncio.run(main())
dev = cd.Device(0)
w = _waiter.waiter_for(dev)
assert w.running
pid = os.fork()
if pid == 0:
    w2 = _waiter.waiter_for(dev)                   # no CUDA call in the child (CUDA does not survive fork)
    os._exit(0 if (w2 is not w and not w2.running and w2.pending == 0) else 2)
_, status = os.waitpid(pid, 0)
asyncio.run(main())                                # the parent's thread goes on
print("child", os.waitstatus_to_exitcode(status), "parent", w.running)
"""


@pytest.mark.gpu
def test_a_forked_child_starts_without_the_parents_waiter_thread():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cd.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "child 0 parent True"



RELEASE_RUNS_PYTHON_SCRIPT = textwrap.dedent(r"""
    import json, time
    import pycudadrv as cd
    from pycudadrv import _waiter
    w, ch, s = _waiter.waiter_for(cd.Device(0)), _waiter.Channel(), cd.Stream()
    errors, got = [], []

    def recorded(cls=cd.Event):
        ev = cls(timing=False)
        ev.record(s)
        return ev

    def settle(n):
        for _ in range(5000):
            got.extend(ch.take())
            if len(got) >= n:
                return
            time.sleep(0.001)

    class Dying(cd.Event):
        def __del__(self):                  # Python code run while the waiter releases this Event
            try:
                w.submit(recorded(), ch, 3)
            except Exception as e:
                errors.append(repr(e))
    ev = recorded(Dying)
    w.submit(ev, ch, 1)
    del ev                                  # the waiter holds it alone now
    settle(1)
    w.submit(recorded(), ch, 2)      # releases the finished Dying event: its __del__ submits a wait
    for token in range(4, 10):
        try:
            w.submit(recorded(), ch, token)
        except Exception as e:
            errors.append(repr(e))
    settle(9)
    print(json.dumps({"errors": errors[:3], "tokens": sorted(got)}))
""")


@pytest.mark.gpu
def test_a_waited_event_whose_release_runs_python_code_keeps_the_waiter_consistent():
    # The waiter keeps each waited Event until its wait is done; releasing one can run Python code (a
    # __del__, a last Queue reference: another thread's submit under threads) before the new wait was
    # recorded: "pop from an empty deque", and the Events of later waits released while still waited for.
    r = subprocess.run([sys.executable, "-c", RELEASE_RUNS_PYTHON_SCRIPT], capture_output=True, text=True,
                       timeout=120, env=_child_env())
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"errors": [], "tokens": list(range(1, 10))}, got


# --- hostile awaiting (breaker4) ----------------------------------------------------------------

def test_one_future_awaited_by_two_tasks_and_a_cancelled_third_resumes_both(fake):
    async def main():
        s = FakeStream()
        fut = aio.wait(s)
        order = []

        async def waiter(tag):
            await fut
            order.append(tag)
        a, b, c = (asyncio.ensure_future(waiter(t)) for t in "abc")
        await asyncio.sleep(0.01)
        c.cancel()
        complete(fut.event)
        await asyncio.wait_for(asyncio.gather(a, b), 5)
        with pytest.raises(asyncio.CancelledError):
            await c
        return sorted(order), fut.done()
    for _ in range(2):
        assert run(main()) == (["a", "b"], True)


class _OwnFuture(asyncio.Future):
    made = 0

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        _OwnFuture.made += 1


class _OwnLoop(asyncio.SelectorEventLoop):
    def create_future(self):
        return _OwnFuture(loop=self)


def test_a_loop_whose_create_future_makes_a_future_subclass_still_resumes_the_awaiter(fake):
    async def main():
        s = FakeStream()
        fut = aio.wait(s)
        asyncio.get_running_loop().call_later(0.01, complete, fut.event)
        await fut
        return fut.done()
    loop = _OwnLoop()
    try:
        for _ in range(2):
            assert loop.run_until_complete(asyncio.wait_for(main(), 10)) is True
    finally:
        loop.close()


def test_a_done_callback_that_raises_goes_to_the_exception_handler_and_the_awaiter_still_resumes(fake):
    async def main():
        loop = asyncio.get_running_loop()
        seen = []
        loop.set_exception_handler(lambda lp, ctx: seen.append(ctx.get("exception")))
        s = FakeStream()
        fut = aio.wait(s)

        def bad(_):
            raise ZeroDivisionError("in a done callback")
        t1 = asyncio.ensure_future(_await(fut))
        t1.add_done_callback(bad)
        t2 = asyncio.ensure_future(_await(fut))
        await asyncio.sleep(0.01)
        complete(fut.event)
        await asyncio.wait_for(asyncio.gather(t1, t2), 5)
        await asyncio.sleep(0.01)
        return [type(e).__name__ for e in seen]
    for _ in range(2):
        assert run(main()) == ["ZeroDivisionError"]


def test_a_loop_closed_while_a_future_is_awaited_then_a_new_loop_awaits_the_next(fake):
    s = FakeStream()
    loop = asyncio.new_event_loop()
    fut = aio.wait(s)
    task = loop.create_task(_await(fut))
    loop.run_until_complete(asyncio.sleep(0.01))
    task.cancel()
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()                      # the first loop is gone with its wait pending
    complete(fut.event)
    gc.collect()

    async def main():
        f2 = aio.wait(s)
        asyncio.get_running_loop().call_later(0.01, complete, f2.event)
        await f2
        return f2.done()
    assert run(main()) is True
    assert fut.result() is None


class _HostileLoop(asyncio.SelectorEventLoop):
    """create_future hands out plain asyncio futures with done callbacks of its own before the
    awaiting task's: one raises, one tries to close the (running) loop."""
    def create_future(self):
        f = asyncio.Future(loop=self)

        def bad(_):
            raise ZeroDivisionError("in a done callback")

        def closes(_):
            self.close()              # RuntimeError: the loop is running
        f.add_done_callback(bad)
        f.add_done_callback(closes)
        return f


def test_done_callbacks_of_the_awaited_loop_future_that_raise_or_close_the_loop_go_to_its_handler(fake):
    seen = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda lp, ctx: seen.append(type(ctx.get("exception"))))
        s = FakeStream()
        fut = aio.wait(s)
        asyncio.get_running_loop().call_later(0.01, complete, fut.event)
        await fut
        await asyncio.sleep(0.01)
        return fut.done()
    loop = _HostileLoop()
    try:
        for _ in range(2):
            assert loop.run_until_complete(main()) is True
    finally:
        loop.close()
    assert ZeroDivisionError in seen and RuntimeError in seen and set(seen) <= {ZeroDivisionError, RuntimeError}
