# Building a MatmulPlan, part of pycudadrv._cudnn (included there): the cuDNN call and
# error helpers, the tensor, matmul, operation and operation-graph descriptors, the engine
# heuristics, and the choice of engines by their numerical and behaviour notes
# (engine_rejection). Every descriptor a plan keeps is recorded on it (in creation order)
# the moment it exists, so MatmulPlan._destroy can always destroy them all in reverse; the
# temporaries here are destroyed before returning, on every path.

# --------------------------------------------------------------------------- cuDNN calls and their errors

cdef str _status_name(cudnnStatus_t st):
    cdef const char* s = _api.GetErrorString(st) if _bound else NULL
    return s.decode("utf-8", "replace") if s != NULL else f"cudnnStatus_t {st}"


cdef str _last_error():
    cdef char buf[1024]
    buf[0] = 0
    if _bound:
        _api.GetLastErrorString(buf, sizeof(buf))
        buf[sizeof(buf) - 1] = 0
    return (<char*>buf).decode("utf-8", "replace").strip()


cdef object _error(cudnnStatus_t st, str call, str context):
    name = _status_name(st)
    detail = _last_error()
    msg = f"{name} ({st}) in {call}" + (f": {detail}" if detail else "")
    if context:
        msg += f"\n{context}"
    return CudnnError(msg, code=st, name=name, call=call)


cdef inline int _ok(cudnnStatus_t st, str call, str context) except -1:
    if st != CUDNN_STATUS_SUCCESS:
        raise _error(st, call, context)
    return 0


cdef int _set(cudnnBackendDescriptor_t d, int attr, int kind, int64_t count, const void* values,
              str what) except -1:
    return _ok(_api.SetAttribute(d, attr, kind, count, values), "cudnnBackendSetAttribute",
               f"{what} (attribute {attr})")


cdef cudnnBackendDescriptor_t _create(int kind, str what) except NULL:
    cdef cudnnBackendDescriptor_t d = NULL
    _ok(_api.CreateDescriptor(kind, &d), "cudnnBackendCreateDescriptor", what)
    if d == NULL:
        raise CudnnError(f"cudnnBackendCreateDescriptor returned no descriptor\n{what}",
                         call="cudnnBackendCreateDescriptor")
    return d


# --------------------------------------------------------------------------- descriptors

cdef cudnnBackendDescriptor_t _own(MatmulPlan p, int kind, str what) except NULL:
    cdef cudnnBackendDescriptor_t d = _create(kind, what)
    p._owned[p._n_owned] = d
    p._n_owned += 1
    return d

cdef cudnnBackendDescriptor_t _tensor(MatmulPlan p, int64_t uid, int data_type, tuple dims, str name) except NULL:
    cdef int64_t d[3]
    cdef int64_t st[3]
    cdef int64_t align = ALIGN_BYTES
    d[0], d[1], d[2] = dims
    st[2] = 1
    st[1] = d[2]
    st[0] = d[1] * d[2]
    what = f"tensor {name} {dims} of {p._label}"
    cdef cudnnBackendDescriptor_t t = _own(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what)
    _set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &data_type, what)
    _set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, d, what)
    _set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, st, what)
    _set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what)
    _set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what)
    _ok(_api.Finalize(t), "cudnnBackendFinalize", what)
    return t

cdef int _build(MatmulPlan p, tuple a_dims, tuple b_dims, tuple c_dims, int want) except -1:
    cdef int data_type = _DATA_TYPES[p.dtype]
    cdef int compute = _DATA_TYPES[p.compute_dtype]
    cdef cudnnBackendDescriptor_t ta, tb, tc, mm, op, g
    ta = _tensor(p, 1, data_type, a_dims, "a")
    tb = _tensor(p, 2, data_type, b_dims, "b")
    tc = _tensor(p, 3, data_type, c_dims, "out")
    what = f"matmul descriptor of {p._label}"
    mm = _own(p, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what)
    _set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, what)
    _ok(_api.Finalize(mm), "cudnnBackendFinalize", what)
    what = f"matmul operation of {p._label}"
    op = _own(p, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what)
    _set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ta, what)
    _set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tb, what)
    _set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tc, what)
    _set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, what)
    _ok(_api.Finalize(op), "cudnnBackendFinalize", what)
    what = f"operation graph of {p._label}"
    g = _own(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what)
    if p._h is not None:
        # Deprecated in recent cuDNN 9 releases (which ignore it), required by the first ones.
        _api.SetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &p._h.handle)
    _set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, what)
    _ok(_api.Finalize(g), "cudnnBackendFinalize", what)
    # Instant heuristics first; the neural-net mode (B) when they left fewer usable engines than wanted
    # (float32 without TF32, autotuning); the fallback engines only when nothing else is usable.
    finalize = p._h is not None
    _find(p, g, CUDNN_HEUR_MODE_INSTANT, want, finalize)
    if p._n_cand < want or not finalize:
        _find(p, g, CUDNN_HEUR_MODE_B, want, finalize)
    if p._n_cand == 0 or not finalize:
        _find(p, g, CUDNN_HEUR_MODE_FALLBACK, want, finalize)
    if not finalize:
        return 0
    if p._n_cand == 0:
        v = _api.GetVersion()
        raise NotSupportedError(no_engine_message(p._label, (v // 10000, v % 10000 // 100, v % 100),
                                                  p.device.ordinal, p.dtype == "float32" and not p.allow_tf32,
                                                  p.tf32_override, p.engines_considered))
    p._use(0, True)
    return 0


def no_engine_message(str label, tuple version, int device, bint strict_float32, bint tf32_override,
                      list considered, str why=""):
    """The NotSupportedError message of a plan no engine qualifies for:
    ``strict_float32`` (float32, allow_tf32=False) names both remedies,
    allow_tf32=True and NVIDIA_TF32_OVERRIDE=0; ``considered`` are the plan's
    engines_considered lines; ``why`` replaces the explanation."""
    v = ".".join(str(x) for x in version)
    head = f"{label}: cuDNN {v} offers no usable engine on device {device}"
    if not strict_float32:
        return f"{head}{'; ' + why if why else ''}. Engines considered:\n  " + "\n  ".join(considered or ["(none)"])
    if not why:
        why = ("every engine offered uses tensor cores (TF32 for float32 inputs)" if tf32_override else
               "every engine offered uses tensor cores (TF32 for float32 inputs) or cuBLASLt (which computes "
               "float32 in TF32 unless NVIDIA_TF32_OVERRIDE=0 is set)")
    fix = ("Pass allow_tf32=True to accept TF32 (10-bit mantissa: relative error about 3e-4 against float64)"
           + ("." if tf32_override else
              ", or start the process with NVIDIA_TF32_OVERRIDE=0 in its environment (it must be set before "
              "NVIDIA's libraries load; pycudadrv never sets it, it is process-wide): cuBLASLt engines then "
              "compute float32 in float32."))
    state = ("NVIDIA_TF32_OVERRIDE=0 is set. " if tf32_override else "NVIDIA_TF32_OVERRIDE=0 is not set. ")
    return (f"{head} that computes float32 in float32 (allow_tf32=False): {why}. {state}{fix} "
            "Engines considered:\n  " + "\n  ".join(considered or ["(none)"]))

cdef dict _engine_info(MatmulPlan p, cudnnBackendDescriptor_t cfg):
    """Global index, numerical and behaviour notes of an engine config's
    engine; None where cuDNN does not say."""
    cdef cudnnBackendDescriptor_t eng = NULL
    cdef int64_t n = 0
    cdef int64_t index = -1
    cdef int notes[32]
    cdef int j
    info = {"engine": None, "numerical_notes": None, "behavior_notes": None}
    if _api.CreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS:
        return info
    try:
        if _api.GetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                             &eng) != CUDNN_STATUS_SUCCESS:
            return info
        if _api.GetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                             &index) == CUDNN_STATUS_SUCCESS:
            info["engine"] = index
        n = 0
        if _api.GetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 32, &n,
                             notes) == CUDNN_STATUS_SUCCESS:
            info["numerical_notes"] = [NUMERICAL_NOTES.get(notes[j], str(notes[j])) for j in range(min(n, 32))]
        n = 0
        if _api.GetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 32, &n,
                             notes) == CUDNN_STATUS_SUCCESS:
            info["behavior_notes"] = [BEHAVIOR_NOTES.get(notes[j], str(notes[j])) for j in range(min(n, 32))]
    finally:
        _api.DestroyDescriptor(eng)
    return info

def engine_rejection(str dtype, str compute_dtype, bint allow_tf32, bint tf32_override, numerical_notes,
                     behavior_notes):
    """Why an engine with these notes (lists of names, None when cuDNN did not
    say) may not compute a plan of ``dtype`` / ``compute_dtype``, or None.

    float32 with allow_tf32=False is computed in float32 or not at all:
    TENSOR_CORE and DOWN_CONVERT_INPUTS engines are always left out (the
    override too leaves tensor-core engines out: cuDNN documents no float32
    accuracy for them); CUBLASLT_DEPENDENCY engines (and engines whose
    behaviour notes are unknown) only unless NVIDIA_TF32_OVERRIDE=0 is in
    effect (``tf32_override``): cuBLASLt computes float32 in TF32 otherwise
    (cuDNN 9.19, H200: relative error 3e-4, no numerical note saying so)."""
    strict = dtype == "float32" and not allow_tf32
    if numerical_notes is None:
        return "its numerical notes are unknown" if strict else None
    if "DOWN_CONVERT_INPUTS" in numerical_notes:
        return "DOWN_CONVERT_INPUTS: it converts the inputs to a narrower type"
    if strict and "TENSOR_CORE" in numerical_notes:
        return ("TENSOR_CORE: tensor cores compute float32 inputs as TF32, allow_tf32=False"
                + (" (left out under NVIDIA_TF32_OVERRIDE=0 too: cuDNN states no float32 accuracy for them)"
                   if tf32_override else ""))
    if (compute_dtype == "float32" and "REDUCED_PRECISION_REDUCTION" in numerical_notes
            and (dtype != "float32" or strict)):
        return "REDUCED_PRECISION_REDUCTION: it accumulates in reduced precision, compute float32 was asked"
    if strict and not tf32_override:
        if behavior_notes is None:
            return ("its behaviour notes are unknown (it may be a cuBLASLt engine, which computes float32 in TF32 "
                    "unless NVIDIA_TF32_OVERRIDE=0 is set)")
        if "CUBLASLT_DEPENDENCY" in behavior_notes:
            return ("CUBLASLT_DEPENDENCY: cuBLASLt computes float32 in TF32 unless NVIDIA_TF32_OVERRIDE=0 is set "
                    "before the process starts")
    return None


cdef object _rejection(MatmulPlan p, dict info):
    """Why an engine may not compute this plan, or None (:func:`engine_rejection`)."""
    return engine_rejection(p.dtype, p.compute_dtype, p.allow_tf32, p.tf32_override, info["numerical_notes"],
                            info["behavior_notes"])

cdef int _find(MatmulPlan p, cudnnBackendDescriptor_t g, int mode, int want, bint finalize) except -1:
    """Ask the heuristics (``mode``) for engine configs, in their order; keep
    up to ``want`` that pass :meth:`_rejection` and whose execution plan
    finalizes (with ``finalize``; else only record what was offered)."""
    cdef cudnnBackendDescriptor_t heur = NULL
    cdef cudnnBackendDescriptor_t plan
    cdef cudnnBackendDescriptor_t* cfgs = NULL
    cdef int64_t count = 0, got = 0, n = 0, ws = 0, i
    cdef int64_t created = 0
    cdef int heur_mode = mode
    cdef cudnnStatus_t st
    mode_name = _HEUR_MODES[mode]
    what = f"engine heuristics ({mode_name}) of {p._label}"
    try:
        heur = _create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what)
        _set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, what)
        _set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode, what)
        st = _api.Finalize(heur)
        if st == CUDNN_STATUS_SUCCESS:
            st = _api.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                   &count, NULL)
        if st != CUDNN_STATUS_SUCCESS:      # a mode this graph or this cuDNN does not support
            last = _last_error()
            p.engines_considered.append(f"{mode_name}: heuristics refused ({_status_name(st)}"
                                           + (f": {last})" if last else ")"))
            return 0
        if count <= 0:
            p.engines_considered.append(f"{mode_name}: no engine config offered")
            return 0
        cfgs = <cudnnBackendDescriptor_t*>calloc(<size_t>count, sizeof(cudnnBackendDescriptor_t))
        if cfgs == NULL:
            raise MemoryError()
        for i in range(count):
            cfgs[i] = _create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what)
            created += 1
        _ok(_api.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                              cfgs), "cudnnBackendGetAttribute", what + ": engine configs")
        if got <= 0:
            p.engines_considered.append(f"{mode_name}: {count} engine configs announced, none returned")
        for i in range(min(got, count)):
            if finalize and p._n_cand >= want:
                break
            info = _engine_info(p, cfgs[i])
            info["heuristic"] = mode_name
            info["rank"] = i
            tag = (f"{mode_name} #{i}: engine {info['engine']}, notes {info['numerical_notes']}"
                   + (f", behaviour {info['behavior_notes']}" if info["behavior_notes"] else ""))
            why = _rejection(p, info)
            if why is not None:
                p.engines_considered.append(f"{tag}: skipped ({why})")
                continue
            if not finalize:
                p.engines_considered.append(f"{tag}: offered")
                continue
            if info["engine"] is not None and any(c["engine"] == info["engine"] for c in p._cand_info):
                p.engines_considered.append(f"{tag}: already kept")
                continue
            plan = NULL
            st = _api.CreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)
            if st == CUDNN_STATUS_SUCCESS:
                # Deprecated in recent cuDNN 9 releases (which take the handle at execution).
                _api.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &p._h.handle)
                st = _api.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i])
            if st == CUDNN_STATUS_SUCCESS:
                st = _api.Finalize(plan)
            if st == CUDNN_STATUS_SUCCESS:
                st = _api.GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                       &ws)
            if st == CUDNN_STATUS_SUCCESS and ws < 0:
                st = -1
            if st != CUDNN_STATUS_SUCCESS:
                detail = _status_name(st)
                last = _last_error()
                if plan != NULL:
                    _api.DestroyDescriptor(plan)
                p.engines_considered.append(f"{tag}: execution plan refused ({detail}"
                                               + (f": {last})" if last else ")"))
                continue
            info["workspace_nbytes"] = ws
            p._cand_plan[p._n_cand] = plan
            p._cand_cfg[p._n_cand] = cfgs[i]
            p._cand_ws[p._n_cand] = ws
            cfgs[i] = NULL                    # owned by the plan from here on
            p._cand_info.append(info)
            p._n_cand += 1
            p.engines_considered.append(f"{tag}: usable, workspace {ws} bytes")
    finally:
        if cfgs != NULL:
            for i in range(created - 1, -1, -1):
                if cfgs[i] != NULL:
                    _api.DestroyDescriptor(cfgs[i])
            free(cfgs)
        if heur != NULL:
            _api.DestroyDescriptor(heur)
    return 0
