#!/usr/bin/env python3
"""Generate the driver entry-point table from the CUDA headers.

Writes two files, both checked in and never edited by hand:

* ``include/pycudadrv/driver_api.h`` -- the C struct of function pointers (one
  field per entry point, typed with the ``PFN_<name>_v<abi>`` typedef of
  ``cudaTypedefs.h``) and the table the loader walks: symbol name, field offset,
  the ABI versions to ask ``cuGetProcAddress`` for (newest first; every one has
  the same parameter list), and whether the entry point is required.
* ``pycudadrv/_driver_api.pxd`` -- the same struct declared for Cython.

Usage: ``python tools/gen_driver_api.py [CUDA_INCLUDE_DIR]``.  The include
directory defaults to the one ``setup.py`` would build against.
"""
from __future__ import annotations

import os
import re
import sys

# (entry point, required[, pinned ABI version]). Optional ones may be NULL at run time; callers check.
ENTRY_POINTS = [
    ("cuInit", True),
    ("cuDriverGetVersion", True),
    ("cuGetErrorName", True),
    ("cuGetErrorString", True),
    ("cuDeviceGetCount", True),
    ("cuDeviceGet", True),
    ("cuDeviceGetName", True),
    ("cuDeviceGetAttribute", True),
    ("cuDeviceTotalMem", True),
    ("cuDeviceCanAccessPeer", True),
    ("cuDevicePrimaryCtxRetain", True),
    ("cuDevicePrimaryCtxRelease", True),
    ("cuCtxSetCurrent", True),
    ("cuCtxGetCurrent", True),
    ("cuStreamCreate", True),
    ("cuStreamDestroy", True),
    ("cuStreamSynchronize", True),
    ("cuStreamQuery", True),
    ("cuStreamWaitEvent", True),
    ("cuStreamBeginCapture", True),
    ("cuStreamEndCapture", True),
    ("cuStreamIsCapturing", True),
    ("cuEventCreate", True),
    ("cuEventDestroy", True),
    ("cuEventRecord", True),
    ("cuEventQuery", True),
    ("cuEventSynchronize", True),
    ("cuEventElapsedTime", True),
    ("cuMemAlloc", True),
    ("cuMemFree", True),
    ("cuMemAllocAsync", True),
    ("cuMemFreeAsync", True),
    ("cuMemGetInfo", True),
    ("cuDeviceGetDefaultMemPool", True),
    ("cuMemPoolSetAttribute", True),
    ("cuMemPoolSetAccess", True),
    ("cuMemcpyHtoD", True),
    ("cuMemcpyDtoH", True),
    ("cuMemcpyHtoDAsync", True),
    ("cuMemcpyDtoHAsync", True),
    ("cuMemcpyDtoDAsync", True),
    ("cuMemcpyPeerAsync", True),
    ("cuCtxEnablePeerAccess", True),
    ("cuMemsetD8Async", True),
    ("cuMemsetD16Async", True),
    ("cuMemsetD32Async", True),
    ("cuMemHostAlloc", True),
    ("cuMemFreeHost", True),
    ("cuModuleLoadDataEx", True),
    ("cuModuleUnload", True),
    ("cuModuleGetFunction", True),
    ("cuFuncGetAttribute", True),
    ("cuFuncSetAttribute", True),
    ("cuLaunchKernel", True),
    ("cuLaunchKernelEx", True),
    ("cuLaunchCooperativeKernel", True),
    ("cuOccupancyMaxActiveBlocksPerMultiprocessor", True),
    ("cuGraphInstantiateWithFlags", True),
    ("cuGraphLaunch", True),
    ("cuGraphUpload", True),
    ("cuGraphDestroy", True),
    ("cuGraphExecDestroy", True),
    ("cuGraphDebugDotPrint", True),
    ("cuGraphGetNodes", True),
    ("cuStreamGetCaptureInfo", False),
    ("cuGraphExecKernelNodeSetParams", True),
    # Newer than the minimum driver: used where present.
    ("cuFuncGetParamInfo", False),
    ("cuFuncGetName", False),
    ("cuModuleGetFunctionCount", False),
    ("cuModuleEnumerateFunctions", False),
    # Lifetimes, occupancy, globals, host callbacks, graph memory (issue work after the first release).
    ("cuCtxSynchronize", True, 2000),
    ("cuPointerGetAttribute", True),
    ("cuModuleGetGlobal", True),
    ("cuFuncSetCacheConfig", True),
    ("cuOccupancyMaxPotentialBlockSize", True),
    ("cuOccupancyAvailableDynamicSMemPerBlock", True),
    ("cuLaunchHostFunc", True),
    ("cuMemPoolGetAttribute", True),
    ("cuDeviceGetGraphMemAttribute", True),
    ("cuDeviceGraphMemTrim", True),
    ("cuGraphCreate", True),
    ("cuGraphNodeGetType", True),
    ("cuGraphKernelNodeSetParams", True),
    # Device-side loops (conditional nodes) and capture into a given graph: CUDA 12.3+.
    ("cuGraphAddNode", False),
    ("cuGraphConditionalHandleCreate", False),
    ("cuStreamBeginCaptureToGraph", False),
    # 8-byte fills (two strided 32-bit memsets) and stream priorities.
    ("cuMemsetD2D32Async", True),
    ("cuStreamCreateWithPriority", True),
    ("cuStreamGetPriority", True),
    ("cuCtxGetStreamPriorityRange", True),
    # Event waits in front of a device loop's conditional node (foreign memory read by its body).
    ("cuGraphAddEventWaitNode", True),
    ("cuGraphAddDependencies", False),
]

# The oldest driver this project supports, whatever the entry points would allow.
SUPPORTED_MIN_DRIVER = 12000

CYTHON_KEYWORDS = {"from", "in", "is", "lambda", "global", "pass", "print", "type", "class", "def"}


def default_include_dir() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))
    from setup import find_cuda_include  # noqa: E402  (setup.py guards its setup() call)

    return find_cuda_include()


def parse_typedefs(text: str) -> dict[str, list[tuple[int, str]]]:
    """name -> [(abi_version, params_text)] for every non-per-thread PFN typedef."""
    out: dict[str, list[tuple[int, str]]] = {}
    pat = re.compile(r"typedef\s+CUresult\s+\(CUDAAPI\s+\*PFN_(\w+?)_v(\d+)\)\s*\((.*?)\);", re.S)
    for m in pat.finditer(text):
        name, ver, params = m.group(1), int(m.group(2)), " ".join(m.group(3).split())
        out.setdefault(name, []).append((ver, params))
    return out


def param_types(params: str) -> list[str]:
    """Strip parameter names so two ABIs can be compared by types alone."""
    types = []
    for p in params.split(","):
        p = p.strip()
        m = re.match(r"(.*?[\s\*])(\w+)(\s*\[\s*\])?$", p)
        types.append(" ".join((m.group(1) + ("*" if m.group(3) else "")).split()) if m else p)
    return types


def cython_params(params: str) -> str:
    if params.strip() == "void":
        return ""
    out = []
    for p in params.split(","):
        p = p.strip()
        m = re.match(r"(.*?[\s\*])(\w+)(\s*\[\s*\])?$", p)
        if m and m.group(2) in CYTHON_KEYWORDS:
            p = m.group(1) + m.group(2) + "_" + (m.group(3) or "")
        out.append(p)
    return ", ".join(out)


def main() -> None:
    inc = sys.argv[1] if len(sys.argv) > 1 else default_include_dir()
    with open(os.path.join(inc, "cudaTypedefs.h")) as f:
        typedefs = parse_typedefs(f.read())
    with open(os.path.join(inc, "cuda.h")) as f:
        cuda_h = f.read()
    m = re.search(r"#define CUDA_VERSION (\d+)", cuda_h)
    header_version = int(m.group(1))

    rows = []
    min_driver = SUPPORTED_MIN_DRIVER
    for entry in ENTRY_POINTS:
        name, required = entry[:2]
        variants = sorted(typedefs[name], reverse=True)
        if len(entry) > 2:   # an ABI pinned below the newest (the newer one needs a newer driver)
            variants = [v for v in variants if v[0] <= entry[2]]
        newest_ver, newest_params = variants[0]
        compatible = [v for v, p in variants if param_types(p) == param_types(newest_params)]
        rows.append((name, required, newest_ver, newest_params, compatible))
        if required:
            min_driver = max(min_driver, min(compatible))

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    banner = "generated by tools/gen_driver_api.py from CUDA {} headers; do not edit".format(header_version)

    h = [f"/* {banner} */", "#ifndef PYCUDADRV_DRIVER_API_H", "#define PYCUDADRV_DRIVER_API_H",
         "#include <stddef.h>", "#include <cuda.h>", "#include <cudaTypedefs.h>", "",
         f"#define PYCUDADRV_HEADER_CUDA_VERSION {header_version}",
         f"#define PYCUDADRV_MIN_DRIVER_VERSION {min_driver}",
         f"#define PYCUDADRV_N_ENTRY_POINTS {len(rows)}", "#define PYCUDADRV_MAX_ABI_VARIANTS 4", "",
         "typedef struct pycudadrv_driver_api {"]
    for name, _, ver, _, _ in rows:
        h.append(f"    PFN_{name}_v{ver} p_{name};")
    h += ["} pycudadrv_driver_api;", "",
          "typedef struct pycudadrv_entry_point {",
          "    const char *name;", "    size_t offset;", "    int required;",
          "    int versions[PYCUDADRV_MAX_ABI_VARIANTS]; /* newest first, 0-terminated */",
          "} pycudadrv_entry_point;", "",
          "static const pycudadrv_entry_point pycudadrv_entry_points[PYCUDADRV_N_ENTRY_POINTS] = {"]
    for name, req, _, _, compat in rows:
        vs = ", ".join(str(v) for v in compat[:3]) + ", 0"
        h.append(f'    {{"{name}", offsetof(pycudadrv_driver_api, p_{name}), {int(req)}, {{{vs}}}}},')
    h += ["};", "", "#endif", ""]
    with open(os.path.join(root, "include", "pycudadrv", "driver_api.h"), "w") as f:
        f.write("\n".join(h))

    p = [f"# {banner}", "from pycudadrv._cuda cimport *", "",
         'cdef extern from "pycudadrv/driver_api.h" nogil:',
         "    int PYCUDADRV_HEADER_CUDA_VERSION", "    int PYCUDADRV_MIN_DRIVER_VERSION",
         "    int PYCUDADRV_N_ENTRY_POINTS", "    int PYCUDADRV_MAX_ABI_VARIANTS", "",
         "    ctypedef struct pycudadrv_driver_api:"]
    for name, _, _, params, _ in rows:
        p.append(f"        CUresult (*p_{name})({cython_params(params)}) noexcept nogil")
    p += ["", "    ctypedef struct pycudadrv_entry_point:", "        const char *name",
          "        size_t offset", "        int required", "        int versions[4]", "",
          "    const pycudadrv_entry_point pycudadrv_entry_points[]", ""]
    with open(os.path.join(root, "pycudadrv", "_driver_api.pxd"), "w") as f:
        f.write("\n".join(p))
    attrs = {}
    for prefix in ("CU_DEVICE_ATTRIBUTE_", "CU_FUNC_ATTRIBUTE_"):
        for m in re.finditer(r"^\s*(%s\w+)\s*=\s*(\d+)" % prefix, cuda_h, re.M):
            if not m.group(1).endswith("_MAX"):
                attrs.setdefault(prefix, {})[m.group(1)] = int(m.group(2))
    py = [f'"""Attribute names of cuda.h ({banner})."""', "",
          "DEVICE_ATTRIBUTES = {"]
    py += [f"    {k!r}: {v}," for k, v in attrs["CU_DEVICE_ATTRIBUTE_"].items()]
    py += ["}", "", "FUNCTION_ATTRIBUTES = {"]
    py += [f"    {k!r}: {v}," for k, v in attrs["CU_FUNC_ATTRIBUTE_"].items()]
    py += ["}", ""]
    with open(os.path.join(root, "pycudadrv", "_attributes.py"), "w") as f:
        f.write("\n".join(py))
    print(f"{len(rows)} entry points; header CUDA {header_version}; minimum driver {min_driver}")


if __name__ == "__main__":
    main()
