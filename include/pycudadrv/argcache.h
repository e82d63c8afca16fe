/* The generic launch's memory of the arguments it packed last (pycudadrv._marshal.marshal_cached).
 *
 * Per parameter, `keep` holds the object packed there last: an owned reference to an immutable
 * scalar (its bytes stay valid while the very same object comes back), or, where `isbuf` is set,
 * the address of the exact Buffer packed there, borrowed (nothing is held alive: the slot is
 * packed again at every launch, from the object the caller passes, whatever it is now). `bufs`
 * lists the parameters whose `isbuf` is set (rebuilt when `stale`), so a launch finds what
 * changed with one scan of `keep` against the caller's argument array and then repacks the
 * Buffers alone. `gather` is room for the argument array of a launch whose values are mapped
 * onto the parameters (TritonKernel.launch). One allocation holds every array. */
#ifndef PYCUDADRV_ARGCACHE_H
#define PYCUDADRV_ARGCACHE_H
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct {
    void **keep;
    Py_ssize_t *bufs;
    void **gather;
    unsigned char *isbuf;
    Py_ssize_t n, nbuf;
    int stale;
} pycudadrv_argcache;

static inline void pycudadrv_argcache_zero(pycudadrv_argcache *c) {
    c->keep = NULL;
    c->bufs = NULL;
    c->gather = NULL;
    c->isbuf = NULL;
    c->n = c->nbuf = 0;
    c->stale = 0;
}

/* n parameters, nothing kept; 0, or -1 (out of memory: `c` left empty). */
static inline int pycudadrv_argcache_init(pycudadrv_argcache *c, Py_ssize_t n) {
    size_t m = n > 0 ? (size_t)n : 1;
    char *p = (char *)calloc(1, m * (2 * sizeof(void *) + sizeof(Py_ssize_t) + 1));
    pycudadrv_argcache_zero(c);
    if (p == NULL) return -1;
    c->keep = (void **)p;
    c->gather = (void **)(p + m * sizeof(void *));
    c->bufs = (Py_ssize_t *)(p + 2 * m * sizeof(void *));
    c->isbuf = (unsigned char *)(p + m * (2 * sizeof(void *) + sizeof(Py_ssize_t)));
    c->n = n;
    return 0;
}

/* Drop the owned references and the arrays (safe on an empty or zeroed cache). */
static inline void pycudadrv_argcache_release(pycudadrv_argcache *c) {
    Py_ssize_t k;
    void **keep = c->keep;
    if (keep != NULL) {
        for (k = 0; k < c->n; k++) {
            if (keep[k] != NULL && !c->isbuf[k]) {
                PyObject *o = (PyObject *)keep[k];
                keep[k] = NULL;
                Py_DECREF(o);
            }
        }
        free(keep);
    }
    pycudadrv_argcache_zero(c);
}

/* Parameter i keeps nothing. */
static inline void pycudadrv_argcache_forget(pycudadrv_argcache *c, Py_ssize_t i) {
    void *old = c->keep[i];
    c->keep[i] = NULL;
    if (c->isbuf[i]) {
        c->isbuf[i] = 0;
        c->stale = 1;
    } else if (old != NULL) {
        Py_DECREF((PyObject *)old);
    }
}

static inline void pycudadrv_argcache_rebuild(pycudadrv_argcache *c) {
    Py_ssize_t k, m = 0;
    for (k = 0; k < c->n; k++)
        if (c->isbuf[k]) c->bufs[m++] = k;
    c->nbuf = m;
    c->stale = 0;
}

/* The first index in [i, n) where a[k] != b[k], or n. */
static Py_ssize_t pycudadrv_first_diff_plain(void *const *a, void *const *b, Py_ssize_t i, Py_ssize_t n) {
    for (; i + 4 <= n; i += 4) {
        if ((((uintptr_t)a[i] ^ (uintptr_t)b[i]) | ((uintptr_t)a[i + 1] ^ (uintptr_t)b[i + 1]) |
             ((uintptr_t)a[i + 2] ^ (uintptr_t)b[i + 2]) | ((uintptr_t)a[i + 3] ^ (uintptr_t)b[i + 3])) != 0)
            break;
    }
    for (; i < n; i++)
        if (a[i] != b[i]) break;
    return i;
}

#if defined(__GNUC__) && defined(__x86_64__)
/* The same, 16 pointers (four 32-byte compares) at a time. */
__attribute__((target("avx2"))) static Py_ssize_t pycudadrv_first_diff_avx2(void *const *a, void *const *b,
                                                                            Py_ssize_t i, Py_ssize_t n) {
    for (; i + 16 <= n; i += 16) {
        __m256i x0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + i)),
                                      _mm256_loadu_si256((const __m256i *)(b + i)));
        __m256i x1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + i + 4)),
                                      _mm256_loadu_si256((const __m256i *)(b + i + 4)));
        __m256i x2 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + i + 8)),
                                      _mm256_loadu_si256((const __m256i *)(b + i + 8)));
        __m256i x3 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + i + 12)),
                                      _mm256_loadu_si256((const __m256i *)(b + i + 12)));
        __m256i x = _mm256_or_si256(_mm256_or_si256(x0, x1), _mm256_or_si256(x2, x3));
        if (!_mm256_testz_si256(x, x)) break;
    }
    for (; i + 4 <= n; i += 4) {
        __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(a + i)),
                                     _mm256_loadu_si256((const __m256i *)(b + i)));
        if (!_mm256_testz_si256(x, x)) break;
    }
    for (; i < n; i++)
        if (a[i] != b[i]) break;
    return i;
}
#endif

typedef Py_ssize_t (*pycudadrv_first_diff_fn)(void *const *, void *const *, Py_ssize_t, Py_ssize_t);

/* The scan for this CPU (AVX2 where the CPU has it; chosen once, at import). */
static inline pycudadrv_first_diff_fn pycudadrv_pick_first_diff(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) return pycudadrv_first_diff_avx2;
#endif
    return pycudadrv_first_diff_plain;
}

#endif
