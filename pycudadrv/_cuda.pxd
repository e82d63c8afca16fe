# Declarations of the cuda.h types pycudadrv uses. Functions are never called
# through these names: every entry point goes through the table in _driver_api.
from libc.stdint cimport uint64_t

cdef extern from "cuda.h" nogil:
    int CUDA_VERSION

    ctypedef int CUresult
    ctypedef int CUdevice
    ctypedef int CUdevice_v1
    ctypedef unsigned long long CUdeviceptr
    ctypedef unsigned long long CUdeviceptr_v2
    ctypedef uint64_t cuuint64_t
    ctypedef struct CUctx_st
    ctypedef struct CUmod_st
    ctypedef struct CUfunc_st
    ctypedef struct CUstream_st
    ctypedef struct CUevent_st
    ctypedef struct CUgraph_st
    ctypedef struct CUgraphExec_st
    ctypedef struct CUgraphNode_st
    ctypedef CUctx_st* CUcontext
    ctypedef CUmod_st* CUmodule
    ctypedef CUfunc_st* CUfunction
    ctypedef CUstream_st* CUstream
    ctypedef CUevent_st* CUevent
    ctypedef CUgraph_st* CUgraph
    ctypedef CUgraphExec_st* CUgraphExec
    ctypedef CUgraphNode_st* CUgraphNode
    ctypedef struct CUgraphEdgeData
    ctypedef struct CUkern_st
    ctypedef CUkern_st* CUkernel
    ctypedef struct CUDA_KERNEL_NODE_PARAMS_v2:
        CUfunction func
        unsigned int gridDimX
        unsigned int gridDimY
        unsigned int gridDimZ
        unsigned int blockDimX
        unsigned int blockDimY
        unsigned int blockDimZ
        unsigned int sharedMemBytes
        void **kernelParams
        void **extra
        CUkernel kern
        CUcontext ctx
    ctypedef int CUmemLocationType
    ctypedef int CUmemAccess_flags
    ctypedef struct CUmemLocation_v1:
        CUmemLocationType type
        int id
    ctypedef struct CUmemAccessDesc_v1:
        CUmemLocation_v1 location
        CUmemAccess_flags flags
    enum:
        CU_MEM_LOCATION_TYPE_DEVICE
        CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    ctypedef struct CUmemPoolHandle_st
    ctypedef CUmemPoolHandle_st* CUmemoryPool
    ctypedef int CUmemPool_attribute

    ctypedef struct CUgraphDeviceUpdatableNode_st
    ctypedef CUgraphDeviceUpdatableNode_st* CUgraphDeviceNode
    ctypedef unsigned long long CUgraphConditionalHandle
    ctypedef int CUpointer_attribute
    ctypedef int CUfunc_cache
    ctypedef int CUgraphMem_attribute
    ctypedef int CUgraphNodeType
    ctypedef int CUgraphConditionalNodeType
    ctypedef void (*CUhostFn)(void* userData) noexcept
    ctypedef size_t (*CUoccupancyB2DSize)(int blockSize) noexcept
    ctypedef struct CUDA_CONDITIONAL_NODE_PARAMS:
        CUgraphConditionalHandle handle
        CUgraphConditionalNodeType type
        unsigned int size
        CUgraph* phGraph_out
        CUcontext ctx
    ctypedef struct CUgraphNodeParams:
        CUgraphNodeType type
        CUDA_CONDITIONAL_NODE_PARAMS conditional
    enum:
        CU_GRAPH_NODE_TYPE_KERNEL
        CU_GRAPH_NODE_TYPE_CONDITIONAL
        CU_GRAPH_COND_TYPE_IF
        CU_GRAPH_COND_TYPE_WHILE
        CU_GRAPH_COND_ASSIGN_DEFAULT
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE
        CU_MEMORYTYPE_HOST
        CU_MEMORYTYPE_DEVICE
        CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT
        CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT
        CU_MEMPOOL_ATTR_USED_MEM_CURRENT
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
        CU_FUNC_CACHE_PREFER_NONE
        CU_FUNC_CACHE_PREFER_SHARED
        CU_FUNC_CACHE_PREFER_L1
        CU_FUNC_CACHE_PREFER_EQUAL
        CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE

    ctypedef int CUdevice_attribute
    ctypedef int CUfunction_attribute
    ctypedef int CUjit_option
    ctypedef int CUstreamCaptureMode
    ctypedef int CUstreamCaptureStatus
    ctypedef int CUlaunchAttributeID
    ctypedef int CUdriverProcAddressQueryResult

    enum:
        CUDA_SUCCESS
        CUDA_ERROR_NOT_READY
        CUDA_ERROR_INVALID_VALUE
        CUDA_ERROR_OUT_OF_MEMORY
        CUDA_ERROR_NO_DEVICE
        CUDA_ERROR_NOT_FOUND
        CUDA_ERROR_NOT_SUPPORTED
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION

        CU_STREAM_NON_BLOCKING
        CU_EVENT_DEFAULT
        CU_EVENT_DISABLE_TIMING
        CU_MEMHOSTALLOC_PORTABLE

        CU_JIT_ERROR_LOG_BUFFER
        CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
        CU_JIT_INFO_LOG_BUFFER
        CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
        CU_JIT_LOG_VERBOSE

        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
        CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH

        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        CU_FUNC_ATTRIBUTE_NUM_REGS

        CU_STREAM_CAPTURE_MODE_GLOBAL
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        CU_STREAM_CAPTURE_MODE_RELAXED
        CU_STREAM_CAPTURE_STATUS_NONE
        CU_STREAM_CAPTURE_STATUS_ACTIVE
        CU_STREAM_CAPTURE_STATUS_INVALIDATED

        CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION

        CU_GET_PROC_ADDRESS_DEFAULT
        CU_GET_PROC_ADDRESS_SUCCESS
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
        CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT

    ctypedef struct _dim3:
        unsigned int x
        unsigned int y
        unsigned int z

    ctypedef struct _device_updatable:
        int deviceUpdatable
        CUgraphDeviceNode devNode

    ctypedef union CUlaunchAttributeValue:
        char pad[64]
        int cooperative
        _dim3 clusterDim
        int programmaticStreamSerializationAllowed
        _device_updatable deviceUpdatableKernelNode

    ctypedef struct CUlaunchAttribute:
        CUlaunchAttributeID id
        CUlaunchAttributeValue value

    ctypedef struct CUlaunchConfig:
        unsigned int gridDimX
        unsigned int gridDimY
        unsigned int gridDimZ
        unsigned int blockDimX
        unsigned int blockDimY
        unsigned int blockDimZ
        unsigned int sharedMemBytes
        CUstream hStream
        CUlaunchAttribute *attrs
        unsigned int numAttrs
