"""``pycudadrv.show_config()`` and ``python -m pycudadrv --info``: what this
pycudadrv is, what it found, and what it is missing.

The report covers the package (version, where it is installed, the ``cuda.h``
it was built against), the driver (library and version), every device (name,
compute capability, memory, multiprocessors), NVRTC (library, version, the
include directories ``compile()`` passes), the compile cache (directory, files,
bytes), the optional libraries (nvJitLink, cuDNN, NVTX; each only when the
pycudadrv module for it exists) and the environment variables in effect.

It never raises for something missing: a part that cannot be had (no driver,
no device, no NVRTC) says why in its place, so the report is as useful on a
machine without a GPU as on one with eight. Pure Python; every probe is
lazy (``import pycudadrv.config`` loads nothing).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import sys
from typing import IO, Any

__all__ = ["show_config", "config_info"]

#: Variables outside pycudadrv's own that decide what it finds (reported when set).
OTHER_VARIABLES = {
    "CUDA_HOME": "CUDA toolkit root (cuda.h when building; NVRTC and device headers at run time)",
    "CUDA_PATH": "CUDA toolkit root, as CUDA_HOME",
    "CUDA_VISIBLE_DEVICES": "which GPUs the driver shows",
    "XDG_CACHE_HOME": "base of the default compile-cache directory",
    "NVIDIA_TF32_OVERRIDE": "0 (set before the process starts): NVIDIA's libraries, cuDNN's float32 plans among "
                            "them, never compute float32 in TF32 (see docs/cudnn.md)",
}

#: How pycudadrv reads each of its variables, so that the report can flag a value that is not used as
#: given: "switch" (1/0, true/false, yes/no, on/off; another value warns and the default applies),
#: "strict switch" (the same spellings; another value raises), ("int", minimum[, maximum]), ("switch or", words)
#: (a switch that also takes those words), ("choice", words), "devices", "cache dir", "library" (a name for the
#: loader or a path) and "path" (any text).
VARIABLE_KINDS: dict[str, Any] = {
    "PYCUDADRV_LIBCUDA": "library", "PYCUDADRV_NVRTC": "library", "PYCUDADRV_NVJITLINK": "library",
    "PYCUDADRV_NVFATBIN": "library", "PYCUDADRV_CACHE": "switch", "PYCUDADRV_CACHE_DIR": "cache dir",
    "PYCUDADRV_CACHE_MAX_BYTES": ("int", 0), "PYCUDADRV_PROFILE": ("switch or", ("events", "host")), "PYCUDADRV_TRACE": "switch",
    "PYCUDADRV_NVTX": "switch", "PYCUDADRV_PERSISTENT_BLOCKS": ("int", 1), "PYCUDADRV_INDIRECT_SYNC": "switch",
    "PYCUDADRV_INDIRECT_TRACE": "switch", "PYCUDADRV_GRAPH_DOT": "path", "PYCUDADRV_ALLOC_TRACE": "switch",
    "PYCUDADRV_DEVICES": "devices", "PYCUDADRV_DEBUG": "switch", "PYCUDADRV_CUDNN": "switch",
    "PYCUDADRV_CUDNN_PATH": "library",
    "PYCUDADRV_MPI_CUDA_AWARE": "strict switch", "PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC": "switch",
    "PYCUDADRV_AIO_COMPLETION": ("choice", ("loop", "blocking")),
    "PYCUDADRV_QUEUE_STREAMS": ("int", 1, 1024), "PYCUDADRV_QUEUE_POLICY": ("choice", ("greedy", "round_robin")),
}

#: Optional libraries reported under "optional libraries": (title, pycudadrv module, probes, library
#: file stem). A module is probed only when it exists in this installation; ``probes`` maps
#: ``is_available`` / ``version`` / ``library_path`` / ``unavailable_reason`` to the module's function
#: of that job (each optional; a failure is reported, never raised). Without a ``library_path``
#: function, the path is that of the mapped library whose name starts with the stem.
OPTIONAL_MODULES: list[tuple[str, str, dict[str, str], str]] = [
    ("nvJitLink", "pycudadrv.link", {"version": "nvjitlink_version"}, "libnvJitLink"),
    ("nvFatbin", "pycudadrv.link", {"version": "nvfatbin_version"}, "libnvfatbin"),
    ("cuDNN", "pycudadrv.cudnn", {"is_available": "is_available", "unavailable_reason": "unavailable_reason",
                                  "version": "version", "library_path": "library_path"}, "libcudnn"),
]


def _why(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _same_message(err: BaseException, reason: Any) -> bool:
    """Whether ``err`` only repeats ``reason`` (an unavailable_reason() text), first lines compared."""
    if not isinstance(reason, str) or not reason.strip():
        return False
    first = (str(err).strip().splitlines() or [""])[0].strip()
    return first == reason.strip().splitlines()[0].strip()


def _version_text(v: Any) -> str:
    if isinstance(v, (tuple, list)):
        return ".".join(str(x) for x in v)
    return str(v)


def _mapped_path(fragment: str) -> str | None:
    """The file of a shared library mapped into this process whose name contains
    ``fragment`` (from ``/proc/self/maps``; None where that is not readable)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and fragment in os.path.basename(parts[5].strip()):
                    return parts[5].strip()
    except OSError:
        pass
    return None


def _dir_usage(path: str) -> tuple[int, int]:
    """(regular files, bytes) under ``path``, symbolic links not followed."""
    files = nbytes = 0
    for base, _dirs, names in os.walk(path):
        for n in names:
            p = os.path.join(base, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if os.path.isfile(p) and not os.path.islink(p):
                files += 1
                nbytes += st.st_size
    return files, nbytes


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _package(cd: Any) -> dict[str, Any]:
    here = os.path.dirname(os.path.abspath(cd.__file__))
    hv = cd._driver.HEADER_CUDA_VERSION
    mv = cd._driver.MIN_DRIVER_VERSION
    return {
        "version": cd.__version__,
        "location": here,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy": _module_version("numpy"),
        "platform": platform.platform(),
        "header_cuda_version": hv,
        "header_cuda": f"{hv // 1000}.{hv % 1000 // 10}",
        "min_driver": f"{mv // 1000}.{mv % 1000 // 10}",
    }


def _module_version(name: str) -> str | None:
    try:
        return str(importlib.import_module(name).__version__)
    except Exception:  # noqa: BLE001 -- absent or odd: the report says so
        return None


def _driver(cd: Any) -> dict[str, Any]:
    try:
        cd.require()
        major, minor = cd.driver_version()
    except Exception as e:  # noqa: BLE001 -- CudaUnavailableError and anything else: reported
        return {"available": False, "error": _why(e)}
    name = cd._driver.driver_library()
    return {"available": True, "library": name, "path": _mapped_path("libcuda.so") or name,
            "version": f"{major}.{minor}"}


def _devices(cd: Any) -> dict[str, Any]:
    try:
        n = cd.device_count()
    except Exception as e:  # noqa: BLE001
        return {"count": 0, "error": _why(e), "devices": []}
    sel_error: str | None = None
    try:
        selected = {d.ordinal for d in cd.selected_devices()}
    except Exception as e:  # noqa: BLE001 -- a bad PYCUDADRV_DEVICES: every device is listed, the error too
        selected, sel_error = set(range(n)), _why(e)
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i not in selected:
            out.append({"ordinal": i, "selected": False})
            continue
        try:
            d = cd.Device(i)
            out.append({"ordinal": i, "selected": True, "name": d.name,
                        "compute_capability": "%d.%d" % tuple(d.compute_capability), "arch": d.arch,
                        "total_memory_bytes": int(d.total_memory),
                        "multiprocessor_count": int(d.multiprocessor_count)})
        except Exception as e:  # noqa: BLE001
            out.append({"ordinal": i, "selected": True, "error": _why(e)})
    info: dict[str, Any] = {"count": n, "devices": out}
    if sel_error:
        info["selection_error"] = sel_error
    return info


def _nvrtc(cd: Any) -> dict[str, Any]:
    from pycudadrv import nvrtc

    info: dict[str, Any]
    try:
        ver = nvrtc.nvrtc_version()
        path = nvrtc.nvrtc_path()
        info = {"available": True, "version": _version_text(ver), "library": path,
                "path": path if os.path.isabs(path) else (_mapped_path("libnvrtc.so") or path)}
    except Exception as e:  # noqa: BLE001
        info = {"available": False, "error": _why(e)}
    try:
        info["include_dirs"] = list(nvrtc.default_include_dirs())
    except Exception as e:  # noqa: BLE001
        info["include_dirs"] = []
        info["include_error"] = _why(e)
    return info


def _cache() -> dict[str, Any]:
    from pycudadrv import nvrtc

    try:
        d = nvrtc.cache_dir()
    except Exception as e:  # noqa: BLE001
        return {"enabled": False, "error": _why(e)}
    if d is None:
        return {"enabled": False, "directory": None}
    info: dict[str, Any] = {"enabled": True, "directory": d, "exists": os.path.isdir(d)}
    if not info["exists"] and os.path.lexists(d):
        info["not_a_directory"] = "a file" if os.path.isfile(d) else "not a directory"
    try:
        from pycudadrv import _compile_cache

        info["max_bytes"] = int(_compile_cache.cache_max_bytes())
        counted = _compile_cache.cache_size() if info["exists"] else (0, 0)
    except (ImportError, AttributeError):   # an older layout: count every file
        counted = _dir_usage(d) if info["exists"] else (0, 0)
    if info["exists"]:
        info["files"], info["bytes"] = int(counted[0]), int(counted[1])
    return info


def _optional() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for title, name, probes, stem in OPTIONAL_MODULES:
        if not _has_module(name):
            out.append({"name": title, "module": None})
            continue
        entry: dict[str, Any] = {"name": title, "module": name}
        try:
            mod = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 -- a module that fails to import is reported, not raised
            entry["error"] = _why(e)
            out.append(entry)
            continue
        for key in ("is_available", "unavailable_reason", "version", "library_path"):
            fn = getattr(mod, probes.get(key, "-"), None)
            if not callable(fn):
                continue
            if key == "unavailable_reason" and entry.get("is_available") is not False:
                continue
            try:
                value = fn()
            except Exception as e:  # noqa: BLE001
                entry[key] = None
                if not _same_message(e, entry.get("unavailable_reason")):   # said once is enough
                    entry.setdefault("error", _why(e))
            else:
                entry[key] = _version_text(value) if key == "version" else value
        if "library_path" not in probes and "error" not in entry:
            path = _mapped_path(stem + ".so")
            if path:
                entry["library_path"] = path
        out.append(entry)
    from pycudadrv import nvtx

    out.append({"name": "NVTX", "module": "pycudadrv.nvtx", "enabled": nvtx.enabled,
                "backend": nvtx.backend(), "library_path": nvtx.library_path()})
    return out


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def value_problem(name: str, raw: str) -> str | None:
    """Why pycudadrv does not use ``name=raw`` as given (what happens
    instead), or None when the value is one it takes. Reads the value the way
    the code that uses it does (:data:`VARIABLE_KINDS`), without acting on it."""
    from pycudadrv._env import _FALSE, _TRUE

    kind = VARIABLE_KINDS.get(name)
    v = raw.strip()
    if kind in ("switch", "strict switch"):
        if not v or v.lower() in _TRUE | _FALSE:
            return None
        then = ("pycudadrv.mpi.detect_cuda_aware() raises ArgumentValueError" if kind == "strict switch"
                else "it warns once and the default applies")
        return f"not a switch (1/0, true/false, yes/no, on/off): {then}"
    if isinstance(kind, tuple) and kind[0] == "switch or":
        if not v or v.lower() in _TRUE | _FALSE | set(kind[1]):
            return None
        return f"not a switch (1/0, true/false, yes/no, on/off) nor one of {', '.join(kind[1])}: it warns once and " \
               "the default applies"
    if isinstance(kind, tuple) and kind[0] == "choice":
        if not v or v.lower() in kind[1]:
            return None
        return f"not one of {', '.join(kind[1])}: it warns once and the default applies"
    if isinstance(kind, tuple):
        if not v:
            return None
        try:
            n = int(v, 0)
        except ValueError:
            return f"not an integer: it warns once and the default applies"
        if n < kind[1]:
            return f"below the minimum {kind[1]}: it warns once and the default applies"
        if len(kind) > 2 and n > kind[2]:
            return f"above the maximum {kind[2]}: it warns once and the default applies"
        return None
    if kind == "devices":
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        if not parts:
            return "an empty selection: the first call that lists devices raises ArgumentValueError"
        for p in parts:
            try:
                n = int(p)
            except ValueError:
                return f"{p!r} is not a device ordinal: the first call that lists devices raises ArgumentValueError"
            if n < 0:
                return f"{p!r} is not a device ordinal (they count from 0)"
        return None
    if kind == "cache dir":
        from pycudadrv._compile_cache import cache_dir_problem, default_cache_dir

        why = cache_dir_problem(raw) if raw else None
        return None if why is None else f"{why}: the default {default_cache_dir()} is used"
    if kind == "library" and os.sep in raw and not os.path.exists(raw):
        return "no such file: loading it fails (there is no fallback while it is set)"
    return None


def _environment() -> dict[str, dict[str, str]]:
    from pycudadrv._env import ENVIRONMENT_VARIABLES

    out: dict[str, dict[str, str]] = {}
    for table in (ENVIRONMENT_VARIABLES, OTHER_VARIABLES):
        for name, what in table.items():
            if name in os.environ:
                out[name] = {"value": os.environ[name], "meaning": what}
                why = value_problem(name, os.environ[name])
                if why is not None:
                    out[name]["invalid"] = why
    return out


def config_info() -> dict[str, Any]:
    """The report as a dict (what :func:`show_config` prints): keys
    ``package``, ``driver``, ``devices``, ``nvrtc``, ``cache``, ``optional``,
    ``environment``. Memory is in bytes. A part that is unavailable holds
    ``available: False`` (or ``enabled: False``) and ``error`` (the exception's
    class and first line) instead of raising.

    Driver calls underneath: ``cuDriverGetVersion``, ``cuDeviceGetCount``,
    ``cuDeviceGetName``, ``cuDeviceTotalMem``, ``cuDeviceGetAttribute``
    (devices are opened through :class:`Device`, which retains their primary
    contexts); NVRTC: ``nvrtcVersion``."""
    import pycudadrv as cd

    return {"package": _package(cd), "driver": _driver(cd), "devices": _devices(cd), "nvrtc": _nvrtc(cd),
            "cache": _cache(), "optional": _optional(), "environment": _environment()}


def _format(info: dict[str, Any]) -> str:
    p, drv, devs, nv, cache = info["package"], info["driver"], info["devices"], info["nvrtc"], info["cache"]
    lines = [f"pycudadrv {p['version']} at {p['location']}",
             f"  {p['python']}, numpy {p['numpy'] or '(not importable)'}, {p['platform']}",
             f"  built against cuda.h of CUDA {p['header_cuda']} (HEADER_CUDA_VERSION {p['header_cuda_version']}); "
             f"oldest driver supported: CUDA {p['min_driver']}",
             "driver:"]
    if drv["available"]:
        shown = drv["library"] if drv["path"] == drv["library"] else f"{drv['library']} ({drv['path']})"
        lines += [f"  library: {shown}", f"  version: CUDA {drv['version']}"]
    else:
        lines.append(f"  unavailable: {drv['error']}")
    if "error" in devs:
        lines.append("devices: unknown (no usable driver, see above)" if not drv["available"]
                     else f"devices: none usable ({devs['error']})")
    else:
        lines.append(f"devices: {devs['count']}" + (" (the driver reports none)" if not devs["count"] else ""))
        if "selection_error" in devs:
            lines.append(f"  device selection ignored: {devs['selection_error']}")
        for d in devs["devices"]:
            if not d["selected"]:
                lines.append(f"  {d['ordinal']}: not selected (PYCUDADRV_DEVICES / select_devices())")
            elif "error" in d:
                lines.append(f"  {d['ordinal']}: unusable: {d['error']}")
            else:
                lines.append(f"  {d['ordinal']}: {d['name']}, compute capability {d['compute_capability']} "
                             f"({d['arch']}), {d['total_memory_bytes'] / 2**30:.1f} GiB, "
                             f"{d['multiprocessor_count']} SMs")
    lines.append("NVRTC:")
    if nv["available"]:
        shown = nv["library"] if nv["path"] == nv["library"] else f"{nv['library']} ({nv['path']})"
        lines += [f"  library: {shown}", f"  version: {nv['version']}"]
    else:
        lines.append(f"  unavailable: {nv['error']}")
    if nv["include_dirs"]:
        lines.append("  include directories: " + "; ".join(nv["include_dirs"]))
    else:
        lines.append("  include directories: none found (cuda_fp16.h and CCCL: pip install nvidia-cuda-runtime "
                     "nvidia-cuda-cccl)" + (f" ({nv['include_error']})" if "include_error" in nv else ""))
    if "error" in cache:
        lines.append(f"compile cache: unusable ({cache['error']})")
    elif not cache["enabled"]:
        lines.append("compile cache: disabled (PYCUDADRV_CACHE)")
    elif cache.get("not_a_directory"):
        lines.append(f"compile cache: {cache['directory']} is {cache['not_a_directory']}, not a directory: "
                     "compile() warns once and goes on without the disk cache")
    elif not cache["exists"]:
        lines.append(f"compile cache: {cache['directory']} (not created yet)")
    else:
        limit = f"; limit {_size_text(cache['max_bytes'])}" if cache.get("max_bytes") else ""
        lines.append(f"compile cache: {cache['directory']} ({cache['files']} entries, {_size_text(cache['bytes'])}"
                     f"{limit})")
    lines.append("optional libraries:")
    for o in info["optional"]:
        if o["name"] == "NVTX":
            state = "on" if o["enabled"] else "off (PYCUDADRV_NVTX=1 or pycudadrv.nvtx.enable())"
            where = {"nvtx": "through the nvtx package", "ctypes": f"through {o['library_path']}",
                     None: "no backend found (pip install nvtx, or nvidia-nvtx for the library)"}.get(
                         o["backend"], str(o["backend"]))
            lines.append(f"  NVTX: {state}; {where}")
        elif o["module"] is None:
            lines.append(f"  {o['name']}: not part of this pycudadrv")
        else:
            parts = []
            if "is_available" in o:
                parts.append("available" if o["is_available"] else "unavailable")
            if o.get("unavailable_reason"):
                parts.append(str(o["unavailable_reason"]))
            if o.get("version"):
                parts.append(f"version {o['version']}")
            if o.get("library_path"):
                parts.append(str(o["library_path"]))
            if "error" in o:
                parts.append(o["error"])
            lines.append(f"  {o['name']} ({o['module']}): " + ("; ".join(parts) or "module present"))
    env = info["environment"]
    lines.append("environment variables in effect:" + ("" if env else " none"))
    for name, e in env.items():
        lines.append(f"  {name}={e['value']!r}: {e['meaning']}"
                     + (f"\n    INVALID: {e['invalid']}" if "invalid" in e else ""))
    return "\n".join(lines) + "\n"


def show_config(file: IO[str] | None = None) -> str:
    """Print what this pycudadrv is and what it found, and return the text.

    Version and location, the ``cuda.h`` it was built against
    (``HEADER_CUDA_VERSION``), the driver library and its CUDA version, every
    device (name, compute capability, memory in GiB, multiprocessors), NVRTC
    (library, version, include directories), the compile cache (directory,
    files, size), nvJitLink / cuDNN / NVTX, and every pycudadrv environment
    variable that is set (plus ``CUDA_HOME``, ``CUDA_PATH``,
    ``CUDA_VISIBLE_DEVICES``, ``XDG_CACHE_HOME``, ``NVIDIA_TF32_OVERRIDE``),
    each value pycudadrv does not use as given marked ``INVALID`` with what
    happens instead.

    Parameters
    ----------
    file : text file, optional
        Where to print (default ``sys.stdout``).

    Returns
    -------
    str
        The report, one item per line. Never raises for a missing driver,
        device or library: the line says what is missing. :func:`config_info`
        gives the same as a dict.
    """
    if file is not None and not callable(getattr(file, "write", None)):
        from pycudadrv._errors import ArgumentTypeError

        raise ArgumentTypeError(f"show_config: file must be a text file (an object with write()) or None, got "
                                f"{type(file).__name__} {file!r:.60}")
    text = _format(config_info())
    print(text, end="", file=file if file is not None else sys.stdout)
    return text
