"""Callgrind proxy of the await path under the fake driver: N x ``await aio.wait(s)`` in one loop, each
suspending and resumed through the waiter thread and the channel (the fake's events are done at once, so the
future's first query is made to answer "not yet"). Count the main thread only:
  PYCUDADRV_LIBCUDA=/work/fakecuda/libcuda.so.1 valgrind --tool=callgrind --separate-threads=yes python bench/cg_await.py 2000
(the part named \"await\", thread 1; divide by N)."""
import asyncio, ctypes, os, sys
import pycudadrv as cd
from pycudadrv import aio
fake = ctypes.CDLL(os.environ["PYCUDADRV_LIBCUDA"])
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
mode = sys.argv[2] if len(sys.argv) > 2 else "spin"
aio.set_completion(mode)
_orig = aio.GpuFuture._check
def _check(self):     # the fake's events are done at once: query (its cost stays) but report "not yet", as a
    if self._state != 0:   # running 1 ms kernel would, so each await suspends and resumes through the channel
        return _orig(self)
    self._event.query()
    return False
aio.GpuFuture._check = _check
s = cd.Stream()
async def main():
    for _ in range(300):
        await aio.wait(s)
    fake.fakecuda_callgrind_start()
    for _ in range(N):
        await aio.wait(s)
    fake.fakecuda_callgrind_stop(b"await")
asyncio.run(main())
