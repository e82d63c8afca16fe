/* FNV-1a, 64-bit: the module cache's key over image bytes. */
#ifndef PYCUDADRV_FNV1A_H
#define PYCUDADRV_FNV1A_H
#include <stddef.h>
#include <stdint.h>

#define PYCUDADRV_FNV1A64_OFFSET_BASIS 0xcbf29ce484222325ULL
#define PYCUDADRV_FNV1A64_PRIME 0x100000001b3ULL

static inline uint64_t pycudadrv_fnv1a64(const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    uint64_t h = PYCUDADRV_FNV1A64_OFFSET_BASIS;
    for (size_t i = 0; i < n; ++i) {
        h ^= (uint64_t)p[i];
        h *= PYCUDADRV_FNV1A64_PRIME;
    }
    return h;
}
#endif
