/* The DLPack tensor structs (DLPack 0.8 ABI, unversioned "dltensor" capsule),
 * written from the public specification for pycudadrv's __dlpack__ export and
 * asbuffer() import. */
#ifndef PYCUDADRV_DLPACK_H
#define PYCUDADRV_DLPACK_H
#include <stdint.h>

enum { PYCUDADRV_kDLCPU = 1, PYCUDADRV_kDLCUDA = 2, PYCUDADRV_kDLCUDAHost = 3, PYCUDADRV_kDLCUDAManaged = 13 };
enum { PYCUDADRV_kDLInt = 0, PYCUDADRV_kDLUInt = 1, PYCUDADRV_kDLFloat = 2, PYCUDADRV_kDLBfloat = 4,
       PYCUDADRV_kDLComplex = 5, PYCUDADRV_kDLBool = 6 };

typedef struct { int32_t device_type; int32_t device_id; } pycudadrv_DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } pycudadrv_DLDataType;
typedef struct {
    void *data;
    pycudadrv_DLDevice device;
    int32_t ndim;
    pycudadrv_DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} pycudadrv_DLTensor;
typedef struct pycudadrv_DLManagedTensor {
    pycudadrv_DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct pycudadrv_DLManagedTensor *self);
} pycudadrv_DLManagedTensor;
#endif
