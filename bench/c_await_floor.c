/*
 * c_await_floor.c -- the C floors of bench/await_latency.py: how soon after an awaited kernel ends a
 * C waiter runs again, three ways, with the kernel and the sampling of the Python rows.
 *
 * Built at run time like bench/c_floor.c (bench/_cfloor.py compile_shared):
 *   cc -O2 -shared -fPIC -pthread -I<cuda include dir> c_await_floor.c -o c_await_floor.so -ldl
 * and called through ctypes (the GIL is released) from the process that runs the Python rows, on
 * the CUfunction, stream and events pycudadrv made (so the same kernel on the same stream).
 *
 * One sample: t0 (CLOCK_MONOTONIC); cuEventRecord(start); cuLaunchKernel(1 block of 32, the given
 * params); cuEventRecord(end); wait (below); t1. The sample is (t1 - t0) - cuEventElapsedTime(start,
 * end), in microseconds: launch latency plus the time from the kernel's end to the waiter running.
 *
 *   AWAIT_SYNC      cuStreamSynchronize(stream) on the calling thread.
 *   AWAIT_HOSTFUNC  cuLaunchHostFunc(stream, f) after `end`; f writes an eventfd that the calling
 *                   thread waits for with poll(2) (what an event loop does), then reads.
 *   AWAIT_WAITER    one waiter thread (started once, asleep on a condition variable while nothing is
 *                   pending) is handed `end`; it calls cuEventSynchronize(end) (an event made without
 *                   CU_EVENT_BLOCKING_SYNC: the driver spin-waits) with the context current, then writes
 *                   an eventfd the calling thread waits for with poll(2).
 *
 * Exported:
 *   int         await_init(const char* libcuda_path);        0, or an error code (await_init_error())
 *   const char* await_init_error(void);
 *   int         await_run(int mode, void* func, void* stream, void** params, void* start, void* end,
 *                         int samples, double* out_us, double* cpu_us);
 *                   `samples` samples into out_us; cpu_us[0] = process CPU us per sample (all threads:
 *                   the waiter's spinning included), cpu_us[1] = the calling thread's. 0 or a CUresult
 *                   (or -1 for a system call failure).
 *   int         await_arm(void* func, void* stream, void** params, void* start, void* end);
 *                   AWAIT_WAITER without the wait: record, launch, record, hand `end` to the waiter
 *                   thread and return 0 (or a CUresult); the caller waits on await_fd() itself (the
 *                   bench's "C waiter+asyncio" row: the same thread woken through asyncio's
 *                   add_reader), then calls await_take() (the waiter's CUresult; drains the fd).
 *   int         await_fd(void);                              the eventfd (the waiter started; -1: failed)
 *   int         await_take(void);
 *   double      await_elapsed_us(void* start, void* end);    cuEventElapsedTime in us (-1 on an error)
 *   void        await_stop(void);                            joins the waiter thread
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

enum { AWAIT_SYNC = 0, AWAIT_HOSTFUNC = 1, AWAIT_WAITER = 2 };

typedef CUresult (*get_proc_address_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static CUresult (*p_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void **, void **);
static CUresult (*p_record)(CUevent, CUstream);
static CUresult (*p_stream_sync)(CUstream);
static CUresult (*p_event_sync)(CUevent);
static CUresult (*p_elapsed)(float *, CUevent, CUevent);
static CUresult (*p_host_func)(CUstream, CUhostFn, void *);
static CUresult (*p_ctx_get)(CUcontext *);
static CUresult (*p_ctx_set)(CUcontext);
static char init_error[256] = "await_init() has not been called";

static int resolve(get_proc_address_t gp, const char *name, int version, void **out) {
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = gp(name, out, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || *out == NULL) {
        snprintf(init_error, sizeof init_error, "cuGetProcAddress(%s, %d): CUresult %d, status %d", name, version,
                 (int)r, (int)st);
        return r != CUDA_SUCCESS ? (int)r : -3;
    }
    return 0;
}

int await_init(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        lib = dlopen(path, RTLD_NOW);
    if (lib == NULL) {
        snprintf(init_error, sizeof init_error, "dlopen(%s): %s", path, dlerror());
        return -1;
    }
    get_proc_address_t gp = (get_proc_address_t)dlsym(lib, "cuGetProcAddress_v2");
    if (gp == NULL) {
        snprintf(init_error, sizeof init_error, "no cuGetProcAddress_v2 in %s", path);
        return -2;
    }
    int rc;
    if ((rc = resolve(gp, "cuLaunchKernel", 4000, (void **)&p_launch)) ||
        (rc = resolve(gp, "cuEventRecord", 2000, (void **)&p_record)) ||
        (rc = resolve(gp, "cuStreamSynchronize", 2000, (void **)&p_stream_sync)) ||
        (rc = resolve(gp, "cuEventSynchronize", 2000, (void **)&p_event_sync)) ||
        (rc = resolve(gp, "cuEventElapsedTime", 2000, (void **)&p_elapsed)) ||
        (rc = resolve(gp, "cuLaunchHostFunc", 10000, (void **)&p_host_func)) ||
        (rc = resolve(gp, "cuCtxGetCurrent", 4000, (void **)&p_ctx_get)) ||
        (rc = resolve(gp, "cuCtxSetCurrent", 4000, (void **)&p_ctx_set)))
        return rc;
    init_error[0] = 0;
    return 0;
}

const char *await_init_error(void) { return init_error; }

static double now_us(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

/* --- the waiter thread ---------------------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_t waiter;
static int waiter_started, waiter_stop;
static CUcontext waiter_ctx;
static CUevent pending;               /* the one pending event (one await at a time, as the bench does) */
static CUresult waiter_status;
static int efd = -1;

static void signal_fd(void) {
    uint64_t one = 1;
    ssize_t r;
    do { r = write(efd, &one, sizeof one); } while (r < 0 && errno == EINTR);
    (void)r;
}

static void *waiter_main(void *arg) {
    (void)arg;
    p_ctx_set(waiter_ctx);
    pthread_mutex_lock(&mu);
    for (;;) {
        while (pending == NULL && !waiter_stop)
            pthread_cond_wait(&cv, &mu);
        if (waiter_stop)
            break;
        CUevent ev = pending;
        pending = NULL;
        pthread_mutex_unlock(&mu);
        CUresult r = p_event_sync(ev);
        pthread_mutex_lock(&mu);
        waiter_status = r;
        pthread_mutex_unlock(&mu);
        signal_fd();
        pthread_mutex_lock(&mu);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void host_fn(void *arg) {
    (void)arg;
    signal_fd();
}

static int wait_fd(void) {
    struct pollfd p = {efd, POLLIN, 0};
    int r;
    do { r = poll(&p, 1, -1); } while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    uint64_t n;
    ssize_t k;
    do { k = read(efd, &n, sizeof n); } while (k < 0 && errno == EINTR);
    return 0;
}

void await_stop(void) {
    if (!waiter_started)
        return;
    pthread_mutex_lock(&mu);
    waiter_stop = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(waiter, NULL);
    waiter_started = waiter_stop = 0;
}

static int start_waiter(void) {
    CUresult r;
    if (efd < 0 && (efd = eventfd(0, EFD_CLOEXEC)) < 0)
        return -1;
    if (!waiter_started) {
        if ((r = p_ctx_get(&waiter_ctx)) != CUDA_SUCCESS)
            return (int)r;
        if (pthread_create(&waiter, NULL, waiter_main, NULL) != 0)
            return -1;
        waiter_started = 1;
    }
    return 0;
}

int await_fd(void) { return start_waiter() == 0 ? efd : -1; }

/* One sample's work: record start, the kernel (1 block of 32), record end. */
static CUresult queue_work(void *func, CUstream s, void **params, void *start, void *end) {
    CUresult r;
    if ((r = p_record((CUevent)start, s)) != CUDA_SUCCESS)
        return r;
    if ((r = p_launch((CUfunction)func, 1, 1, 1, 32, 1, 1, 0, s, params, NULL)) != CUDA_SUCCESS)
        return r;
    return p_record((CUevent)end, s);
}

/* Hand `end` to the waiter thread. */
static void hand_over(CUevent end) {
    pthread_mutex_lock(&mu);
    pending = end;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

int await_arm(void *func, void *stream, void **params, void *start, void *end) {
    CUresult r;
    int rc = start_waiter();
    if (rc != 0)
        return rc;
    if ((r = queue_work(func, (CUstream)stream, params, start, end)) != CUDA_SUCCESS)
        return (int)r;
    hand_over((CUevent)end);
    return 0;
}

double await_elapsed_us(void *start, void *end) {
    float ms = 0;
    return p_elapsed(&ms, (CUevent)start, (CUevent)end) == CUDA_SUCCESS ? 1e3 * (double)ms : -1.0;
}

int await_take(void) {
    uint64_t n;
    ssize_t k;
    do { k = read(efd, &n, sizeof n); } while (k < 0 && errno == EINTR);
    pthread_mutex_lock(&mu);
    CUresult r = waiter_status;
    pthread_mutex_unlock(&mu);
    return k < 0 ? -1 : (int)r;
}

int await_run(int mode, void *func, void *stream, void **params, void *start, void *end, int samples,
              double *out_us, double *cpu_us) {
    CUstream s = (CUstream)stream;
    CUresult r;
    if (efd < 0 && (efd = eventfd(0, EFD_CLOEXEC)) < 0)
        return -1;
    if (mode == AWAIT_WAITER && (r = (CUresult)start_waiter()) != 0)
        return (int)r;
    double p0 = now_us(CLOCK_PROCESS_CPUTIME_ID), c0 = now_us(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < samples; i++) {
        double t0 = now_us(CLOCK_MONOTONIC);
        if ((r = queue_work(func, s, params, start, end)) != CUDA_SUCCESS)
            return (int)r;
        if (mode == AWAIT_SYNC) {
            if ((r = p_stream_sync(s)) != CUDA_SUCCESS)
                return (int)r;
        } else if (mode == AWAIT_HOSTFUNC) {
            if ((r = p_host_func(s, host_fn, NULL)) != CUDA_SUCCESS)
                return (int)r;
            if (wait_fd() != 0)
                return -1;
        } else {
            hand_over((CUevent)end);
            if (wait_fd() != 0)
                return -1;
            if (waiter_status != CUDA_SUCCESS)
                return (int)waiter_status;
        }
        double t1 = now_us(CLOCK_MONOTONIC);
        float ms = 0;
        if ((r = p_elapsed(&ms, (CUevent)start, (CUevent)end)) != CUDA_SUCCESS)
            return (int)r;
        out_us[i] = (t1 - t0) - 1e3 * (double)ms;
    }
    cpu_us[0] = (now_us(CLOCK_PROCESS_CPUTIME_ID) - p0) / (samples > 0 ? samples : 1);
    cpu_us[1] = (now_us(CLOCK_THREAD_CPUTIME_ID) - c0) / (samples > 0 ? samples : 1);
    return 0;
}
