/* The kernel-argument arena: 16-byte aligned slots, inline room for the common
 * case, heap spill beyond. Each parameter takes ceil(size/16) consecutive
 * slots; the void* array handed to cuLaunchKernel is built by
 * pycudadrv_arena_finish() once every argument is in, so growing the slot
 * storage never invalidates a pointer that was already given out. */
#ifndef PYCUDADRV_ARENA_H
#define PYCUDADRV_ARENA_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PYCUDADRV_ARENA_INLINE_SLOTS 64
#define PYCUDADRV_ARENA_INLINE_PARAMS 64

typedef struct { _Alignas(16) unsigned char b[16]; } pycudadrv_slot;

typedef struct pycudadrv_arena {
    pycudadrv_slot *slots;   /* inline_slots, or the heap after a spill */
    void **params;           /* inline_params, or the heap */
    uint32_t *index;         /* first slot of each parameter */
    uint32_t n_slots, cap_slots, n_params, cap_params;
    pycudadrv_slot inline_slots[PYCUDADRV_ARENA_INLINE_SLOTS];
    void *inline_params[PYCUDADRV_ARENA_INLINE_PARAMS];
    uint32_t inline_index[PYCUDADRV_ARENA_INLINE_PARAMS];
} pycudadrv_arena;

static inline void pycudadrv_arena_init(pycudadrv_arena *a) {
    a->slots = a->inline_slots;
    a->params = a->inline_params;
    a->index = a->inline_index;
    a->n_slots = a->n_params = 0;
    a->cap_slots = PYCUDADRV_ARENA_INLINE_SLOTS;
    a->cap_params = PYCUDADRV_ARENA_INLINE_PARAMS;
}

static inline void pycudadrv_arena_release(pycudadrv_arena *a) {
    if (a->slots != a->inline_slots) free(a->slots);
    if (a->params != a->inline_params) free(a->params);
    if (a->index != a->inline_index) free(a->index);
    pycudadrv_arena_init(a);
}

static inline void pycudadrv_arena_reset(pycudadrv_arena *a) { a->n_slots = a->n_params = 0; }

static inline int pycudadrv_arena_is_spilled(const pycudadrv_arena *a) {
    return a->slots != a->inline_slots || a->params != a->inline_params;
}

/* Grow to hold at least `slots` slots and `params` parameters. 0 on success, -1 on OOM. */
static inline int pycudadrv_arena_reserve(pycudadrv_arena *a, uint32_t slots, uint32_t params) {
    if (slots > a->cap_slots) {
        uint32_t cap = a->cap_slots;
        while (cap < slots) cap *= 2;
        pycudadrv_slot *s = (pycudadrv_slot *)aligned_alloc(16, (size_t)cap * sizeof(pycudadrv_slot));
        if (!s) return -1;
        memcpy(s, a->slots, (size_t)a->n_slots * sizeof(pycudadrv_slot));
        if (a->slots != a->inline_slots) free(a->slots);
        a->slots = s;
        a->cap_slots = cap;
    }
    if (params > a->cap_params) {
        uint32_t cap = a->cap_params;
        while (cap < params) cap *= 2;
        void **p = (void **)malloc((size_t)cap * sizeof(void *));
        uint32_t *ix = (uint32_t *)malloc((size_t)cap * sizeof(uint32_t));
        if (!p || !ix) { free(p); free(ix); return -1; }
        memcpy(ix, a->index, (size_t)a->n_params * sizeof(uint32_t));
        if (a->params != a->inline_params) free(a->params);
        if (a->index != a->inline_index) free(a->index);
        a->params = p;
        a->index = ix;
        a->cap_params = cap;
    }
    return 0;
}

/* Room for the next parameter of `nbytes`, zeroed (so padding is
 * deterministic); NULL on OOM. Valid until the next push. */
static inline unsigned char *pycudadrv_arena_push(pycudadrv_arena *a, size_t nbytes) {
    uint32_t need = (uint32_t)((nbytes + 15) / 16);
    if (need == 0) need = 1;
    if (pycudadrv_arena_reserve(a, a->n_slots + need, a->n_params + 1) != 0) return NULL;
    unsigned char *p = a->slots[a->n_slots].b;
    memset(p, 0, (size_t)need * 16);
    a->index[a->n_params++] = a->n_slots;
    a->n_slots += need;
    return p;
}

/* Lay out n parameters at once, zeroed: parameter i takes ceil(size_i / 16) slots
 * (at least one). Sizes are read from `first_size` with a byte `stride` (the size
 * field of an array of structs). Replaces whatever was pushed, and builds the void*
 * array (a->params) as pycudadrv_arena_finish does. 0, or -1 on OOM. */
static inline int pycudadrv_arena_layout(pycudadrv_arena *a, const unsigned char *first_size, size_t stride,
                                         uint32_t n) {
    uint32_t total = 0, i, need;
    for (i = 0; i < n; ++i) {
        need = (uint32_t)((*(const size_t *)(first_size + (size_t)i * stride) + 15) / 16);
        total += need ? need : 1;
    }
    a->n_slots = a->n_params = 0;
    if (pycudadrv_arena_reserve(a, total ? total : 1, n ? n : 1) != 0) return -1;
    memset(a->slots, 0, (size_t)total * sizeof(pycudadrv_slot));
    for (i = 0, total = 0; i < n; ++i) {
        need = (uint32_t)((*(const size_t *)(first_size + (size_t)i * stride) + 15) / 16);
        a->index[i] = total;
        total += need ? need : 1;
    }
    a->n_slots = total;
    a->n_params = n;
    for (i = 0; i < n; ++i) a->params[i] = a->slots[a->index[i]].b;   /* as pycudadrv_arena_finish */
    return 0;
}

/* Storage of parameter i (after pushes; stable until the next push). */
static inline unsigned char *pycudadrv_arena_at(pycudadrv_arena *a, uint32_t i) {
    return a->slots[a->index[i]].b;
}

/* Bytes of slot storage in use (16 per slot). */
static inline size_t pycudadrv_arena_slot_bytes(const pycudadrv_arena *a) { return (size_t)a->n_slots * 16u; }

/* Copy the slot contents of src into dst, which has the same layout (the same
 * parameter sizes in the same order): dst's void* array stays valid. 0 on
 * success, -1 when the layouts differ. */
static inline int pycudadrv_arena_copy_slots(pycudadrv_arena *dst, const pycudadrv_arena *src) {
    if (dst->n_slots != src->n_slots || dst->n_params != src->n_params) return -1;
    memcpy(dst->slots, src->slots, (size_t)src->n_slots * sizeof(pycudadrv_slot));
    return 0;
}

/* Build the void* array: params[i] -> first slot of parameter i. */
static inline void **pycudadrv_arena_finish(pycudadrv_arena *a) {
    for (uint32_t i = 0; i < a->n_params; ++i) a->params[i] = a->slots[a->index[i]].b;
    return a->params;
}

#endif
