from libc.stdint cimport int64_t
from pycudadrv._cuda cimport CUstream, CUdeviceptr
from pycudadrv._device cimport Device
from pycudadrv._stream cimport Stream, Capture
from pycudadrv._memory cimport Buffer

# The part of the cuDNN v9 backend (graph) API pycudadrv uses. Values from
# cudnn_graph.h of cuDNN 9.28.1 (cudnn_backend.h only includes it); every one of
# them exists since cuDNN 9.0.0 with the same value. No cuDNN header is read at
# build time: pycudadrv/cudnn.py opens libcudnn.so.9 with ctypes and hands the
# function addresses to bind(); they are called through the pointers below.
# C enums are int-sized on every platform pycudadrv builds for.
ctypedef void* cudnnHandle_t
ctypedef void* cudnnBackendDescriptor_t
ctypedef int cudnnStatus_t

cdef enum:
    CUDNN_STATUS_SUCCESS = 0
    # cudnnDataType_t
    CUDNN_DATA_FLOAT = 0
    CUDNN_DATA_HALF = 2
    CUDNN_DATA_BFLOAT16 = 9
    # cudnnBackendAttributeType_t
    CUDNN_TYPE_HANDLE = 0
    CUDNN_TYPE_DATA_TYPE = 1
    CUDNN_TYPE_INT64 = 3
    CUDNN_TYPE_VOID_PTR = 6
    CUDNN_TYPE_HEUR_MODE = 8
    CUDNN_TYPE_NUMERICAL_NOTE = 11
    CUDNN_TYPE_BACKEND_DESCRIPTOR = 15
    CUDNN_TYPE_BEHAVIOR_NOTE = 19
    # cudnnBackendDescriptorType_t
    CUDNN_BACKEND_ENGINE_DESCRIPTOR = 2
    CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3
    CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4
    CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5
    CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15
    CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16
    CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17
    CUDNN_BACKEND_MATMUL_DESCRIPTOR = 18
    CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR = 19
    # cudnnBackendAttributeName_t
    CUDNN_ATTR_ENGINEHEUR_MODE = 200
    CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201
    CUDNN_ATTR_ENGINEHEUR_RESULTS = 202
    CUDNN_ATTR_ENGINECFG_ENGINE = 300
    CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400
    CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401
    CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402
    CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800
    CUDNN_ATTR_OPERATIONGRAPH_OPS = 801
    CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900
    CUDNN_ATTR_TENSOR_DATA_TYPE = 901
    CUDNN_ATTR_TENSOR_DIMENSIONS = 902
    CUDNN_ATTR_TENSOR_STRIDES = 903
    CUDNN_ATTR_TENSOR_UNIQUE_ID = 906
    CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000
    CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001
    CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003
    CUDNN_ATTR_ENGINE_GLOBAL_INDEX = 1301
    CUDNN_ATTR_ENGINE_NUMERICAL_NOTE = 1303
    CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE = 1305
    CUDNN_ATTR_MATMUL_COMP_TYPE = 1500
    CUDNN_ATTR_OPERATION_MATMUL_ADESC = 1520
    CUDNN_ATTR_OPERATION_MATMUL_BDESC = 1521
    CUDNN_ATTR_OPERATION_MATMUL_CDESC = 1522
    CUDNN_ATTR_OPERATION_MATMUL_DESC = 1523
    # cudnnBackendHeurMode_t
    CUDNN_HEUR_MODE_INSTANT = 0
    CUDNN_HEUR_MODE_B = 1
    CUDNN_HEUR_MODE_FALLBACK = 2
    # cudnnBackendNumericalNote_t
    CUDNN_NUMERICAL_NOTE_TENSOR_CORE = 0
    CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS = 1
    CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION = 2

# The entry points (signatures as in cudnn_graph.h), filled by bind(): all or none.
ctypedef size_t (*cudnn_version_fn)() noexcept nogil
ctypedef const char* (*cudnn_error_string_fn)(cudnnStatus_t) noexcept nogil
ctypedef void (*cudnn_last_error_fn)(char*, size_t) noexcept nogil
ctypedef cudnnStatus_t (*cudnn_create_fn)(cudnnHandle_t*) noexcept nogil
ctypedef cudnnStatus_t (*cudnn_set_stream_fn)(cudnnHandle_t, CUstream) noexcept nogil
ctypedef cudnnStatus_t (*cudnn_create_descriptor_fn)(int, cudnnBackendDescriptor_t*) noexcept nogil
ctypedef cudnnStatus_t (*cudnn_descriptor_fn)(cudnnBackendDescriptor_t) noexcept nogil
ctypedef cudnnStatus_t (*cudnn_set_attribute_fn)(cudnnBackendDescriptor_t, int, int, int64_t,
                                                  const void*) noexcept nogil
ctypedef cudnnStatus_t (*cudnn_get_attribute_fn)(cudnnBackendDescriptor_t, int, int, int64_t, int64_t*,
                                                  void*) noexcept nogil
ctypedef cudnnStatus_t (*cudnn_execute_fn)(cudnnHandle_t, cudnnBackendDescriptor_t,
                                            cudnnBackendDescriptor_t) noexcept nogil

cdef struct pycudadrv_cudnn_api:
    cudnn_version_fn GetVersion                       # cudnnGetVersion
    cudnn_error_string_fn GetErrorString              # cudnnGetErrorString
    cudnn_last_error_fn GetLastErrorString            # cudnnGetLastErrorString
    cudnn_create_fn Create                            # cudnnCreate
    cudnn_set_stream_fn SetStream                     # cudnnSetStream
    cudnn_create_descriptor_fn CreateDescriptor       # cudnnBackendCreateDescriptor
    cudnn_descriptor_fn DestroyDescriptor             # cudnnBackendDestroyDescriptor
    cudnn_set_attribute_fn SetAttribute               # cudnnBackendSetAttribute
    cudnn_get_attribute_fn GetAttribute               # cudnnBackendGetAttribute
    cudnn_descriptor_fn Finalize                      # cudnnBackendFinalize
    cudnn_execute_fn Execute                          # cudnnBackendExecute

cdef enum:
    CANDIDATES_MAX = 8      # execution plans kept for autotuning
    STRICT_CANDIDATES = 3   # execution plans kept for a float32 plan without TF32 (the precision check's spares)
    PACKS_KEPT = 4          # finalized variant packs kept per plan (one per pointer triple)
    OWNED_MAX = 6           # tensors a, b, out, matmul, operation, operation graph
    ALIGN_BYTES = 16        # bytes, declared for every tensor (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT)

# A finalized variant pack for one (a, b, out) pointer triple.
cdef struct pycudadrv_cudnn_pack:
    void* ptrs[3]
    cudnnBackendDescriptor_t desc

# One cuDNN handle per device, for the life of the process (never destroyed:
# cudnnDestroy synchronises the device, which is unsafe at interpreter exit).
cdef class _Handle:
    cdef cudnnHandle_t handle
    cdef CUstream stream             # the stream last given to cudnnSetStream
    cdef readonly Device device

cdef class MatmulPlan:
    cdef readonly Device device
    cdef readonly str dtype
    cdef readonly str compute_dtype
    cdef readonly bint allow_tf32
    cdef readonly bint tf32_override # NVIDIA_TF32_OVERRIDE=0 was in effect when the plan was built
    cdef readonly tuple a_shape, b_shape, out_shape
    cdef readonly int64_t batch, m, n, k
    cdef readonly dict engine        # the chosen engine: global index, notes, workspace, heuristic rank
    cdef readonly list engines_considered
    cdef str _label
    cdef object _accepted            # numpy dtypes an operand may carry (raw-byte Buffers are always accepted)
    cdef size_t _nbytes[3]
    cdef _Handle _h
    cdef Stream _default_stream
    cdef Stream _last_stream         # the stream of the last eager execution (the workspace's last user)
    cdef list _streams               # every stream executed on (synchronised before the plan is destroyed)
    cdef Buffer _workspace
    cdef void* _ws_ptr
    cdef readonly int64_t workspace_nbytes
    cdef cudnnBackendDescriptor_t _owned[OWNED_MAX]
    cdef int _n_owned
    cdef cudnnBackendDescriptor_t _cand_plan[CANDIDATES_MAX]
    cdef cudnnBackendDescriptor_t _cand_cfg[CANDIDATES_MAX]
    cdef int64_t _cand_ws[CANDIDATES_MAX]
    cdef list _cand_info
    cdef int _n_cand
    cdef cudnnBackendDescriptor_t _plan   # the execution plan in use
    cdef pycudadrv_cudnn_pack _packs[PACKS_KEPT]
    cdef int _last_pack, _next_pack
    cdef Buffer _seen_a, _seen_b, _seen_c   # the Buffers last validated as a, b, out (checks not repeated)
    cdef int _graph_uses             # captured graphs holding this plan
    cdef bint _closed
    cdef bint _destroyed

    # building: the module-level functions of _cudnn_build.pxi fill these fields
    cdef int _flush_packs(self) except -1
    cdef int _use(self, int i, bint exact) except -1
    # executing
    cdef cudnnBackendDescriptor_t _make_pack(self, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                                             void* ws) except NULL
    cdef cudnnBackendDescriptor_t _pack(self, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c) except NULL
    cdef int _closed_operand(self, Buffer buf, int which) except -1
    cdef Buffer _wrap(self, object x, int which)
    cdef int _check_operand(self, Buffer buf, int which) except -1
    cdef Buffer _operand(self, object x, int which)
    cdef int _switch_stream(self, Stream s) except -1
    cdef int _set_stream(self, Stream s) except -1
    cdef int _check_stream(self, Buffer a, Buffer b, Buffer out, Stream s) except -1
    cdef int _execute_captured(self, Buffer a, Buffer b, Buffer out, Stream s, Capture cap) except -1
    cdef int _execute(self, Buffer a, Buffer b, Buffer out, Stream s) except -1
    cdef int _destroy(self, bint raise_errors) except -1
