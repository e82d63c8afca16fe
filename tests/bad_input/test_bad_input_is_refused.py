"""Objects made without their factory, constructors called wrongly, and malformed input: every
one raises a pycudadrv error (never a crash, never a bare builtin). No GPU needed."""
import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pycudadrv as cd
import pycudadrv._interop as _interop
from pycudadrv import _signature as sig
from pycudadrv._kernel import KernelBase
from pycudadrv._signature import Param, ANY, INT, BYTES

# The compiled classes of the launch, memory, module and graph layers, plus their Python helpers.
COMPILED = ["Buffer", "_stream.Capture", "CapturedGraph", "Condition", "DeviceLoop", "Function", "HostBuffer",
            "LaunchConfig", "Module", "_marshal.ParamLayout", "PreparedLaunch"]

_WALK = textwrap.dedent(r"""
    import json, re, sys
    import pycudadrv as cd
    from pycudadrv._kernel import KernelBase
    # Python's own calling-convention errors (a method called with too few or too many arguments).
    ARITY = re.compile(r"takes .*arguments? \(|positional arguments? but|missing \d+ required|unexpected keyword|"
                       r"takes no arguments|expected (at most |at least )?\d+ arguments?, got")
    DUNDERS = {"__len__", "__enter__", "__exit__", "__call__", "__iter__", "__bool__", "__hash__", "__dlpack__",
               "__dlpack_device__", "__cuda_array_interface__", "__getitem__", "__repr__", "__str__"}
    def resolve(path):      # "Name" (a top-level name) or "_module.Name"
        obj = cd
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj
    classes = [resolve(n) for n in sys.argv[1].split(",")] + [KernelBase]
    classes += [type("Sub" + c.__name__, (c,), {}) for c in classes]     # Python subclasses too
    report = {"refused": {}, "leaks": []}
    for C in classes:
        try:
            o = C.__new__(C)
        except cd.Error as e:
            report["refused"][C.__name__] = f"{type(e).__name__}: {e}"
            continue
        for name in sorted(dir(o)):
            if name.startswith("__") and name not in DUNDERS:
                continue
            try:
                attr = getattr(o, name)
            except cd.Error:
                continue
            except Exception as e:
                report["leaks"].append(f"{C.__name__}.{name}: {type(e).__name__}: {e}")
                continue
            if not callable(attr) or isinstance(attr, type):
                continue
            for args in [(), (0,), (None,), (0, 0)]:
                try:
                    attr(*args)
                except cd.Error:
                    pass
                except TypeError as e:
                    if not ARITY.search(str(e)):
                        report["leaks"].append(f"{C.__name__}.{name}{args}: TypeError: {e}")
                except Exception as e:
                    report["leaks"].append(f"{C.__name__}.{name}{args}: {type(e).__name__}: {e}")
    import gc; gc.collect()
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def walk():
    """Every compiled class made by ``Cls.__new__(Cls)`` (and a Python subclass of each), then
    every property read and every method called with no or trivial arguments, in a child
    process (a crash there is a negative return code, not a dead test run)."""
    p = subprocess.run([sys.executable, "-c", _WALK, ",".join(COMPILED)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"the walk crashed (return code {p.returncode}):\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_no_compiled_object_made_by_new_crashes_or_raises_a_builtin(walk):
    assert walk["leaks"] == []


@pytest.mark.parametrize("cls, says", [
    ("Function", "Module.function(name)"), ("KernelBase", "Module.function(name)"),
    ("Buffer", "Buffer.empty()"), ("HostBuffer", "HostBuffer.empty(shape, dtype)"),
    ("Module", "load_module(image)"), ("ParamLayout", "Module.function()"),
    ("CapturedGraph", "stream.capture(mode)"), ("DeviceLoop", "stream.loop(...)"),
])
def test_objects_that_only_factories_make_refuse_new_and_subclasses(walk, cls, says):
    for name in (cls, "Sub" + cls):
        assert walk["refused"][name].startswith("ArgumentTypeError: ") and says in walk["refused"][name]


@pytest.mark.parametrize("make, says", [
    (lambda: cd.Function(), "Module.function(name)"),
    (lambda: cd.Buffer(), "Buffer.empty()"),
    (lambda: cd.Buffer(16), "Buffer.empty()"),
    (lambda: cd.HostBuffer(16), "HostBuffer.empty(shape, dtype)"),
    (lambda: cd.Module(), "load_module(image)"),
    (lambda: cd.CapturedGraph(), "stream.capture(mode)"),
    (lambda: cd.CapturedGraph(5, "global"), "stream.capture(mode)"),
    (lambda: cd.DeviceLoop(), "stream.loop(...)"),
    (lambda: cd.LaunchConfig(), "fn.bind(grid, block).config"),
    (lambda: cd.LaunchConfig(None, 1, 1), "takes the Function first"),
    (lambda: cd.PreparedLaunch(), "fn.bind(grid, block, *args)"),
    (lambda: cd.Condition(), "pycudadrv.when(buffer, op, threshold)"),
    (lambda: cd.when(None, "<", 1), "pycudadrv.when(buffer, op, threshold)"),
])
def test_constructors_called_wrongly_say_where_the_objects_come_from(make, says):
    with pytest.raises(cd.ArgumentTypeError) as ei:
        make()
    assert says in str(ei.value)


def test_repr_of_objects_made_without_their_factory():
    from pycudadrv.nvrtc import ObjectCode
    assert repr(cd._stream.Capture.__new__(cd._stream.Capture)) == "<Capture mode=None on stream (none), ended, 0 kernel launches>"
    assert repr(cd.PreparedLaunch.__new__(cd.PreparedLaunch)) == "<PreparedLaunch (not initialised)>"
    assert repr(cd.LaunchConfig.__new__(cd.LaunchConfig)) == "<LaunchConfig grid=(0, 0, 0) block=(0, 0, 0) " \
                                                             "shared_mem_bytes=0>"
    assert repr(cd.Condition.__new__(cd.Condition)) == "<Condition (not initialised)>"
    assert repr(ObjectCode.__new__(ObjectCode)) == "<ObjectCode None for None, no image, NVRTC 0.0>"
    assert repr(ObjectCode(image=None, target=None, arch=None)) == "<ObjectCode None for None, no image, NVRTC 0.0>"


def test_a_condition_made_by_new_has_no_kernel():
    with pytest.raises(cd.StateError, match="not initialised"):
        cd.Condition.__new__(cd.Condition).kernel_name


def test_a_prepared_launch_made_by_new_refuses_every_launch():
    p = cd.PreparedLaunch.__new__(cd.PreparedLaunch)
    for call in (p, p.launch, p.launch_timed_ns, p._launch_device_updatable, lambda: p.launch_on(None),
                 lambda: p.set_arg(0, 1)):
        with pytest.raises(cd.ArgumentTypeError, match="not initialised"):
            call()
    assert p.param_bytes() == [] and p.args is None and p.function is None


@pytest.mark.parametrize("flag", ["x", "no", 1, None, 0.0])
def test_set_release_gil_takes_a_bool_only(flag):
    before = cd.get_release_gil()
    with pytest.raises(cd.ArgumentTypeError, match="flag must be True or False"):
        cd.set_release_gil(flag)
    assert cd.get_release_gil() is before


def test_set_release_gil_returns_the_previous_setting():
    before = cd.set_release_gil(np.True_)
    try:
        assert cd.get_release_gil() is True
    finally:
        assert cd.set_release_gil(before) is True


class _OnlyBefore:
    def before(self, fn, stream):
        return None


@pytest.mark.parametrize("hook", [5, "profile", object(), _OnlyBefore()])
def test_set_launch_hook_takes_none_or_an_object_with_before_and_after(hook):
    with pytest.raises(cd.ArgumentTypeError, match="callable before"):
        cd.set_launch_hook(hook)
    assert cd.get_launch_hook() is None


# --- malformed input to the module, memory and marshalling functions -------------------------------

class _CudaStream:
    """An object whose __cuda_stream__ returns what it is given (a malformed protocol answer)."""

    def __init__(self, answer):
        self.answer = answer

    def __cuda_stream__(self):
        return self.answer


@pytest.mark.parametrize("call, error, says", [
    (lambda: cd.image_kind(None), cd.ArgumentTypeError, "image_kind: a module image is bytes-like"),
    (lambda: cd.image_kind(5), cd.ArgumentTypeError, "got int"),
    (lambda: cd.load_module(None), cd.ArgumentTypeError, "load_module: a module image is bytes-like"),
    (lambda: cd.load_module("\ud800"), cd.ArgumentValueError, "cannot be encoded as UTF-8"),
    (lambda: cd.load_module(b"//ptx", ptx=5), cd.ArgumentTypeError, "ptx must be the PTX text"),
    (lambda: cd.link.fatbin_entries(None), cd.ArgumentTypeError, "a fatbin is bytes-like, got NoneType"),
    (lambda: cd.link.fatbin_entries("x"), cd.ArgumentTypeError, "a fatbin is bytes-like, got str"),
    (lambda: cd.Buffer.empty(10, "bogus"), cd.ArgumentTypeError, "dtype 'bogus' is not a numpy dtype"),
    (lambda: cd.HostBuffer.empty(10, "O"), cd.ArgumentTypeError, "holds Python objects"),
    (lambda: cd._host.shape_and_nbytes((3,), "bogus"), cd.ArgumentTypeError, "is not a numpy dtype"),
    (lambda: cd._host.shape_and_nbytes((3,), "V0"), cd.ArgumentTypeError, "zero-size elements"),
    (lambda: cd._host.shape_and_nbytes((True,), "f4"), cd.ArgumentTypeError, "shape must be an int or a tuple"),
    (lambda: cd.Buffer.zeros(2**70), cd.ArgumentValueError, "more than any memory holds"),
    (lambda: sig.parse_signature(None), cd.ArgumentTypeError, "got NoneType None"),
    (lambda: sig.parse_signature(5), cd.ArgumentTypeError, "got int 5"),
    (lambda: sig.parse_signature({"int": 1}), cd.ArgumentTypeError, "got dict"),
    (lambda: sig.parse_signature([np.generic]), cd.ArgumentValueError, "unknown parameter type"),
    (lambda: sig.parse_signature([np.floating]), cd.ArgumentValueError, "abstract numpy scalar type"),
    (lambda: cd.dispatch.Encoder("dev"), cd.ArgumentTypeError, "Encoder: device must be a pycudadrv Device or None, got str 'dev'"),
    (lambda: cd.dispatch.Encoder(None, 5), cd.ArgumentTypeError, "Encoder: stream must be a pycudadrv Stream or None, got int 5"),
    (lambda: cd.Device(0, 1), cd.ArgumentTypeError, "Device takes one ordinal: Device(ordinal=0), got Device(0, 1)"),
    (lambda: cd.Device(0, bogus=1), cd.ArgumentTypeError, "Device takes one ordinal: Device(ordinal=0), got Device(0, bogus=1)"),
    (lambda: cd.Buffer.from_numpy(None), cd.ArgumentTypeError,
     "Buffer.from_numpy: array must be an array of numbers (a numpy array or any buffer-protocol object), got NoneType None"),
    (lambda: cd.Event.elapsed_ms(None, None), cd.ArgumentTypeError,
     "Event.elapsed_ms: start must be a pycudadrv Event (recorded on a stream), got NoneType None"),
    (lambda: cd.HostBuffer.empty(4, object), cd.ArgumentTypeError, "holds Python objects, which device or pinned memory cannot hold"),
    (lambda: cd.image_kind("/tmp/kernel.cubin"), cd.ArgumentValueError,
     "module image '/tmp/kernel.cubin' is text but not PTX (it has no .version directive); it looks like a file path"),
    (lambda: cd.load_module("kernel.ptx"), cd.ArgumentValueError, "is text but not PTX"),
    (lambda: cd.Linker(arch=5), cd.ArgumentValueError, "Linker: arch 5 is not a GPU architecture (they start at sm_50"),
    (lambda: cd.compile("__global__ void k() {}", arch="sm_35"), cd.ArgumentValueError,
     "compile: arch 'sm_35' is not a GPU architecture"),
    (lambda: cd.Linker(arch="sm_90").add(b"garbage"), cd.ArgumentValueError,
     "Linker.add: these bytes are text but not PTX (no .version directive"),
    (lambda: cd.build_fatbin([]), cd.ArgumentValueError, "build_fatbin: entries is empty"),
    (lambda: sig.ptx_entries("garbage"), cd.ArgumentValueError, "ptx_entries: 'garbage' is not PTX text"),
    (lambda: cd.compile("__global__ void k() {}", arch="sm_90", include_paths=["/nonexistent/include"]),
     cd.ArgumentValueError, "compile: include_paths entry '/nonexistent/include' is not a directory (it does not exist)"),
    (lambda: cd.compile("__global__ void k() {}", arch="sm_90", include_paths=[__file__]),
     cd.ArgumentValueError, "is not a directory (it is a file: give the directory that holds it)"),
    (lambda: cd.build_fatbin([("ptx", b".version 8.0\n.target sm_90\n", "sm_90")], identifier=5), cd.ArgumentTypeError,
     "build_fatbin: identifier must be a non-empty str without NUL bytes"),
    (lambda: cd.build_fatbin([("ptx", b".version 8.0\n.target sm_90\n", "sm_90")], identifier="a\0b"),
     cd.ArgumentTypeError, "identifier must be a non-empty str without NUL bytes"),
    (lambda: cd.Linker(arch="sm_90").add(b".version 8.0\n.target sm_90\n", name=5), cd.ArgumentTypeError,
     "Linker.add: name must be a str"),
    (lambda: cd.Linker(arch="sm_90").add(".version 8.0\n.target sm_90\n.address_size 64\n"), cd.ArgumentTypeError,
     "Linker.add: a str is a file path; this one looks like PTX text: pass its bytes"),
    (lambda: cd.show_config(file="x"), cd.ArgumentTypeError, "show_config: file must be a text file"),
    (lambda: cd.dispatch.Dispatch(None, None), cd.ArgumentTypeError, "Dispatch: pass_ must be a Pass"),
    (lambda: cd.Stream.from_handle(_CudaStream(())), cd.ArgumentTypeError,
     "Stream.from_handle: _CudaStream.__cuda_stream__() must return (version, handle), got tuple ()"),
    (lambda: cd.Stream.from_handle(_CudaStream(5)), cd.ArgumentTypeError, "must return (version, handle), got int 5"),
    (lambda: cd.select_devices(5), cd.ArgumentTypeError, "select_devices: device ordinals are a sequence of ints"),
    (lambda: cd.select_devices(b"0"), cd.ArgumentTypeError, "select_devices: device ordinals are a sequence of ints"),
    (lambda: cd.select_devices("0,,1"), cd.ArgumentValueError, "select_devices: an empty entry in the device list"),
    (lambda: cd.compile("__global__ void k() {}", arch="sm_90", options=[b"-DX"]), cd.ArgumentTypeError,
     "compile: options must be strings, got bytes b'-DX' (decode bytes first)"),
    (lambda: cd.compile("__global__ void k() {}", arch="sm_90", headers={"": "int y;"}), cd.ArgumentValueError,
     "compile: header name '' is empty"),
    (lambda: cd.image_kind(b"\x7fELF"), cd.ArgumentValueError, "truncated ELF file (4 bytes"),
    (lambda: cd.Buffer.from_numpy("abc"), cd.ArgumentTypeError, "Buffer.from_numpy: array must be an array of numbers"),
    (lambda: cd.Buffer.empty(4, device="gpu0"), cd.ArgumentTypeError,
     "Buffer.empty: device must be a Device or an int ordinal, got str 'gpu0'"),
    (lambda: cd.HostBuffer.empty(4, device=1.5), cd.ArgumentTypeError, "HostBuffer.empty: device must be a Device"),
    (lambda: cd.Event(device="gpu0"), cd.ArgumentTypeError, "Event: device must be a Device"),
    (lambda: cd.load_module(b".version 8.0\n.target sm_90\n", device="gpu0"), cd.ArgumentTypeError,
     "load_module: device must be a Device"),
    (lambda: cd.context("gpu0"), cd.ArgumentTypeError, "context: device must be a Device or an int ordinal, got str"),
    (lambda: cd.graph_memory_used("gpu0"), cd.ArgumentTypeError, "graph_memory_used: device must be a Device"),
    (lambda: cd.Queue(device="gpu0"), cd.ArgumentTypeError, "Queue: device must be a Device or an int ordinal, got str"),
    (lambda: sig.ptx_entries(b".entry k()"), cd.ArgumentTypeError,
     "ptx_entries: ptx must be PTX text as a str; decode bytes first (ptx.decode()), got bytes b'.entry k()'"),
    (lambda: sig.ptx_entries(None), cd.ArgumentTypeError, "ptx_entries: ptx must be PTX text as a str, got NoneType None"),
    (lambda: sig.source_params(b"__global__ void k() {}"), cd.ArgumentTypeError,
     "source_params: source must be CUDA C++ text as a str; decode bytes first (source.decode()), got bytes"),
    (lambda: sig.source_params(None), cd.ArgumentTypeError,
     "source_params: source must be CUDA C++ text as a str, got NoneType None"),
])
def test_malformed_input_is_a_pycudadrv_error(call, error, says):
    with pytest.raises(error) as ei:
        call()
    assert says in str(ei.value)


@pytest.mark.parametrize("layout, args, says", [
    ({"int": 1}, [1], "got dict"),
    (np.dtype("i4"), [1], "got Int32DType"),
    (None, [], "got NoneType None"),
    (5, [1], "got int 5"),
    ([Param(INT, 4, 4, 0), "int"], [1, 2], "mixes Param entries and type names"),
    (["int", Param(INT, 4, 4, 0)], [1, 2], "mixes Param entries and type names"),
    ("int", 5, "args must be a list or tuple of values"),
    ("char, char", "ab", "args must be a list or tuple of values"),
    ("int, int", {1, 2}, "args must be a list or tuple of values (in parameter order), got set"),
    ("int, int", (v for v in (1, 2)), "args must be a list or tuple of values (in parameter order), got generator"),
    ("int, int", {1: 0, 2: 0}, "args must be a list or tuple of values (in parameter order), got dict"),
    ([Param(1.5, 4, 4, 0)], [1], "kind must be an int, got 1.5"),
    ([Param(INT, 2.5, 4, 0)], [1], "size must be an int, got 2.5"),
    ([Param(INT, None, 4, 0)], [1], "size must be an int, got None"),
    ([Param(INT, True, 4, 0)], [1], "size must be an int, got True"),
    ([Param(INT, 4, 4, None)], [1], "offset must be an int, got None"),
])
def test_pack_arguments_refuses_malformed_layouts_and_arguments(layout, args, says):
    with pytest.raises(cd.ArgumentTypeError, match=re.escape(says)):
        cd.pack_arguments(layout, args)


def test_a_layout_of_plain_tuples_is_not_taken_for_params():
    with pytest.raises(cd.ArgumentValueError, match=re.escape("unknown parameter type (1, 4, 4, 0) in signature")):
        cd.pack_arguments([(1, 4, 4, 0)], [1])


def test_pack_arguments_takes_a_list_or_a_tuple_of_arguments():
    assert cd.pack_arguments("int", [7])[0] == cd.pack_arguments("int", (7,))[0] == [b"\x07\x00\x00\x00"]


def test_pack_arguments_name_must_be_a_str():
    with pytest.raises(cd.ArgumentTypeError, match="name must be a str, got int"):
        cd.pack_arguments("int", [1], name=5)


@pytest.mark.parametrize("param, says", [
    (Param(9, 4, 4, 0), "kind 9 is not a ParamKind (0..8)"),
    (Param(2**70, 4, 4, 0), "is not a ParamKind (0..8)"),
    (Param(INT, 3, 4, 0), "int parameters have 1, 2, 4, 8 or 16 bytes, not 3"),
    (Param(sig.POINTER, 4, 4, 0), "pointer parameters have 8 bytes, not 4"),
    (Param(sig.FLOAT, 16, 16, 0), "float parameters have 2, 4 or 8 bytes, not 16"),
    (Param(BYTES, 0, 1, 0), "has 0 bytes: a kernel parameter has at least one"),
    (Param(INT, 4, 4, -4), "offset -4 is outside [0, 2**63)"),
    (Param(INT, 4, 4, 2**70), "offset 1180591620717411303424 is outside [0, 2**63)"),
])
def test_layout_fields_out_of_range_are_value_errors(param, says):
    with pytest.raises(cd.ArgumentValueError, match=re.escape(says)):
        cd.pack_arguments([param], [b"" if param.kind == BYTES else 1])


@pytest.mark.parametrize("layout", [[np.dtype((np.uint8, 40000))], [Param(BYTES, 32765, 1, 0)]])
def test_a_single_parameter_over_the_limit_says_the_limit(layout):
    with pytest.raises(cd.ArgumentValueError, match=r"parameter #0 of the layout is \d+ bytes, beyond the driver's "
                                                    "limit of 32764 bytes"):
        cd.pack_arguments(layout, [b""])


def test_the_end_of_the_parameters_never_wraps_near_2_64():
    with pytest.raises(cd.ArgumentValueError, match=re.escape("offset 18446744073709551612 is outside [0, 2**63)")):
        cd.pack_arguments([Param(INT, 4, 4, 2**64 - 4)], [1])
    with pytest.raises(cd.ArgumentValueError, match="9223372036854775811 bytes of parameters exceed the driver's limit"):
        cd.pack_arguments([Param(INT, 4, 4, 2**63 - 1)], [1])


def test_a_huge_int_is_described_without_printing_it():
    with pytest.raises(cd.ArgumentTypeError, match=r"out of range for a 32-bit signed integer .*; got int <an int "
                                                   r"of 33220 bits>"):
        cd.pack_arguments("int", [10**10000])


def test_a_released_memoryview_cannot_be_read():
    m = memoryview(bytes(8))
    m.release()
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #0 .*cannot read its bytes .*got memoryview "
                                                   r"\(released\)"):
        cd.pack_arguments("int2", [m])


class _Dev:
    """Stands in for a CuPy/Numba/PyTorch array."""

    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


class _Raises:
    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("boom")


_BASE = {"data": (4096, False)}


@pytest.mark.parametrize("cai, says", [
    ({**_BASE, "strides": (4,)}, "has no 'shape' (a tuple of ints)"),
    ({**_BASE, "strides": (4,), "shape": (3,)}, "'typestr' must be a str such as '<f4', got None"),
    ({**_BASE, "strides": (4,), "shape": (3, 4), "typestr": "<f4"},
     "strides (4,) gives 1 stride(s) for the 2-dimensional shape (3, 4)"),
    ({**_BASE, "strides": (), "shape": (3,), "typestr": "<f4"},
     "strides () gives 0 stride(s) for the 1-dimensional shape (3,)"),
    ({**_BASE, "strides": 5, "shape": (3,), "typestr": "<f4"}, "'strides' must be None or a tuple of ints"),
    ({**_BASE, "strides": (None,), "shape": (3,), "typestr": "<f4"}, "'strides' must be None or a tuple of ints"),
    ({**_BASE, "strides": (4,), "shape": 3, "typestr": "<f4"}, "'shape' must be a tuple of ints, got 3"),
    ({**_BASE, "strides": (4,), "shape": (-3,), "typestr": "<f4"}, "shape (-3,) has a negative extent at dimension 0"),
    ({**_BASE, "shape": (-3,), "typestr": "<f4"}, "shape (-3,) has a negative extent at dimension 0"),
    ({**_BASE, "strides": (4,), "shape": ("a",), "typestr": "<f4"}, "'shape' must be a tuple of ints, got ('a',)"),
    ({**_BASE, "strides": (4,), "shape": (3,), "typestr": "garbage"}, "typestr 'garbage' is not a numpy type"),
    ({**_BASE, "strides": (4,), "shape": (3,), "typestr": 5}, "'typestr' must be a str such as '<f4', got 5"),
])
def test_a_malformed_cuda_array_interface_is_refused_by_pack_data_pointer_and_span_alike(cai, says):
    """One reader of the interface (pycudadrv._interop.cai_extent): the same fault is the same
    ArgumentValueError through a launch's packing, data_pointer, asbuffer and the Queue's span
    (a negative extent with no strides used to pass a launch unchecked)."""
    with pytest.raises(cd.ArgumentValueError) as ei:
        cd.pack_arguments("float*", [_Dev(cai)])
    assert "parameter #0 (8-byte pointer parameter): its __cuda_array_interface__ " in str(ei.value)
    assert says in str(ei.value)
    for read in (cd.data_pointer, cd.asbuffer, lambda x: _interop.span(x, "Queue.launch")):
        with pytest.raises(cd.ArgumentValueError, match=re.escape(says)):
            read(_Dev(cai))


def test_a_cuda_array_interface_that_raises_is_named():
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #0 .*reading its __cuda_array_interface__ raised "
                                                   r"RuntimeError: boom") as ei:
        cd.pack_arguments("float*", [_Raises()])
    assert isinstance(ei.value.__cause__, RuntimeError)
    with pytest.raises(cd.ArgumentTypeError, match="data_pointer: _Raises: reading its __cuda_array_interface__"):
        cd.data_pointer(_Raises())


def test_a_shape_and_strides_of_numpy_ints_are_read_as_ints():
    cai = {**_BASE, "shape": (np.int64(3),), "strides": (np.int64(4),), "typestr": "<f4"}
    assert cd.data_pointer(_Dev(cai)) == 4096
    assert cd.pack_arguments("float*", [_Dev(cai)])[0] == [(4096).to_bytes(8, "little")]


def test_strided_opt_in_still_checks_the_interface():
    assert cd.data_pointer(_Dev({**_BASE, "strides": (8,), "shape": (3,), "typestr": "<f4"}), strided=True) == 4096
    with pytest.raises(cd.ArgumentValueError, match="typestr 'bad' is not a numpy type string"):
        cd.data_pointer(_Dev({**_BASE, "strides": (8,), "shape": (3,), "typestr": "bad"}), strided=True)


@pytest.mark.parametrize("name", ["_Z1k" + "P" * 5000 + "i", "_Z" + "9" * 5000 + "k", "_Z1kILi5", "_Z1kILi5E",
                                  "_ZN" + "1a" * 20000 + "1kEv" + "S" * 10, "_Z1kIS" + "Z" * 5000 + "_E"])
def test_mangled_names_it_cannot_read_give_none_never_an_exception(name):
    assert sig.mangled_params(name) is None or isinstance(sig.mangled_params(name), list)


def test_a_long_nested_name_is_read():
    # 20000 components: the reader keeps the last one only, so this is linear (joining every prefix was quadratic)
    assert sig.mangled_params("_ZN" + "1a" * 20000 + "1kEPfi") == [(sig.POINTER, 8, 8, False), (INT, 4, 4, None)]


def test_deeply_nested_types_give_none_not_a_recursion_error():
    assert sig.mangled_params("_Z1k" + "P" * 5000 + "i") is None
    assert sig.mangled_params("_Z1k" + "P" * 8 + "i") == [(sig.POINTER, 8, 8, False)]


def test_an_unknown_mangled_literal_at_the_end_is_not_an_endless_loop():
    assert sig.mangled_params("_Z1kILi5") is None


# --- on the GPU: the new parameter rules reach a real kernel ---------------------------------------

WIDE = r"""
extern "C" __global__ void wide(unsigned __int128 u, __int128 s, const float x[4], unsigned long long* out,
                                float* y) {
    out[0] = (unsigned long long)u;
    out[1] = (unsigned long long)(u >> 64);
    out[2] = (unsigned long long)s;
    out[3] = (unsigned long long)((unsigned __int128)s >> 64);
    for (int i = 0; i < 4; ++i) y[i] = 2.0f * x[i];
}
"""


@pytest.mark.gpu
def test_int128_and_array_parameters_reach_the_kernel(rng):
    fn = cd.compile(WIDE, options=["--device-int128"]).load().function("wide")
    assert fn.layout_source == "source+ptx"
    assert [(p.kind, p.size, p.const) for p in fn.param_layout] == [
        (sig.UINT, 16, None), (INT, 16, None), (sig.POINTER, 8, True), (sig.POINTER, 8, False),
        (sig.POINTER, 8, False)]
    u = (int(rng.integers(1, 2**63)) << 65) | int(rng.integers(1, 2**63))          # above 2**64
    s = -((int(rng.integers(1, 2**62)) << 64) | int(rng.integers(1, 2**63)))       # below -2**64
    x = rng.standard_normal(4).astype(np.float32)
    out = cd.Buffer.from_numpy(np.full(4, 0xDEADBEEFDEADBEEF, np.uint64))           # poisoned
    y = cd.Buffer.from_numpy(np.full(4, np.nan, np.float32))
    fn.launch(1, 1, u, s, cd.Buffer.from_numpy(x), out, y)
    mask = 2**64 - 1
    assert out.to_numpy().tolist() == [u & mask, u >> 64, s & mask, (s & (2**128 - 1)) >> 64]
    np.testing.assert_allclose(y.to_numpy().astype(np.float64), 2.0 * x.astype(np.float64), rtol=1e-7)
    with pytest.raises(cd.ArgumentTypeError, match=r"parameter #0 .*128-bit unsigned integer"):
        fn.launch(1, 1, -1, s, None, out, y)


_WRONG_SELF = textwrap.dedent(r"""
    import sys
    import pycudadrv as cd
    from pycudadrv._kernel import KernelBase
    def resolve(path):
        obj = cd
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj
    called = 0
    for cls in [resolve(n) for n in sys.argv[1].split(",")] + [KernelBase, cd.Queue, cd.Stream, cd.Event]:
        for klass in cls.__mro__[:-1]:
            for name, attr in vars(klass).items():
                if not callable(attr) or isinstance(attr, (type, staticmethod, classmethod)) or name in (
                        "__new__", "__init_subclass__", "__subclasshook__", "__class_getitem__"):
                    continue
                for args in [(), (0,), (None, None)]:
                    try:
                        attr(object(), *args)
                    except Exception:
                        pass
                called += 1
    print("called", called)
""")


def test_a_method_called_through_its_class_with_another_object_as_self_is_refused_not_a_crash():
    """``Function.set_signature(object(), "int")``: Cython's cyfunction methods (binding=True) did not
    check ``self`` and read the object's C fields (a segfault); the methods are method descriptors now,
    which CPython checks. Every method of every compiled class, in a child process."""
    p = subprocess.run([sys.executable, "-c", _WRONG_SELF, ",".join(COMPILED)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"crashed (return code {p.returncode}):\n{p.stderr[-3000:]}"
    assert int(p.stdout.split()[-1]) > 100
