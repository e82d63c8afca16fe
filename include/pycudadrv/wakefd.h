/* A file descriptor one thread writes to wake an event loop that watches it (pycudadrv/_waiter.pyx).
 *
 * Linux: one eventfd(2) (non-blocking, close-on-exec): a write adds 1 to its counter, a read returns
 * the counter and zeroes it, so any number of signals before a drain cost one wake-up.
 * Elsewhere (or where eventfd fails, e.g. an old kernel): a self-pipe, non-blocking on both ends; a
 * drain reads until the pipe is empty, and a signal into a full pipe is dropped (the loop is awake).
 *
 * All functions are async-signal-safe system calls and need no GIL. */
#ifndef PYCUDADRV_WAKEFD_H
#define PYCUDADRV_WAKEFD_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/eventfd.h>
#endif

/* Open: fds[0] is watched (read end), fds[1] is written; they are one descriptor for an eventfd.
 * Returns 0, or -1 with errno set. */
static inline int pycudadrv_wakefd_open(int fds[2]) {
#if defined(__linux__) && defined(EFD_NONBLOCK) && defined(EFD_CLOEXEC)
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd >= 0) {
        fds[0] = fds[1] = fd;
        return 0;
    }
#endif
#if defined(__linux__)
    /* pipe2 (glibc 2.9) sets both flags at once; fcntl would bind to fcntl64@GLIBC_2.28 under
     * _FILE_OFFSET_BITS=64 and raise the wheel's glibc floor (include/pycudadrv/glibc_floor.h). */
    return pipe2(fds, O_NONBLOCK | O_CLOEXEC);
#else
    if (pipe(fds) != 0)
        return -1;
    for (int k = 0; k < 2; k++) {
        int fl = fcntl(fds[k], F_GETFL);
        if (fl == -1 || fcntl(fds[k], F_SETFL, fl | O_NONBLOCK) == -1 || fcntl(fds[k], F_SETFD, FD_CLOEXEC) == -1) {
            int e = errno;
            close(fds[0]);
            close(fds[1]);
            errno = e;
            return -1;
        }
    }
    return 0;
#endif
}

/* Wake the watcher (one write; a full pipe or counter means it is awake already). */
static inline void pycudadrv_wakefd_signal(const int fds[2]) {
    ssize_t r;
    if (fds[0] == fds[1]) {
        uint64_t one = 1;
        do { r = write(fds[1], &one, sizeof one); } while (r < 0 && errno == EINTR);
    } else {
        char c = 1;
        do { r = write(fds[1], &c, 1); } while (r < 0 && errno == EINTR);
    }
    (void)r;
}

/* Consume every pending signal without blocking. */
static inline void pycudadrv_wakefd_drain(const int fds[2]) {
    ssize_t r;
    if (fds[0] == fds[1]) {
        uint64_t n;
        do { r = read(fds[0], &n, sizeof n); } while (r < 0 && errno == EINTR);
    } else {
        char buf[64];
        do { r = read(fds[0], buf, sizeof buf); } while (r > 0 || (r < 0 && errno == EINTR));
    }
    (void)r;
}

static inline void pycudadrv_wakefd_close(const int fds[2]) {
    close(fds[0]);
    if (fds[1] != fds[0])
        close(fds[1]);
}

#endif
