"""pycudadrv.Queue: the self-ordering queue over a pool of streams.

The first part runs anywhere: a pretend GPU (streams that log what they are
asked to do, events the test completes) stands in for the driver, so the
ordering rules are checked call by call. The second part (marked gpu) checks
values, overlap and hazards on the device."""
import json
import os
import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pycudadrv as cd
import pycudadrv._interop as interop
import pycudadrv.queue as qmod
from queue_model import RangeTracker
from _fakes import GPU, FakeEvent, FakeKernel, FakeStream


# --- a pretend GPU (tests/_fakes.py) and the Queue's own fakes ------------------------------------

ALLOC_STREAM = FakeStream()


class FakeBuffer:
    """Device memory at a pretend address (a view is a FakeBuffer over part of it)."""

    def __init__(self, ptr, nbytes, stream=None):
        self.ptr = ptr
        self.nbytes = nbytes
        self.stream = stream or ALLOC_STREAM

    def __getitem__(self, sl):
        a, b, _ = sl.indices(self.nbytes)
        return FakeBuffer(self.ptr + a, b - a, self.stream)

    @property
    def __cuda_array_interface__(self):     # its bytes, as the Queue's span reads any foreign array
        return {"version": 3, "data": (self.ptr, False), "shape": (self.nbytes,), "typestr": "|u1"}

    def fill(self, value, stream=None):
        GPU.log.append(("launch", stream.id, f"fill@{self.ptr:x}"))
        GPU.last[stream.id] = f"fill@{self.ptr:x}"

    def copy_to(self, dst, n, src_offset, dst_offset, stream=None):
        GPU.log.append(("launch", stream.id, "copy"))
        GPU.last[stream.id] = "copy"

    def to_numpy(self, out=None, stream=None):
        GPU.log.append(("launch", stream.id, "read"))
        stream.synchronize()
        return np.arange(3.0)


@pytest.fixture
def fake(monkeypatch):
    """The queue module wired to the pretend GPU."""
    GPU.reset()
    monkeypatch.setattr(qmod, "Stream", FakeStream)
    monkeypatch.setattr(qmod, "Event", FakeEvent)
    monkeypatch.setattr(qmod, "Buffer", FakeBuffer)
    monkeypatch.setattr(qmod, "synchronize_context", lambda device: None)     # a timed plan's drain
    return GPU


def lane_of(q, name):
    """Index in the pool of the stream kernel `name` was launched on."""
    ids = [s.id for s in q.streams]
    for op in GPU.log:
        if op[0] == "launch" and op[2] == name:
            return ids.index(op[1])
    raise AssertionError(f"{name} was never launched")


def waits(q):
    """[(pool index of the waiting stream, label of the work it waits for)] in order."""
    ids = [s.id for s in q.streams]
    return [(ids.index(op[1]), op[2]) for op in GPU.log if op[0] == "wait"]


def complete_all(q):
    for s in q.streams:
        s.synchronize()


A = FakeKernel("A", "float* y, const float* x")          # y = f(x)
B = FakeKernel("B", "float* u, const float* y")
C = FakeKernel("C", "float* v, const float* y")
D = FakeKernel("D", "float* w, const float* u, const float* v")


def buffers(n=4, size=256):
    return [FakeBuffer(0x10000 * (k + 1), size) for k in range(n)]


# --- ordering rules (CPU) -----------------------------------------------------------------------

def test_independent_kernels_spread_over_the_streams_without_waits(fake):
    q = cd.Queue(streams=4)
    x = buffers(8)
    for k in range(4):
        q.launch(FakeKernel(f"k{k}", "float* y, const float* x"), 1, 32, x[2 * k], x[2 * k + 1])
    assert sorted(lane_of(q, f"k{k}") for k in range(4)) == [0, 1, 2, 3]
    assert waits(q) == []


def test_diamond_waits_once_per_cross_stream_edge(fake):
    q = cd.Queue(streams=4)
    x, y, u, v, w = buffers(5)
    q.launch(A, 1, 32, y, x)
    q.launch(B, 1, 32, u, y)
    q.launch(C, 1, 32, v, y)
    q.launch(D, 1, 32, w, u, v)
    # B right behind A on A's stream; C beside it on another, after A; D behind B, after C.
    assert lane_of(q, "B") == lane_of(q, "A") == lane_of(q, "D") == 0
    assert lane_of(q, "C") == 1
    assert waits(q) == [(1, "A"), (0, "C")]


def test_read_after_write_on_another_stream_waits_for_the_writer(fake):
    q = cd.Queue(streams=2, policy="round_robin")
    x, y, u = buffers(3)
    q.launch(A, 1, 32, y, x)           # stream 0
    q.launch(B, 1, 32, u, y)           # stream 1 reads y
    assert (lane_of(q, "A"), lane_of(q, "B")) == (0, 1)
    assert waits(q) == [(1, "A")]


def test_write_after_read_waits_for_the_reader(fake):
    q = cd.Queue(streams=2)
    x, y, z = buffers(3)
    reader = FakeKernel("reader", "float* y, const float* x")
    writer = FakeKernel("writer", "float* x, const float* z")
    q.launch(reader, 1, 32, y, x, stream=q.streams[0])
    q.launch(writer, 1, 32, x, z, stream=q.streams[1])
    assert waits(q) == [(1, "reader")]


def test_write_after_write_waits_for_the_first_writer(fake):
    q = cd.Queue(streams=2)
    x, y, z = buffers(3)
    q.launch(FakeKernel("w1", "float* x, const float* y"), 1, 32, x, y, stream=q.streams[0])
    q.launch(FakeKernel("w2", "float* x, const float* z"), 1, 32, x, z, stream=q.streams[1])
    assert waits(q) == [(1, "w1")]


def test_readers_of_the_same_memory_do_not_wait_for_each_other(fake):
    q = cd.Queue(streams=2)
    x, y, z = buffers(3)
    q.launch(FakeKernel("r1", "float* y, const float* x"), 1, 32, y, x, stream=q.streams[0])
    q.launch(FakeKernel("r2", "float* z, const float* x"), 1, 32, z, x, stream=q.streams[1])
    assert waits(q) == []


def test_views_order_only_where_their_bytes_overlap(fake):
    q = cd.Queue(streams=3)
    (buf,) = buffers(1, 1024)
    lo, hi, mid = buf[0:512], buf[512:1024], buf[256:768]
    fill = FakeKernel("fill", "float* y")
    q.launch(FakeKernel("lo", "float* y"), 1, 32, lo, stream=q.streams[0])
    q.launch(FakeKernel("hi", "float* y"), 1, 32, hi, stream=q.streams[1])
    assert waits(q) == []                                  # disjoint halves of one allocation
    q.launch(fill, 1, 32, mid, stream=q.streams[2])        # overlaps both
    assert sorted(waits(q)) == [(2, "hi"), (2, "lo")]


def test_const_pointer_is_read_and_plain_pointer_is_written(fake):
    q = cd.Queue(streams=2)
    x, y, z = buffers(3)
    q.launch(FakeKernel("rw", "float* x, const float* y"), 1, 32, x, y, stream=q.streams[0])
    q.launch(FakeKernel("r", "float* z, const float* y"), 1, 32, z, y, stream=q.streams[1])
    assert waits(q) == []                      # both only read y
    q.launch(FakeKernel("r2", "float* z, const float* x"), 1, 32, z, x, stream=q.streams[1])
    assert waits(q) == [(1, "rw")]             # x was written through the plain pointer


def test_unknown_constness_counts_as_a_write(fake):
    q = cd.Queue(streams=2)
    x, y = buffers(2)
    unknown = FakeKernel("unknown")             # no layout at all: every Buffer argument read and written
    q.launch(unknown, 1, 32, x, stream=q.streams[0])
    q.launch(FakeKernel("r", "float* y, const float* x"), 1, 32, y, x, stream=q.streams[1])
    assert waits(q) == [(1, "unknown")]


def test_explicit_reads_override_the_layout_and_writes_add_memory(fake):
    q = cd.Queue(streams=2)
    x, y, hidden = buffers(3)
    q.launch(FakeKernel("k", "float* x, float* y"), 1, 32, x, y, reads=[x], writes=hidden, stream=q.streams[0])
    q.launch(FakeKernel("r", "float* y, const float* x"), 1, 32, y, x, stream=q.streams[1])
    assert [w for w in waits(q)] == [(1, "k")]          # y (still written), not x
    GPU.log.clear()
    q.launch(FakeKernel("h", "const float* x"), 1, 32, x, reads=hidden, stream=q.streams[1])
    assert waits(q) == []                               # stream 1 already waited for k
    q2 = cd.Queue(streams=2)
    q2.launch(FakeKernel("k", "float* x, float* y"), 1, 32, x, y, reads=[x], writes=hidden, stream=q2.streams[0])
    GPU.log.clear()
    q2.launch(FakeKernel("h", "const float* x"), 1, 32, x, reads=hidden, stream=q2.streams[1])
    assert waits(q2) == [(1, "k")]                      # the memory only writes= named


def test_one_wait_covers_later_dependencies_on_the_same_stream(fake):
    q = cd.Queue(streams=2)
    x, y, u, v = buffers(4)
    q.launch(A, 1, 32, y, x, stream=q.streams[0])
    q.launch(B, 1, 32, u, y, stream=q.streams[1])
    q.launch(C, 1, 32, v, y, stream=q.streams[1])
    assert waits(q) == [(1, "A")]


def test_greedy_follows_the_writer_of_the_first_input_while_it_is_last_there(fake):
    q = cd.Queue(streams=3)
    x, y, z, u = buffers(4)
    q.launch(A, 1, 32, y, x)                                  # stream 0
    q.launch(FakeKernel("other", "float* u"), 1, 32, u)       # stream 1 (least loaded)
    q.launch(B, 1, 32, z, y)                                  # behind A: stream 0
    assert lane_of(q, "B") == 0 and waits(q) == []


def test_round_robin_takes_the_streams_in_turn(fake):
    q = cd.Queue(streams=3, policy="round_robin")
    bufs = buffers(5)
    for k in range(5):
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k])
    assert [lane_of(q, f"k{k}") for k in range(5)] == [0, 1, 2, 0, 1]


def test_least_loaded_counts_only_work_not_seen_complete(fake):
    q = cd.Queue(streams=2)
    bufs = buffers(5)
    q.launch(FakeKernel("a", "float* y"), 1, 32, bufs[0])          # stream 0
    q.launch(FakeKernel("b", "float* y"), 1, 32, bufs[1])          # stream 1
    q.launch(FakeKernel("c", "float* y"), 1, 32, bufs[2])          # stream 0 (a tie: the first)
    assert q.stats()["in_flight"] == [2, 1]
    q.streams[0].synchronize()                                    # a and c complete
    q._retire_now()                                               # the completion check sees it
    q.launch(FakeKernel("d", "float* y"), 1, 32, bufs[3])
    assert lane_of(q, "d") == 0 and q.stats()["in_flight"] == [1, 1]


def test_choosing_a_stream_asks_the_driver_nothing(fake):
    # The least loaded stream is chosen from the counts the last completion check left: no query per
    # choice (a query that finds its event done costs 1.36 us on the H200), so the check's back-off
    # holds while the GPU is behind.
    q = cd.Queue(streams=4)
    bufs = buffers(64)
    GPU.queries = 0
    for k in range(15):                               # independent work, the streams all busy
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k])
    assert GPU.queries == 0 and sum(q.stats()["in_flight"]) == 15
    assert max(q.stats()["in_flight"]) - min(q.stats()["in_flight"]) <= 1      # still spread evenly


def test_work_seen_finished_is_not_waited_for(fake):
    q = cd.Queue(streams=2, policy="round_robin")
    x, y, u = buffers(3)
    q.launch(A, 1, 32, y, x)
    complete_all(q)
    q._retire_now()                                  # the completion check sees A done
    GPU.queries = 0
    q.launch(B, 1, 32, u, y)
    assert (GPU.queries, waits(q)) == (0, [])


def test_a_dependency_not_seen_finished_is_waited_for_without_asking(fake):
    # cuEventQuery of a finished event costs the driver about nine waits (1.36 us against 0.15 us on
    # the H200): a submission never asks, it waits, whether the work it depends on runs or is done.
    q = cd.Queue(streams=2, policy="round_robin")
    x, y, u, v = buffers(4)
    q.launch(A, 1, 32, y, x)                         # stream 0
    q.launch(B, 1, 32, u, y)                         # stream 1: A running: waited for
    assert (GPU.queries, waits(q)) == (0, [(1, "A")])
    complete_all(q)                                  # everything done; the queue has not seen it
    q.launch(FakeKernel("E", "float* v, const float* u"), 1, 32, v, u)   # stream 0 reads u (B)
    assert (GPU.queries, waits(q)) == (0, [(1, "A"), (0, "B")])          # ordered by a wait, not a query


def test_once_the_completion_check_saw_work_finished_it_is_not_waited_for_again(fake):
    q = cd.Queue(streams=2, policy="round_robin")
    x, y, u, v, w = buffers(5)
    q.launch(A, 1, 32, y, x)                         # stream 0
    q.launch(B, 1, 32, u, y)                         # stream 1: waits for A
    q.launch(FakeKernel("E", "float* v, const float* u"), 1, 32, v, u)   # stream 0: waits for B
    complete_all(q)
    q._retire_now()
    q.launch(C, 1, 32, x, v)                         # stream 1 reads v (E): seen done, no wait
    q.launch(FakeKernel("F", "float* w, const float* u"), 1, 32, w, u)   # stream 0 reads u (B): the same
    assert waits(q) == [(1, "A"), (0, "B")]
    q.launch(FakeKernel("G", "float* y, const float* x"), 1, 32, y, x)   # stream 1 reads x (C, same stream)
    q.launch(FakeKernel("H", "float* u, const float* x"), 1, 32, u, x)   # stream 0 reads x (C): not seen done
    assert waits(q) == [(1, "A"), (0, "B"), (0, "C")]


def test_the_completion_check_asks_the_tail_first_then_the_front_then_halves(fake):
    # While the GPU keeps up, the tail first: one query finds all of a stream done (a query that
    # finds its event done is the costly one). Once a check found nothing done, the front first.
    q = cd.Queue(streams=1)
    bufs = buffers(40)
    for k in range(12):
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k])
    GPU.queries = 0
    q._retire_now()                                   # the GPU behind: the tail, then the front
    assert (GPU.queries, q.stats()["in_flight"]) == (2, [12])
    GPU.queries = 0
    q._retire_now()                                   # still behind: the front alone
    assert (GPU.queries, q.stats()["in_flight"]) == (1, [12])
    for ev in q.streams[0].events[:5]:                # the first five completed
        ev.done = True
    GPU.queries = 0
    q._retire_now()                                   # front, tail, then halves: 2 + log2(12) at most
    assert q.stats()["in_flight"] == [7] and GPU.queries <= 6
    complete_all(q)
    GPU.queries = 0
    q._retire_now()                                   # the GPU keeping up: the tail alone
    assert (GPU.queries, q.stats()["in_flight"]) == (1, [0])
    for k in range(12):
        q.launch(FakeKernel(f"j{k}", "float* y"), 1, 32, bufs[k])
    for ev in q.streams[0].events[-12:][:5]:
        ev.done = True
    GPU.queries = 0
    q._retire_now()                                   # tail (running), front (done), then halves
    assert q.stats()["in_flight"] == [7] and GPU.queries <= 6


def test_the_completion_check_asks_every_stream_then_comes_16_submissions_per_stream_later(fake):
    # A check asks every stream with work in flight (their counts stay comparable for the least loaded
    # choice) and the next comes 16 submissions per stream asked later: one query per 16 submissions
    # (asking four streams every 16 submissions cost 0.34 us per submission on the H200).
    q = cd.Queue(streams=4, policy="round_robin")
    bufs = buffers(100)
    for k in range(15):
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k])
    assert q.stats()["in_flight"] == [4, 4, 4, 3]
    complete_all(q)
    GPU.queries = 0
    q.launch(FakeKernel("k15", "float* y"), 1, 32, bufs[15])          # the 16th: a check of all four
    assert (GPU.queries, q.stats()["in_flight"]) == (4, [0, 0, 0, 1])  # each one's tail: all done
    for k in range(16, 79):
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k])
    assert GPU.queries == 4                                            # 63 more: no check yet
    complete_all(q)
    q.launch(FakeKernel("k79", "float* y"), 1, 32, bufs[79])          # the 64th after it
    assert (GPU.queries, q.stats()["in_flight"]) == (8, [0, 0, 0, 1])


def test_while_every_check_finds_all_work_done_checks_come_less_often_down_to_a_quarter(fake):
    # The GPU keeping up: a check that finds every stream's work done doubles the interval (the next
    # would find the same), up to four times the base; one that finds work still running sets the base.
    q = cd.Queue(streams=4, policy="round_robin")
    bufs = buffers(8)
    n = 0

    def submit_until_a_check(limit=1000):
        nonlocal n
        before = GPU.queries
        for k in range(1, limit + 1):
            q.launch(FakeKernel(f"k{n}", "float* y"), 1, 32, bufs[n % 8])
            n += 1
            if GPU.queries != before:
                return k
            complete_all(q)
        return None

    assert submit_until_a_check() == 16
    gaps = [submit_until_a_check() for _ in range(4)]
    assert gaps == [64, 128, 256, 256]                # 4 streams asked: base 64, then doubled to 256
    for k in range(255):                               # the next interval: three streams finish, one not
        q.launch(FakeKernel(f"r{k}", "float* y"), 1, 32, bufs[k % 8])
    for pool_stream in q.streams[:3]:
        pool_stream.synchronize()
    before = GPU.queries
    q.launch(FakeKernel("r255", "float* y"), 1, 32, bufs[0])             # the 256th: a check
    assert GPU.queries > before
    assert q.stats()["in_flight"][:3] == [0, 0, 0] and q.stats()["in_flight"][3] > 0
    assert submit_until_a_check() == 64                # work found running: the base again


def test_a_check_with_nothing_in_flight_changes_nothing_and_the_next_asks_each_tail_once(fake):
    # Right after a synchronize nothing is in flight: a check then learns nothing, and must not turn the
    # next check (the GPU keeping up) into front-then-tail, two queries per stream (a breaker's find).
    q = cd.Queue(streams=2, policy="round_robin")
    bufs = buffers(32)
    for k in range(4):
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k])
    q.synchronize()
    q._retire_now()
    GPU.queries = 0
    for k in range(16):
        q.launch(FakeKernel(f"j{k}", "float* y"), 1, 32, bufs[4 + k])
        complete_all(q)
    assert GPU.queries == 2                           # the 16th: each stream's tail, all done


def test_work_on_streams_given_with_stream_is_seen_complete_while_the_pool_sets_the_pace(fake):
    # Each stream given with stream= is a lane of its own; a check asks them all, and the interval
    # counts the pool's streams only: work on a new stream per submission never piles up beyond the
    # longest interval of checks that find all work done (4 times 16 per pool stream).
    q = cd.Queue(streams=2)
    bufs = buffers(4)
    worst = 0
    for k in range(600):
        s = FakeStream()
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k % 4], stream=s)
        s.synchronize()                                                # its work completes at once
        worst = max(worst, len(q._pending()))                           # every lane, the pool and beyond
    assert worst <= 4 * 2 * 16 + 1


def test_a_new_stream_per_submission_keeps_neither_lanes_nor_streams(fake):
    # A lane per stream given with stream=, kept for the queue's life, held every Stream and a table per
    # producer lane: memory grew with the square of the streams (1.6 GB at 20,000) and no Stream went.
    # Idle lanes beyond 16 are let go at the completion check, and their Streams with them.
    import gc
    import weakref
    q = cd.Queue(streams=2)
    bufs = buffers(4)
    refs = []
    for k in range(2000):
        s = FakeStream()
        refs.append(weakref.ref(s))
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k % 4], stream=s)
        s.synchronize()
        del s
    q.synchronize()
    gc.collect()
    assert q._lanes_kept() <= 2 + 4 * 2 * 16 + 16 + 1
    assert sum(r() is not None for r in refs) <= 4 * 2 * 16 + 16 + 1 + 4     # (the tracker's last writers)


def test_a_closed_stream_given_with_stream_is_let_go_once_its_work_is_seen_done(fake):
    q = cd.Queue(streams=1)
    bufs = buffers(4)
    s = FakeStream()
    q.launch(FakeKernel("on_s", "float* y"), 1, 32, bufs[0], stream=s)
    assert q._lanes_kept() == 2
    s.synchronize()
    s.close()
    for k in range(64):                     # completion checks come (the GPU keeping up)
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[1 + k % 3])
        complete_all(q)
    assert q._lanes_kept() == 1


def test_a_stream_given_in_a_let_go_lanes_place_is_still_waited_for(fake):
    # Lane indices are reused: what the pool stream waited for of the old lane must not stand for the new.
    q = cd.Queue(streams=1)
    x, y = buffers(2)
    olds = []
    for k in range(20):                     # 20 streams given with stream=, each writing x, the pool reading it
        s = FakeStream()
        olds.append(s)
        q.launch(FakeKernel(f"w{k}", "float* x"), 1, 32, x, stream=s)
        q.launch(FakeKernel(f"r{k}", "float* y, const float* x"), 1, 32, y, x)
        s.synchronize()
        complete_all(q)
    del olds
    for k in range(40):
        q.launch(FakeKernel(f"p{k}", "float* y"), 1, 32, y)
        complete_all(q)
    assert q._lanes_kept() <= 1 + 16
    GPU.log.clear()
    s = FakeStream()                        # a lane afresh, maybe at an old index; its write not done
    q.launch(FakeKernel("w_new", "float* x"), 1, 32, x, stream=s)
    q.launch(FakeKernel("r_new", "float* y, const float* x"), 1, 32, y, x)
    assert ("wait", q.streams[0].id, "w_new") in GPU.log


def test_a_submission_interleaved_by_another_threads_is_refused_not_issued_without_its_hazards(fake):
    # copy/fill/dispatch/graph/matmul/empty build their access list in one call and issue it in the next;
    # another thread submitting in between reset the list, and the first was issued ordered by nothing.
    q = cd.Queue(streams=2)
    x, y, z = buffers(3)
    q.launch(FakeKernel("reader", "float* z, const float* x"), 1, 32, z, x, stream=q.streams[0])
    for _ in range(2):
        token = q._buffers("Queue.fill", (x, True))         # this thread starts a fill of x
        t = threading.Thread(target=lambda: q.fill(y, 0))   # another submits meanwhile
        t.start()
        t.join()
        n = q.submissions
        with pytest.raises(cd.StateError, match="another submission was made to this Queue"):
            q._issue_call(token, "fill of x", q.streams[1], lambda s: x.fill(0, stream=s), (x,))
        assert q.submissions == n
    q.fill(x, 0, stream=q.streams[1])                       # from the start on this thread: ordered
    assert (1, "reader") in waits(q)


def test_a_submission_begun_again_on_the_same_thread_before_it_is_issued_is_refused(fake):
    # Code run between a copy/fill's access list and its issue (a finalizer, a signal handler) that
    # submits to the queue resets that list: the thread check alone let the fill go, ordered by nothing.
    q = cd.Queue(streams=2)
    x, y, z = buffers(3)
    q.launch(FakeKernel("reader", "float* z, const float* x"), 1, 32, z, x, stream=q.streams[0])
    def failing_fill():
        with pytest.raises(cd.ArgumentTypeError):
            q.fill("junk", 0)               # begins a submission, refused before its issue

    for nested in (lambda: q.launch(FakeKernel("w", "float* y"), 1, 32, y), lambda: q.fill(y, 0), failing_fill):
        token = q._buffers("Queue.fill", (x, True))
        nested()
        with pytest.raises(cd.StateError, match="another submission was made to this Queue"):
            q._issue_call(token, "fill of x", q.streams[1], lambda s: x.fill(0, stream=s), (x,))
    q.fill(x, 0, stream=q.streams[1])
    assert (1, "reader") in waits(q)


def test_streams_that_only_read_shared_memory_are_let_go_too(fake):
    # A reader per lane was kept in the tracker's list of the shared range: with a new Stream per
    # submission the list, and every Stream (a Submission holds its lane, the lane its Stream), grew
    # without end. A reader seen complete is replaced.
    import gc
    import weakref
    q = cd.Queue(streams=2)
    out = buffers(4)
    weights = FakeBuffer(0x900000, 256)
    K = FakeKernel("K", "float* y, const float* w")
    refs = []
    for k in range(3000):
        s = FakeStream()
        refs.append(weakref.ref(s))
        q.launch(K, 1, 32, out[k % 4], weights, stream=s)
        s.synchronize()
        del s
    gc.collect()
    assert sum(r() is not None for r in refs) <= 4 * 2 * 16 + 16 + 1 + 4
    seg, = [d for d in q._tracker_dump() if d[0] == 0x900000]
    GPU.log.clear()
    q.launch(FakeKernel("W", "float* w"), 1, 32, weights)        # a writer still waits for pending readers
    assert len([op for op in GPU.log if op[0] == "wait"]) <= 4 * 2 * 16 + 1


def test_independent_chains_spread_over_the_streams_without_waits_across_completion_checks(fake):
    # Eight buffers, each rewritten every eighth submission, the GPU keeping up: every check sees every
    # stream's work done, so the least loaded choice spreads the chains evenly and no chain waits on
    # another stream. A check of one stream at a time left the others' counts stale:
    # the stream just checked took what came next, chains hopped (107 waits in 400 submissions).
    q = cd.Queue(streams=4)
    bufs = buffers(8)
    for i in range(400):
        q.launch(FakeKernel(f"k{i}", "float* y"), 1, 32, bufs[i % 8])
        complete_all(q)
    assert waits(q) == []
    assert sorted(lane_of(q, f"k{i}") for i in range(392, 400)) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_synchronize_waits_for_work_on_a_stream_given_with_stream_and_closed_since(fake):
    # Stream.close lets the queued work run to the end; the queue's sync point waits for it through
    # the lane's last event instead of refusing (ClosedError from the closed stream's synchronize).
    q = cd.Queue(streams=2)
    x, y = buffers(2)
    s = FakeStream()
    q.launch(FakeKernel("on_s", "float* y"), 1, 32, x, stream=s)
    q.launch(FakeKernel("on_pool", "float* y"), 1, 32, y)
    s.close()
    q.synchronize()
    assert s.events[-1].done and len(q._pending()) == 0


def test_while_nothing_completes_the_completion_check_comes_less_often(fake):
    q = cd.Queue(streams=1)
    bufs = buffers(260)
    for k in range(256):
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k])
    assert GPU.queries <= 5                           # one per 16 submissions would be 16
    complete_all(q)
    q._retire_now()                                   # finds them all done: every 64 submissions (4 x 16)
    assert q.stats()["in_flight"] == [0]
    GPU.queries = 0
    for k in range(63):
        q.launch(FakeKernel(f"j{k}", "float* y"), 1, 32, bufs[k])
    assert GPU.queries == 0
    q.launch(FakeKernel("j63", "float* y"), 1, 32, bufs[63])
    assert GPU.queries == 2                           # the tail (the last check found work done), the front


def test_memory_made_outside_the_pool_waits_for_its_stream_while_that_is_busy(fake):
    q = cd.Queue(streams=2)
    x, y = buffers(2)
    ALLOC_STREAM.busy = True            # e.g. the upload of Buffer.from_numpy still queued there
    try:
        q.launch(A, 1, 32, y, x)
    finally:
        ALLOC_STREAM.busy = False
    q.launch(A, 1, 32, y, x)
    alloc = [op for op in GPU.log if op[0] == "wait_stream"]
    assert alloc == [("wait_stream", q.streams[0].id, ALLOC_STREAM.id)]      # one stream, once


def test_copy_fill_and_read_are_ordered_like_kernels(fake):
    q = cd.Queue(streams=2, policy="round_robin")
    x, y = buffers(2)
    q.fill(x, 1.0)                                 # stream 0
    q.copy(x, y)                                   # stream 1: reads x, writes y
    out = q.read(y)                                # stream 0: waits for the copy
    assert waits(q) == [(1, f"fill@{x.ptr:x}"), (0, "copy")]
    assert list(out) == [0.0, 1.0, 2.0]


def test_a_graph_launch_without_reads_and_writes_is_a_barrier(fake):
    q = cd.Queue(streams=3, policy="round_robin")
    bufs = buffers(3)
    for k in range(2):
        q.launch(FakeKernel(f"k{k}", "float* y"), 1, 32, bufs[k])

    class G:
        def launch(self, s):
            GPU.log.append(("launch", s.id, "graph"))
            GPU.last[s.id] = "graph"
    q.launch_graph(G())                                     # stream 2
    q.launch(FakeKernel("after", "float* y"), 1, 32, bufs[2])  # stream 0
    assert waits(q) == [(2, "k0"), (2, "k1"), (0, "graph")]


def test_synchronize_waits_for_every_stream_and_forgets(fake):
    q = cd.Queue(streams=2, policy="round_robin")
    x, y, u = buffers(3)
    sa = q.launch(A, 1, 32, y, x)
    q.synchronize()
    assert sa.done and q.stats()["in_flight"] == [0, 0] and q.stats()["tracked_ranges"] == 0
    q.launch(B, 1, 32, u, y)
    assert waits(q) == []


def test_an_asynchronous_fault_names_the_earliest_unfinished_kernel(fake):
    q = cd.Queue(streams=2, policy="round_robin")
    x, y, u, v = buffers(4)
    q.launch(A, 1, 32, y, x)
    q.launch(FakeKernel("bad", "float* u"), 1, 32, u)
    GPU.fault = cd.CudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered",
                             "cuStreamSynchronize")
    with pytest.raises(cd.CudaError, match=r"earliest submission not seen complete is kernel 'A' \(#\d+") as e:
        q.synchronize()
    assert e.value.code == 700 and "also unfinished: kernel 'bad'" in str(e.value)
    with pytest.raises(cd.CudaError, match="kernel 'A'"):
        q.launch(C, 1, 32, v, y)      # the next submission finds it too (cuEventQuery)


def test_a_fault_found_right_after_the_faulting_launch_names_that_kernel(fake):
    q = cd.Queue(streams=2)
    x, y = buffers(2)

    class Faulting(FakeKernel):
        def launch(self, *a, **kw):
            super().launch(*a, **kw)
            GPU.fault = cd.CudaError(719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", "cuEventRecord")
    with pytest.raises(cd.CudaError, match="earliest submission not seen complete is kernel 'trap'"):
        q.launch(Faulting("trap", "float* y, const float* x"), 1, 32, y, x)


def test_submissions_report_completion(fake):
    q = cd.Queue(streams=1)
    x, y = buffers(2)
    sub = q.launch(A, 1, 32, y, x)
    assert (sub.label, sub.query(), sub.done) == ("kernel 'A'", False, False)
    sub.synchronize()
    assert sub.query() and sub.done and "done" in repr(sub)


def test_capture_forks_to_the_pool_joins_back_and_holds_the_arguments(fake):
    q = cd.Queue(streams=3)
    x, y, u, v, w = buffers(5)
    with q.capture() as g:
        q.launch(A, 1, 32, y, x)
        q.launch(B, 1, 32, u, y)
        q.launch(C, 1, 32, v, y)
        q.launch(D, 1, 32, w, u, v)
        with pytest.raises(cd.CaptureError, match="read"):
            q.read(w)
        with pytest.raises(cd.CaptureError, match="synchronize"):
            q.synchronize()
    ids = [s.id for s in q.streams]
    ops = [op for op in GPU.log if op[0] in ("begin_capture", "end_capture", "wait", "launch")]
    assert ops[0] == ("begin_capture", ids[0]) and ops[-1] == ("end_capture", ids[0])
    assert ("wait", ids[1], None) in ops                     # stream 1 joined from the fork point
    assert ops[-2] == ("wait", ids[0], "C")                  # and joined back before the end
    assert g.exited and all(b in g.held for b in (x, y, u, v, w))
    assert not any(op[0] == "wait_stream" for op in GPU.log)  # nothing outside the capture is waited for
    q.launch(B, 1, 32, u, y)                                 # eager again: the capture left no state
    assert "capturing" not in repr(q)


def test_bad_arguments_are_refused_with_the_limit(fake):
    with pytest.raises(cd.ArgumentValueError, match=r"streams must be in \[1, 1024\], got 0"):
        cd.Queue(streams=0)
    with pytest.raises(cd.ArgumentTypeError, match="streams must be an int"):
        cd.Queue(streams=True)
    with pytest.raises(cd.ArgumentValueError, match="policy must be one of"):
        cd.Queue(policy="fastest")
    q = cd.Queue(streams=1)
    with pytest.raises(cd.ArgumentTypeError, match=r"Queue.launch of kernel 'A', reads\[0\]: expected a pycudadrv "
                                                   "Buffer"):
        q.launch(A, 1, 32, *buffers(2), reads=[3.0j])
    with pytest.raises(cd.ArgumentTypeError, match="stream= must be a pycudadrv Stream"):
        q.launch(A, 1, 32, *buffers(2), stream=7)
    q.close()
    with pytest.raises(cd.ClosedError, match="Queue is closed"):
        q.launch(A, 1, 32, *buffers(2))


def test_tracker_merges_a_write_over_split_ranges():
    t = RangeTracker()

    class S:
        def __init__(self, seq, lane):
            self.seq, self.lane, self.done = seq, lane, False
    r1, r2, w = S(1, "a"), S(2, "b"), S(3, "c")
    t.commit(0, 100, False, r1)
    t.commit(50, 150, False, r2)
    assert t.starts == [0, 50, 100]
    deps = {}
    t.collect(0, 150, True, w, deps)
    assert deps == {"a": r1, "b": r2}
    t.commit(0, 150, True, w)
    assert t.starts == [0] and t.segs[0] == [150, w, {}]
    w.done = True
    t.prune()
    assert len(t) == 0


def test_ranges_of_finished_work_are_dropped_while_the_gpu_keeps_up(fake):
    q = cd.Queue(streams=2, policy="round_robin")
    bufs = buffers(300, 64)
    k = FakeKernel("w", "float* y")
    for b in bufs:                                  # 300 writes of distinct whole buffers, each finished
        q.launch(k, 1, 32, b)
        complete_all(q)
    assert q.stats()["tracked_ranges"] < 100        # not kept until a thousand ranges pile up
    q._tracker_dump()                               # raises StateError if the index by start is out of step
    r = FakeKernel("r", "const float* x")
    GPU.log.clear()
    w = q.launch(k, 1, 32, bufs[5])                 # tracked again after its range was dropped
    q.launch(r, 1, 32, bufs[5][0:32])               # a view of it, on the other stream: waits
    q.launch(r, 1, 32, bufs[5])                     # the whole buffer, exact hit: waits too
    assert waits(q) == [(1, "w")]                   # the view waits; the whole read follows w on its stream
    assert not w.done
    q._tracker_dump()


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
// A kernel to the pycudadrv.dispatch convention: storage out, storage in, uniform scale, (indirect, len).
extern "C" __global__ void dscale(float* out, unsigned long long out_len, const float* in,
                                  unsigned long long in_len, const float* uni,
                                  const unsigned int* indirect, unsigned long long indirect_len) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < out_len / sizeof(float) && i < in_len / sizeof(float)) out[i] = uni[0] * in[i];
}
extern "C" __global__ void combine(float* w, const float* u, const float* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) w[i] = u[i] * v[i] + u[i];
}
// One block: wait `ns` nanoseconds, then copy `in` to `out`; times[0..1] = start and end (globaltimer).
extern "C" __global__ void spin_copy(float* out, const float* in, long long ns, unsigned long long* times, int n) {
    unsigned long long t0 = now_ns();
    if (threadIdx.x == 0) { while (now_ns() - t0 < (unsigned long long)ns) { } }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
    __syncthreads();
    if (threadIdx.x == 0) { times[0] = t0; times[1] = now_ns(); }
}
"""
N = 4096
MS = 1_000_000


@pytest.fixture(scope="module")
def mod():
    return cd.compile(KERNELS).load()


def grid_of(n):
    return ((n + 255) // 256,)


@pytest.mark.gpu
def test_synchronize_after_a_stream_given_with_stream_was_closed(mod, rng):
    # The breaker's find: q.synchronize() raised ClosedError once a stream given with stream= was closed
    # (Stream.close lets its work finish); it waits for that work and the values are right.
    aff = mod.function("affine")
    n = 256
    for _ in range(2):
        h = rng.standard_normal(n).astype(np.float32)
        q = cd.Queue(streams=2)
        x = q.from_numpy(h)
        y = q.from_numpy(np.full(n, np.nan, np.float32))
        s = cd.Stream()
        q.launch(aff, 1, 256, y, x, 2.0, 1.0, n, stream=s)      # y = 2 x + 1, on s
        s.close()
        q.synchronize()
        got = q.read(y)
        q.close()
        np.testing.assert_allclose(got, 2.0 * h.astype(np.float64) + 1.0, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_a_stream_in_the_place_of_one_whose_submission_failed_still_waits_for_the_upload(mod, rng):
    # The breaker's find: a fill on stream x waited for the allocation stream (memory uploaded there behind
    # a 300 ms kernel), then failed (a value float32 cannot hold); x closed, its lane was let go and its index
    # given to the next stream, which the table still said was ordered after the upload: no wait, stale data.
    spin = mod.function("spin_copy")
    n = 1 << 20
    for _ in range(2):
        h = rng.standard_normal(n).astype(np.float32)
        q = cd.Queue(streams=2)
        st = cd.Stream()
        times = cd.Buffer.zeros(2, np.uint64, stream=st)
        dummy = cd.Buffer.zeros(1, np.float32, stream=st)
        spin.launch(1, 32, dummy, dummy, 300 * MS, times, 0, stream=st)       # st busy for 300 ms
        buf = cd.Buffer.from_numpy(h, stream=st)                                # its upload queued behind
        x = cd.Stream()
        with pytest.raises(cd.ArgumentValueError):
            q.fill(buf, 1e40, stream=x)
        x.close()
        scratch = q.empty(16, np.float32)
        for _ in range(40):                                                     # completion checks: x let go
            q.fill(scratch, 0)
        y = cd.Stream()
        out = cd.Buffer.zeros(n, np.float32, stream=y)
        poison = np.full(n, np.nan, np.float32)
        out.write(poison, stream=y)
        q.copy(buf, out, stream=y)
        got = q.read(out)
        st.synchronize()
        q.close()
        np.testing.assert_array_equal(got, h)


@pytest.mark.gpu
def test_timed_copies_and_fills_give_their_gpu_time_and_the_right_values(rng):
    n = 1 << 22
    for _ in range(2):
        h = rng.standard_normal(n).astype(np.float32)
        q = cd.Queue(streams=2)
        a = q.empty(n, np.float32)
        b = q.empty(n, np.float32)
        up = q.copy(h, a, timed=True)
        cp = q.copy(a, b, timed=True)
        fl = q.fill(a, 0.5, timed=True)
        got_b, got_a = q.read(b), q.read(a)
        for sub in (up, cp, fl):
            assert 0.0 < sub.elapsed_ms() < 1000.0
        q.close()
        np.testing.assert_array_equal(got_b, h)
        np.testing.assert_array_equal(got_a, np.full(n, 0.5, np.float32))


@pytest.mark.gpu
def test_a_new_stream_per_step_keeps_the_values_and_lets_the_streams_go(mod, rng):
    # Each step on a Stream of its own, given with stream= and dropped by the caller: the queue let go of
    # idle lanes (and so of the Streams) beyond 16, reusing their indices; the chain's values stay those of
    # the same steps run in order, and memory uploaded on another stream is waited for by each new lane.
    aff = mod.function("affine")
    n = 1024
    for _ in range(2):
        h = rng.standard_normal(n).astype(np.float32)
        side = cd.Stream()
        hc = rng.standard_normal(n).astype(np.float32)
        c = cd.Buffer.from_numpy(hc, stream=side)                                 # uploaded on `side`
        q = cd.Queue(streams=2)
        x = q.from_numpy(h)
        y = q.from_numpy(np.full(n, np.nan, np.float32))
        ref = h.astype(np.float64)
        for k in range(300):
            s = cd.Stream()
            if k % 2 == 0:
                q.launch(aff, grid_of(n), 256, y, x, 0.5, 1.0, n, stream=s)      # y = 0.5 x + 1
            else:
                q.launch(aff, grid_of(n), 256, x, y, 0.5, 1.0, n, stream=s)      # x = 0.5 y + 1
            ref = 0.5 * ref + 1.0
            if k % 50 == 0:
                q.launch(aff, grid_of(n), 256, c, c, 2.0, 0.0, n)                 # c *= 2: memory made on `side`
            del s
        q.synchronize()
        got, got_c = q.read(x), q.read(c)
        assert q._lanes_kept() <= 2 + 4 * 2 * 16 + 16 + 1         # (a Stream takes no weak reference)
        q.close()
        side.close()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got_c, hc * np.float32(2.0 ** 6))         # six doublings, exact


@pytest.mark.gpu
def test_dependencies_that_finished_while_the_stream_was_chosen_need_no_wait(mod, rng):
    # The fuzz found it: a fill's dependencies (the readers of its buffer on both streams) were
    # collected, then choosing a stream (none idle) retired them all and recycled their events, and
    # the wait was placed on a recycled event (None): AttributeError out of Queue.fill.
    aff = mod.function("affine")
    n = 256
    for _ in range(2):
        h = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
        q = cd.Queue(streams=2)
        b = [q.from_numpy(v) for v in h]
        q.launch(aff, 1, 256, b[1], b[2], 2.0, 1.0, n)      # b1 = 2 b2 + 1
        q.launch(aff, 1, 256, b[2], b[0], -1.0, 0.5, n)     # b2 = -b0 + 0.5 (after the read of b2)
        q.launch(aff, 1, 256, b[1], b[0], 3.0, 0.0, n)      # b1 = 3 b0
        q.launch(aff, 1, 256, b[2], b[0], 0.5, 2.0, n)      # b2 = b0 / 2 + 2
        cd.Device(0).synchronize()                          # all done; the queue has not looked yet
        q.fill(b[0], np.float32(7.0))                       # after the three readers of b0
        q.launch(aff, 1, 256, b[1], b[0], 1.0, 1.0, n)      # b1 = b0 + 1 = 8
        got = [q.read(v) for v in b]
        q.close()
        h0 = h[0].astype(np.float64)
        np.testing.assert_array_equal(got[0], np.full(n, 7.0, np.float32))
        np.testing.assert_array_equal(got[1], np.full(n, 8.0, np.float32))
        np.testing.assert_allclose(got[2], h0 / 2 + 2, rtol=1e-6, atol=1e-6)


def _block(stream):
    """Keep `stream` busy (a host function waiting on a gate) until the returned gate is set."""
    gate = threading.Event()
    stream.launch_host_func(gate.wait)
    return gate


@pytest.mark.gpu
def test_memory_made_outside_the_queue_comes_after_its_stream_and_is_checked_once(mod, rng):
    # Buffers made on the default stream: a submission using one waits for that stream while it is
    # busy (cuStreamQuery), once per pool stream; once the queue saw it idle, memory made there
    # before is not asked about again (one compare per submission, no query).
    aff = mod.function("affine")
    n, dev = 256, cd.Device(0)
    for _ in range(2):
        q = cd.Queue(streams=3)
        ys = [q.from_numpy(np.full(n, np.nan, np.float32)) for _ in range(6)]
        q.synchronize()
        gate = _block(dev.default_stream)
        z = cd.Buffer.empty(n, np.float32)               # made on the default stream, and filled there
        c = float(rng.uniform(1.0, 9.0))
        z.fill(np.float32(c))                             # runs once the gate opens
        w0 = q.stats()["waits"]
        q.launch(aff, 1, 256, ys[0], z, 2.0, 1.0, n, stream=q.streams[0])    # waits for the default stream
        q.launch(aff, 1, 256, ys[1], z, 3.0, 0.0, n, stream=q.streams[0])    # stream 0 is after it already
        assert q.stats()["waits"] - w0 == 1
        q.launch(aff, 1, 256, ys[2], z, -1.0, 0.0, n, stream=q.streams[1])   # stream 1 is not
        assert q.stats()["waits"] - w0 == 2
        gate.set()
        x_h = rng.standard_normal(n).astype(np.float32)
        x = cd.Buffer.from_numpy(x_h)                     # made after those checks
        dev.default_stream.synchronize()
        q.launch(aff, 1, 256, ys[3], x, 2.0, 1.0, n, stream=q.streams[2])    # asked: idle, no wait
        gate = _block(dev.default_stream)
        q.launch(aff, 1, 256, ys[4], x, 0.5, 0.0, n, stream=q.streams[0])    # made before it was seen idle
        q.launch(aff, 1, 256, ys[5], z, 4.0, 0.0, n, stream=q.streams[2])
        assert q.stats()["waits"] - w0 == 2
        gate.set()
        got = [q.read(y) for y in ys]
        q.close()
        x64 = x_h.astype(np.float64)
        for g, want in zip(got, [2 * c + 1, 3 * c, -c, 2 * x64 + 1, 0.5 * x64, 4 * c]):
            np.testing.assert_allclose(g, np.broadcast_to(want, (n,)), rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_memory_of_another_queue_comes_after_the_work_queued_on_its_stream(mod, rng):
    aff = mod.function("affine")
    n = 256
    for _ in range(2):
        q1, q2 = cd.Queue(streams=1), cd.Queue(streams=2)
        a = q1.from_numpy(rng.standard_normal(n).astype(np.float32))
        out = q2.from_numpy(np.full(n, np.nan, np.float32))
        q1.synchronize()
        q2.synchronize()
        gate = _block(q1.streams[0])
        c = float(rng.uniform(1.0, 9.0))
        q1.fill(a, np.float32(c))                         # queued behind the gate on q1's stream
        w0 = q2.stats()["waits"]
        q2.launch(aff, 1, 256, out, a, 2.0, 1.0, n)       # a was made on q1's stream, busy: waits for it
        assert q2.stats()["waits"] - w0 == 1
        gate.set()
        got = q2.read(out)
        q1.close()
        q2.close()
        np.testing.assert_allclose(got, np.full(n, 2 * c + 1), rtol=1e-6)


@pytest.mark.gpu
def test_diamond_dag_gives_the_numpy_values(mod, rng):
    x_h = rng.standard_normal(N).astype(np.float32)
    with cd.Queue(streams=4) as q:
        x = q.from_numpy(x_h)
        y, u, v, w = (q.from_numpy(np.full(N, np.nan, np.float32)) for _ in range(4))
        t = q.from_numpy(np.zeros(2, np.uint64))
        aff, comb = mod.function("affine"), mod.function("combine")
        q.synchronize()
        waits0 = q.stats()["waits"]
        # A runs 20 ms, so B, C and D are all placed while it is in flight: B and C go to
        # the least loaded streams and must each wait for A; D waits for them
        q.launch(mod.function("spin_copy"), 1, 256, y, x, 20 * MS, t, N)   # A: y = x, after 20 ms
        q.launch(aff, grid_of(N), 256, u, y, -0.5, 3.0, N)       # B: u = -y/2 + 3
        q.launch(aff, grid_of(N), 256, v, y, 1.5, -2.0, N)       # C: v = 1.5y - 2
        q.launch(comb, grid_of(N), 256, w, u, v, N)              # D: w = u v + u
        got = q.read(w)
        assert q.stats()["waits"] - waits0 >= 2
    y64 = x_h.astype(np.float64)
    u64, v64 = -0.5 * y64 + 3, 1.5 * y64 - 2
    np.testing.assert_allclose(got, u64 * v64 + u64, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_independent_kernels_of_20_ms_overlap(mod, rng):
    spin = mod.function("spin_copy")
    with cd.Queue(streams=4) as q:
        ins = [q.from_numpy(rng.standard_normal(256).astype(np.float32)) for _ in range(2)]
        outs = [q.from_numpy(np.full(256, np.nan, np.float32)) for _ in range(2)]
        times = [q.from_numpy(np.zeros(2, np.uint64)) for _ in range(2)]
        q.synchronize()
        s0, s1 = q.streams[0], q.streams[1]
        start = cd.Event().record(s0)
        s1.wait(start)
        subs = [q.launch(spin, 1, 256, outs[k], ins[k], 20 * MS, times[k], 256) for k in range(2)]
        assert {sub.stream for sub in subs} == {s0, s1}
        ends = [cd.Event().record(s) for s in (s0, s1)]
        q.synchronize()
        wall_ms = max(cd.Event.elapsed_ms(start, e) for e in ends)
        (a0, a1), (b0, b1) = (q.read(t) for t in times)
    assert a1 - a0 >= 19 * MS and b1 - b0 >= 19 * MS          # each really ran ~20 ms
    assert b0 < a1 and a0 < b1                                # and they ran at the same time
    assert wall_ms < 32.0                                     # well under the 40 ms of running in turn


@pytest.mark.gpu
def test_a_writer_on_another_stream_waits_for_the_reader(mod, rng):
    old = rng.standard_normal(256).astype(np.float32)
    new_src = rng.standard_normal(256).astype(np.float32) + 10.0
    with cd.Queue(streams=2) as q:
        x, src = q.from_numpy(old), q.from_numpy(new_src)
        out = q.from_numpy(np.full(256, np.nan, np.float32))
        t = q.from_numpy(np.zeros(2, np.uint64))
        q.synchronize()
        # The reader waits 20 ms before it reads x; the writer of x is placed on the other stream.
        q.launch(mod.function("spin_copy"), 1, 256, out, x, 20 * MS, t, 256, stream=q.streams[0])
        q.launch(mod.function("affine"), 1, 256, x, src, 1.0, 0.0, 256, stream=q.streams[1])
        got_out, got_x = q.read(out), q.read(x)
    np.testing.assert_array_equal(got_out, old)                # never the new value
    np.testing.assert_array_equal(got_x, new_src)


@pytest.mark.gpu
def test_a_buffer_closed_while_queued_work_reads_it_is_freed_after_that_work(mod, rng):
    x_h = rng.standard_normal(256).astype(np.float32)
    with cd.Queue(streams=2) as q:
        x = q.from_numpy(x_h)
        out = q.from_numpy(np.full(256, np.nan, np.float32))
        t = q.from_numpy(np.zeros(2, np.uint64))
        q.synchronize()
        q.launch(mod.function("spin_copy"), 1, 256, out, x, 20 * MS, t, 256)
        x.close()                                   # no host synchronisation: the free waits for the kernel
        for _ in range(8):                          # memory the pool may hand out again meanwhile
            cd.Buffer.empty(256, np.float32, stream=q.streams[1]).fill(np.float32(-7.0), stream=q.streams[1])
        np.testing.assert_array_equal(q.read(out), x_h)


@pytest.mark.gpu
def test_prepared_launches_copies_and_fills_through_the_queue(mod, rng):
    x_h = rng.standard_normal(N).astype(np.float32)
    with cd.Queue(streams=3, policy="round_robin") as q:
        x = cd.Buffer.from_numpy(x_h)                # allocated and uploaded on the default stream
        y = q.empty(N, np.float32)
        z = q.empty(N, np.float32)
        q.fill(z, np.float32(np.nan))
        p = mod.function("affine").bind(grid_of(N), 256, y, x, 3.0, -1.0, N)
        q.submit(p)                                  # y = 3x - 1
        q.copy(y, z)                                 # z = y
        q.launch(mod.function("affine"), grid_of(N), 256, y, z, 0.5, 0.0, N)   # y = z / 2
        got_y, got_z = q.read(y), q.read(z)
    z64 = 3 * x_h.astype(np.float64) - 1
    np.testing.assert_allclose(got_z, z64, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_y, z64 / 2, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_a_dispatch_on_its_encoder_stream_is_ordered_against_the_pool(mod, rng):
    n = 4096
    src_h = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(0.5, 2.0))
    with cd.Queue(streams=2) as q:
        x = q.from_numpy(np.full(n, -3.0, np.float32))
        src = q.from_numpy(src_h)
        out = q.from_numpy(np.full(n, np.nan, np.float32))
        uni = q.from_numpy(np.array([a], np.float32))
        t = q.from_numpy(np.zeros(2, np.uint64))
        q.synchronize()
        enc = cd.Device(0).encoder(cd.Stream())          # a stream outside the pool
        with enc.pass_("scale") as p:
            d = p.dispatch(mod.function("dscale"), block=(256, 1, 1))
        d.set_arg((0, 0), out)
        d.set_arg((0, 1), x)
        d.set_arg((1, 0), uni, kind="uniform")
        # x = src, written 20 ms late on a pool stream; the dispatch reads x, so it must wait for that.
        q.launch(mod.function("spin_copy"), 1, 256, x, src, 20 * MS, t, n)
        sub = q.dispatch(d, threads=n)
        assert sub.stream is enc.stream
        got = q.read(out)
    np.testing.assert_allclose(got, a * src_h.astype(np.float64), rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_captured_queue_work_replays_as_one_graph_with_its_edges(mod, rng):
    x_h = rng.standard_normal(N).astype(np.float32)
    q = cd.Queue(streams=3)
    x = q.from_numpy(x_h)
    y, u, v, w = (q.from_numpy(np.full(N, np.nan, np.float32)) for _ in range(4))
    q.synchronize()
    aff, comb = mod.function("affine"), mod.function("combine")
    with q.capture() as graph:
        q.launch(aff, grid_of(N), 256, y, x, 2.0, 1.0, N)
        q.launch(aff, grid_of(N), 256, u, y, -0.5, 3.0, N)
        q.launch(aff, grid_of(N), 256, v, y, 1.5, -2.0, N)
        q.launch(comb, grid_of(N), 256, w, u, v, N)
    assert graph.num_nodes == 4
    assert np.isnan(q.read(w)).all()                         # captured, not run
    q.launch_graph(graph)
    got = q.read(w)
    y64 = 2 * x_h.astype(np.float64) + 1
    u64, v64 = -0.5 * y64 + 3, 1.5 * y64 - 2
    np.testing.assert_allclose(got, u64 * v64 + u64, rtol=1e-5, atol=1e-5)
    graph.close()
    q.close()


FAULT_SCRIPT = r"""
import json, sys
import numpy as np
import pycudadrv as cd
mod = cd.compile(r'''
extern "C" __global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void wild_write(float* y, long long offset) {
    y[offset] = 1.0f;            // far outside any allocation: CUDA_ERROR_ILLEGAL_ADDRESS
}''').load()
q = cd.Queue(streams=2)
x = q.from_numpy(np.ones(256, np.float32))
y = q.from_numpy(np.zeros(256, np.float32))
q.synchronize()
try:
    q.launch(mod.function("wild_write"), 1, 1, y, 1 << 40)
    q.launch(mod.function("scale"), 1, 256, y, x, 256)     # may already find the fault
    q.read(y)
    print(json.dumps({"raised": None}))
except cd.CudaError as e:
    print(json.dumps({"raised": type(e).__name__, "name": e.name, "message": str(e)}))
"""


def _run_isolated(script):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cd.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_a_fault_raises_at_the_sync_point_naming_the_kernel_that_caused_it():
    # A fault poisons the CUDA context for the rest of the process: run it in a subprocess.
    got = _run_isolated(FAULT_SCRIPT)
    assert got["raised"] == "CudaError"
    assert got["name"] in ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED")
    assert "earliest submission not seen complete is kernel 'wild_write'" in got["message"]


def test_span_of_an_array_interface_covers_every_byte_its_strides_reach():
    class Cai:
        def __init__(self, **cai):
            self.__cuda_array_interface__ = {"version": 3, "typestr": "<f4", **cai}
    assert interop.span(Cai(data=(4096, False), shape=(8,)), "x") == (4096, 4096 + 32)
    assert interop.span(Cai(data=(4096, False), shape=(4, 2), strides=(16, 4)), "x") == (4096, 4096 + 56)
    assert interop.span(Cai(data=(4096, False), shape=(4,), strides=(-4,)), "x") == (4096 - 12, 4096 + 4)
    assert interop.span(Cai(data=(0, False), shape=(0,)), "x") is None
    with pytest.raises(cd.ArgumentTypeError, match="x: expected a pycudadrv Buffer"):
        interop.span(object(), "x")


class _Cai:
    """An object exporting exactly the given ``__cuda_array_interface__`` dict."""

    def __init__(self, **cai):
        self.__cuda_array_interface__ = cai


def _brute_extent(ptr, shape, strides, itemsize):
    """``[lo, hi)`` over every element, one by one; None when there is none."""
    import itertools
    if any(n == 0 for n in shape):
        return None
    if strides is None:             # C order
        strides, step = [], itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    offsets = [sum(i * s for i, s in zip(idx, strides)) for idx in itertools.product(*(range(n) for n in shape))]
    return (ptr + min(offsets), ptr + max(offsets) + itemsize)


_TYPESTRS = {"|u1": 1, "<i2": 2, "<f4": 4, "<f8": 8, "<c16": 16, "|V12": 12}


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=4).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)),                           # zero-size and 0-d shapes too
                            st.none() | st.tuples(*(st.integers(-64, 64) for _ in shape)),   # negative strides
                            st.sampled_from(sorted(_TYPESTRS)))))
def test_span_equals_the_brute_force_extent_for_every_valid_interface(case):
    shape, strides, typestr = case
    ptr = 1 << 40
    got = interop.span(_Cai(data=(ptr, False), shape=shape, strides=strides, typestr=typestr, version=3), "x")
    assert got == _brute_extent(ptr, shape, strides, _TYPESTRS[typestr])


@pytest.mark.parametrize("cai, error, text", [
    ({"shape": (4, 4), "strides": (16,), "typestr": "<f4"}, cd.ArgumentValueError,
     r"strides \(16,\) gives 1 stride\(s\) for the 2-dimensional shape \(4, 4\)"),
    ({"shape": (4,), "strides": (4, 4), "typestr": "<f4"}, cd.ArgumentValueError,
     r"strides \(4, 4\) gives 2 stride\(s\) for the 1-dimensional shape \(4,\)"),
    ({"shape": (-4, 4), "typestr": "<f4"}, cd.ArgumentValueError,
     r"shape \(-4, 4\) has a negative extent at dimension 0"),
    ({"shape": (4, 2.0), "typestr": "<f4"}, cd.ArgumentValueError, r"'shape' must be a tuple of ints, got \(4, 2.0\)"),
    ({"shape": (True,), "typestr": "<f4"}, cd.ArgumentValueError, r"'shape' must be a tuple of ints, got \(True,\)"),
    ({"shape": 4, "typestr": "<f4"}, cd.ArgumentValueError, r"'shape' must be a tuple of ints, got 4"),
    ({"typestr": "<f4"}, cd.ArgumentValueError, r"has no 'shape'"),
    ({"shape": (4,), "strides": (4,)}, cd.ArgumentValueError, r"'typestr' must be a str such as '<f4', got None"),
    ({"shape": (4,), "typestr": "bogus"}, cd.ArgumentValueError, r"typestr 'bogus' is not a numpy type string"),
    ({"shape": (4,), "typestr": "|V0"}, cd.ArgumentValueError, r"typestr '\|V0' is not a type of device data"),
    ({"shape": (4,), "strides": (4.0,), "typestr": "<f4"}, cd.ArgumentValueError,
     r"'strides' must be None or a tuple of ints"),
    ({"shape": (4,), "strides": (-4096,), "typestr": "<f4"}, cd.ArgumentValueError,
     r"elements reach bytes \[-0x2000, 0x1004\), outside the 64-bit address space"),
])
def test_span_refuses_a_malformed_array_interface_naming_the_object(cai, error, text):
    with pytest.raises(error, match=r"Queue.launch, argument #1: _Cai: its __cuda_array_interface__.*" + text):
        interop.span(_Cai(data=(4096, False), version=3, **cai), "Queue.launch, argument #1")


def test_span_refuses_a_data_pointer_that_is_not_an_int():
    for data in [None, (), ("0x1000", False), (True, False), (1.0, False)]:
        with pytest.raises(cd.ArgumentValueError, match="has no valid 'data'|is not an address"):
            interop.span(_Cai(data=data, shape=(4,), typestr="<f4"), "x")


def test_a_launch_with_a_malformed_array_interface_is_refused_before_anything_is_issued(fake):
    q = cd.Queue(streams=2)
    bad = _Cai(data=(0x10000, False), shape=(4, 4), strides=(16,), typestr="<f4", version=3)
    with pytest.raises(cd.ArgumentValueError, match=r"Queue.launch of kernel 'A', argument #0: _Cai: its "
                                                    r"__cuda_array_interface__ strides \(16,\) gives 1 stride"):
        q.launch(A, 1, 32, bad, buffers(1)[0])
    assert GPU.log == [] and q.submissions == 0
    q.launch(A, 1, 32, np.zeros(4), buffers(1)[0])        # no array interface at all: the launch judges it
    assert q.submissions == 1


# --- process-wide defaults (CPU) ------------------------------------------------------------------

@pytest.fixture
def clean_defaults(monkeypatch):
    monkeypatch.delenv("PYCUDADRV_QUEUE_STREAMS", raising=False)
    monkeypatch.delenv("PYCUDADRV_QUEUE_POLICY", raising=False)
    qmod.reset_queue_defaults()
    yield
    qmod.reset_queue_defaults()


def test_queue_defaults_set_in_code_apply_to_new_queues_twice_in_a_row(fake, clean_defaults):
    assert qmod.get_queue_defaults() == {"streams": 4, "policy": "greedy"}
    for streams, policy in [(3, "round_robin"), (2, "greedy")]:
        before = qmod.set_queue_defaults(streams=streams, policy=policy)
        assert qmod.get_queue_defaults() == {"streams": streams, "policy": policy} != before
        q = cd.Queue()
        assert (len(q.streams), q.policy) == (streams, policy)
        assert len(cd.Queue(streams=1).streams) == 1 and cd.Queue(policy="round_robin").policy == "round_robin"
        x, y = buffers(2)
        q.launch(A, 1, 32, y, x)                     # a queue made from the defaults works as any other
        assert q.stats()["submissions"] == 1
    qmod.set_queue_defaults(policy="round_robin")          # None leaves the other value as it is
    assert qmod.get_queue_defaults() == {"streams": 2, "policy": "round_robin"}
    qmod.reset_queue_defaults()
    assert qmod.get_queue_defaults() == {"streams": 4, "policy": "greedy"}


@pytest.mark.parametrize("kw, error, text", [
    ({"streams": 0}, cd.ArgumentValueError, r"set_queue_defaults: streams must be in \[1, 1024\], got 0"),
    ({"streams": 1025}, cd.ArgumentValueError, r"streams must be in \[1, 1024\], got 1025"),
    ({"streams": True}, cd.ArgumentTypeError, "streams must be an int, got True"),
    ({"streams": 2.0}, cd.ArgumentTypeError, "streams must be an int, got 2.0"),
    ({"streams": 2, "policy": "fastest"}, cd.ArgumentValueError, "policy must be one of .*got 'fastest'"),
])
def test_a_refused_set_defaults_changes_nothing(fake, clean_defaults, kw, error, text):
    qmod.set_queue_defaults(streams=3)
    with pytest.raises(error, match=text):
        qmod.set_queue_defaults(**kw)
    assert qmod.get_queue_defaults() == {"streams": 3, "policy": "greedy"}    # not even the valid half applied


DEFAULTS_SCRIPT = r"""
import json, warnings
import pycudadrv.queue as q
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    got = q.get_queue_defaults()
q.set_queue_defaults(streams=7)
print(json.dumps({"got": got, "warnings": [str(x.message) for x in w], "after_set": q.get_queue_defaults()}))
"""


@pytest.mark.parametrize("env, expect, warned", [
    ({"PYCUDADRV_QUEUE_STREAMS": "2", "PYCUDADRV_QUEUE_POLICY": "round_robin"}, {"streams": 2, "policy": "round_robin"},
     None),
    ({"PYCUDADRV_QUEUE_STREAMS": " 16 ", "PYCUDADRV_QUEUE_POLICY": " Greedy "}, {"streams": 16, "policy": "greedy"},
     None),
    ({"PYCUDADRV_QUEUE_STREAMS": "0"}, {"streams": 4, "policy": "greedy"}, "PYCUDADRV_QUEUE_STREAMS='0' is not an integer >= 1"),
    ({"PYCUDADRV_QUEUE_STREAMS": "2000"}, {"streams": 4, "policy": "greedy"}, "is not an integer <= 1024"),
    ({"PYCUDADRV_QUEUE_STREAMS": "many"}, {"streams": 4, "policy": "greedy"}, "'many' is not an integer"),
    ({"PYCUDADRV_QUEUE_POLICY": "fastest"}, {"streams": 4, "policy": "greedy"},
     "PYCUDADRV_QUEUE_POLICY='fastest' is not one of greedy, round_robin"),
])
def test_queue_defaults_come_from_the_environment_in_a_new_process(env, expect, warned):
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("PYCUDADRV_QUEUE_")}
    child_env.update(env)
    child_env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cd.__file__)) + os.pathsep + child_env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", DEFAULTS_SCRIPT], capture_output=True, text=True, timeout=120,
                       env=child_env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["got"] == expect
    assert got["after_set"]["streams"] == 7                        # set_queue_defaults wins over the variable
    if warned is None:
        assert got["warnings"] == []
    else:
        assert len(got["warnings"]) == 1 and warned in got["warnings"][0]


def test_config_flags_queue_variables_it_would_not_use():
    from pycudadrv import config

    assert config.value_problem("PYCUDADRV_QUEUE_STREAMS", "8") is None
    assert "above the maximum 1024" in config.value_problem("PYCUDADRV_QUEUE_STREAMS", "4096")
    assert "below the minimum 1" in config.value_problem("PYCUDADRV_QUEUE_STREAMS", "0")
    assert config.value_problem("PYCUDADRV_QUEUE_POLICY", "round_robin") is None
    assert "not one of greedy, round_robin" in config.value_problem("PYCUDADRV_QUEUE_POLICY", "lifo")


# --- the compiled tracker against its reference model (CPU) ---------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2),                                      # stream
                          st.lists(st.tuples(st.integers(0, 15), st.integers(1, 6), st.booleans()),
                                   min_size=1, max_size=3),                       # (start, length, write)
                          st.integers(-1, 2)),                                    # a stream's work done first
                min_size=1, max_size=25))
def test_the_compiled_tracker_keeps_what_the_reference_model_keeps(program):
    GPU.reset()
    saved = qmod.Stream, qmod.Event, qmod.Buffer
    qmod.Stream, qmod.Event, qmod.Buffer = FakeStream, FakeEvent, FakeBuffer
    try:
        q = cd.Queue(streams=3)
        (buf,) = buffers(1, 32 * 64)
        ref = RangeTracker()
        k = FakeKernel("k", "int n")                    # no pointer parameters: every access is explicit
        for s, accesses, done in program:
            if done >= 0:                               # seen complete: readers of it make room
                q.streams[done].synchronize()
                q._retire_now()
            acc = {}
            for start, length, w in accesses:           # reads first, then writes (named in both: a write)
                if not w:
                    acc[(buf.ptr + 64 * start, buf.ptr + 64 * (start + length))] = False
            for start, length, w in accesses:
                if w:
                    acc[(buf.ptr + 64 * start, buf.ptr + 64 * (start + length))] = True
            views = {w: [buf[64 * a:64 * (a + n)] for a, n, ww in accesses if ww == w] for w in (False, True)}
            deps = {}
            for (lo, hi), w in acc.items():
                ref.collect(lo, hi, w, object(), deps)
            waits_before = q.stats()["waits"]
            sub = q.launch(k, 1, 32, 1, reads=views[False], writes=views[True], stream=q.streams[s])
            expect_waits = len({lane for lane in deps if lane is not sub.lane})
            assert q.stats()["waits"] - waits_before <= expect_waits       # never more than one per lane
            for (lo, hi), w in acc.items():
                ref.commit(lo, hi, w, sub)
            model = [(s0, seg[0], None if seg[1] is None else seg[1].seq, sorted(r.seq for r in seg[2].values()))
                     for s0, seg in sorted(ref.segs.items())]
            assert q._tracker_dump() == model
    finally:
        qmod.Stream, qmod.Event, qmod.Buffer = saved


# --- fault reports name the kernel (CPU) ---------------------------------------------------------

def test_a_fault_behind_an_unfinished_fill_names_the_kernel_not_the_fill(fake):
    q = cd.Queue(streams=2, policy="round_robin")
    x, y, u = buffers(3)
    q.fill(x, 1.0)                                              # #1 not a kernel, not seen complete
    q.launch(FakeKernel("wild", "float* u"), 1, 32, u)          # #2 the kernel
    q.launch(A, 1, 32, y, x)                                    # #3
    GPU.fault = cd.CudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered",
                             "cuStreamSynchronize")
    for _ in range(2):                                          # the same report at every sync point
        with pytest.raises(cd.CudaError) as e:
            q.synchronize()
        msg = str(e.value)
        assert "the earliest kernel not seen complete is kernel 'wild' (#2, stream 1 of the queue)" in msg
        assert f"before it, not seen complete (not kernels): fill of {x.nbytes} bytes (#1)" in msg
        assert "also unfinished: kernel 'A' (#3)" in msg and e.value.code == 700


# --- cuDNN plans as submissions, with a pretend plan (CPU) -----------------------------------------

class FakePlan:
    """What Queue.matmul uses of a MatmulPlan: calling it on a stream, its workspace, shapes and repr."""
    m, n, k, dtype, closed = 8, 8, 8, "float32", False

    def __init__(self, workspace):
        self.workspace = workspace

    def __call__(self, a, b, out, stream=None):
        GPU.log.append(("launch", stream.id, "plan"))
        GPU.last[stream.id] = "plan"

    def __repr__(self):
        return "<FakePlan>"


def test_a_timed_plan_execution_drains_the_device_first_and_an_untimed_one_does_not(fake, monkeypatch):
    monkeypatch.setattr(qmod, "_plan_type", lambda: FakePlan)
    drained = []
    monkeypatch.setattr(qmod, "synchronize_context", lambda device: drained.append(len(GPU.log)))
    q = cd.Queue(streams=2)
    a, b, out, ws = buffers(4)
    plan = FakePlan(ws)
    for _ in range(2):
        q.launch(FakeKernel("before", "float* a"), 1, 32, a, stream=q.streams[0])
        n = len(drained)
        q.matmul(plan, b, b, out, stream=q.streams[1])
        assert len(drained) == n                                   # untimed: no drain
        at = len(GPU.log)
        q.matmul(plan, b, b, out, stream=q.streams[1], timed=True)
        assert drained[-1] == at and len(drained) == n + 1         # timed: drained before the plan was issued
        assert GPU.log[at:] and ("launch", q.streams[1].id, "plan") in GPU.log[at:]
    with pytest.raises(cd.ArgumentTypeError, match="Queue.matmul: timed must be True or False"):
        q.matmul(plan, b, b, out, timed="yes")


def test_a_plan_execution_is_ordered_against_kernels_by_its_reads_and_writes(fake, monkeypatch):
    monkeypatch.setattr(qmod, "_plan_type", lambda: FakePlan)
    q = cd.Queue(streams=2)
    a, b, out, ws, z = buffers(5)
    plan = FakePlan(ws)
    for _ in range(2):                                     # twice in one queue, after a kernel each time
        GPU.log.clear()
        q.launch(FakeKernel("make_a", "float* a"), 1, 32, a, stream=q.streams[0])
        sub = q.matmul(plan, a, b, out, stream=q.streams[1], timed=True)
        assert waits(q) == [(1, "make_a")]                 # reads a: after its writer
        assert sub.label == "cuDNN matmul 8x8x8 (float32)" and sub.is_kernel and sub.timed
        q.launch(FakeKernel("use_out", "float* z, const float* out"), 1, 32, z, out, stream=q.streams[0])
        assert waits(q)[-1] == (0, "plan")                 # reads out: after the plan
        q.matmul(plan, b, b, out, stream=q.streams[0])     # out and the workspace again: stream 0 waited already
        assert waits(q) == [(1, "make_a"), (0, "plan")]
        q.matmul(plan, b, a, z, stream=q.streams[1])       # nothing shared but the workspace: write after write
        assert waits(q) == [(1, "make_a"), (0, "plan"), (1, "plan")]
        q.synchronize()
    with pytest.raises(cd.ArgumentTypeError, match="Queue.matmul takes a cuDNN MatmulPlan"):
        q.matmul(object(), a, b, out)


def test_timed_submissions_are_refused_inside_a_capture(fake):
    q = cd.Queue(streams=2)
    x, y = buffers(2)
    with q.capture():
        with pytest.raises(cd.CaptureError, match="timed=True during Queue.capture"):
            q.launch(A, 1, 32, y, x, timed=True)
    with pytest.raises(cd.StateError, match="was not submitted with timed=True"):
        q.launch(A, 1, 32, y, x).elapsed_ms()


# --- on the GPU: plans, timing and fault reports ---------------------------------------------------

HALF_KERNELS = r"""
__device__ unsigned long long now16() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// One block: wait `ns` nanoseconds, then copy n 16-bit values (float16 bits).
extern "C" __global__ void spin_copy16(unsigned short* out, const unsigned short* in, long long ns, int n) {
    unsigned long long t0 = now16();
    if (threadIdx.x == 0) { while (now16() - t0 < (unsigned long long)ns) { } }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}
"""


@pytest.mark.gpu
def test_plan_submissions_are_ordered_against_kernels_and_give_the_numpy_values(rng):
    from pycudadrv import cudnn

    reason = cudnn.unavailable_reason()
    if reason is not None:
        pytest.skip(f"cuDNN unavailable: {reason}")
    spin = cd.compile(HALF_KERNELS).load().function("spin_copy16")
    m, k, n = 96, 64, 48
    plan = cudnn.matmul_plan((m, k), (k, n), "float16")
    with cd.Queue(streams=2) as q:
        for _ in range(2):              # twice in one process, each time right after a kernel
            a_h = rng.standard_normal((m, k)).astype(np.float16)
            b_h = rng.standard_normal((k, n)).astype(np.float16)
            src, b = q.from_numpy(a_h), q.from_numpy(b_h)
            a = q.from_numpy(np.full((m, k), np.nan, np.float16))
            out = q.from_numpy(np.full((m, n), np.nan, np.float16))
            out2 = q.from_numpy(np.full((m, n), np.nan, np.float16))
            q.synchronize()
            # a = src, written 20 ms late on stream 0; the plan on stream 1 reads a: it must wait for that.
            q.launch(spin, 1, 256, a, src, 20 * MS, m * k, stream=q.streams[0])
            sub = q.matmul(plan, a, b, out, stream=q.streams[1], timed=True)
            # out2 = out on stream 0: after the plan (it reads out).
            q.launch(spin, 1, 256, out2, out, 0, m * n, stream=q.streams[0])
            got = q.read(out2).astype(np.float64)
            assert sub.elapsed_ms() > 0.0 and sub.is_kernel
            ref = a_h.astype(np.float64) @ b_h.astype(np.float64)
            assert np.isfinite(got).all()
            assert float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) < 1e-2


@pytest.mark.gpu
def test_a_timed_launch_reports_its_gpu_time(mod, rng):
    spin = mod.function("spin_copy")
    with cd.Queue(streams=2) as q:
        x = q.from_numpy(rng.standard_normal(256).astype(np.float32))
        y = q.from_numpy(np.full(256, np.nan, np.float32))
        t = q.from_numpy(np.zeros(2, np.uint64))
        for _ in range(2):
            sub = q.launch(spin, 1, 256, y, x, 5 * MS, t, 256, timed=True)
            assert 4.5 <= sub.elapsed_ms() < 1000.0
            np.testing.assert_array_equal(q.read(y), q.read(x))


FAULT_AFTER_UPLOAD_SCRIPT = FAULT_SCRIPT.replace(
    "q.synchronize()\ntry:\n",
    "q.synchronize()\ntry:\n    q.copy(np.ones(1 << 22, np.float32), q.empty(1 << 22, np.float32))   # an upload first\n")


@pytest.mark.gpu
def test_a_fault_behind_an_upload_names_the_kernel_not_the_upload():
    assert "an upload first" in FAULT_AFTER_UPLOAD_SCRIPT
    got = _run_isolated(FAULT_AFTER_UPLOAD_SCRIPT)
    assert got["raised"] == "CudaError"
    assert re.search(r"the earliest (kernel|submission) not seen complete is kernel 'wild_write'", got["message"])


# --- Queue.launch's own argument handling ---------------------------------------------------------

def test_queue_launch_without_fn_grid_and_block_is_an_argument_type_error_naming_the_call(fake):
    q = cd.Queue(streams=2)
    for args in [(), (A,), (A, 1)]:
        with pytest.raises(TypeError, match=r"launch\(\) takes at least 3 positional arguments"):
            q.launch(*args)
    assert GPU.log == []


def test_queue_launch_takes_fn_grid_and_block_by_keyword_and_refuses_one_twice(fake):
    q = cd.Queue(streams=2)
    x, y = buffers(2)
    k = FakeKernel("kw", "float* y, const float* x", record=True)
    q.launch(fn=k, grid=2, block=64)
    q.launch(k, block=32, grid=(1, 2))
    assert [(g, b) for g, b, *_ in k.calls] == [(2, 64), ((1, 2), 32)]
    with pytest.raises(TypeError, match="multiple values for keyword argument 'grid'"):
        q.launch(k, 1, 32, y, x, grid=4)
    assert len(k.calls) == 2


def test_queue_launch_passes_its_arguments_in_order_and_other_keywords_to_the_kernel(fake):
    q = cd.Queue(streams=2)
    x, y, z = buffers(3)
    k = FakeKernel("fw", "float* y, const float* x, int n", record=True)
    for _ in range(2):            # twice: nothing kept from the first call leaks into the second
        q.launch(k, 3, 128, y, x, 7, shared_mem_bytes=256, cooperative=False, reads=[z], stream=q.streams[1])
    assert [(g, b, a, kw) for g, b, a, _, kw in k.calls] == [(3, 128, (y, x, 7), {"shared_mem_bytes": 256, "cooperative": False})] * 2
    assert lane_of(q, "fw") == 1
    assert waits(q) == []
    q.launch(k, 1, 32, z, x, 1, stream=q.streams[0])   # z was read (reads=): writing it waits for the reader
    assert waits(q) == [(0, "fw")]
