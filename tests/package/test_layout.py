"""Guards that keep the package's shape: who may import whom, file sizes, and
that every deliberate error derives from pycudadrv.Error. CPU only; they read
the package sources, so they run from a checkout (CI's first stage)."""
import ast
import functools
import os
import re

import pytest

import pycudadrv

PKG = os.path.dirname(os.path.abspath(pycudadrv.__file__))
HAS_SOURCES = os.path.exists(os.path.join(PKG, "_launch.pyx"))
needs_sources = pytest.mark.skipif(not HAS_SOURCES, reason="the package sources (.pyx) are not beside this "
                                   "installed copy; the checkout's test run covers these guards")

#: Bottom up: a module may import only modules listed before it (plus the allow-list).
LAYERS = [
    "_errors", "_usage", "_textargs", "_uninit", "_env", "_paths", "_version", "_attributes", "_capabilities", "_cuda", "_vcall", "_driver_api",
    "_driver", "_device", "_stream", "_event", "_channel", "_waiter", "_ordering", "_host", "_alloc", "_dlpack", "_memory", "_interop", "_marshal", "_mangled", "_signature",
    "_kernel",
    "_launch", "_prepared", "_tritonlaunch", "_module", "_graph", "_sequence", "_loops",
    # the Python layer
    "_compile_cache", "_includes", "nvtx", "_timing", "_linklibs", "nvrtc", "link", "timestamps", "dispatch", "bench", "profile", "aio", "_lanes", "_tracker", "_queue",
    "queue", "_builder",
    "heat", "_cudnn", "cudnn", "_mpi_setup", "mpi", "triton", "config", "__main__", "__init__",
]

#: Imports against the layering, each for a stated reason (always lazy: inside a function). Every
#: entry must be upward and used (test_every_allowed_upward_import_is_upward_and_used).
ALLOWED_UPWARD = {
    ("_device", "_stream"): "Device.default_stream creates the device's Stream on first use",
    ("_device", "dispatch"): "Device.encoder() returns a dispatch.Encoder",
    ("_stream", "_graph"): "Stream.capture() returns a CapturedGraph",
    ("_stream", "_loops"): "Stream.loop() returns a DeviceLoop",
    ("_stream", "_event"): "Stream.record() makes an Event when none is given",
    ("_marshal", "_signature"): "pack_arguments() parses a signature string",
    ("_loops", "nvrtc"): "pycudadrv's condition kernels are compiled with NVRTC on first use",
    ("_launch", "_builder"): "Function.builder() returns a LaunchBuilder (built on Function and aio)",
    ("_launch", "_prepared"): "Function.bind() returns a PreparedLaunch (built on Function and issue_launch)",
    ("queue", "_cudnn"): "Queue.matmul checks that it was given a cuDNN MatmulPlan",
}

IMPORT_RE = re.compile(r"^\s*(?:from\s+pycudadrv\.(\w+)\s+c?import|from\s+pycudadrv\s+import\s+([\w, ()]+)|"
                       r"import\s+pycudadrv\.(\w+))", re.M)


def _sources():
    for f in sorted(os.listdir(PKG)):
        if f.endswith((".pyx", ".pxd", ".pxi", ".py")):
            yield f, open(os.path.join(PKG, f), encoding="utf-8").read()


INCLUDE_RE = re.compile(r'^\s*include\s+"([^"]+)"', re.M)


@functools.lru_cache(maxsize=None)
def _included_by():
    """{included file: the file whose ``include`` line names it} (a .pxi is compiled as part of its includer)."""
    out = {}
    for f, text in _sources():
        for inc in INCLUDE_RE.findall(text):
            assert os.path.exists(os.path.join(PKG, inc)), f"{f} includes {inc}, which is not in the package"
            assert inc not in out, f"{inc} is included by both {out[inc]} and {f}"
            out[inc] = f
    return out


def _module_of(filename):
    """The module a source file belongs to: a .pxi belongs to the module whose .pyx includes it."""
    inc = _included_by()
    while filename in inc:
        filename = inc[filename]
    return filename.rsplit(".", 1)[0]


def _imports(text):
    for m in IMPORT_RE.finditer(text):
        if m.group(1):
            yield m.group(1)
        elif m.group(3):
            yield m.group(3)
        else:
            for name in re.split(r"[\s,()]+", m.group(2)):
                if name and name != "noqa":
                    yield name


@needs_sources
def test_every_module_of_the_package_has_a_layer():
    modules = {_module_of(f) for f, _ in _sources()}
    missing = sorted(m for m in modules if m not in LAYERS)
    assert missing == [], f"add these modules to LAYERS in tests/package/test_layout.py: {missing}"


@needs_sources
def test_modules_import_only_lower_layers_or_allowed_exceptions():
    rank = {m: i for i, m in enumerate(LAYERS)}
    bad = []
    for f, text in _sources():
        a = _module_of(f)
        for b in _imports(text):
            if b == a or b not in rank:
                continue
            if rank[b] >= rank[a] and (a, b) not in ALLOWED_UPWARD and a != "__init__":
                bad.append(f"{f} imports {b}")
    assert bad == [], "imports against the layering:\n" + "\n".join(bad)


@needs_sources
def test_every_allowed_upward_import_is_upward_and_used():
    rank = {m: i for i, m in enumerate(LAYERS)}
    used = {(_module_of(f), b) for f, text in _sources() for b in _imports(text)}
    assert [k for k in ALLOWED_UPWARD if rank[k[1]] <= rank[k[0]]] == [], "not upward: remove them"
    assert [k for k in ALLOWED_UPWARD if k not in used] == [], "no import uses them: remove them"


#: What owns the fields of an allocation and of its views: only these modules assign them.
FIELD_OWNERS = {"_alloc", "_memory"}


def _fields(pxd, cls):
    text = open(os.path.join(PKG, pxd), encoding="utf-8").read()
    body = text[text.index(f"cdef class {cls}"):]
    body = body[:body.index("\n\n")]
    return set(re.findall(r"^    cdef (?:readonly |public )?[\w.]+\*? (\w+)", body, re.M)) - {"__weakref__"}


@needs_sources
def test_only_the_allocation_and_buffer_modules_assign_their_fields():
    """A Buffer is built by buffer_over and an Allocation changes through its own methods: no other
    module writes their fields (Cython has no private cdef fields, so this reads the sources)."""
    fields = _fields("_memory.pxd", "Buffer") | _fields("_alloc.pxd", "Allocation")
    assert {"_ptr", "_alloc", "ptr", "freed", "holds", "ordered"} <= fields
    bad = []
    for f, text in _sources():
        if _module_of(f) in FIELD_OWNERS or not f.endswith((".pyx", ".pxi")):
            continue
        typed = set(re.findall(r"\bcdef (?:Buffer|Allocation) (\w+)", text))
        typed |= set(re.findall(r"\bcdef (?:Buffer|Allocation) \w+(?:\s*=[^,\n]*)?(?:, (\w+))", text))
        for m in re.finditer(r"(?:\(<(?:Buffer|Allocation)>[^()]*\)|\b(\w+))((?:\._alloc)?)\.(\w+)\s*=(?!=)", text):
            recv, via, field = m.group(1), m.group(2), m.group(3)
            if field in fields and (recv is None or recv in typed or via):
                bad.append(f"{f}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0).strip()}")
    assert bad == [], "these write Buffer/Allocation fields outside _alloc/_memory:\n" + "\n".join(bad)


@needs_sources
def test_capture_work_and_dlpack_release_are_typed_calls_not_names():
    """The free path never calls up by method name: the capture's work is CaptureWork, the DLPack
    deleter holds an Allocation."""
    names = ("_release_deferred", "_free_in_capture", "_abandon", "_dlpack_released")
    bad = [f"{f}: {n}" for f, text in _sources() if f.endswith((".pyx", ".pxi", ".pxd")) for n in names if n in text]
    assert bad == []


@needs_sources
def test_allowed_upward_imports_are_lazy():
    """An allowed upward import happens inside a function, never at module level."""
    bad = []
    for f, text in _sources():
        a = _module_of(f)
        for line in text.splitlines():
            if not line or line[0].isspace():
                continue   # indented: inside a function or class body
            for b in _imports(line):
                if (a, b) in ALLOWED_UPWARD:
                    bad.append(f"{f}: {line.strip()}")
    assert bad == []


#: The most lines one compiled unit (a .py, a .pxd, or a .pyx with every .pxi it includes) may hold.
#: A file that outgrows it holds more than one concern: cut it by concern, not by count.
MAX_LINES = 1000


def _compiled_lines(filename, _seen=()):
    """Lines of ``filename`` plus, recursively, of every file it ``include``s: what one module compiles."""
    assert filename not in _seen, f"include cycle: {' -> '.join(_seen + (filename,))}"
    text = open(os.path.join(PKG, filename), encoding="utf-8").read()
    return text.count("\n") + sum(_compiled_lines(inc, _seen + (filename,)) for inc in INCLUDE_RE.findall(text))


def _compiled_files():
    """Every file that is compiled or imported on its own (an included .pxi counts in its includer)."""
    inc = _included_by()
    return [f for f, _ in _sources() if f not in inc]


@needs_sources
def test_no_module_is_over_the_line_limit_with_what_it_includes():
    long = {f: _compiled_lines(f) for f in _compiled_files() if _compiled_lines(f) > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines (includes counted): cut by concern"


@needs_sources
def test_the_line_count_of_a_module_includes_its_pxi_files():
    own = open(os.path.join(PKG, "_cudnn.pyx"), encoding="utf-8").read().count("\n")
    pxi = open(os.path.join(PKG, "_cudnn_build.pxi"), encoding="utf-8").read().count("\n")
    assert _compiled_lines("_cudnn.pyx") == own + pxi
    assert "_cudnn_build.pxi" not in _compiled_files() and _module_of("_cudnn_build.pxi") == "_cudnn"


@needs_sources
def test_every_layer_names_a_module_of_the_package():
    modules = {_module_of(f) for f, _ in _sources()}
    assert [m for m in LAYERS if m not in modules] == [], "no such module: remove it from LAYERS"


#: Builtins raised on purpose that are not pycudadrv errors, each for a reason.
ALLOWED_BUILTIN_RAISES = {
    "MemoryError": "a host malloc failure inside the interpreter: Python's own out-of-memory error",
    "FileNotFoundError": "_paths.find_cuda_include: setup.py loads that file before pycudadrv exists",
    "ImportError": "pycudadrv/__init__.py: an unbuilt source tree (the import system's own error)",
}
RAISE_RE = re.compile(r"\braise\s+([A-Z]\w*(?:Error|Exception))\b")


@needs_sources
def test_deliberate_errors_are_pycudadrv_errors():
    import pycudadrv._errors as errors

    ours = {n for n in dir(errors) if isinstance(getattr(errors, n), type)}
    bad = []
    for f, text in _sources():
        for m in RAISE_RE.finditer(text):
            name = m.group(1)
            if name in ours or ALLOWED_BUILTIN_RAISES.get(name):
                continue
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{f}:{line}: raise {name}")
    assert bad == [], "raise a pycudadrv._errors class instead:\n" + "\n".join(bad)


def test_every_exported_exception_derives_from_pycudadrv_error():
    for name in pycudadrv._errors.__all__:
        cls = getattr(pycudadrv, name)
        assert issubclass(cls, pycudadrv.Error), name


def test_errors_are_also_the_builtin_a_caller_expects():
    assert issubclass(pycudadrv.ArgumentTypeError, TypeError)
    assert issubclass(pycudadrv.ArgumentValueError, ValueError)
    assert issubclass(pycudadrv.ClosedError, ValueError)
    assert issubclass(pycudadrv.CaptureError, RuntimeError)
    assert issubclass(pycudadrv.CudaUnavailableError, pycudadrv.CudaError)
    assert issubclass(pycudadrv.OutOfMemoryError, MemoryError)
    assert issubclass(pycudadrv.EventNotRecordedError, ValueError)


def test_out_of_memory_cuda_error_is_a_memory_error_and_pickles():
    import pickle

    e = pycudadrv.CudaError(2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "cuMemAlloc", "allocating 8 bytes")
    assert isinstance(e, pycudadrv.OutOfMemoryError) and isinstance(e, MemoryError)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is pycudadrv.OutOfMemoryError and e2.code == 2 and e2.context == "allocating 8 bytes"


def test_error_classes_keep_the_driver_code():
    g = pycudadrv.GraphUpdateError("refused", code=910)
    n = pycudadrv.NotSupportedError("no clusters", code=801)
    u = pycudadrv.CudaUnavailableError("no device", code=100, name="CUDA_ERROR_NO_DEVICE")
    assert (g.code, n.code, u.code, u.name) == (910, 801, 100, "CUDA_ERROR_NO_DEVICE")
    import pickle
    assert pickle.loads(pickle.dumps(g)).code == 910
    assert pickle.loads(pickle.dumps(u)).code == 100


def test_package_all_names_what_a_user_calls_and_each_is_its_modules_object():
    from pycudadrv import _launch, _memory, _stream

    assert len(pycudadrv.__all__) <= 80 and len(set(pycudadrv.__all__)) == len(pycudadrv.__all__)
    assert all(hasattr(pycudadrv, name) for name in pycudadrv.__all__)
    for mod in (_launch, _memory, _stream):
        for name in mod.__all__:
            if name in pycudadrv.__all__:
                assert getattr(pycudadrv, name) is getattr(mod, name)
    for internal in ("ParamLayout", "dims3", "shape_and_nbytes", "FLOAT32_MAX", "synchronize_context",
                     "clear_cache", "FAST_MATH_OPTIONS", "Capture"):
        assert internal not in pycudadrv.__all__ and not hasattr(pycudadrv, internal), internal


CDEF_FIELD_RE = re.compile(r"^\s+cdef\s+(?:readonly\s+|public\s+)?(?:\w+\s*\**\s+)+?(\**\w+(?:\s*,\s*\**\w+)*)\s*(?:#.*)?$",
                           re.M)


def _declared_fields(text):
    for m in CDEF_FIELD_RE.finditer(text):
        for name in m.group(1).split(","):
            yield name.strip().lstrip("*")


@needs_sources
def test_no_declarations_hold_one_state_twice_as_numbered_fields():
    """Two modes of one thing (eager and capture) are two records of one type, not fields ``x0``/``x1``."""
    twins = []
    for f, text in _sources():
        if f.endswith(".pxd"):
            names = set(_declared_fields(text))
            twins += [f"{f}: {n[:-1]}0/{n[:-1]}1" for n in sorted(names) if n.endswith("0") and n[:-1] + "1" in names]
    assert twins == []


def test_the_numbered_field_guard_reads_the_declarations_it_guards():
    text = "cdef class L:\n    cdef Submission tail0, tail1   # eager, capture\n    cdef long long* seen0\n"
    assert list(_declared_fields(text)) == ["tail0", "tail1", "seen0"]
