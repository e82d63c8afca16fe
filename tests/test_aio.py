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
import weakref

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import aio


# --- a pretend GPU ------------------------------------------------------------------------------

class FakeDevice:
    ordinal = 0


class Gpu:
    def __init__(self):
        self.fault = None              # a CudaError every query raises (a poisoned context)
        self.streams = []
        self.host_threads = []


GPU = Gpu()


class FakeEvent:
    def __init__(self, timing=True, device=None):
        self.device = FakeDevice()
        self.done = False
        self.is_recorded = False

    def record(self, stream):
        self.is_recorded = True
        self.done = False
        return self

    def query(self):
        if GPU.fault is not None:
            raise GPU.fault
        return self.done

    def synchronize(self):
        if GPU.fault is not None:
            raise GPU.fault
        self.done = True


class FakeStream:
    count = 0

    def __init__(self, device=None):
        FakeStream.count += 1
        self.device = FakeDevice()
        self.handle = 0x2000 + FakeStream.count
        self.waits = []                # the event each host function waits behind
        self.host_funcs = []
        GPU.streams.append(self)

    def wait(self, ev):
        self.waits.append(ev)

    def launch_host_func(self, cb):
        self.host_funcs.append((self.waits[-1], cb))


def complete(*events):
    """The GPU finishes `events`: host functions behind them run on a driver thread (unless faulted)."""
    for ev in events:
        ev.done = True
    due = []
    for s in GPU.streams:
        for item in list(s.host_funcs):
            if item[0].done:
                s.host_funcs.remove(item)
                due.append(item[1])
    if GPU.fault is None and due:
        t = threading.Thread(target=lambda: [cb() for cb in due])
        t.start()
        GPU.host_threads.append(t)


@pytest.fixture(params=["host_func", "poll"])
def fake(request, monkeypatch):
    global GPU
    GPU = Gpu()
    monkeypatch.setattr(aio, "Event", FakeEvent)
    monkeypatch.setattr(aio, "Stream", FakeStream)
    for name in ("_events", "_signal_streams", "_misc_signal", "_policies"):
        monkeypatch.setattr(aio, name, {})
    prev = aio.set_completion(request.param, watchdog_ms=5, spin_us=50, interval_ms=1)
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


def test_a_host_function_on_a_driver_thread_wakes_the_loop(fake):
    if fake != "host_func":
        pytest.skip("host_func completion only")
    aio.set_completion(watchdog_ms=60_000)         # so only the host function can report completion
    woke = []

    async def main():
        s = FakeStream()
        fut = aio.wait(s)
        real = aio._post

        def post(loop, fn, arg):
            woke.append(threading.current_thread() is not threading.main_thread())
            real(loop, fn, arg)
        aio._post = post
        try:
            asyncio.get_running_loop().call_later(0.01, complete, fut.event)
            await fut
        finally:
            aio._post = real
        return fut.done()
    assert run(main()) and woke == [True]
    signal = [st for st in GPU.streams if st.waits]
    assert len(signal) == 1 and signal[0].host_funcs == []     # behind a private stream, not the user's


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
    with pytest.raises(cd.ArgumentValueError, match="watchdog_ms must be a positive number"):
        aio.set_completion(watchdog_ms=0)
    with pytest.raises(cd.ArgumentValueError, match="streams must be an int >= 1"):
        aio.DevicePolicy(streams=0)
    with pytest.raises(cd.ArgumentTypeError, match="next_stream"):
        aio.set_policy(object())
    prev = aio.get_completion()
    for key in ("watchdog_ms", "spin_us", "interval_ms"):
        with pytest.raises(cd.ArgumentValueError, match=f"{key} must be a positive number"):
            aio.set_completion(**{key: 10 ** 400})        # too large for a float: not finite
    assert aio.get_completion() == prev
    try:
        aio.set_completion(watchdog_ms=np.float32(7.5), spin_us=np.int32(3))    # numpy numbers are numbers
        assert aio.get_completion()["watchdog_ms"] == 7.5 and aio.get_completion()["spin_us"] == 3.0
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


@pytest.fixture(params=["host_func", "poll"])
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
@pytest.mark.parametrize("completion", ["host_func", "poll"])
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
