# cython: language_level=3
"""The waiter threads of pycudadrv.aio's ``"blocking"`` completion mode.

One native thread per device (a pthread, started on the first wait and never holding the GIL)
takes the pending events in submission order and waits for each with the device's primary context
current on it: ``cuStreamWaitEvent`` of a private stream on the event, then ``cuEventRecord`` +
``cuEventSynchronize`` of a ``CU_EVENT_BLOCKING_SYNC`` event on that stream (the thread sleeps in
the kernel until the GPU interrupt). With nothing pending the thread sleeps
on a condition variable.

Each event loop has a ``pycudadrv._channel.Channel`` (re-exported here): the thread hands each
finished (token, CUresult) to it, which wakes the loop through an ``eventfd(2)``.

Fork: a thread does not survive ``fork()``; in the child every waiter and channel of the parent is
forgotten (never touched: its mutex may have been held) and a new thread starts on the first wait.
Shutdown: :func:`stop_all` (registered with ``atexit``) asks every thread to stop and joins each
that stops within the timeout (one stuck in a wait for a kernel that never ends is detached).
"""
cimport cython
from libc.stdint cimport uint64_t, uintptr_t
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from posix.unistd cimport getpid
from posix.types cimport pid_t
from pycudadrv._cuda cimport *
from pycudadrv._driver cimport driver, make_error
from pycudadrv._driver_api cimport pycudadrv_driver_api
from pycudadrv._device cimport Device
from pycudadrv._stream cimport EventBase
from pycudadrv._channel cimport (channel_t, Channel, channel_ref, channel_unref, channel_deliver, pthread_mutex_t,
                                 pthread_mutex_lock, pthread_mutex_unlock)

import atexit
import os
from collections import deque

from pycudadrv._channel import LoopPoller, _set_timing
from pycudadrv._errors import ArgumentValueError, ClosedError, StateError

__all__ = ["Channel", "LoopPoller", "Waiter", "waiter_for", "stop_all", "error"]


cdef extern from "cuda.h" nogil:
    enum:
        CU_EVENT_BLOCKING_SYNC
        CUDA_ERROR_INVALID_CONTEXT


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t*, void*)
    int pthread_mutex_destroy(pthread_mutex_t*)
    int pthread_cond_init(pthread_cond_t*, void*)
    int pthread_cond_signal(pthread_cond_t*)
    int pthread_cond_broadcast(pthread_cond_t*)
    int pthread_cond_wait(pthread_cond_t*, pthread_mutex_t*)
    int pthread_cond_destroy(pthread_cond_t*)
    int pthread_create(pthread_t*, void*, void* (*)(void*) noexcept nogil, void*)
    int pthread_join(pthread_t, void**)
    int pthread_detach(pthread_t)


cdef extern from *:
    """
    #include "pycudadrv/glibc_floor.h"
    #include <pthread.h>
    #include <sched.h>
    #include <time.h>
    /* Wait on cv until *flag becomes nonzero or `seconds` pass (CLOCK_REALTIME, as pthread_cond_timedwait). */
    static int pycudadrv_cond_wait_flag(pthread_cond_t* cv, pthread_mutex_t* mu, volatile int* flag, double seconds) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long long ns = (long long)ts.tv_nsec + (long long)(seconds * 1e9);
        ts.tv_sec += (time_t)(ns / 1000000000LL);
        ts.tv_nsec = (long)(ns % 1000000000LL);
        while (!*flag) {
            if (pthread_cond_timedwait(cv, mu, &ts) != 0)
                break;
        }
        return *flag;
    }
    static void pycudadrv_pause_us(long us) {
        struct timespec ts = {0, us * 1000L};
        nanosleep(&ts, NULL);
    }
    #include <signal.h>
    /* The waiter takes no signal (Python's handlers run on the main thread) and is named in ps/gdb. */
    static void pycudadrv_thread_setup(void) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);
    #if defined(__linux__) && defined(__GLIBC__)
        pthread_setname_np(pthread_self(), "pycudadrv-wait");
    #endif
    }
    """
    int pycudadrv_cond_wait_flag(pthread_cond_t* cv, pthread_mutex_t* mu, volatile int* flag, double seconds) nogil
    void pycudadrv_pause_us(long us) nogil
    void pycudadrv_thread_setup() nogil



cdef pid_t _pid = getpid()    # this process (set again in a forked child)


# --- a waiter: one thread per device ------------------------------------------------------------

cdef enum:
    WAIT_BLOCKING = 1
    WAIT_FLAG = 2             # tests: spin on a host int32 until it is nonzero (1: success, v: CUresult v)

ctypedef struct entry_t:
    uint64_t token
    void* handle              # the CUevent, or the int32 address of a WAIT_FLAG entry
    channel_t* ch
    int kind

ctypedef struct waiter_t:
    pthread_mutex_t mu
    pthread_cond_t cv         # work arrived, or stop
    pthread_cond_t exited_cv
    entry_t* ring
    size_t head, count, cap
    int stop
    int started               # a thread exists (until it exits)
    volatile int exited
    int waiting               # the thread is inside a wait now
    pthread_t thread
    CUcontext ctx             # NULL: a test waiter (WAIT_FLAG entries only)
    CUresult (*set_current)(CUcontext) noexcept nogil
    CUresult (*ev_sync)(CUevent) noexcept nogil
    CUresult (*ev_record)(CUevent, CUstream) noexcept nogil
    CUresult (*ev_create)(CUevent*, unsigned int) noexcept nogil
    CUresult (*stream_create)(CUstream*, unsigned int) noexcept nogil
    CUresult (*stream_wait)(CUstream, CUevent, unsigned int) noexcept nogil
    CUstream priv_stream      # the blocking path's, made on the thread on first use
    CUevent blocking_event
    uint64_t done             # waits finished (for tests and repr)


cdef int wait_one(waiter_t* w, entry_t* e) noexcept nogil:
    cdef CUresult r
    cdef volatile int* flag
    cdef int v
    if e.kind == WAIT_FLAG:
        flag = <volatile int*>e.handle
        while True:
            v = flag[0]
            if v != 0:
                return 0 if v == 1 else v
            pycudadrv_pause_us(50)
    if w.ctx == NULL:
        return CUDA_ERROR_INVALID_CONTEXT
    if w.priv_stream == NULL:
        r = w.stream_create(&w.priv_stream, CU_STREAM_NON_BLOCKING)
        if r != CUDA_SUCCESS:
            w.priv_stream = NULL
            return r
    if w.blocking_event == NULL:
        r = w.ev_create(&w.blocking_event, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING)
        if r != CUDA_SUCCESS:
            w.blocking_event = NULL
            return r
    r = w.stream_wait(w.priv_stream, <CUevent>e.handle, 0)
    if r == CUDA_SUCCESS:
        r = w.ev_record(w.blocking_event, w.priv_stream)
    if r == CUDA_SUCCESS:
        r = w.ev_sync(w.blocking_event)
    return r


cdef void* waiter_main(void* arg) noexcept nogil:
    cdef waiter_t* w = <waiter_t*>arg
    cdef entry_t e
    cdef int status
    cdef CUresult ctx_status = CUDA_SUCCESS
    pycudadrv_thread_setup()
    if w.ctx != NULL:
        ctx_status = w.set_current(w.ctx)
    pthread_mutex_lock(&w.mu)
    while True:
        while w.count == 0 and not w.stop:
            pthread_cond_wait(&w.cv, &w.mu)
        if w.stop:
            break
        e = w.ring[w.head]
        w.head = (w.head + 1) % w.cap
        w.count -= 1
        w.waiting = 1
        pthread_mutex_unlock(&w.mu)
        status = ctx_status if (ctx_status != CUDA_SUCCESS and e.kind != WAIT_FLAG) else wait_one(w, &e)
        channel_deliver(e.ch, e.token, status)
        pthread_mutex_lock(&w.mu)
        w.waiting = 0
        w.done += 1
    w.exited = 1
    pthread_cond_broadcast(&w.exited_cv)
    pthread_mutex_unlock(&w.mu)
    return NULL


cdef void drop_queued(waiter_t* w) noexcept nogil:
    """With w->mu held, the thread gone: drop the waits still queued (their futures stay pending)."""
    cdef channel_t* ch
    while w.count:
        ch = w.ring[w.head].ch
        w.head = (w.head + 1) % w.cap
        w.count -= 1
        pthread_mutex_lock(&ch.mu)
        channel_unref(ch)


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
cdef class Waiter:
    """The waiter thread of one device (made by :func:`waiter_for`), or, with ``device=None``, a
    test waiter whose waits are host flags (:meth:`submit_flag`), needing no driver."""

    cdef waiter_t* _w
    cdef readonly object device
    cdef pid_t _pid
    # The Events of the waits in submission order, from the first not known finished: the thread
    # uses their handles without holding them, so they stay alive here until their wait is done
    # (waits finish in this order: w->done counts them), even if their future and loop are gone.
    cdef object _held
    cdef uint64_t _released

    def __cinit__(self, device=None):
        cdef waiter_t* w = <waiter_t*>malloc(sizeof(waiter_t))
        cdef pycudadrv_driver_api* d
        if w == NULL:
            raise MemoryError()
        memset(w, 0, sizeof(waiter_t))
        if device is not None:
            if not isinstance(device, Device):
                free(w)
                raise ArgumentValueError(f"Waiter: device must be a Device or None, got {type(device).__name__}")
            d = driver()
            w.ctx = (<Device>device)._context
            w.set_current = d.p_cuCtxSetCurrent
            w.ev_sync = d.p_cuEventSynchronize
            w.ev_record = d.p_cuEventRecord
            w.ev_create = d.p_cuEventCreate
            w.stream_create = d.p_cuStreamCreate
            w.stream_wait = d.p_cuStreamWaitEvent
        pthread_mutex_init(&w.mu, NULL)
        pthread_cond_init(&w.cv, NULL)
        pthread_cond_init(&w.exited_cv, NULL)
        self._w = w
        self.device = device
        self._pid = _pid
        self._held = deque()
        self._released = 0

    cdef int _push(self, void* handle, Channel ch, uint64_t token, int kind, object keep) except -1:
        cdef waiter_t* w = self._w
        cdef channel_t* c = ch._ch
        cdef entry_t* ring
        cdef size_t cap, k
        cdef int rc = 0
        cdef uint64_t done = 0
        if c == NULL:
            raise ClosedError("pycudadrv.aio: the completion channel is closed")
        if self._pid != _pid or c.pid != _pid:
            raise StateError("pycudadrv.aio: this waiter or channel belongs to the parent process (fork); use waiter_for()")
        channel_ref(c)
        # With the GIL held throughout (the thread never takes it, so this cannot deadlock): pushes
        # from several Python threads enter the ring and _held in one order.
        pthread_mutex_lock(&w.mu)
        if w.count == w.cap:
            cap = w.cap * 2 if w.cap else 64
            ring = <entry_t*>malloc(cap * sizeof(entry_t))
            if ring == NULL:
                rc = -1
            else:
                for k in range(w.count):
                    ring[k] = w.ring[(w.head + k) % w.cap]
                free(w.ring)
                w.ring, w.head, w.cap = ring, 0, cap
        if rc == 0:
            k = (w.head + w.count) % w.cap
            w.ring[k].token = token
            w.ring[k].handle = handle
            w.ring[k].ch = c
            w.ring[k].kind = kind
            w.count += 1
            if not w.started or w.exited:
                if w.started:                 # stopped before (stop_all): reap it, start anew
                    pthread_join(w.thread, NULL)
                w.started, w.exited, w.stop = 1, 0, 0
                if pthread_create(&w.thread, NULL, waiter_main, <void*>w) != 0:
                    w.started = 0
                    w.count -= 1
                    rc = -2
        done = w.done
        pthread_mutex_unlock(&w.mu)
        if rc == 0:                           # after the unlock: the woken thread does not block on w.mu
            pthread_cond_signal(&w.cv)
        # No Python code may run until _held matches the ring again: a release can (an Event's dealloc),
        # and another thread's push would then find this wait missing (or drop a live one's Event).
        held = self._held
        if rc == 0:
            held.append(keep)
        released = []
        while self._released < done:
            released.append(held.popleft())
            self._released += 1
        del released
        if rc != 0:
            pthread_mutex_lock(&c.mu)
            channel_unref(c)
            if rc == -1:
                raise MemoryError()
            raise StateError("pycudadrv.aio: cannot start the waiter thread (pthread_create failed)")
        return 0

    def submit(self, EventBase event not None, Channel channel not None, unsigned long long token):
        """Queue a wait for ``event`` (recorded; the waiter keeps it alive until the wait is done): the
        thread sleeps in the driver until it is done (a ``CU_EVENT_BLOCKING_SYNC`` event behind it on a
        private stream). Starts the thread on first use. Raises ClosedError for a closed channel or
        event."""
        if self._w == NULL:
            raise StateError("pycudadrv.aio: this waiter was stopped while stuck in a wait; use waiter_for()")
        if self._w.ctx == NULL:
            raise StateError("pycudadrv.aio: a test waiter (device=None) takes submit_flag() only")
        if event._closed or event._handle == NULL:
            raise ClosedError("pycudadrv.aio: the awaited event is closed")
        self._push(<void*>event._handle, channel, token, WAIT_BLOCKING, event)

    def submit_flag(self, uintptr_t address, Channel channel not None, unsigned long long token):
        """Tests: queue a wait that spins (50 us pauses) until the int32 at ``address`` is nonzero
        (1 reports success, any other value v reports CUresult v). The caller keeps the memory alive
        until the token comes back."""
        if address == 0:
            raise ArgumentValueError("Waiter.submit_flag: address is NULL")
        if self._w == NULL:
            raise StateError("pycudadrv.aio: this waiter was stopped while stuck in a wait; use waiter_for()")
        self._push(<void*>address, channel, token, WAIT_FLAG, None)

    @property
    def pending(self):
        """Waits queued or in progress."""
        cdef int n
        if self._w == NULL or self._pid != _pid:
            return 0
        with nogil:
            pthread_mutex_lock(&self._w.mu)
            n = <int>self._w.count + self._w.waiting
            pthread_mutex_unlock(&self._w.mu)
        return n

    @property
    def running(self):
        """Whether the thread is alive."""
        return self._w != NULL and self._pid == _pid and bool(self._w.started and not self._w.exited)

    @property
    def completed(self):
        """Waits finished since the waiter was made."""
        return 0 if self._w == NULL else self._w.done

    def stop(self, double timeout_s=1.0):
        """Ask the thread to stop (waits still queued are abandoned: their futures stay pending) and
        join it if it stops within ``timeout_s`` seconds; a thread stuck in a wait longer is
        detached. Returns whether it was joined (True too when no thread ran). The next submit
        starts a new one."""
        cdef waiter_t* w = self._w
        cdef int ok
        if self._pid != _pid or w == NULL:
            return True
        with nogil:
            pthread_mutex_lock(&w.mu)
            if not w.started:
                pthread_mutex_unlock(&w.mu)
                ok = 1
            else:
                w.stop = 1
                pthread_cond_broadcast(&w.cv)
                ok = pycudadrv_cond_wait_flag(&w.exited_cv, &w.mu, &w.exited, timeout_s)
                w.started = 0
                if ok:
                    drop_queued(w)      # the thread has let go of everything
                pthread_mutex_unlock(&w.mu)
                if ok:
                    pthread_join(w.thread, NULL)
                else:
                    pthread_detach(w.thread)
        if ok:
            self._held.clear()            # finished or dropped: nothing of the thread's is left
            self._released = w.done
        else:
            self._w = NULL                # the detached thread still uses it: leave it to the thread
            self._pid = -1
        return bool(ok)

    def __dealloc__(self):
        if self._w != NULL and self._pid == _pid and not self._w.started:
            pthread_cond_destroy(&self._w.cv)
            pthread_cond_destroy(&self._w.exited_cv)
            pthread_mutex_destroy(&self._w.mu)
            free(self._w.ring)
            free(self._w)
        # a running thread (never expected: waiters live in _waiters) or a parent's keeps its memory

    def __repr__(self):
        if self._w == NULL:
            return "<aio waiter, detached>"
        where = "test waiter" if self._w.ctx == NULL else f"device {self.device.ordinal}"
        return f"<aio waiter of {where}, {'running' if self.running else 'idle, no thread'}, {self.pending} pending>"


cdef dict _waiters = {}       # device ordinal -> Waiter


def waiter_for(device):
    """The waiter of ``device`` (a Device; made on first use, its thread starts on the first
    submit), or with None this process's test waiter (host flags, no driver)."""
    key = None if device is None else (<Device?>device).ordinal
    w = _waiters.get(key)
    if w is None or (<Waiter>w)._w == NULL:
        w = _waiters[key] = Waiter(device)
    return w


def stop_all(double timeout_s=0.5):
    """Stop every waiter thread (at interpreter exit); returns whether all were joined."""
    ok = True
    for w in list(_waiters.values()):
        ok = (<Waiter>w).stop(timeout_s) and ok
    return ok


def error(int status, str call, str context=""):
    """The CudaError of a failed wait (``status`` a CUresult)."""
    return make_error(<CUresult>status, call, context)


def _forget_after_fork():
    global _waiters, _pid
    _pid = getpid()
    for w in _waiters.values():
        (<Waiter>w)._pid = -1     # never touched again in this process
        (<Waiter>w)._w = NULL
    _waiters = {}


globals()["Channel"] = Channel    # re-exported (a cimported class makes no module attribute by itself)
atexit.register(stop_all)
os.register_at_fork(after_in_child=_forget_after_fork)
