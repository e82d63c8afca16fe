#!/usr/bin/env python3
"""Where a Timestamps pass's cost over events placed by hand comes from (H200 probe, not a benchmark):
bench/timestamps_cost.py's rows plus variants of the by-hand row, each against the same C floor
(event record + launch + event record over 256 event pairs), interleaved and paired as there:

* by hand, 256 pairs (the bench's row), and over 768 pairs (the event working set a Timestamps
  pool cycles through when try_take() every 256 passes returns each batch two calls later);
* by hand, 256 pairs, each batch's elapsed times read after it (untimed: cuEventElapsedTime), as
  try_take() reads the events before they are recorded again;
* the Timestamps pass with try_take() every 256 passes (untimed), with read() (blocking:
  every batch back in the pool before the next), and with no take at all (its pool filled by
  the warm-up round);
* the same pass with try_take() as it was before 2026-12-02 (no request after a take, the events
  handed out again in reverse order), and by hand over the 256 pairs in reverse order;
* by hand in a Python ``with`` block (a class with __enter__ / __exit__ recording the events), and
  by hand with a cuEventQuery after each batch (untimed).

Prints the median ratio of each row to the floor."""
import sys
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from _cfloor import kernel_params  # noqa: E402
from _harness import KERNEL_NAME, KERNEL_SRC, N_ELEMS, Row, median_or_nan, run_interleaved, setup  # noqa: E402
from _report import log  # noqa: E402

N = 256


def main():
    b = setup("probe_timestamps", "probe")
    if b is None:
        return 2
    cd = b.cd
    s = cd.Stream()
    a = cd.Buffer.zeros(N_ELEMS, "float32", stream=s)
    bb = cd.Buffer.zeros(N_ELEMS, "float32", stream=s)
    fn = cd.compile(KERNEL_SRC).load().function(KERNEL_NAME)
    p = fn.bind(1, 32, a, bb, 0, 1.0, stream=s)
    starts = [cd.Event(device=b.pdev) for _ in range(3 * N)]
    ends = [cd.Event(device=b.pdev) for _ in range(3 * N)]
    c_params = kernel_params(a.ptr, bb.ptr, 0, 1.0)
    s.synchronize()

    def c_timed(n):
        return b.floor.timed_launch_loop(fn.handle, s.handle, c_params, [e.handle for e in starts[:N]],
                                         [e.handle for e in ends[:N]], n)

    class HandPass:
        """A Python context manager recording events by hand (the with-protocol alone)."""
        def __init__(self):
            self.k = 0

        def __enter__(self):
            starts[self.k].record(s)

        def __exit__(self, *exc):
            ends[self.k].record(s)
            self.k = (self.k + 1) % N
            return False

    def with_hand(n):
        cm, launch = HandPass(), p.launch
        t0 = perf_counter_ns()
        for _ in repeat(None, n):
            with cm:
                launch()
        return perf_counter_ns() - t0

    def hand_query(n):
        launch = p.launch
        untimed = 0
        t0 = perf_counter_ns()
        for _ in repeat(None, n // N):
            for st, en in zip(starts[:N], ends[:N]):
                st.record(s)
                launch()
                en.record(s)
            t1 = perf_counter_ns()
            ends[N - 1].query()
            untimed += perf_counter_ns() - t1
        return perf_counter_ns() - t0 - untimed

    def by_hand(pairs, read):
        def run(n):
            launch = p.launch
            untimed = 0
            k = 0
            t0 = perf_counter_ns()
            for _ in repeat(None, n // N):
                sts, ens = starts[k:k + N], ends[k:k + N]
                for st, en in zip(sts, ens):
                    st.record(s)
                    launch()
                    en.record(s)
                k = (k + N) % pairs
                if read:
                    t1 = perf_counter_ns()
                    ens[-1].synchronize()
                    cd.Event.elapsed_ms_pairs(sts, ens)
                    untimed += perf_counter_ns() - t1
            return perf_counter_ns() - t0 - untimed
        return run

    class OldTimestamps(cd.Timestamps):
        """try_take as before 2026-12-02: no request after a take; events back in the pool starts
        first, then ends (handed out again in reverse)."""
        def _take(self):
            req, self._requested = self._requested, []
            self._req_end = None
            starts_, ends_ = [e[1] for e in req], [e[2] for e in req]
            out = list(zip([e[0] for e in req], cd.Event.elapsed_ms_pairs(starts_, ends_)))
            self._give_back(starts_ + ends_, req)
            return out

        def try_take(self):
            if not self._requested:
                self.request_read()
                if not self._requested:
                    return None if self._open else []
            if not self._ready():
                return None
            return self._take()

    ts = cd.Timestamps(s)
    old_ts = OldTimestamps(s)

    def ts_untaken(n):
        measure, launch = ts.measure, p.launch
        t0 = perf_counter_ns()
        for _ in repeat(None, n):
            with measure("step"):
                launch()
        return perf_counter_ns() - t0

    def ts_run(blocking, t=ts):
        def run(n):
            measure, launch = t.measure, p.launch
            take = t.read if blocking else t.try_take
            untimed = 0
            t0 = perf_counter_ns()
            for _ in repeat(None, n // N):
                for _ in repeat(None, N):
                    with measure("step"):
                        launch()
                t1 = perf_counter_ns()
                take()
                untimed += perf_counter_ns() - t1
            return perf_counter_ns() - t0 - untimed
        return run

    def ts_sync():
        s.synchronize()
        ts.read()
        old_ts.read()

    def by_hand_reversed(n):
        launch = p.launch
        sts, ens = starts[:N][::-1], ends[:N][::-1]
        t0 = perf_counter_ns()
        for _ in repeat(None, n // N):
            for st, en in zip(sts, ens):
                st.record(s)
                launch()
                en.record(s)
        return perf_counter_ns() - t0

    rows = [Row("by hand, 256 pairs", by_hand(N, False), s.synchronize),
            Row("by hand, 768 pairs", by_hand(3 * N, False), s.synchronize),
            Row("by hand, 256 pairs, read after each batch", by_hand(N, True), s.synchronize),
            Row("Timestamps, try_take every 256", ts_run(False), ts_sync),
            Row("Timestamps before 2026-12-02, try_take every 256", ts_run(False, old_ts), ts_sync),
            Row("by hand, 256 pairs, in reverse order", by_hand_reversed, s.synchronize),
            Row("Timestamps, read() every 256", ts_run(True), ts_sync),
            Row("Timestamps, no take (the pool filled)", ts_untaken, ts_sync),
            Row("by hand in a Python with-block", with_hand, s.synchronize),
            Row("by hand, 256 pairs, query after each batch", hand_query, s.synchronize)]
    res = run_interleaved(Row("C floor", c_timed, s.synchronize), rows, rounds=9, launches=10_240, label="probe",
                          log=log, paired=True)
    for r in rows:
        print(f"{r.name:<52} {median_or_nan(res.ratios(r.name)):.3f} x C")
    return 0


if __name__ == "__main__":
    sys.exit(main())
