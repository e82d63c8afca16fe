/*
 * c_cudnn_floor.c -- cuDNN's own floor for bench/matmul.py: a C loop of cudnnBackendExecute
 * on one handle, execution plan and variant pack, with nothing between the calls but the
 * loop and a status check. The three come from pycudadrv (MatmulPlan._raw_handles: the
 * plan's handle with cudnnSetStream done, its execution plan, the finalized variant pack of
 * the operands), so this loop executes exactly what `plan(a, b, out, stream=s)` executes
 * and the difference between the two is what pycudadrv adds.
 *
 * bench/matmul.py compiles it at run time as bench/_cfloor.py compiles c_floor.c:
 *   cc -O2 -shared -fPIC c_cudnn_floor.c -o c_cudnn_floor.so -ldl
 * No cuDNN header is needed: the entry points are declared below as cudnn_graph.h declares
 * them (a handle and descriptors are pointers, cudnnStatus_t an int-sized enum). Where the
 * header is installed (the nvidia-cudnn-cu13 wheel's include/), the benchmark adds
 *   -DPYCUDADRV_CHECK_CUDNN_H -I<cudnn include> -I<cuda include>
 * and these declarations are checked against it at compile time.
 *
 * Nothing links against libcudnn: cudnn_floor_init() takes the libcudnn.so.9 that pycudadrv
 * has loaded (pycudadrv.cudnn.library_path(); dlopen with RTLD_NOLOAD, so a second copy of
 * cuDNN, whose handles would not be those of the first, is never loaded).
 *
 * Exported (none touches Python; ctypes releases the GIL around them):
 *   int         cudnn_floor_init(const char* libcudnn_path);   0, or -1 (cudnn_floor_init_error)
 *   const char* cudnn_floor_init_error(void);
 *   double      cudnn_floor_execute_loop(void* handle, void* plan, void* variant_pack, int iters);
 *                   elapsed seconds (CLOCK_MONOTONIC around the loop), or -(cudnnStatus_t) of the
 *                   first failing cudnnBackendExecute (so a value < 0 is an error)
 *   const char* cudnn_floor_status_name(int status);            cudnnGetErrorString(status)
 *   int         cudnn_floor_checked_against_header(void);       1 when built with the header check
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

typedef int cudnn_status_t;
typedef cudnn_status_t (*execute_t)(void *handle, void *execution_plan, void *variant_pack);
typedef const char *(*error_string_t)(cudnn_status_t status);

#ifdef PYCUDADRV_CHECK_CUDNN_H
#include <cudnn_graph.h>
_Static_assert(sizeof(cudnnStatus_t) == sizeof(cudnn_status_t), "cudnnStatus_t is not int-sized");
_Static_assert(CUDNN_STATUS_SUCCESS == 0, "CUDNN_STATUS_SUCCESS is not 0");
_Static_assert(sizeof(cudnnHandle_t) == sizeof(void *), "cudnnHandle_t is not a pointer");
_Static_assert(sizeof(cudnnBackendDescriptor_t) == sizeof(void *), "cudnnBackendDescriptor_t is not a pointer");
/* The header's declarations have the shapes assumed above (typeof: no reference to the symbols). */
_Static_assert(__builtin_types_compatible_p(__typeof__(cudnnBackendExecute),
                                            cudnnStatus_t(cudnnHandle_t, cudnnBackendDescriptor_t,
                                                          cudnnBackendDescriptor_t)),
               "cudnnBackendExecute(handle, executionPlan, variantPack) changed");
_Static_assert(__builtin_types_compatible_p(__typeof__(cudnnGetErrorString), const char *(cudnnStatus_t)),
               "cudnnGetErrorString(status) changed");
#define CHECKED 1
#else
#define CHECKED 0
#endif

static execute_t p_execute = NULL;
static error_string_t p_error_string = NULL;
static char init_error[512] = "cudnn_floor_init() was not called";

int cudnn_floor_init(const char *libcudnn_path) {
    void *lib = dlopen(libcudnn_path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        const char *e = dlerror();
        snprintf(init_error, sizeof init_error, "%s is not loaded in this process (dlopen RTLD_NOLOAD: %s); "
                 "load it through pycudadrv.cudnn first", libcudnn_path, e ? e : "?");
        return -1;
    }
    p_execute = (execute_t)dlsym(lib, "cudnnBackendExecute");
    p_error_string = (error_string_t)dlsym(lib, "cudnnGetErrorString");
    if (p_execute == NULL || p_error_string == NULL) {
        snprintf(init_error, sizeof init_error, "%s lacks cudnnBackendExecute or cudnnGetErrorString",
                 libcudnn_path);
        p_execute = NULL;
        return -1;
    }
    init_error[0] = '\0';
    return 0;
}

const char *cudnn_floor_init_error(void) { return init_error; }

int cudnn_floor_checked_against_header(void) { return CHECKED; }

const char *cudnn_floor_status_name(int status) {
    const char *s = p_error_string != NULL ? p_error_string(status) : NULL;
    return s != NULL ? s : "?";
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cudnn_floor_execute_loop(void *handle, void *plan, void *variant_pack, int iters) {
    if (p_execute == NULL)
        return -1e9;   /* not initialised: no cudnnStatus_t is that large */
    double t0 = now_s();
    for (int i = 0; i < iters; i++) {
        cudnn_status_t st = p_execute(handle, plan, variant_pack);
        if (st != 0)
            return -(double)st;
    }
    return now_s() - t0;
}
