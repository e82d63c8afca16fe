# cython: language_level=3
"""The completion channel of pycudadrv.aio's ``"blocking"`` mode: where its waiter threads hand one
event loop their finished waits, and that loop's reader; and the poller of its ``"loop"`` futures
(:class:`LoopPoller`).

A :class:`Channel` is a list of finished (token, CUresult) pairs behind a pthread mutex and an
``eventfd(2)`` (a self-pipe where there is none). A waiter thread (``pycudadrv._waiter``) appends, and writes the descriptor only when the list was empty (one wake-up per batch),
after letting the mutex go. The loop watches the descriptor once (:meth:`Channel.watch`, one
``loop.add_reader`` per loop); its reader :meth:`Channel.ready` drains it, finishes the awaited
futures and steps their tasks in that same loop iteration. A channel is freed when its owner closed
it and no pending wait refers to it any more (completions arriving later are dropped).

``bench/await_latency.py --breakdown`` turns on (:func:`_set_timing`, a C flag: off, one load per
delivery) CLOCK_MONOTONIC stamps of the last wake-up, read with :meth:`Channel._timestamps`.
"""
cimport cython
from libc.stdint cimport uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memset
from libc.errno cimport errno
from posix.unistd cimport getpid
from posix.types cimport pid_t
from pycudadrv._cuda cimport *
from pycudadrv._event cimport query_now

import os
from collections import deque

from pycudadrv._errors import ClosedError, StateError

__all__ = ["Channel", "LoopPoller"]


cdef extern from "<pthread.h>" nogil:
    int pthread_mutex_init(pthread_mutex_t*, void*)
    int pthread_mutex_destroy(pthread_mutex_t*)


cdef extern from *:
    """
    #include "pycudadrv/glibc_floor.h"
    #include <time.h>
    /* --breakdown: deliveries and readers take CLOCK_MONOTONIC stamps only while this is set. */
    static volatile int pycudadrv_aio_timing = 0;
    static long long pycudadrv_mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec;
    }
    """
    int pycudadrv_aio_timing
    long long pycudadrv_mono_ns() nogil


cdef extern from "pycudadrv/wakefd.h" nogil:
    int pycudadrv_wakefd_open(int fds[2])
    void pycudadrv_wakefd_signal(const int fds[2])
    void pycudadrv_wakefd_drain(const int fds[2])
    void pycudadrv_wakefd_close(const int fds[2])




cdef pid_t _pid = getpid()    # this process (set again in a forked child)


def _forget_after_fork():
    global _pid
    _pid = getpid()


os.register_at_fork(after_in_child=_forget_after_fork)


# --- a channel: finished waits handed to one event loop ----------------------------------------

cdef void channel_ref(channel_t* ch) noexcept nogil:
    """One more reference: a pending wait or host function that will deliver to it."""
    pthread_mutex_lock(&ch.mu)
    ch.refs += 1
    pthread_mutex_unlock(&ch.mu)


cdef void channel_unref(channel_t* ch) noexcept nogil:
    """Drop one reference (with ch->mu held by the caller, which it releases); free at zero."""
    ch.refs -= 1
    cdef int last = ch.refs == 0
    pthread_mutex_unlock(&ch.mu)
    if last:
        pycudadrv_wakefd_close(ch.fds)
        pthread_mutex_destroy(&ch.mu)
        free(ch.tokens)
        free(ch.status)
        free(ch)


cdef void channel_deliver(channel_t* ch, uint64_t token, int status) noexcept nogil:
    """On a waiter thread: hand (token, status) over and drop the wait's reference. The descriptor is
    written after the mutex is let go (the woken reader takes it at once), the reference still held
    (so the descriptor stays open). With timing on (_set_timing), the stamps of the wake-up."""
    cdef long long t_wait = pycudadrv_mono_ns() if pycudadrv_aio_timing else 0
    cdef int wake = 0
    cdef size_t cap
    cdef void* p
    pthread_mutex_lock(&ch.mu)
    if not ch.closed:
        if ch.n == ch.cap:
            cap = ch.cap * 2 if ch.cap else 64
            p = realloc(ch.tokens, cap * sizeof(uint64_t))
            if p != NULL:
                ch.tokens = <uint64_t*>p
                p = realloc(ch.status, cap * sizeof(int))
                if p != NULL:
                    ch.status = <int*>p
                    ch.cap = cap
        if ch.n < ch.cap:         # (out of memory: the completion is lost; .result() still works)
            ch.tokens[ch.n] = token
            ch.status[ch.n] = status
            ch.n += 1
            wake = ch.n == 1      # the list was empty: the loop needs a wake-up
    if not wake:
        channel_unref(ch)
        return
    if t_wait:
        ch.t_wait = t_wait
    pthread_mutex_unlock(&ch.mu)
    pycudadrv_wakefd_signal(ch.fds)
    pthread_mutex_lock(&ch.mu)
    if t_wait:
        ch.t_signal = pycudadrv_mono_ns()
    channel_unref(ch)


@cython.final
cdef size_t channel_swap(channel_t* ch, uint64_t** tokens, int** status) noexcept nogil:
    """Drain the descriptor and take the delivered (token, CUresult) arrays (the caller frees
    them); returns their length."""
    cdef size_t n
    pycudadrv_wakefd_drain(ch.fds)
    pthread_mutex_lock(&ch.mu)
    tokens[0], status[0], n = ch.tokens, ch.status, ch.n
    ch.tokens = NULL
    ch.status = NULL
    ch.n = ch.cap = 0
    pthread_mutex_unlock(&ch.mu)
    return n


@cython.binding(False)     # methods are method descriptors: CPython checks self
cdef class Channel:
    """Where the waiter threads hand one event loop its finished waits.

    ``loop.add_reader(ch.fileno(), callback)``; the callback calls :meth:`take`. :meth:`close`
    when the loop is gone (the descriptor is closed once no pending wait refers to it).
    Raises StateError (with the errno text of ``eventfd``/``pipe``) when no descriptor can be made."""

    # _ch; _waits: token -> the object whose _waited(status, loop, out) finishes it (watch());
    # _loop: a weak reference to the loop

    def __cinit__(self):
        cdef channel_t* ch = <channel_t*>malloc(sizeof(channel_t))
        if ch == NULL:
            raise MemoryError()
        memset(ch, 0, sizeof(channel_t))
        if pycudadrv_wakefd_open(ch.fds) != 0:
            e = errno
            free(ch)
            raise StateError(f"pycudadrv.aio: cannot make an eventfd or a pipe for the event loop: {os.strerror(e)}")
        pthread_mutex_init(&ch.mu, NULL)
        ch.refs = 1
        ch.pid = _pid
        self._ch = ch

    def fileno(self):
        """The descriptor the loop watches (the eventfd, or the pipe's read end)."""
        if self._ch == NULL:
            raise ClosedError("pycudadrv.aio: the completion channel is closed")
        return self._ch.fds[0]

    def take(self):
        """Drain the descriptor and return the finished waits since the last call: a list whose
        items are the token (an int) of a wait that succeeded, or ``(token, CUresult)`` for one
        whose ``cuEventSynchronize`` (or the blocking path's calls) failed."""
        cdef channel_t* ch = self._ch
        cdef uint64_t* tokens
        cdef int* status
        cdef size_t n, k
        if ch == NULL or ch.pid != _pid:
            return []
        with nogil:
            n = channel_swap(ch, &tokens, &status)
        out = []
        try:
            for k in range(n):
                if status[k] == 0:
                    out.append(tokens[k])
                else:
                    out.append((tokens[k], status[k]))
        finally:
            free(tokens)
            free(status)
        return out

    def watch(self, loop, dict waits not None):
        """Be ``loop``'s reader of this channel (registered once with ``loop.add_reader``, for
        every wait to come): :meth:`ready` finishes ``waits[token]`` (popped) of each delivered
        token through ``_waited(status, loop, out)``, which appends to the list ``out`` the
        asyncio futures of ``loop`` to resolve (a token not in ``waits`` is dropped). The channel
        holds ``loop`` weakly. Raises ClosedError for a closed channel."""
        global _Future
        if self._ch == NULL:
            raise ClosedError("pycudadrv.aio: the completion channel is closed")
        if _Future is None:
            import asyncio
            _Future = asyncio.Future
        import weakref
        self._waits, self._loop = waits, weakref.ref(loop)
        loop.add_reader(self._ch.fds[0], self.ready)

    def ready(self):
        """The loop's reader (see :meth:`watch`): drain the descriptor, finish what was delivered,
        and resume each task awaiting one of them now, in this loop iteration (its wake-up is not
        queued with ``call_soon`` for the next one)."""
        cdef channel_t* ch = self._ch
        cdef uint64_t* tokens
        cdef int* status
        cdef size_t n, k
        cdef dict waits = self._waits
        if ch == NULL or ch.pid != _pid or waits is None:
            return
        if pycudadrv_aio_timing:
            ch.t_reader = pycudadrv_mono_ns()
        with nogil:
            n = channel_swap(ch, &tokens, &status)
        if n == 0:
            return
        loop = self._loop()
        out = []
        try:
            try:
                for k in range(n):
                    gf = waits.pop(tokens[k], None)
                    if gf is not None:
                        gf._waited(status[k], loop, out)
            finally:
                free(tokens)
                free(status)
        finally:
            _resume_all(out, loop)

    def _timestamps(self):
        """bench/await_latency.py --breakdown: ``(t_wait, t_signal, t_reader)`` in ns of
        CLOCK_MONOTONIC (``time.monotonic_ns()``) at the last wake-up: the waiter's wait returned, the descriptor was written, :meth:`ready` was entered; 0 where not
        taken (timing off, see :func:`_set_timing`), or not yet: the writer stamps t_signal after
        its write, which may wake the reader first. Zeroes them."""
        cdef channel_t* ch = self._ch
        cdef long long a, b, c
        if ch == NULL or ch.pid != _pid:
            return (0, 0, 0)
        pthread_mutex_lock(&ch.mu)
        a, b, c = ch.t_wait, ch.t_signal, ch.t_reader
        ch.t_wait = ch.t_signal = ch.t_reader = 0
        pthread_mutex_unlock(&ch.mu)
        return (a, b, c)

    def deliver(self, unsigned long long token, int status=0):
        """Hand ``token`` (with CUresult ``status``) over from Python, as a
        finished wait would (for stand-ins of the driver in tests). Raises
        ClosedError for a closed channel."""
        cdef channel_t* ch = self._ch
        if ch == NULL:
            raise ClosedError("pycudadrv.aio: the completion channel is closed")
        channel_ref(ch)
        with nogil:
            channel_deliver(ch, token, status)

    @property
    def closed(self):
        return self._ch == NULL

    def close(self):
        """Stop delivering (what finishes later is dropped); a second close is a no-op."""
        cdef channel_t* ch = self._ch
        if ch == NULL:
            return
        self._ch = NULL
        if ch.pid != _pid:
            return                # the parent's, before a fork: never touched
        pthread_mutex_lock(&ch.mu)
        ch.closed = 1
        channel_unref(ch)

    def __dealloc__(self):
        self.close()

    def __repr__(self):
        return "<aio completion channel, closed>" if self._ch == NULL else f"<aio completion channel fd {self._ch.fds[0]}>"


cdef object _Future = None    # asyncio.Future (imported by the first Channel.watch)


cdef _resume(fut, loop):
    """Resolve ``fut`` (an asyncio future of ``loop``, on its thread) and run its done callbacks
    now (a task's wake-up: the task steps here), each in its own context, as the loop would run
    them one iteration later; what a callback raises goes to the loop's exception handler, as
    there. A future of another type is only resolved (its callbacks queued as usual)."""
    if fut.done():
        return
    cbs = getattr(fut, "_callbacks", None) if type(fut) is _Future else None   # [(callback, context)] or None (an asyncio without it: resolved as usual)
    if not cbs:
        fut.set_result(None)
        return
    for cb, _ctx in cbs:
        fut.remove_done_callback(cb)
    fut.set_result(None)
    for cb, ctx in cbs:
        try:
            ctx.run(cb, fut)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            loop.call_exception_handler({"message": f"Exception in callback {cb!r}", "exception": exc})


cdef _resume_all(list out, loop):
    cdef Py_ssize_t k = 0
    try:
        while k < len(out):
            k += 1
            _resume(out[k - 1], loop)
    finally:
        for fut in out[k:]:            # a callback raised SystemExit / KeyboardInterrupt: the rest as usual
            if not fut.done():
                fut.set_result(None)


@cython.binding(False)     # methods are method descriptors: CPython checks self
@cython.final
cdef class LoopPoller:
    """The futures of one event loop that pycudadrv.aio asks the driver about (``cuEventQuery``,
    from here): those of its ``"loop"`` mode, in groups. A group is a
    deque of futures that finish in order (one stream's, recorded in that order), or a lone future;
    a sweep asks each group's front.

    The loop's own thread sweeps once per loop iteration while any future is pending (:meth:`run`, a
    callback that ``loop.call_soon``-s itself again from the first :meth:`add`; the loop never sleeps
    in its selector meanwhile, so one core is busy, as for a blocking ``synchronize()``); with nothing
    pending it is not scheduled and the loop sleeps. A future finished there has its awaiting tasks
    resumed in the same iteration (as :meth:`Channel.ready` does). A future whose event is not a pycudadrv event (or closed, never
    recorded, or a capture is in progress, when the driver must not be asked), or whose query
    fails, is asked through its own ``_check()`` (which turns a fault into its error).

    ``LoopPoller(loop, pending, done)``: ``pending``/``done``, the future states of
    pycudadrv.aio. The loop is held weakly."""

    cdef dict _groups
    cdef Py_ssize_t _count
    cdef object _loop
    cdef bint _scheduled
    cdef int _pending, _done

    def __cinit__(self, loop, int pending, int done):
        import weakref
        self._groups = {}
        self._loop = weakref.ref(loop)
        self._pending, self._done = pending, done

    @property
    def count(self):
        """The futures not yet seen finished."""
        return self._count

    def add(self, gf, key):
        """Watch GpuFuture ``gf`` in group ``key`` (behind that group's earlier futures), and be
        scheduled (``loop.call_soon``) unless already."""
        dq = self._groups.get(key)
        if dq is None:
            dq = self._groups[key] = deque()
        dq.append(gf)
        self._count += 1
        self._schedule()

    cdef int _schedule(self) except -1:
        if self._scheduled or not self._count:
            return 0
        loop = self._loop()
        if loop is None or loop.is_closed():
            return 0
        loop.call_soon(self.run)
        self._scheduled = True
        return 0

    cdef int _finished(self, gf, loop, list out) except -1:
        """1 if ``gf`` is finished now (finishing it), 0 if not."""
        cdef CUresult r
        cdef int k
        if gf._state != self._pending:
            return 1
        k = query_now(gf._event, True, &r)
        if k == 0:
            return 0
        if k == 1:
            gf._finish(self._done, loop, out)
            return 1
        return 1 if gf._check() else 0      # not asked here, or the query failed: its own check says why

    cdef bint _drain(self, object key, object loop, list out) except -1:
        """Finish group ``key``'s futures that have finished, front first; whether any did."""
        dq = self._groups.get(key)
        cdef bint progressed = False
        while dq:
            if not self._finished(dq[0], loop, out):
                break
            dq.popleft()
            self._count -= 1
            progressed = True
        if dq is not None and not dq:
            del self._groups[key]
        return progressed

    def sweep(self, key=None):
        """Finish what has finished (each group's front first; only group ``key`` if given), their
        asyncio futures resolved as usual (the awaiting tasks resume at the loop's next iteration);
        whether anything finished."""
        cdef bint progressed = False
        loop = self._loop()
        if loop is None:
            return False
        if key is not None:
            return self._drain(key, loop, None)
        for k in list(self._groups):
            if self._drain(k, loop, None):
                progressed = True
        return progressed

    def run(self):
        """The ``"loop"`` mode's sweep (the loop's callback): finish what has finished, resume the tasks
        awaiting those in this iteration, and be scheduled again while any future is pending."""
        self._scheduled = False
        loop = self._loop()
        if loop is None:
            return
        out = []
        try:
            for key in list(self._groups):
                self._drain(key, loop, out)
        finally:
            try:
                _resume_all(out, loop)
            finally:
                self._schedule()

    def __repr__(self):
        return f"<aio loop poller, {self._count} pending>"


def _set_timing(bint on):
    """bench/await_latency.py --breakdown: take the stamps of :meth:`Channel._timestamps` (a C flag;
    off by default). Returns the previous setting."""
    global pycudadrv_aio_timing
    prev = bool(pycudadrv_aio_timing)
    pycudadrv_aio_timing = 1 if on else 0
    return prev
