"""Helpers shared by the tests of calls that could crash the interpreter: a child interpreter per
case (a crash fails one test, not the run) and a Function of its own per test."""
import os
import subprocess
import sys
import textwrap

import pycudadrv as cd

SAXPY = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def fresh_saxpy(prefix, tag):
    """``saxpy`` in a module of its own: the module cache keys on the image, so a distinct global
    (``<prefix>_<tag>``) makes it new, with none of another test's state (its argument cache, its
    launch convention)."""
    name = "".join(c if c.isalnum() else "_" for c in tag)
    return cd.compile(SAXPY + f"__device__ int {prefix}_{name};\n").load().function("saxpy")


def run_child(prelude, code, timeout=120):
    """Run ``prelude`` (imports), ``SAXPY`` (the source above) and ``code`` in a child interpreter
    under ``-X dev``; returns its (returncode, stdout + stderr)."""
    src = prelude + f"SAXPY = {SAXPY!r}\n" + textwrap.dedent(code)
    p = subprocess.run([sys.executable, "-X", "dev", "-c", src], capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ))
    return p.returncode, p.stdout + p.stderr
