"""The differential fuzz of pycudadrv's seams: random programs over a few
device arrays ("slots"), run two ways and compared bit for bit.

* The subject runs each program with everything pycudadrv offers, mixed:
  several streams ordered by events, generic, prepared (``bind``,
  ``set_arg``, ``launch_on``) and sequence launches, captured graphs replayed,
  device loops, a Queue's DAG (its own streams, its own ordering), awaited
  launches (each aio segment in a random completion mode), frees and re-allocations while other streams still use the
  memory, stream closes, views, and slots owned by PyTorch or CuPy (when
  installed; else by wrappers that export only CAI v3 or only DLPack), written
  by their library on its own side stream and read by pycudadrv kernels inside
  that stream's ``with``.
* The reference runs the same program eagerly, in order, on one stream, with
  plain Buffers and generic launches only (loops unrolled, replays repeated).

Every slot is an allocation with guard words before and after it; a guard
kernel checks every guard after every step (on the GPU, no host round trip)
and records the first step that found one changed. Pure test code: imported
by tests/fuzz/test_gpu_fuzz.py (in the suite) and tools/fuzz_seams.py (long runs)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

import pycudadrv as cd
from pycudadrv import aio

N = 2048                 # elements of a slot
G = 64                   # guard words before and after
GUARD = 0x7F7FDEAD       # a float32 NaN pattern no kernel here writes
NSLOTS = 5

SRC = r"""
extern "C" __global__ void fz_affine(float* dst, const float* src, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = a * src[i] + b;
}
extern "C" __global__ void fz_combine(float* dst, const float* u, const float* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = u[i] * v[i] + u[i];
}
extern "C" __global__ void fz_spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
// Every guard word of one allocation (`lo` words before the slot, `hi` after it) still holds `pattern`;
// the first step that finds one changed is kept in flag[0] (atomicMin).
extern "C" __global__ void fz_guard(const unsigned int* base, int lo, int hi_start, int hi, unsigned int pattern,
                                    int* flag, int step) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool bad = (i < lo && base[i] != pattern) || (i < hi && base[hi_start + i] != pattern);
    if (bad) atomicMin(flag, step);
}
"""

_mod_cache: dict = {}


def module():
    mod = _mod_cache.get("mod")
    if mod is None:
        mod = _mod_cache["mod"] = cd.compile(SRC).load()
        s = cd.Stream()
        z = cd.Buffer.zeros(4, np.float32, stream=s)
        mod.function("fz_affine").launch(1, 32, z, z, 1.0, 0.0, 0, stream=s)      # load every kernel now
        mod.function("fz_combine").launch(1, 32, z, z, z, 0, stream=s)           # (lazy loading would
        mod.function("fz_spin").launch(1, 1, 0, stream=s)                          # serialise the first
        flag = cd.Buffer.from_numpy(np.array([1 << 30], np.int32), stream=s)       # use of each)
        mod.function("fz_guard").launch(1, 32, z.view(np.uint32), 0, 0, 0, 0, flag, 0, stream=s)
        s.synchronize()
    return mod


# --- programs ------------------------------------------------------------------------------------

@dataclass
class Op:
    kind: str                   # affine | combine | copy | fill | upload | realloc
    dst: int
    srcs: tuple = ()
    a: float = 0.0
    b: float = 0.0
    data: object = None         # upload / realloc contents (float32, N)


@dataclass
class Segment:
    how: str                    # eager | graph | loop | sequence | queue | aio | foreign | close_stream
    ops: list
    repeat: int = 1             # graph replays, loop times, sequence repeats
    stream: int = 0             # the user stream it runs on (eager/graph/loop/sequence/aio)
    paths: list = field(default_factory=list)   # per op for eager: generic | prepared | set_arg | launch_on | view
                                                # | spelled | kwdict
    qstreams: int = 2
    completion: str = "loop"    # aio: the completion mode its awaits use


@dataclass
class Program:
    seed: int
    init: list                  # per slot: float32[N]
    foreign: list               # per slot: None | "torch" | "cupy" | "cai3" | "dlpack"
    segments: list

    def steps(self):
        return sum(len(seg.ops) * (1 if seg.how in ("eager", "queue", "aio", "foreign") else seg.repeat)
                   for seg in self.segments)


def _rand_op(rng, kernels_only=False, allow_realloc=True):
    kinds = ["affine", "affine", "combine", "combine"] + ([] if kernels_only else ["copy", "fill", "upload"])
    if allow_realloc and not kernels_only:
        kinds.append("realloc")
    kind = kinds[rng.integers(len(kinds))]
    dst = int(rng.integers(NSLOTS))
    if kind == "affine":
        return Op(kind, dst, (int(rng.integers(NSLOTS)),), float(np.float32(rng.uniform(-1.25, 1.25))),
                  float(np.float32(rng.uniform(-1, 1))))
    if kind == "combine":
        return Op(kind, dst, (int(rng.integers(NSLOTS)), int(rng.integers(NSLOTS))))
    if kind == "copy":
        src = int(rng.integers(NSLOTS))
        return Op(kind, dst, (src,))
    if kind == "fill":
        return Op(kind, dst, a=float(np.float32(rng.uniform(-2, 2))))
    return Op(kind, dst, data=rng.standard_normal(N).astype(np.float32))


def make_program(seed, n_segments=10, foreign_kinds=("cai3", "dlpack")):
    """A random program of `n_segments` segments (about 2 to 3 ops each)."""
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(N).astype(np.float32) for _ in range(NSLOTS)]
    foreign = [None] * NSLOTS
    for k in rng.choice(NSLOTS, size=2, replace=False):
        foreign[int(k)] = foreign_kinds[int(rng.integers(len(foreign_kinds)))] if foreign_kinds else None
    segs = []
    hows = ["eager", "eager", "eager", "graph", "loop", "sequence", "queue", "aio", "foreign", "close_stream"]
    for _ in range(n_segments):
        how = hows[rng.integers(len(hows))]
        if how == "foreign" and not any(foreign):
            how = "eager"
        nops = int(rng.integers(1, 4))
        if how in ("graph", "loop", "sequence"):
            ops = [_rand_op(rng, kernels_only=True) for _ in range(nops)]
        elif how == "queue":
            ops = [_rand_op(rng, allow_realloc=False) for _ in range(nops)]
            ops = [o if o.kind not in ("upload",) else Op("fill", o.dst, a=0.5) for o in ops]
        elif how == "aio":
            ops = [_rand_op(rng, kernels_only=True) for _ in range(nops)]
        elif how == "foreign":
            dst = [k for k in range(NSLOTS) if foreign[k]][int(rng.integers(sum(1 for f in foreign if f)))]
            src = int(rng.integers(NSLOTS))
            ops = [Op("copy", dst, (src,))] + [_rand_op(rng, kernels_only=True) for _ in range(nops)]
            for o in ops[1:]:
                if rng.random() < 0.7:
                    o.srcs = (dst,) + tuple(o.srcs[1:])        # read what the foreign producer just wrote
        else:
            ops = [_rand_op(rng) for _ in range(nops)]
        seg = Segment(how, ops, repeat=int(rng.integers(1, 4)), stream=int(rng.integers(3)),
                      qstreams=int(rng.choice([1, 2, 4])))
        seg.paths = [str(rng.choice(["generic", "prepared", "set_arg", "launch_on", "view", "spelled", "kwdict"]))
                     for _ in ops]
        if how == "aio":
            seg.completion = str(rng.choice(["loop", "loop", "blocking"]))
        segs.append(seg)
    return Program(seed, init, foreign, segs)


# --- slots: an allocation with guards --------------------------------------------------------------

def _guarded_host(data):
    out = np.empty(G + N + G, np.float32)
    out.view(np.uint32)[:] = GUARD
    out[G:G + N] = data
    return out


class _CAIv3:
    """A slot owned by "another library" that exports CAI v3 with its producer stream."""

    def __init__(self, buf, stream):
        self.buf, self.stream = buf, stream

    @property
    def __cuda_array_interface__(self):
        return dict(self.buf.__cuda_array_interface__, stream=self.stream.handle)


class _DLPackOnly:
    def __init__(self, buf, stream):
        self.buf, self.stream = buf, stream

    def __dlpack__(self, *, stream=None, **kw):
        if stream is not None and stream != -1:
            cd.Stream.from_handle(int(stream)).wait(cd.Event(timing=False).record(self.stream))
        return self.buf.__dlpack__(stream=-1)

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()


class Slot:
    """One logical array of the subject run: a guarded allocation, pycudadrv's or a library's."""

    def __init__(self, kind, data, stream, producer):
        self.kind = kind
        self.producer = producer           # the library's side stream (a pycudadrv Stream over it)
        host = _guarded_host(data)
        if kind == "torch":
            import torch
            self.whole = torch.from_numpy(host).cuda()
            torch.cuda.synchronize()
            self.arr = self.whole[G:G + N]
            self.base = cd.asbuffer(self.whole)
        elif kind == "cupy":
            import cupy as cp
            self.whole = cp.asarray(host)
            cp.cuda.runtime.deviceSynchronize()
            self.arr = self.whole[G:G + N]
            self.base = cd.asbuffer(self.whole)
        else:
            self.whole = cd.Buffer.from_numpy(host, stream=stream)
            self.base = self.whole
            inner = self.whole[G:G + N]
            self.arr = (inner if kind is None else _CAIv3(inner, producer) if kind == "cai3"
                        else _DLPackOnly(inner, producer))

    def arg(self):
        """What a kernel is given for this slot."""
        return self.arr

    def buffer(self):
        """A pycudadrv Buffer over the slot's elements (asbuffer for a library's)."""
        return cd.asbuffer(self.arr) if not isinstance(self.arr, cd.Buffer) else self.arr

    def guard_base(self):
        return self.base.view(np.uint32)


# --- the reference: eager, in order, one stream ----------------------------------------------------

def run_reference(prog):
    mod = module()
    s = cd.Stream()
    aff, comb = mod.function("fz_affine"), mod.function("fz_combine")
    slots = [cd.Buffer.from_numpy(d, stream=s) for d in prog.init]
    g = (N + 255) // 256

    def do(op):
        if op.kind == "affine":
            aff.launch(g, 256, slots[op.dst], slots[op.srcs[0]], op.a, op.b, N, stream=s)
        elif op.kind == "combine":
            comb.launch(g, 256, slots[op.dst], slots[op.srcs[0]], slots[op.srcs[1]], N, stream=s)
        elif op.kind == "copy":
            if op.srcs[0] != op.dst:
                slots[op.srcs[0]].copy_to(slots[op.dst], stream=s)
        elif op.kind == "fill":
            slots[op.dst].fill(np.float32(op.a), stream=s)
        else:   # upload, realloc
            slots[op.dst].write(op.data, stream=s)

    for seg in prog.segments:
        times = 1 if seg.how in ("eager", "queue", "aio", "foreign", "close_stream") else seg.repeat
        for _ in range(times):
            for op in seg.ops:
                do(op)
    out = [b.to_numpy(stream=s) for b in slots]
    s.synchronize()
    return out


# --- the subject: everything at once ---------------------------------------------------------------

class Subject:
    def __init__(self, prog, libs):
        self.prog = prog
        self.mod = module()
        self.aff, self.comb, self.spin = (self.mod.function(k) for k in ("fz_affine", "fz_combine", "fz_spin"))
        self.guard = self.mod.function("fz_guard")
        self.streams = [cd.Stream() for _ in range(3)]
        self.libs = libs
        self.torch_stream = self.cupy_stream = None
        self.own_producer = cd.Stream()
        self.slots = [self._make_slot(k, prog.init[k], prog.foreign[k]) for k in range(NSLOTS)]
        # Per slot: the event after its last write, and the events after reads since (user-level ordering).
        self.last_write = [None] * NSLOTS
        self.reads = [[] for _ in range(NSLOTS)]
        self.flag = cd.Buffer.from_numpy(np.array([1 << 30], np.int32), stream=self.streams[0])
        self.step = 0
        self.keep = []            # graphs, loops, queues and prepared launches in flight
        self.cycles = int(0.05 * cd.Device(0).attribute("clock_rate"))    # 50 us
        for s in self.streams:
            s.wait_stream(self.streams[0])

    def _lib_kind(self, kind):
        if kind in ("torch", "cupy") and kind not in self.libs:
            return "cai3"
        return kind

    def _make_slot(self, k, data, kind):
        kind = self._lib_kind(kind)
        s = self.streams[0]
        producer = self.own_producer
        if kind == "torch":
            import torch
            if self.torch_stream is None:
                self.torch_stream = torch.cuda.Stream()
            producer = cd.Stream.from_handle(self.torch_stream.cuda_stream)
        elif kind == "cupy":
            import cupy as cp
            if self.cupy_stream is None:
                self.cupy_stream = cp.cuda.Stream(non_blocking=True)
            producer = cd.Stream.from_handle(self.cupy_stream.ptr)
        slot = Slot(kind, data, s, producer)
        s.synchronize()
        return slot

    # user-level ordering: what a careful user of streams and events writes
    def _before(self, op, s):
        for k in op.srcs:
            if self.last_write[k] is not None:
                s.wait(self.last_write[k])
        if self.last_write[op.dst] is not None:
            s.wait(self.last_write[op.dst])
        for ev in self.reads[op.dst]:
            s.wait(ev)

    def _after(self, op, s):
        ev = cd.Event(timing=False).record(s)
        self.last_write[op.dst] = ev
        self.reads[op.dst] = []
        for k in op.srcs:
            if k != op.dst:
                self.reads[k].append(ev)

    def _check_guards(self, s):
        self.step += 1
        for slot in self.slots:
            base = slot.guard_base()
            self.guard.launch(1, G, base, G, G + N, G, GUARD, self.flag, self.step, stream=s)

    def _launch_kernel(self, op, s, path):
        g = (N + 255) // 256
        sl = self.slots
        fn = self.aff if op.kind == "affine" else self.comb
        scalars = (op.a, op.b, N) if op.kind == "affine" else (N,)
        slots = (op.dst,) + tuple(op.srcs)
        # "view": every array as a pycudadrv Buffer (asbuffer for another library's); else as it is
        arrays = tuple(sl[k].buffer() if path == "view" else sl[k].arg() for k in slots)
        args = arrays + scalars
        if path in ("generic", "view"):
            fn.launch(g, 256, *args, stream=s)
        elif path == "spelled":          # the bound method, its arguments written out in the call
            launch = fn.launch
            if op.kind == "affine":
                launch(g, 256, arrays[0], arrays[1], op.a, op.b, N, stream=s)
            else:
                launch(g, 256, arrays[0], arrays[1], arrays[2], N, stream=s)
        elif path == "kwdict":           # keywords from a dict (the tuple-and-dict call of the bound method)
            fn.launch(g, 256, *args, **{"stream": s, "shared_mem_bytes": 0})
        elif path == "prepared":
            p = fn.bind(g, 256, *args, stream=s)
            p.launch()
            self.keep.append(p)
        elif path == "set_arg":
            p = fn.bind(g, 256, *(args[:-1] + (0,)), stream=s)
            p.set_arg(len(args) - 1, N)
            p()
            self.keep.append(p)
        else:   # launch_on
            p = fn.bind(g, 256, *args)
            p.launch_on(s)
            self.keep.append(p)

    def _do_plain(self, op, s, path="generic"):
        sl = self.slots
        if op.kind in ("affine", "combine"):
            self._launch_kernel(op, s, path)
        elif op.kind == "copy":
            if op.srcs[0] != op.dst:
                sl[op.srcs[0]].buffer().copy_to(sl[op.dst].buffer(), stream=s)
        elif op.kind == "fill":
            sl[op.dst].buffer().fill(np.float32(op.a), stream=s)
        elif op.kind == "upload":
            pinned = cd.HostBuffer.empty(N, np.float32)
            pinned.array[:] = op.data
            sl[op.dst].buffer().write(pinned.array, stream=s)        # the copy keeps the pinned source
        else:   # realloc: free while other streams may still use it; a new allocation; upload
            old = sl[op.dst]
            if old.kind is None:
                old.whole.close()
                sl[op.dst] = Slot(None, op.data, s, self.own_producer)
                s.synchronize()        # its guard words are in place before any stream checks them
            else:
                old.buffer().write(op.data, stream=s)

    def _eager(self, seg):
        for op, path in zip(seg.ops, seg.paths):
            s = self.streams[seg.stream if path != "launch_on" else (seg.stream + 1) % 3]
            self._before(op, s)
            self._do_plain(op, s, path)
            self._after(op, s)
            self._check_guards(s)

    def _join_all(self, s):
        for k in range(NSLOTS):
            if self.last_write[k] is not None:
                s.wait(self.last_write[k])
            for ev in self.reads[k]:
                s.wait(ev)

    def _mark_all(self, s, ops_or_slots):
        """After a segment on `s`: its writes are the slots' last writes, its reads are reads (a later
        writer on another stream must wait for them)."""
        ev = cd.Event(timing=False).record(s)
        if isinstance(ops_or_slots, set):
            written, read = ops_or_slots, set()
        else:
            written = {op.dst for op in ops_or_slots}
            read = {k for op in ops_or_slots for k in op.srcs} - written
        for k in written:
            self.last_write[k] = ev
            self.reads[k] = []
        for k in read:
            self.reads[k].append(ev)

    def _graph(self, seg):
        s = self.streams[seg.stream]
        self._join_all(s)
        with s.capture() as g:
            for op in seg.ops:
                self._launch_kernel(op, s, "generic")
        for _ in range(seg.repeat):
            g.launch()
        self._mark_all(s, seg.ops)
        self._check_guards(s)
        self.keep.append(g)

    def _loop(self, seg):
        s = self.streams[seg.stream]
        self._join_all(s)
        with s.loop(times=seg.repeat) as lp:
            for op in seg.ops:
                self._launch_kernel(op, s, "generic")
        lp.launch()
        self._mark_all(s, seg.ops)
        self._check_guards(s)
        self.keep.append(lp)

    def _sequence(self, seg):
        s = self.streams[seg.stream]
        self._join_all(s)
        g = (N + 255) // 256
        sl = self.slots
        ps = []
        for op in seg.ops:
            if op.kind == "affine":
                ps.append(self.aff.bind(g, 256, sl[op.dst].arg(), sl[op.srcs[0]].arg(), op.a, op.b, N, stream=s))
            else:
                ps.append(self.comb.bind(g, 256, sl[op.dst].arg(), sl[op.srcs[0]].arg(), sl[op.srcs[1]].arg(), N,
                                         stream=s))
        seq = cd.LaunchSequence(ps)
        seq.launch(repeat=seg.repeat)
        self._mark_all(s, seg.ops)
        self._check_guards(s)
        self.keep.append(seq)

    def _queue(self, seg):
        q = cd.Queue(streams=seg.qstreams)
        barrier = cd.Stream()
        self._join_all(barrier)
        ev = cd.Event(timing=False).record(barrier)
        for qs in q.streams:
            qs.wait(ev)
        g = (N + 255) // 256
        sl = self.slots
        # A third of the queue segments place every op on a Stream of its own (stream=, dropped after),
        # after 20 fills of scratch memory on as many Streams: the queue lets idle lanes go and reuses
        # their indices while the ops run. Ops with a "view" path are timed (timed=True).
        fresh = seg.stream == 2
        ends = []                       # events after each fresh Stream's work, for the barrier

        def new_stream():
            st = cd.Stream()
            st.wait(ev)                 # after the earlier segments, as the pool streams
            ends.append(cd.Event(timing=False))
            return st

        if fresh:
            scratch = q.empty(64, np.float32)
            for _ in range(20):
                st = new_stream()
                q.fill(scratch, np.float32(1.0), stream=st)
                ends[-1].record(st)
        for op, path in zip(seg.ops, seg.paths):
            st = new_stream() if fresh else None
            kw = {"stream": st} if fresh else {}
            if path == "view":
                kw["timed"] = True
            if op.kind == "affine":
                q.launch(self.aff, g, 256, sl[op.dst].buffer(), sl[op.srcs[0]].buffer(), op.a, op.b, N, **kw)
            elif op.kind == "combine":
                q.launch(self.comb, g, 256, sl[op.dst].buffer(), sl[op.srcs[0]].buffer(), sl[op.srcs[1]].buffer(), N,
                         **kw)
            elif op.kind == "copy":
                if op.srcs[0] != op.dst:
                    q.copy(sl[op.srcs[0]].buffer(), sl[op.dst].buffer(), **kw)
            elif op.kind == "fill":
                q.fill(sl[op.dst].buffer(), np.float32(op.a), **kw)
            if fresh:
                ends[-1].record(st)
                q._retire_now()         # the completion check (lets idle lanes go) between the ops
        for qs in q.streams:
            barrier.wait(cd.Event(timing=False).record(qs))
        for e in ends:
            barrier.wait(e)
        self._mark_all(barrier, set(range(NSLOTS)))
        self._check_guards(barrier)
        q.close()                     # streams destroyed with work queued: frees still wait for it
        self.keep.append(barrier)

    def _aio(self, seg):
        s = self.streams[seg.stream]
        self._join_all(s)
        g = (N + 255) // 256
        sl = self.slots

        async def main():
            for op in seg.ops:
                if op.kind == "affine":
                    await aio.launch(self.aff, g, 256, sl[op.dst].arg(), sl[op.srcs[0]].arg(), op.a, op.b, N, stream=s)
                else:
                    await aio.launch(self.comb, g, 256, sl[op.dst].arg(), sl[op.srcs[0]].arg(), sl[op.srcs[1]].arg(),
                                     N, stream=s)
        prev = aio.set_completion(seg.completion)
        try:
            asyncio.run(main())
        finally:
            aio.set_completion(**prev)
        self._mark_all(s, seg.ops)
        self._check_guards(s)

    def _foreign(self, seg):
        """The slot's own library writes it on its side stream (after a slow kernel) and pycudadrv
        kernels read it inside that stream's `with`, ordered by pycudadrv alone."""
        first, rest = seg.ops[0], seg.ops[1:]
        dst = self.slots[first.dst]
        src = self.slots[first.srcs[0]]
        prod = dst.producer
        # WAR/WAW: the producer waits for what our streams did to the slots it touches
        for k in (first.dst, first.srcs[0]):
            if self.last_write[k] is not None:
                prod.wait(self.last_write[k])
        for ev in self.reads[first.dst]:
            prod.wait(ev)
        ctx = None
        if dst.kind == "torch":
            import torch
            ctx = torch.cuda.stream(self.torch_stream)
        elif dst.kind == "cupy":
            ctx = self.cupy_stream
        if ctx is not None:
            ctx.__enter__()
        try:
            self.spin.launch(1, 1, self.cycles, stream=prod)
            if first.srcs[0] != first.dst:
                if dst.kind in ("torch", "cupy"):
                    # the library itself copies (on its current stream, the side stream); the source is
                    # read on that stream too, so the source's last writer is waited for above
                    if src.kind == dst.kind:
                        dst.arr[...] = src.arr
                    else:
                        src.buffer().copy_to(dst.buffer(), stream=prod)
                else:
                    src.buffer().copy_to(dst.buffer(), stream=prod)
            ev = cd.Event(timing=False).record(prod)
            self.last_write[first.dst] = None      # only pycudadrv's foreign ordering orders the readers now
            self.reads[first.dst] = []
            if first.srcs[0] != first.dst:
                self.reads[first.srcs[0]].append(ev)   # the producer read it: later writers wait
            for op in rest:
                s = self.streams[seg.stream]
                for k in op.srcs:
                    if k != first.dst and self.last_write[k] is not None:
                        s.wait(self.last_write[k])
                if op.dst != first.dst and self.last_write[op.dst] is not None:
                    s.wait(self.last_write[op.dst])
                if op.dst != first.dst:
                    for r in self.reads[op.dst]:
                        s.wait(r)
                if op.dst == first.dst:
                    s.wait(ev)                      # writing the slot: after the producer (user-level)
                self._launch_kernel(op, s, seg.paths[0] if seg.paths[0] in ("generic", "prepared") else "generic")
                self._after(op, s)
            self.last_write[first.dst] = self.last_write[first.dst] or ev
            self._check_guards(prod)
        finally:
            if ctx is not None:
                if dst.kind == "torch":
                    import torch
                    ctx.__exit__(None, None, None)
                    torch.cuda.current_stream().wait_stream(self.torch_stream)
                else:
                    ctx.__exit__(None, None, None)
                    import cupy as cp
                    cp.cuda.get_current_stream().wait_event(self.cupy_stream.record())

    def _close_stream(self, seg):
        """Replace a user stream with work still queued on it (its close must not lose that work,
        and frees of memory it used wait for it)."""
        old = self.streams[seg.stream]
        fresh = cd.Stream()
        fresh.wait_stream(old)
        old.close()
        self.streams[seg.stream] = fresh
        self._eager(Segment("eager", seg.ops, stream=seg.stream, paths=seg.paths))

    def run(self):
        for seg in self.prog.segments:
            getattr(self, "_" + seg.how)(seg)
        cd._stream.synchronize_context()      # guard checks ran on every stream: all of them first
        out_stream = cd.Stream()
        self._join_all(out_stream)
        got = [slot.buffer().to_numpy(stream=out_stream) for slot in self.slots]
        first_bad = int(self.flag.to_numpy(stream=out_stream)[0])
        for slot in self.slots:     # the guards themselves, once more, read back
            whole = slot.guard_base().to_numpy(stream=out_stream)
            if (whole[:G] != GUARD).any() or (whole[G + N:] != GUARD).any():
                first_bad = min(first_bad, self.step + 1)
        cd._stream.synchronize_context()
        return got, (None if first_bad >= (1 << 30) else first_bad)


def run_program(seed, n_segments=10, libs=()):
    """Run program `seed` both ways: (steps, mismatching slots, first step a guard was hit or None)."""
    kinds = tuple(k for k in ("torch", "cupy") if k in libs) + ("cai3", "dlpack")
    prog = make_program(seed, n_segments, kinds)
    ref = run_reference(prog)
    got, guard = Subject(prog, libs).run()
    bad = [k for k in range(NSLOTS) if not np.array_equal(got[k].view(np.uint32), ref[k].view(np.uint32))]
    return prog.steps(), bad, guard


def available_libs():
    libs = []
    try:
        import torch
        if torch.cuda.is_available():
            libs.append("torch")
    except ImportError:
        pass
    try:
        import cupy  # noqa: F401
        libs.append("cupy")
    except ImportError:
        pass
    return tuple(libs)
