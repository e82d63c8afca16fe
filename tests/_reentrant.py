"""A kernel and a foreign array whose interface runs Python code while a launch marshals it
(shared by the generic-launch and Triton-launch tests, and their child processes)."""

SCALE = r"""
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a * x[i];
}
"""


class _ReentrantCAI:
    """A foreign array whose ``__cuda_array_interface__`` (a Python property, as torch's is) runs
    ``during()`` the first time it is read: Python code inside the marshalling of a launch."""

    def __init__(self, buf, during):
        self.buf, self.during, self.reads = buf, during, 0

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        if self.reads == 1:
            self.during()
        return {"shape": (self.buf.nbytes // 4,), "typestr": "<f4", "data": (self.buf.ptr, False), "version": 3}
