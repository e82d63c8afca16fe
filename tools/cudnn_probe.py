#!/usr/bin/env python3
"""Step-by-step diagnostics of cuDNN matmul on this machine, for when pycudadrv.cudnn fails.

Part 1 drives the cuDNN backend API from ctypes alone (no pycudadrv._cudnn), printing the
status of every step: loading libcudnn.so.9 and cuBLASLt, cudnnCreate, the tensor /
matmul / operation / operation-graph descriptors, the engine heuristics (instant, B,
fallback) with every engine config's global index, numerical and behaviour notes, what
pycudadrv's rules make of it (pycudadrv._cudnn.engine_rejection: float32 without TF32 takes
no TENSOR_CORE engine, and no CUBLASLT_DEPENDENCY one unless NVIDIA_TF32_OVERRIDE=0),
whether its execution plan finalizes and its workspace, then one execution against NumPy
float64 (with ``--all-engines``: every engine that finalizes, each with its error: which
engines really compute float32 in float32). Part 2 does the same through
pycudadrv.cudnn.matmul_plan (eager and captured; for float32 also with allow_tf32=True).

    python tools/cudnn_probe.py                      # 129x77 @ 77x51, float32, float16, bfloat16
    python tools/cudnn_probe.py --shape 4,256,128,64 --dtypes float16
    NVIDIA_TF32_OVERRIDE=0 python tools/cudnn_probe.py --all-engines --dtypes float32

Exit status: 0 when every dtype computed the right product both ways (a float32 plan that
pycudadrv refuses, with the reason, counts as right), 1 otherwise, 2 when cuDNN or a GPU is
missing.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the checkout, when run from it

import numpy as np  # noqa: E402

# cudnn_graph.h (cuDNN 9.28.1) values, as in pycudadrv/_cudnn.pxd.
DATA = {"float32": 0, "float16": 2, "bfloat16": 9}
T_HANDLE, T_DATA_TYPE, T_INT64, T_VOID_PTR, T_HEUR_MODE, T_NUM_NOTE, T_DESC, T_BEH_NOTE = 0, 1, 3, 6, 8, 11, 15, 19
D_ENGINE, D_ENGINECFG, D_ENGINEHEUR, D_PLAN, D_GRAPH, D_PACK, D_TENSOR, D_MATMUL, D_OP_MATMUL = (
    2, 3, 4, 5, 15, 16, 17, 18, 19)
A_HEUR_MODE, A_HEUR_GRAPH, A_HEUR_RESULTS, A_CFG_ENGINE = 200, 201, 202, 300
A_PLAN_HANDLE, A_PLAN_CFG, A_PLAN_WS = 400, 401, 402
A_GRAPH_HANDLE, A_GRAPH_OPS = 800, 801
A_T_ALIGN, A_T_DTYPE, A_T_DIMS, A_T_STRIDES, A_T_UID = 900, 901, 902, 903, 906
A_PACK_UIDS, A_PACK_PTRS, A_PACK_WS = 1000, 1001, 1003
A_ENG_INDEX, A_ENG_NUM_NOTE, A_ENG_BEH_NOTE = 1301, 1303, 1305
A_MM_COMP, A_OP_A, A_OP_B, A_OP_C, A_OP_DESC = 1500, 1520, 1521, 1522, 1523
NUM_NOTES = {0: "TENSOR_CORE", 1: "DOWN_CONVERT_INPUTS", 2: "REDUCED_PRECISION_REDUCTION", 3: "FFT",
             4: "NONDETERMINISTIC", 5: "WINOGRAD", 9: "STRICT_NAN_PROP"}
BEH_NOTES = {0: "RUNTIME_COMPILATION", 3: "SUPPORTS_CUDA_GRAPH_NATIVE_API", 4: "CUBLASLT_DEPENDENCY"}
P, I64 = ctypes.c_void_p, ctypes.c_int64


class Probe:
    def __init__(self, lib):
        self.lib = lib
        lib.cudnnGetErrorString.restype = ctypes.c_char_p
        lib.cudnnGetErrorString.argtypes = [ctypes.c_int]
        lib.cudnnGetLastErrorString.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.cudnnBackendCreateDescriptor.argtypes = [ctypes.c_int, ctypes.POINTER(P)]
        lib.cudnnBackendDestroyDescriptor.argtypes = [P]
        lib.cudnnBackendFinalize.argtypes = [P]
        lib.cudnnBackendSetAttribute.argtypes = [P, ctypes.c_int, ctypes.c_int, I64, P]
        lib.cudnnBackendGetAttribute.argtypes = [P, ctypes.c_int, ctypes.c_int, I64, ctypes.POINTER(I64), P]
        lib.cudnnBackendExecute.argtypes = [P, P, P]
        lib.cudnnCreate.argtypes = [ctypes.POINTER(P)]
        lib.cudnnSetStream.argtypes = [P, P]
        self.created = []

    def status(self, st):
        if st == 0:
            return "ok"
        buf = ctypes.create_string_buffer(2048)
        self.lib.cudnnGetLastErrorString(buf, 2048)
        return f"{self.lib.cudnnGetErrorString(st).decode()} ({st}): {buf.value.decode(errors='replace')}"

    def step(self, what, st, indent=4):
        print(f"{' ' * indent}{what}: {self.status(st)}")
        return st == 0

    def create(self, kind):
        d = P()
        st = self.lib.cudnnBackendCreateDescriptor(kind, ctypes.byref(d))
        if st != 0:
            raise RuntimeError(f"cudnnBackendCreateDescriptor({kind}): {self.status(st)}")
        self.created.append(d)
        return d

    def set(self, d, attr, kind, count, ref):
        return self.lib.cudnnBackendSetAttribute(d, attr, kind, count, ref)

    def get(self, d, attr, kind, count, ref):
        n = I64(0)
        st = self.lib.cudnnBackendGetAttribute(d, attr, kind, count, ctypes.byref(n), ref)
        return st, n.value

    def destroy_all(self):
        for d in reversed(self.created):
            self.lib.cudnnBackendDestroyDescriptor(d)
        self.created = []


def tensor(pr, uid, dtype, dims):
    t = pr.create(D_TENSOR)
    strides = (dims[1] * dims[2], dims[2], 1)
    ok = all(st == 0 for st in (
        pr.set(t, A_T_DTYPE, T_DATA_TYPE, 1, ctypes.byref(ctypes.c_int(DATA[dtype]))),
        pr.set(t, A_T_DIMS, T_INT64, 3, (I64 * 3)(*dims)),
        pr.set(t, A_T_STRIDES, T_INT64, 3, (I64 * 3)(*strides)),
        pr.set(t, A_T_UID, T_INT64, 1, ctypes.byref(I64(uid))),
        pr.set(t, A_T_ALIGN, T_INT64, 1, ctypes.byref(I64(16)))))
    pr.step(f"tensor uid {uid} dims {dims} strides {strides} (attributes {'ok' if ok else 'REFUSED'}) finalize",
            pr.lib.cudnnBackendFinalize(t))
    return t


def engine_notes(pr, cfg):
    eng = pr.create(D_ENGINE)
    st, _ = pr.get(cfg, A_CFG_ENGINE, T_DESC, 1, ctypes.byref(eng))
    if st != 0:
        return None, None, None
    idx = I64(-1)
    pr.get(eng, A_ENG_INDEX, T_INT64, 1, ctypes.byref(idx))
    notes = (ctypes.c_int * 32)()
    _, n = pr.get(eng, A_ENG_NUM_NOTE, T_NUM_NOTE, 32, notes)
    num = [NUM_NOTES.get(notes[i], str(notes[i])) for i in range(min(n, 32))]
    _, n = pr.get(eng, A_ENG_BEH_NOTE, T_BEH_NOTE, 32, notes)
    beh = [BEH_NOTES.get(notes[i], str(notes[i])) for i in range(min(n, 32))]
    return idx.value, num, beh


def ctypes_path(lib, dtype, a_dims, b_dims, c_dims, cd, rng, all_engines, override):
    """The whole flow from ctypes; returns True when the product is right (every engine pycudadrv's
    rules accept, with ``all_engines``)."""
    from pycudadrv._cudnn import engine_rejection
    pr = Probe(lib)
    handle = P()
    cd.Device(0).set_current()
    if not pr.step("cudnnCreate", lib.cudnnCreate(ctypes.byref(handle)), 2):
        return False
    try:
        ta, tb, tc = tensor(pr, 1, dtype, a_dims), tensor(pr, 2, dtype, b_dims), tensor(pr, 3, dtype, c_dims)
        mm = pr.create(D_MATMUL)
        pr.set(mm, A_MM_COMP, T_DATA_TYPE, 1, ctypes.byref(ctypes.c_int(DATA["float32"])))
        pr.step("matmul descriptor (compute float32) finalize", lib.cudnnBackendFinalize(mm))
        op = pr.create(D_OP_MATMUL)
        for attr, t in ((A_OP_A, ta), (A_OP_B, tb), (A_OP_C, tc), (A_OP_DESC, mm)):
            pr.set(op, attr, T_DESC, 1, ctypes.byref(t))
        pr.step("matmul operation finalize", lib.cudnnBackendFinalize(op))
        g = pr.create(D_GRAPH)
        pr.step("operation graph: set handle (deprecated attribute)",
                pr.set(g, A_GRAPH_HANDLE, T_HANDLE, 1, ctypes.byref(handle)))
        pr.set(g, A_GRAPH_OPS, T_DESC, 1, ctypes.byref(op))
        if not pr.step("operation graph finalize", lib.cudnnBackendFinalize(g)):
            return False
        runs = []                          # (plan, workspace bytes, name, accepted by pycudadrv's rules)
        for mode, mode_name in ((0, "instant"), (1, "B"), (2, "fallback")):
            heur = pr.create(D_ENGINEHEUR)
            pr.set(heur, A_HEUR_GRAPH, T_DESC, 1, ctypes.byref(g))
            pr.set(heur, A_HEUR_MODE, T_HEUR_MODE, 1, ctypes.byref(ctypes.c_int(mode)))
            if not pr.step(f"heuristics {mode_name} finalize", lib.cudnnBackendFinalize(heur)):
                continue
            st, count = pr.get(heur, A_HEUR_RESULTS, T_DESC, 0, None)
            print(f"    heuristics {mode_name}: {count} engine configs announced ({pr.status(st)})")
            if count <= 0:
                continue
            cfgs = [pr.create(D_ENGINECFG) for _ in range(count)]
            arr = (P * count)(*[c.value for c in cfgs])
            st, got = pr.get(heur, A_HEUR_RESULTS, T_DESC, count, arr)
            print(f"    heuristics {mode_name}: {got} returned ({pr.status(st)})")
            for i in range(got):
                cfg = P(arr[i])
                idx, num, beh = engine_notes(pr, cfg)
                plan = pr.create(D_PLAN)
                pr.set(plan, A_PLAN_HANDLE, T_HANDLE, 1, ctypes.byref(handle))
                pr.set(plan, A_PLAN_CFG, T_DESC, 1, ctypes.byref(cfg))
                st = lib.cudnnBackendFinalize(plan)
                ws = I64(-1)
                if st == 0:
                    pr.get(plan, A_PLAN_WS, T_INT64, 1, ctypes.byref(ws))
                why = engine_rejection(dtype, "float32", False, override, num, beh)
                print(f"      #{i}: engine {idx}, numerical {num}, behaviour {beh}: plan {pr.status(st)}"
                      + (f", workspace {ws.value} bytes" if st == 0 else "")
                      + (f" [pycudadrv: skipped, {why}]" if why else " [pycudadrv: usable]"))
                if st == 0 and (all_engines or (why is None and not any(r[3] for r in runs))):
                    runs.append((plan, ws.value, f"{mode_name} #{i} engine {idx}", why is None))
            if runs and not all_engines:
                break
        if not runs:
            print("    no usable engine (pycudadrv refuses this product"
                  + (" without allow_tf32=True or NVIDIA_TF32_OVERRIDE=0)" if dtype == "float32" else ")"))
            return dtype == "float32"
        a_host = rng.standard_normal(a_dims)
        b_host = rng.standard_normal(b_dims)
        a, a64 = upload(cd, a_host, dtype)
        b, b64 = upload(cd, b_host, dtype)
        out = cd.Buffer.empty(int(np.prod(c_dims)) * (4 if dtype == "float32" else 2))
        s = cd.Stream()
        pr.step("cudnnSetStream", lib.cudnnSetStream(handle, P(s.handle)))
        ok = True
        for plan, ws_bytes, name, accepted in runs:
            out.fill(np.uint8(0xFF))
            ws = cd.Buffer.empty(max(ws_bytes, 1), async_alloc=False)
            cd.Device(0).synchronize()
            pack = pr.create(D_PACK)
            pr.set(pack, A_PACK_UIDS, T_INT64, 3, (I64 * 3)(1, 2, 3))
            pr.set(pack, A_PACK_PTRS, T_VOID_PTR, 3, (P * 3)(a.ptr, b.ptr, out.ptr))
            pr.set(pack, A_PACK_WS, T_VOID_PTR, 1, ctypes.byref(P(ws.ptr if ws_bytes > 0 else None)))
            pr.step(f"{name}: variant pack finalize", lib.cudnnBackendFinalize(pack))
            if not pr.step(f"{name}: cudnnBackendExecute", lib.cudnnBackendExecute(handle, plan, pack)):
                ok = ok and not accepted
                continue
            s.synchronize()
            err = rel_err(download(out, dtype, c_dims), np.matmul(a64, b64))
            right = err < (1e-5 if dtype == "float32" else 1e-2)
            print(f"    {name}: relative error against float64: {err:.3e} -> {'OK' if right else 'WRONG'}"
                  + ("" if accepted else " (an engine pycudadrv leaves out)"))
            ok = ok and (right or not accepted)
            ws.close()
        return ok
    finally:
        pr.destroy_all()


def upload(cd, x, dtype):
    if dtype == "bfloat16":
        f = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
        bits = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)
        return cd.Buffer.from_numpy(bits), (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    arr = np.asarray(x).astype(np.float32 if dtype == "float32" else np.float16)
    return cd.Buffer.from_numpy(arr), arr.astype(np.float64)


def download(buf, dtype, shape):
    raw = buf.to_numpy()
    if dtype == "bfloat16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape).astype(np.float64)
    return raw.view(np.float32 if dtype == "float32" else np.float16).reshape(shape).astype(np.float64)


def rel_err(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def pycudadrv_path(cudnn, cd, dtype, a_shape, b_shape, rng, allow_tf32=False):
    tol = 1e-5 if dtype == "float32" and not allow_tf32 else (2e-3 if dtype == "float32" else 1e-2)
    try:
        plan = cudnn.matmul_plan(a_shape, b_shape, dtype, allow_tf32=allow_tf32, cache=False)
    except cd.NotSupportedError as e:
        print(f"    refused: {e}")
        return dtype == "float32" and not allow_tf32
    print(f"    {plan!r}")
    for line in plan.engines_considered:
        print(f"      {line}")
    a, a64 = upload(cd, rng.standard_normal(plan.a_shape), dtype)
    b, b64 = upload(cd, rng.standard_normal(plan.b_shape), dtype)
    out = cd.Buffer.empty(int(np.prod(plan.out_shape)) * (4 if dtype == "float32" else 2))
    out.fill(np.uint8(0xFF))
    plan(a, b, out)
    err = rel_err(download(out, dtype, plan.out_shape), np.matmul(a64, b64))
    print(f"    eager: relative error {err:.3e} -> {'OK' if err < tol else 'WRONG'} (tolerance {tol:g})")
    s = cd.Stream()
    s.wait_stream(cd.Device(0).default_stream)
    out.fill(np.uint8(0xFF))
    s.wait_stream(cd.Device(0).default_stream)
    with s.capture() as g:
        plan(a, b, out, stream=s)
    g.launch()
    s.synchronize()
    err2 = rel_err(download(out, dtype, plan.out_shape), np.matmul(a64, b64))
    print(f"    captured graph ({g.num_nodes} nodes): relative error {err2:.3e} -> "
          f"{'OK' if err2 < tol else 'WRONG'}")
    g.close()
    plan.close()
    return err < tol and err2 < tol


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="1,129,77,51", help="batch,M,K,N (default 1,129,77,51)")
    ap.add_argument("--dtypes", default="float32,float16,bfloat16")
    ap.add_argument("--all-engines", action="store_true",
                    help="execute every engine whose plan finalizes (part 1), not only pycudadrv's choice")
    args = ap.parse_args(argv)
    nb, m, k, n = (int(x) for x in args.shape.split(","))
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    import pycudadrv as cd
    from pycudadrv import cudnn

    print("== loading")
    print(f"  candidates: {cudnn._library_candidates()}")
    reason = cudnn.unavailable_reason()
    if reason is not None:
        print(f"  cuDNN unavailable: {reason}")
        return 2
    print(f"  libcudnn: {cudnn.library_path()}, version {cudnn.version()}, cuBLASLt: {cudnn._blas}")
    override = cudnn.tf32_override()
    print(f"  NVIDIA_TF32_OVERRIDE={os.environ.get('NVIDIA_TF32_OVERRIDE')!r}: "
          + ("in effect (cuBLASLt engines compute float32 in float32)" if override else
             "not in effect (float32 without TF32 takes no cuBLASLt engine)"))
    if not cd.is_available():
        print("  no GPU: stopping before cudnnCreate")
        return 2
    dev = cd.Device(0)
    print(f"  device 0: {dev.name}, compute capability {dev.compute_capability}, driver {cd.driver_version()}")
    rng = np.random.default_rng(1)
    a_dims, b_dims, c_dims = (nb, m, k), (nb, k, n), (nb, m, n)
    a_shape, b_shape = ((m, k), (k, n)) if nb == 1 else (a_dims, b_dims)
    results = {}
    for dtype in dtypes:
        print(f"\n== {dtype}: {a_dims} @ {b_dims}, ctypes only")
        try:
            ok1 = ctypes_path(cudnn._lib, dtype, a_dims, b_dims, c_dims, cd, rng, args.all_engines, override)
        except Exception:
            traceback.print_exc()
            ok1 = False
        ok2 = True
        for tf32 in ((False, True) if dtype == "float32" else (False,)):
            print(f"\n== {dtype}: pycudadrv.cudnn.matmul_plan{(a_shape, b_shape)}"
                  + (", allow_tf32=True" if tf32 else ""))
            try:
                ok2 = pycudadrv_path(cudnn, cd, dtype, a_shape, b_shape, rng, allow_tf32=tf32) and ok2
            except Exception:
                traceback.print_exc()
                ok2 = False
        results[dtype] = (ok1, ok2)
    print("\n== summary")
    for dtype, (ok1, ok2) in results.items():
        print(f"  {dtype:9s} ctypes: {'OK' if ok1 else 'FAILED'}   pycudadrv: {'OK' if ok2 else 'FAILED'}")
    return 0 if all(a and b for a, b in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
