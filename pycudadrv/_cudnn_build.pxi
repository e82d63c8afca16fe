# Building a MatmulPlan, part of pycudadrv._cudnn (included there): the tensor, matmul,
# operation and operation-graph descriptors, the engine heuristics, and the choice of
# engines by their numerical notes. Every descriptor a plan keeps is recorded on it (in
# creation order) the moment it exists, so MatmulPlan._destroy can always destroy them all
# in reverse; the temporaries here are destroyed before returning, on every path.

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
        hint = ""
        if p.dtype == "float32" and not p.allow_tf32:
            hint = ("; every engine offered for float32 uses tensor cores (TF32): pass allow_tf32=True "
                    "to accept TF32's 10-bit mantissa")
        v = _api.GetVersion()
        raise NotSupportedError(f"{p._label}: cuDNN {v // 10000}.{v % 10000 // 100}.{v % 100} offers no "
                                f"usable engine on device "
                                f"{p.device.ordinal}{hint}. Engines considered:\n  "
                                + "\n  ".join(p.engines_considered or ["(none)"]))
    p._use(0, True)
    return 0

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

cdef object _rejection(MatmulPlan p, dict info):
    """Why an engine may not compute this plan, or None."""
    notes = info["numerical_notes"]
    strict_f32 = p.dtype == "float32" and not p.allow_tf32
    if notes is None:
        return "its numerical notes are unknown" if strict_f32 else None
    if "DOWN_CONVERT_INPUTS" in notes:
        return "it converts the inputs to a narrower type"
    if strict_f32 and "TENSOR_CORE" in notes:
        return "tensor cores: TF32 for float32 inputs, allow_tf32=False"
    if p.compute_dtype == "float32" and p.dtype != "float32" and "REDUCED_PRECISION_REDUCTION" in notes:
        return "it accumulates in reduced precision, compute float32 was asked"
    return None

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
            tag = f"{mode_name} #{i}: engine {info['engine']}, notes {info['numerical_notes']}"
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
