/*
 * c_floor.c -- the "C floor" of the pycudadrv benchmarks: the cost of a bare
 * loop of driver calls (cuLaunchKernel, cuGraphLaunch) made from C, with
 * nothing between the calls but the loop itself and a CUresult check.
 *
 * The benchmarks compile this file at run time with the system compiler
 *   cc -O2 -shared -fPIC -I<cuda include dir> c_floor.c -o c_floor.so -ldl
 * and call it through ctypes from the same Python process as the Python rows,
 * so every ratio compares two measurements taken on the same machine, in the
 * same process, minutes (not runs) apart.
 *
 * Nothing here links against libcuda. floor_init() finds the libcuda.so.1
 * that pycudadrv has already loaded (dlopen of an already loaded library
 * returns that same instance) and resolves the entry points through
 * cuGetProcAddress_v2, the way pycudadrv itself does; the loops then call the
 * driver through those function pointers on whatever context is current on
 * the calling thread (pycudadrv makes the device's primary context current).
 *
 * Exported (all return without touching Python; ctypes releases the GIL):
 *   int         floor_init(const char* libcuda_path);   0, or an error code
 *   const char* floor_init_error(void);                 text for that code
 *   double      floor_launch_loop(void* func, void* stream, void** params, int iters);
 *   double      floor_ctx_launch_loop(void* func, void* stream, void** params, int iters);
 *   double      floor_timed_launch_loop(void* func, void* stream, void** params, void** start_events,
 *                                       void** end_events, int n_events, int iters);
 *   double      floor_launch_loop_dims(void* func, unsigned int grid_x, unsigned int block_x,
 *                                      unsigned int shared_mem_bytes, void* stream,
 *                                      void** params, int iters);
 *   double      floor_graph_launch_loop(void* graph_exec, void* stream, int iters);
 *   double      floor_graph_launch_loop_sync(void* graph_exec, void* stream, int iters);
 *                   the same loop, then cuStreamSynchronize(stream), all inside the timing
 *   int         floor_graph_capture(void* func, unsigned int grid_x, unsigned int grid_y,
 *                                   unsigned int grid_z, unsigned int block_x, unsigned int block_y,
 *                                   unsigned int block_z, unsigned int shared_mem_bytes, void* stream,
 *                                   void** params, int count, void** graph_exec_out, int* num_nodes_out);
 *                   captures `count` cuLaunchKernel calls on `stream` (thread-local capture mode) and
 *                   instantiates them (cuGraphInstantiateWithFlags, flags 0); 0 or a CUresult
 *   int         floor_graph_upload(void* graph_exec, void* stream);       cuGraphUpload
 *   int         floor_graph_exec_destroy(void* graph_exec);               cuGraphExecDestroy
 *   int         floor_stream_synchronize(void* stream);                   cuStreamSynchronize
 *   void*       floor_launch_kernel_fn(void);           the resolved cuLaunchKernel
 *   const char* floor_error_name(int code);             cuGetErrorName(code), or "?"
 * The loops return the elapsed seconds (CLOCK_MONOTONIC around the loop), or
 * -(CUresult) of the first failing call (so a value < 0 is an error).
 * The graph-building and synchronizing entry points are optional: floor_init()
 * succeeds without them (an older driver), and those functions then return
 * CUDA_ERROR_NOT_SUPPORTED.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef CUresult (*launch_kernel_t)(CUfunction, unsigned int, unsigned int, unsigned int,
                                    unsigned int, unsigned int, unsigned int, unsigned int,
                                    CUstream, void **, void **);
typedef CUresult (*graph_launch_t)(CUgraphExec, CUstream);
typedef CUresult (*get_error_name_t)(CUresult, const char **);
typedef CUresult (*stream_begin_capture_t)(CUstream, CUstreamCaptureMode);
typedef CUresult (*stream_end_capture_t)(CUstream, CUgraph *);
typedef CUresult (*graph_instantiate_t)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*graph_exec_destroy_t)(CUgraphExec);
typedef CUresult (*graph_destroy_t)(CUgraph);
typedef CUresult (*graph_get_nodes_t)(CUgraph, CUgraphNode *, size_t *);
typedef CUresult (*graph_upload_t)(CUgraphExec, CUstream);
typedef CUresult (*stream_synchronize_t)(CUstream);
typedef CUresult (*event_record_t)(CUevent, CUstream);
typedef CUresult (*get_proc_address_t)(const char *, void **, int, cuuint64_t,
                                       CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_kernel_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*graph_create_t)(CUgraph *, unsigned int);
typedef CUresult (*cond_handle_create_t)(CUgraphConditionalHandle *, CUgraph, CUcontext, unsigned int,
                                         unsigned int);
typedef CUresult (*graph_add_node_t)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *,
                                     size_t, CUgraphNodeParams *);
typedef CUresult (*begin_capture_to_graph_t)(CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *,
                                             size_t, CUstreamCaptureMode);
typedef CUresult (*ctx_get_current_t)(CUcontext *);
typedef CUresult (*stream_get_capture_info_t)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
                                              const CUgraphNode **, const CUgraphEdgeData **, size_t *);
typedef CUresult (*kernel_node_set_params_t)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);

static launch_kernel_t p_launch_kernel = NULL;
static graph_launch_t p_graph_launch = NULL;
static get_error_name_t p_get_error_name = NULL;
static stream_begin_capture_t p_stream_begin_capture = NULL;
static stream_end_capture_t p_stream_end_capture = NULL;
static graph_instantiate_t p_graph_instantiate = NULL;
static graph_exec_destroy_t p_graph_exec_destroy = NULL;
static graph_destroy_t p_graph_destroy = NULL;
static graph_get_nodes_t p_graph_get_nodes = NULL;
static graph_upload_t p_graph_upload = NULL;
static stream_synchronize_t p_stream_synchronize = NULL;
static event_record_t p_event_record = NULL;
static launch_kernel_ex_t p_launch_kernel_ex = NULL;
static graph_create_t p_graph_create = NULL;
static cond_handle_create_t p_cond_handle_create = NULL;
static graph_add_node_t p_graph_add_node = NULL;
static begin_capture_to_graph_t p_begin_capture_to_graph = NULL;
static ctx_get_current_t p_ctx_get_current = NULL;
static stream_get_capture_info_t p_stream_get_capture_info = NULL;
static kernel_node_set_params_t p_kernel_node_set_params = NULL;
static char init_error[512] = "floor_init() has not been called";

/* Error codes of floor_init() besides a CUresult from cuGetProcAddress. */
enum { FLOOR_ERR_DLOPEN = -1, FLOOR_ERR_GETPROC = -2, FLOOR_ERR_NOFUNC = -3 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Resolve `name` at ABI version `version`; 0 on success, else a CUresult or
 * FLOOR_ERR_NOFUNC, with init_error filled in. */
static int resolve(get_proc_address_t getproc, const char *name, int version, void **out) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r;
    *out = NULL;
    r = getproc(name, out, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS) {
        snprintf(init_error, sizeof init_error, "cuGetProcAddress(%s, %d) failed: CUresult %d", name,
                 version, (int)r);
        return (int)r;
    }
    if (*out == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS) {
        snprintf(init_error, sizeof init_error, "cuGetProcAddress(%s, %d): symbol not found (status %d)",
                 name, version, (int)status);
        *out = NULL;
        return FLOOR_ERR_NOFUNC;
    }
    return 0;
}

int floor_init(const char *libcuda_path) {
    const char *path = (libcuda_path != NULL && libcuda_path[0] != '\0') ? libcuda_path : "libcuda.so.1";
    void *lib, *fn = NULL;
    get_proc_address_t getproc;
    int rc;

    /* The instance pycudadrv loaded; fall back to a plain dlopen (same
     * instance anyway when the soname matches). The handle is never closed. */
    lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        snprintf(init_error, sizeof init_error, "dlopen(%s) failed: %s", path, e ? e : "unknown error");
        return FLOOR_ERR_DLOPEN;
    }
    getproc = (get_proc_address_t)dlsym(lib, "cuGetProcAddress_v2");
    if (getproc == NULL) {
        snprintf(init_error, sizeof init_error, "%s has no cuGetProcAddress_v2 (driver older than CUDA 12.0)",
                 path);
        return FLOOR_ERR_GETPROC;
    }
    rc = resolve(getproc, "cuLaunchKernel", 4000, &fn);
    if (rc != 0)
        return rc;
    p_launch_kernel = (launch_kernel_t)fn;
    /* Optional: only floor_graph_launch_loop needs it. */
    if (resolve(getproc, "cuGraphLaunch", 10000, &fn) == 0)
        p_graph_launch = (graph_launch_t)fn;
    else
        p_graph_launch = NULL;
    /* Optional: error names for reports. */
    if (resolve(getproc, "cuGetErrorName", 6000, &fn) == 0)
        p_get_error_name = (get_error_name_t)fn;
    else
        p_get_error_name = NULL;
    /* Optional: graph building in C, stream synchronize (floor_graph_capture,
     * floor_graph_launch_loop_sync and friends); NULL when absent. */
#define FLOOR_OPTIONAL(var, type, name, version) \
    var = (resolve(getproc, name, version, &fn) == 0) ? (type)fn : NULL
    FLOOR_OPTIONAL(p_stream_begin_capture, stream_begin_capture_t, "cuStreamBeginCapture", 10010);
    FLOOR_OPTIONAL(p_stream_end_capture, stream_end_capture_t, "cuStreamEndCapture", 10000);
    FLOOR_OPTIONAL(p_graph_instantiate, graph_instantiate_t, "cuGraphInstantiateWithFlags", 11040);
    FLOOR_OPTIONAL(p_graph_exec_destroy, graph_exec_destroy_t, "cuGraphExecDestroy", 10000);
    FLOOR_OPTIONAL(p_graph_destroy, graph_destroy_t, "cuGraphDestroy", 10000);
    FLOOR_OPTIONAL(p_graph_get_nodes, graph_get_nodes_t, "cuGraphGetNodes", 10000);
    FLOOR_OPTIONAL(p_graph_upload, graph_upload_t, "cuGraphUpload", 11010);
    FLOOR_OPTIONAL(p_event_record, event_record_t, "cuEventRecord", 2000);
    FLOOR_OPTIONAL(p_stream_synchronize, stream_synchronize_t, "cuStreamSynchronize", 2000);
    /* Optional: PDL captures and device-side WHILE loops (CUDA 12.3+). */
    FLOOR_OPTIONAL(p_launch_kernel_ex, launch_kernel_ex_t, "cuLaunchKernelEx", 11060);
    FLOOR_OPTIONAL(p_graph_create, graph_create_t, "cuGraphCreate", 10000);
    FLOOR_OPTIONAL(p_cond_handle_create, cond_handle_create_t, "cuGraphConditionalHandleCreate", 12030);
    FLOOR_OPTIONAL(p_graph_add_node, graph_add_node_t, "cuGraphAddNode", 12030);
    FLOOR_OPTIONAL(p_begin_capture_to_graph, begin_capture_to_graph_t, "cuStreamBeginCaptureToGraph", 12030);
    FLOOR_OPTIONAL(p_ctx_get_current, ctx_get_current_t, "cuCtxGetCurrent", 4000);
    /* Optional: GPU-driven indirect dispatch (floor_indirect_graph). */
    FLOOR_OPTIONAL(p_stream_get_capture_info, stream_get_capture_info_t, "cuStreamGetCaptureInfo", 12030);
    FLOOR_OPTIONAL(p_kernel_node_set_params, kernel_node_set_params_t, "cuGraphKernelNodeSetParams", 12000);
#undef FLOOR_OPTIONAL
    snprintf(init_error, sizeof init_error, "ok");
    return 0;
}

const char *floor_init_error(void) { return init_error; }

void *floor_launch_kernel_fn(void) { return (void *)p_launch_kernel; }

const char *floor_error_name(int code) {
    const char *name = NULL;
    if (p_get_error_name == NULL || p_get_error_name((CUresult)code, &name) != CUDA_SUCCESS || name == NULL)
        return "?";
    return name;
}

double floor_launch_loop_dims(void *func, unsigned int grid_x, unsigned int block_x,
                              unsigned int shared_mem_bytes, void *stream, void **params, int iters) {
    const launch_kernel_t launch = p_launch_kernel;
    const CUfunction f = (CUfunction)func;
    const CUstream s = (CUstream)stream;
    double t0, t1;
    int i;
    if (launch == NULL)
        return -(double)CUDA_ERROR_NOT_INITIALIZED;
    t0 = now_s();
    for (i = 0; i < iters; ++i) {
        CUresult r = launch(f, grid_x, 1, 1, block_x, 1, 1, shared_mem_bytes, s, params, NULL);
        if (r != CUDA_SUCCESS)
            return -(double)r;
    }
    t1 = now_s();
    return t1 - t0;
}

/* The C floor of a timed pass: `iters` x (cuEventRecord(start[k]), cuLaunchKernel, cuEventRecord(end[k]))
 * with k cycling over `n_events` event pairs; grid 1, block 32. Seconds, or -(CUresult). */
double floor_timed_launch_loop(void *func, void *stream, void **params, void **start_events,
                               void **end_events, int n_events, int iters) {
    const launch_kernel_t launch = p_launch_kernel;
    const event_record_t record = p_event_record;
    const CUfunction f = (CUfunction)func;
    const CUstream s = (CUstream)stream;
    double t0, t1;
    int i, k = 0;
    CUresult r;
    if (launch == NULL || record == NULL || n_events <= 0)
        return -(double)CUDA_ERROR_NOT_SUPPORTED;
    t0 = now_s();
    for (i = 0; i < iters; ++i) {
        if ((r = record((CUevent)start_events[k], s)) != CUDA_SUCCESS)
            return -(double)r;
        if ((r = launch(f, 1, 1, 1, 32, 1, 1, 0, s, params, NULL)) != CUDA_SUCCESS)
            return -(double)r;
        if ((r = record((CUevent)end_events[k], s)) != CUDA_SUCCESS)
            return -(double)r;
        if (++k == n_events)
            k = 0;
    }
    t1 = now_s();
    return t1 - t0;
}

/* As floor_launch_loop, with a cuCtxGetCurrent before each launch: what pycudadrv's Device.activate
 * asks the driver per launch (so another library's cuCtxSetCurrent is seen). Seconds, or -(CUresult). */
double floor_ctx_launch_loop(void *func, void *stream, void **params, int iters) {
    const launch_kernel_t launch = p_launch_kernel;
    const ctx_get_current_t get_current = p_ctx_get_current;
    const CUfunction f = (CUfunction)func;
    const CUstream s = (CUstream)stream;
    CUcontext cur = NULL;
    double t0, t1;
    int i;
    if (launch == NULL || get_current == NULL)
        return -(double)CUDA_ERROR_NOT_SUPPORTED;
    t0 = now_s();
    for (i = 0; i < iters; ++i) {
        CUresult r = get_current(&cur);
        if (r == CUDA_SUCCESS)
            r = launch(f, 1, 1, 1, 32, 1, 1, 0, s, params, NULL);
        if (r != CUDA_SUCCESS)
            return -(double)r;
    }
    t1 = now_s();
    return t1 - t0;
}

double floor_launch_loop(void *func, void *stream, void **params, int iters) {
    /* The benchmark configuration: grid 1, block 32, no dynamic shared memory. */
    return floor_launch_loop_dims(func, 1, 32, 0, stream, params, iters);
}

/* `iters` x cuGraphLaunch(graph_exec, stream), then (when `synchronize`) cuStreamSynchronize(stream)
 * inside the timing; seconds, or -(CUresult). Inline, so each caller compiles to its own loop with
 * `synchronize` folded away. */
static inline double graph_launch_loop(void *graph_exec, void *stream, int iters, int synchronize) {
    const graph_launch_t launch = p_graph_launch;
    const stream_synchronize_t sync = p_stream_synchronize;
    const CUgraphExec g = (CUgraphExec)graph_exec;
    const CUstream s = (CUstream)stream;
    double t0, t1;
    CUresult r;
    int i;
    if (launch == NULL || (synchronize && sync == NULL))
        return -(double)CUDA_ERROR_NOT_SUPPORTED;
    t0 = now_s();
    for (i = 0; i < iters; ++i) {
        r = launch(g, s);
        if (r != CUDA_SUCCESS)
            return -(double)r;
    }
    if (synchronize) {
        r = sync(s);
        if (r != CUDA_SUCCESS)
            return -(double)r;
    }
    t1 = now_s();
    return t1 - t0;
}

double floor_graph_launch_loop(void *graph_exec, void *stream, int iters) {
    return graph_launch_loop(graph_exec, stream, iters, 0);
}

double floor_graph_launch_loop_sync(void *graph_exec, void *stream, int iters) {
    /* As floor_graph_launch_loop, then wait for the stream inside the timing:
     * the figure covers the GPU's execution of every replay, not just their
     * submission (for graphs long enough to be GPU-bound). */
    return graph_launch_loop(graph_exec, stream, iters, 1);
}

/* Record what `record(s, ctx)` launches on `s` and instantiate it: cuStreamBeginCapture
 * (thread-local capture mode), record, cuStreamEndCapture, cuGraphGetNodes (the node count,
 * when available), cuGraphInstantiateWithFlags (flags 0), cuGraphDestroy (the executable graph
 * does not need the CUgraph). The outputs are cleared first; `args_ok` is the caller's check of
 * its own arguments (CUDA_ERROR_INVALID_VALUE when 0). On failure the capture is ended (the
 * stream is usable again), nothing is leaked and *graph_exec_out is NULL. 0 or a CUresult. */
typedef CUresult (*capture_record_t)(CUstream s, const void *ctx);

static int capture_graph(int args_ok, CUstream s, capture_record_t record, const void *ctx,
                         void **graph_exec_out, int *num_nodes_out) {
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUresult r, r_end;
    size_t n = 0;
    if (graph_exec_out != NULL)
        *graph_exec_out = NULL;
    if (num_nodes_out != NULL)
        *num_nodes_out = -1;
    if (graph_exec_out == NULL || !args_ok || s == NULL)
        return (int)CUDA_ERROR_INVALID_VALUE;
    if (p_launch_kernel == NULL || p_stream_begin_capture == NULL || p_stream_end_capture == NULL ||
        p_graph_instantiate == NULL || p_graph_destroy == NULL)
        return (int)CUDA_ERROR_NOT_SUPPORTED;
    r = p_stream_begin_capture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r != CUDA_SUCCESS)
        return (int)r;
    r = record(s, ctx);
    r_end = p_stream_end_capture(s, &graph);
    if (r == CUDA_SUCCESS)
        r = r_end;
    if (r == CUDA_SUCCESS && graph == NULL)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (r == CUDA_SUCCESS && p_graph_get_nodes != NULL && p_graph_get_nodes(graph, NULL, &n) == CUDA_SUCCESS &&
        num_nodes_out != NULL)
        *num_nodes_out = (int)n;
    if (r == CUDA_SUCCESS)
        r = p_graph_instantiate(&exec, graph, 0);
    if (graph != NULL)
        p_graph_destroy(graph);
    if (r != CUDA_SUCCESS) {
        if (exec != NULL && p_graph_exec_destroy != NULL)
            p_graph_exec_destroy(exec);
        return (int)r;
    }
    *graph_exec_out = (void *)exec;
    return 0;
}

/* What floor_graph_capture records: `count` launches of one kernel. */
struct repeated_launch {
    CUfunction func;
    unsigned int grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem_bytes;
    void **params;
    int count;
};

static CUresult record_repeated_launch(CUstream s, const void *ctx) {
    const struct repeated_launch *l = (const struct repeated_launch *)ctx;
    CUresult r = CUDA_SUCCESS;
    int i;
    for (i = 0; i < l->count; ++i) {
        r = p_launch_kernel(l->func, l->grid_x, l->grid_y, l->grid_z, l->block_x, l->block_y, l->block_z,
                            l->shared_mem_bytes, s, l->params, NULL);
        if (r != CUDA_SUCCESS)
            break;
    }
    return r;
}

int floor_graph_capture(void *func, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int block_x, unsigned int block_y, unsigned int block_z,
                        unsigned int shared_mem_bytes, void *stream, void **params, int count,
                        void **graph_exec_out, int *num_nodes_out) {
    /* Record `count` launches of `func` (same dims, same params) on `stream`
     * and instantiate them (capture_graph): the same chain of kernel nodes that
     * a capture of the same launches made anywhere else would record. */
    struct repeated_launch l;
    l.func = (CUfunction)func;
    l.grid_x = grid_x;
    l.grid_y = grid_y;
    l.grid_z = grid_z;
    l.block_x = block_x;
    l.block_y = block_y;
    l.block_z = block_z;
    l.shared_mem_bytes = shared_mem_bytes;
    l.params = params;
    l.count = count;
    return capture_graph(count >= 1, (CUstream)stream, record_repeated_launch, &l, graph_exec_out,
                         num_nodes_out);
}

int floor_graph_upload(void *graph_exec, void *stream) {
    if (p_graph_upload == NULL)
        return (int)CUDA_ERROR_NOT_SUPPORTED;
    return (int)p_graph_upload((CUgraphExec)graph_exec, (CUstream)stream);
}

int floor_graph_exec_destroy(void *graph_exec) {
    if (p_graph_exec_destroy == NULL)
        return (int)CUDA_ERROR_NOT_SUPPORTED;
    if (graph_exec == NULL)
        return 0;
    return (int)p_graph_exec_destroy((CUgraphExec)graph_exec);
}

int floor_stream_synchronize(void *stream) {
    if (p_stream_synchronize == NULL)
        return (int)CUDA_ERROR_NOT_SUPPORTED;
    return (int)p_stream_synchronize((CUstream)stream);
}

/* ---------------------------------------------------------------------------------------------
 * Sequences of kernels (bench/step_loop.py): one "step" is `n_kernels` launches, kernel k being
 *   funcs[k] with grid dims[6k+0..2], block dims[6k+3..5], shared[k] bytes of dynamic shared
 *   memory (0 for all when shared is NULL) and kernelParams params[k].
 *
 *   int    floor_graph_capture_seq(int n_kernels, void *const *funcs, const unsigned int *dims,
 *                                  const unsigned int *shared, void **const *params, void *stream,
 *                                  int repeats, void **graph_exec_out, int *num_nodes_out);
 *              captures `repeats` steps (repeats x n_kernels cuLaunchKernel calls, in order) on
 *              `stream` (thread-local capture mode) and instantiates them (flags 0); 0 or a
 *              CUresult. Replay with floor_graph_launch_loop[_sync]; free with
 *              floor_graph_exec_destroy.
 *   double floor_launch_seq_loop(int n_kernels, void *const *funcs, const unsigned int *dims,
 *                                const unsigned int *shared, void **const *params, void *stream,
 *                                int repeats, int synchronize);
 *              `repeats` steps of plain cuLaunchKernel calls, then (when `synchronize`)
 *              cuStreamSynchronize(stream), all inside the timing; seconds or -(CUresult).
 * ------------------------------------------------------------------------------------------- */

static CUresult launch_seq(int n_kernels, void *const *funcs, const unsigned int *dims,
                           const unsigned int *shared, void **const *params, CUstream s) {
    const launch_kernel_t launch = p_launch_kernel;
    int k;
    for (k = 0; k < n_kernels; ++k) {
        const unsigned int *d = dims + 6 * k;
        CUresult r = launch((CUfunction)funcs[k], d[0], d[1], d[2], d[3], d[4], d[5],
                            shared != NULL ? shared[k] : 0u, s, params[k], NULL);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* What floor_graph_capture_seq records: `repeats` steps of a sequence of kernels. */
struct repeated_seq {
    int n_kernels;
    void *const *funcs;
    const unsigned int *dims;
    const unsigned int *shared;
    void **const *params;
    int repeats;
};

static CUresult record_repeated_seq(CUstream s, const void *ctx) {
    const struct repeated_seq *q = (const struct repeated_seq *)ctx;
    CUresult r = CUDA_SUCCESS;
    int i;
    for (i = 0; i < q->repeats && r == CUDA_SUCCESS; ++i)
        r = launch_seq(q->n_kernels, q->funcs, q->dims, q->shared, q->params, s);
    return r;
}

int floor_graph_capture_seq(int n_kernels, void *const *funcs, const unsigned int *dims,
                            const unsigned int *shared, void **const *params, void *stream, int repeats,
                            void **graph_exec_out, int *num_nodes_out) {
    /* As floor_graph_capture, for a sequence of kernels repeated `repeats` times. */
    struct repeated_seq q;
    q.n_kernels = n_kernels;
    q.funcs = funcs;
    q.dims = dims;
    q.shared = shared;
    q.params = params;
    q.repeats = repeats;
    return capture_graph(n_kernels >= 1 && funcs != NULL && dims != NULL && params != NULL && repeats >= 1,
                         (CUstream)stream, record_repeated_seq, &q, graph_exec_out, num_nodes_out);
}

double floor_launch_seq_loop(int n_kernels, void *const *funcs, const unsigned int *dims,
                             const unsigned int *shared, void **const *params, void *stream, int repeats,
                             int synchronize) {
    const CUstream s = (CUstream)stream;
    double t0, t1;
    CUresult r;
    int i;
    if (p_launch_kernel == NULL || (synchronize && p_stream_synchronize == NULL))
        return -(double)CUDA_ERROR_NOT_SUPPORTED;
    if (n_kernels < 1 || funcs == NULL || dims == NULL || params == NULL)
        return -(double)CUDA_ERROR_INVALID_VALUE;
    t0 = now_s();
    for (i = 0; i < repeats; ++i) {
        r = launch_seq(n_kernels, funcs, dims, shared, params, s);
        if (r != CUDA_SUCCESS)
            return -(double)r;
    }
    if (synchronize) {
        r = p_stream_synchronize(s);
        if (r != CUDA_SUCCESS)
            return -(double)r;
    }
    t1 = now_s();
    return t1 - t0;
}

/* ---------------------------------------------------------------------------------------------
 * Steps with the host out of the way (bench/graph_loops.py): the C twins of pycudadrv's
 * PDL-chained graphs and device-side loops, built from the same kernels and parameter bytes.
 *
 *   int floor_graph_capture_seq_pdl(int n_kernels, void *const *funcs, const unsigned int *dims,
 *                                   const unsigned int *shared, void **const *params, void *stream,
 *                                   int repeats, void **graph_exec_out, int *num_nodes_out);
 *          as floor_graph_capture_seq, every launch through cuLaunchKernelEx with
 *          CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so the capture joins consecutive
 *          kernels by programmatic edges.
 *   int floor_while_graph_seq(int n_kernels, void *const *funcs, const unsigned int *dims,
 *                             const unsigned int *shared, void **const *params, void *stream,
 *                             int steps_per_iteration, int pdl, void *cond_func, void *state,
 *                             unsigned int iterations, void **graph_exec_out);
 *          a graph of one conditional WHILE node (cuGraphConditionalHandleCreate with default 1,
 *          cuGraphAddNode) whose body is captured with cuStreamBeginCaptureToGraph:
 *          `steps_per_iteration` steps, then cond_func(handle, state, iterations) -- pycudadrv's
 *          own condition kernel, so both twins run the same device code.
 * ------------------------------------------------------------------------------------------- */

static CUresult launch_seq_ex(int n_kernels, void *const *funcs, const unsigned int *dims,
                              const unsigned int *shared, void **const *params, CUstream s, int pdl) {
    CUlaunchAttribute attr;
    CUlaunchConfig cfg;
    int k;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    for (k = 0; k < n_kernels; ++k) {
        const unsigned int *d = dims + 6 * k;
        CUresult r;
        if (!pdl) {
            r = p_launch_kernel((CUfunction)funcs[k], d[0], d[1], d[2], d[3], d[4], d[5],
                                shared != NULL ? shared[k] : 0u, s, params[k], NULL);
        } else {
            memset(&cfg, 0, sizeof cfg);
            cfg.gridDimX = d[0]; cfg.gridDimY = d[1]; cfg.gridDimZ = d[2];
            cfg.blockDimX = d[3]; cfg.blockDimY = d[4]; cfg.blockDimZ = d[5];
            cfg.sharedMemBytes = shared != NULL ? shared[k] : 0u;
            cfg.hStream = s;
            cfg.attrs = &attr;
            cfg.numAttrs = 1;
            r = p_launch_kernel_ex(&cfg, (CUfunction)funcs[k], params[k], NULL);
        }
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

static CUresult record_repeated_seq_pdl(CUstream s, const void *ctx) {
    const struct repeated_seq *q = (const struct repeated_seq *)ctx;
    CUresult r = CUDA_SUCCESS;
    int i;
    for (i = 0; i < q->repeats && r == CUDA_SUCCESS; ++i)
        r = launch_seq_ex(q->n_kernels, q->funcs, q->dims, q->shared, q->params, s, 1);
    return r;
}

int floor_graph_capture_seq_pdl(int n_kernels, void *const *funcs, const unsigned int *dims,
                                const unsigned int *shared, void **const *params, void *stream, int repeats,
                                void **graph_exec_out, int *num_nodes_out) {
    struct repeated_seq q;
    if (p_launch_kernel_ex == NULL)
        return (int)CUDA_ERROR_NOT_SUPPORTED;
    q.n_kernels = n_kernels;
    q.funcs = funcs;
    q.dims = dims;
    q.shared = shared;
    q.params = params;
    q.repeats = repeats;
    return capture_graph(n_kernels >= 1 && funcs != NULL && dims != NULL && params != NULL && repeats >= 1,
                         (CUstream)stream, record_repeated_seq_pdl, &q, graph_exec_out, num_nodes_out);
}

int floor_while_graph_seq(int n_kernels, void *const *funcs, const unsigned int *dims,
                          const unsigned int *shared, void **const *params, void *stream,
                          int steps_per_iteration, int pdl, void *cond_func, void *state,
                          unsigned int iterations, void **graph_exec_out) {
    CUgraph outer = NULL, body = NULL, ended = NULL;
    CUgraphExec exec = NULL;
    CUgraphConditionalHandle handle = 0;
    CUgraphNodeParams np;
    CUgraphNode node = NULL;
    CUcontext ctx = NULL;
    CUstream s = (CUstream)stream;
    CUdeviceptr state_ptr = (CUdeviceptr)(uintptr_t)state;
    void *cond_params[3];
    unsigned int cond_dims[6] = {1, 1, 1, 1, 1, 1};
    void *const cond_funcs[1] = {cond_func};
    void **const cond_param_list[1] = {cond_params};
    CUresult r, r_end;
    int i;
    if (graph_exec_out == NULL)
        return (int)CUDA_ERROR_INVALID_VALUE;
    *graph_exec_out = NULL;
    if (p_graph_create == NULL || p_cond_handle_create == NULL || p_graph_add_node == NULL ||
        p_begin_capture_to_graph == NULL || p_ctx_get_current == NULL || p_launch_kernel_ex == NULL ||
        p_graph_instantiate == NULL || p_graph_destroy == NULL || p_stream_end_capture == NULL)
        return (int)CUDA_ERROR_NOT_SUPPORTED;
    if (n_kernels < 1 || steps_per_iteration < 1 || cond_func == NULL || state == NULL)
        return (int)CUDA_ERROR_INVALID_VALUE;
    r = p_ctx_get_current(&ctx);
    if (r == CUDA_SUCCESS)
        r = p_graph_create(&outer, 0);
    if (r == CUDA_SUCCESS)
        r = p_cond_handle_create(&handle, outer, ctx, iterations > 0 ? 1u : 0u, CU_GRAPH_COND_ASSIGN_DEFAULT);
    if (r == CUDA_SUCCESS) {
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
        np.conditional.handle = handle;
        np.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
        np.conditional.size = 1;
        np.conditional.ctx = ctx;
        r = p_graph_add_node(&node, outer, NULL, NULL, 0, &np);
    }
    if (r == CUDA_SUCCESS) {
        body = np.conditional.phGraph_out[0];
        r = p_begin_capture_to_graph(s, body, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
        if (r == CUDA_SUCCESS) {
            for (i = 0; i < steps_per_iteration && r == CUDA_SUCCESS; ++i)
                r = launch_seq_ex(n_kernels, funcs, dims, shared, params, s, pdl);
            cond_params[0] = &handle;
            cond_params[1] = &state_ptr;
            cond_params[2] = &iterations;
            if (r == CUDA_SUCCESS)
                r = launch_seq_ex(1, cond_funcs, cond_dims, NULL, cond_param_list, s, pdl);
            r_end = p_stream_end_capture(s, &ended);
            if (r == CUDA_SUCCESS)
                r = r_end;
        }
    }
    if (r == CUDA_SUCCESS)
        r = p_graph_instantiate(&exec, outer, 0);
    if (outer != NULL)
        p_graph_destroy(outer);
    if (r != CUDA_SUCCESS)
        return (int)r;
    *graph_exec_out = (void *)exec;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * GPU-driven indirect dispatch (bench/graph_loops.py): the C twin of a graph of indirect dispatches
 * as pycudadrv.dispatch captures them.
 *
 *   int floor_indirect_graph(void *update_func, void *dispatch_func, unsigned int block_x,
 *                            void **dispatch_params, void *counts, unsigned int max_x, int dispatches,
 *                            int pdl, void *stream, void **graph_exec_out);
 *          captures (thread-local mode) `dispatches` x [update_func<<<1, 1>>>(node, counts, max_x) --
 *          pycudadrv's own update kernel, so both twins run the same device code -- then
 *          dispatch_func<<<1, block_x>>>(dispatch_params...) launched by cuLaunchKernelEx as a
 *          device-updatable kernel node]; when `pdl`, with programmatic stream serialization for
 *          the node (the update kernel's programmatic dependent) and for every update kernel but
 *          the first (the previous dispatch's programmatic dependent), as pycudadrv.dispatch
 *          launches them on sm_90+; after the capture each update
 *          kernel's node gets its dispatch node's device handle (cuGraphKernelNodeSetParams), then
 *          the graph is instantiated (flags 0) and uploaded (cuGraphUpload: device-updated nodes
 *          need it before the first launch). 0 or a CUresult; replay with floor_graph_launch_loop.
 * ------------------------------------------------------------------------------------------- */

int floor_indirect_graph(void *update_func, void *dispatch_func, unsigned int block_x, void **dispatch_params,
                         void *counts, unsigned int max_x, int dispatches, int pdl, void *stream,
                         void **graph_exec_out) {
    enum { MAX_DISPATCHES = 1024 };
    CUgraphNode update_nodes[MAX_DISPATCHES];
    unsigned long long dev_nodes[MAX_DISPATCHES];
    CUdeviceptr counts_ptr = (CUdeviceptr)(uintptr_t)counts;
    unsigned long long no_node = 0;
    void *update_params[3];
    CUlaunchAttribute attrs[2];
    CUlaunchConfig cfg;
    CUDA_KERNEL_NODE_PARAMS np;
    CUstreamCaptureStatus status;
    const CUgraphNode *deps = NULL;
    size_t ndeps = 0;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUstream s = (CUstream)stream;
    CUresult r, r_end;
    int i;
    if (graph_exec_out == NULL)
        return (int)CUDA_ERROR_INVALID_VALUE;
    *graph_exec_out = NULL;
    if (p_stream_begin_capture == NULL || p_stream_end_capture == NULL || p_launch_kernel_ex == NULL ||
        p_stream_get_capture_info == NULL || p_kernel_node_set_params == NULL || p_graph_instantiate == NULL ||
        p_graph_destroy == NULL || p_graph_upload == NULL)
        return (int)CUDA_ERROR_NOT_SUPPORTED;
    if (update_func == NULL || dispatch_func == NULL || counts == NULL || dispatches < 1 ||
        dispatches > MAX_DISPATCHES)
        return (int)CUDA_ERROR_INVALID_VALUE;
    update_params[0] = &no_node;
    update_params[1] = &counts_ptr;
    update_params[2] = &max_x;
    r = p_stream_begin_capture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r != CUDA_SUCCESS)
        return (int)r;
    for (i = 0; i < dispatches && r == CUDA_SUCCESS; ++i) {
        memset(attrs, 0, sizeof attrs);
        attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[0].value.programmaticStreamSerializationAllowed = 1;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.hStream = s;
        cfg.attrs = attrs;
        cfg.numAttrs = 1;
        if (pdl && i > 0)       /* after the previous dispatch's kernel: its programmatic dependent */
            r = p_launch_kernel_ex(&cfg, (CUfunction)update_func, update_params, NULL);
        else
            r = p_launch_kernel((CUfunction)update_func, 1, 1, 1, 1, 1, 1, 0, s, update_params, NULL);
        if (r == CUDA_SUCCESS)
            r = p_stream_get_capture_info(s, &status, NULL, NULL, &deps, NULL, &ndeps);
        if (r == CUDA_SUCCESS && ndeps != 1)
            r = CUDA_ERROR_INVALID_VALUE;
        if (r != CUDA_SUCCESS)
            break;
        update_nodes[i] = deps[0];
        memset(attrs, 0, sizeof attrs);
        attrs[0].id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
        attrs[0].value.deviceUpdatableKernelNode.deviceUpdatable = 1;
        attrs[1].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[1].value.programmaticStreamSerializationAllowed = 1;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = block_x;
        cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.hStream = s;
        cfg.attrs = attrs;
        cfg.numAttrs = pdl ? 2 : 1;
        r = p_launch_kernel_ex(&cfg, (CUfunction)dispatch_func, dispatch_params, NULL);
        dev_nodes[i] = (unsigned long long)(uintptr_t)attrs[0].value.deviceUpdatableKernelNode.devNode;
    }
    r_end = p_stream_end_capture(s, &graph);
    if (r == CUDA_SUCCESS)
        r = r_end;
    if (r == CUDA_SUCCESS && graph == NULL)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    for (i = 0; i < dispatches && r == CUDA_SUCCESS; ++i) {
        update_params[0] = &dev_nodes[i];
        memset(&np, 0, sizeof np);
        np.func = (CUfunction)update_func;
        np.gridDimX = np.gridDimY = np.gridDimZ = 1;
        np.blockDimX = np.blockDimY = np.blockDimZ = 1;
        np.kernelParams = update_params;
        r = p_kernel_node_set_params(update_nodes[i], &np);
    }
    if (r == CUDA_SUCCESS)
        r = p_graph_instantiate(&exec, graph, 0);
    if (graph != NULL)
        p_graph_destroy(graph);
    if (r == CUDA_SUCCESS)
        r = p_graph_upload(exec, s);
    if (r != CUDA_SUCCESS) {
        if (exec != NULL && p_graph_exec_destroy != NULL)
            p_graph_exec_destroy(exec);
        return (int)r;
    }
    *graph_exec_out = (void *)exec;
    return 0;
}
