# The completion channel of pycudadrv.aio (see _channel.pyx); cimported by _waiter.
cimport cython
from libc.stdint cimport uint64_t
from posix.types cimport pid_t

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)

ctypedef struct channel_t:
    pthread_mutex_t mu
    int fds[2]
    int refs                 # the Python owner (until close) + one per pending wait
    int closed               # the owner closed it: completions are dropped
    pid_t pid                # the process that made it (a forked child never touches it)
    uint64_t* tokens         # finished waits: token and CUresult, n of cap
    int* status
    size_t n, cap
    long long t_wait         # --breakdown stamps (ns, CLOCK_MONOTONIC) of the last wake-up: the wait returned,
    long long t_signal       # the descriptor was written, the loop's reader ran (0: not taken)
    long long t_reader

cdef void channel_ref(channel_t* ch) noexcept nogil
cdef void channel_unref(channel_t* ch) noexcept nogil
cdef void channel_deliver(channel_t* ch, uint64_t token, int status) noexcept nogil

@cython.final
cdef class Channel:
    cdef channel_t* _ch
    cdef dict _waits
    cdef object _loop
