"""pycudadrv.nvtx: off costs nothing and records nothing; on, ranges nest and pair up; the
ctypes backend matches nvToolsExt.h and loads the NVTX library when one is installed (CPU only)."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import pycudadrv
from pycudadrv import nvtx
from pycudadrv._errors import ArgumentTypeError, ArgumentValueError, LibraryUnavailableError

from _fakes import FakeEvent, FakeStream


def same_package_env(**extra):
    """The environment for a child interpreter that imports this very pycudadrv (the one under
    test, installed or built in place), whatever its working directory."""
    env = dict(os.environ, **extra)
    here = os.path.dirname(os.path.dirname(os.path.abspath(pycudadrv.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return env


class Recorder:
    """A backend that writes down what it is asked to do."""

    name = "recorder"
    path = None

    def __init__(self):
        self.calls = []

    def push(self, label):
        self.calls.append(("push", label))

    def pop(self):
        self.calls.append(("pop",))

    def mark(self, label):
        self.calls.append(("mark", label))


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(nvtx, "_impl", rec)
    monkeypatch.setattr(nvtx, "enabled", False)
    yield rec


def test_off_by_default_in_a_fresh_interpreter(tmp_path):
    env = same_package_env()
    env.pop("PYCUDADRV_NVTX", None)
    out = subprocess.run([sys.executable, "-c", "from pycudadrv import nvtx; print(nvtx.enabled, nvtx._impl)"],
                         capture_output=True, text=True, env=env, check=True, cwd=tmp_path)
    assert out.stdout.split() == ["False", "None"]


def test_while_off_push_returns_false_and_records_nothing(recorder):
    assert nvtx.push("step") is False
    nvtx.mark("m")
    with nvtx.range("block"):
        pass
    assert recorder.calls == []


def test_enabled_ranges_nest_and_pop_in_reverse_order(recorder):
    nvtx.enabled = True
    with nvtx.range("outer"):
        assert nvtx.push("inner") is True
        nvtx.pop()
    assert recorder.calls == [("push", "outer"), ("push", "inner"), ("pop",), ("pop",)]


def test_range_pops_when_the_block_raises(recorder):
    nvtx.enabled = True
    with pytest.raises(KeyError):
        with nvtx.range("failing"):
            raise KeyError("x")
    assert recorder.calls == [("push", "failing"), ("pop",)]


def test_a_range_opened_while_on_is_closed_after_disable(recorder):
    nvtx.enabled = True
    with nvtx.range("spanning"):
        nvtx.disable()
        assert nvtx.push("ignored") is False
    assert recorder.calls == [("push", "spanning"), ("pop",)]
    assert nvtx.is_enabled() is False


def test_labels_must_be_strings_while_on(recorder):
    nvtx.enabled = True
    with pytest.raises(ArgumentTypeError, match="nvtx.push: label must be a str, got int"):
        nvtx.push(3)
    with pytest.raises(ArgumentTypeError, match="nvtx.mark: label must be a str, got bytes"):
        nvtx.mark(b"x")
    assert recorder.calls == []


def test_enable_refuses_an_unknown_backend():
    with pytest.raises(ArgumentValueError, match="backend must be 'nvtx', 'ctypes' or None, got 'nsys'"):
        nvtx.enable("nsys")


def test_enable_without_any_backend_says_where_it_looked(monkeypatch):
    monkeypatch.setattr(nvtx, "_impl", None)
    monkeypatch.setattr(nvtx, "enabled", False)
    monkeypatch.setattr(nvtx, "_library_candidates", lambda: iter(["/nonexistent/libnvtx3interop.so.1"]))
    with pytest.raises(LibraryUnavailableError, match=r"NVTX library not found .*/nonexistent/libnvtx3interop\.so\.1"):
        nvtx.enable("ctypes")
    assert nvtx.enabled is False


def test_the_environment_switch_without_a_backend_warns_and_stays_off(monkeypatch):
    monkeypatch.setattr(nvtx, "_impl", None)
    monkeypatch.setattr(nvtx, "enabled", False)
    monkeypatch.setattr(nvtx, "_make", lambda which: (_ for _ in ()).throw(LibraryUnavailableError("none here")))
    monkeypatch.setenv("PYCUDADRV_NVTX", "1")
    with pytest.warns(RuntimeWarning, match="PYCUDADRV_NVTX is set but NVTX ranges stay off: none here"):
        nvtx._from_environment()
    assert nvtx.enabled is False


def test_event_attributes_layout_is_nvtoolsext_h_on_64_bit_linux():
    import ctypes

    a = nvtx._EventAttributes
    assert ctypes.sizeof(a) == 48
    assert [(name, getattr(a, name).offset) for name, _ in a._fields_] == [
        ("version", 0), ("size", 2), ("category", 4), ("colorType", 8), ("color", 12), ("payloadType", 16),
        ("reserved0", 20), ("payload", 24), ("messageType", 32), ("message", 40)]


def _nvtx_header():
    cands = ["/usr/local/cuda/include"]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.insert(0, os.path.join(os.environ[var], "include"))
    try:
        import nvidia

        cands += [os.path.join(b, "cu13", "include") for b in nvidia.__path__]
    except ImportError:
        pass
    for c in cands:
        if os.path.isfile(os.path.join(c, "nvtx3", "nvToolsExt.h")):
            return c
    return None


def test_event_attributes_layout_matches_the_installed_header(tmp_path):
    inc = _nvtx_header()
    cc = shutil.which("cc") or shutil.which("gcc")
    if inc is None or cc is None:
        pytest.skip("needs nvtx3/nvToolsExt.h (a CUDA toolkit or the nvidia-nvtx wheel) and a C compiler")
    src = tmp_path / "layout.c"
    src.write_text(textwrap.dedent("""
        #include <stddef.h>
        #include <stdio.h>
        #include <nvtx3/nvToolsExt.h>
        int main(void) {
            printf("%zu %zu %zu %zu %d %d\\n", sizeof(nvtxEventAttributes_t),
                   offsetof(nvtxEventAttributes_t, payload), offsetof(nvtxEventAttributes_t, messageType),
                   offsetof(nvtxEventAttributes_t, message), NVTX_VERSION, (int)NVTX_MESSAGE_TYPE_ASCII);
            return 0;
        }
    """))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", inc, str(src), "-o", str(exe)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    a = nvtx._EventAttributes
    assert out == [str(x) for x in (48, a.payload.offset, a.messageType.offset, a.message.offset,
                                    nvtx._NVTX_VERSION, nvtx._NVTX_MESSAGE_TYPE_ASCII)]


def _ctypes_backend_or_skip():
    try:
        return nvtx._CtypesImpl()
    except LibraryUnavailableError as e:
        pytest.skip(f"no NVTX C library here: {e}")


def test_ctypes_backend_pushes_and_pops_through_the_library(monkeypatch):
    impl = _ctypes_backend_or_skip()
    monkeypatch.setattr(nvtx, "_impl", impl)
    monkeypatch.setattr(nvtx, "enabled", True)
    assert os.path.basename(impl.path).startswith(("libnvtx3interop.so", "libnvToolsExt.so"))
    with nvtx.range("outer"):
        with nvtx.range("inner \u00e9"):   # non-ASCII labels go as UTF-8 bytes
            nvtx.mark("tick")
    assert nvtx.library_path() == impl.path
    assert "outer" in impl._attrs and "inner \u00e9" in impl._attrs


def test_ctypes_backend_keeps_each_label_bytes_alive_with_its_attributes():
    impl = _ctypes_backend_or_skip()
    a, text = impl._attributes("pass 7")
    import ctypes

    assert text == b"pass 7"
    assert ctypes.string_at(a.message) == b"pass 7"
    assert (a.version, a.size, a.messageType) == (3, 48, 1)


def test_package_backend_when_the_nvtx_package_is_installed(monkeypatch):
    pytest.importorskip("nvtx")
    monkeypatch.setattr(nvtx, "_impl", None)
    monkeypatch.setattr(nvtx, "enabled", False)
    assert nvtx.enable("nvtx") == "nvtx"
    try:
        with nvtx.range("through the nvtx package"):
            nvtx.mark("tick")
        assert nvtx.library_path() is None
    finally:
        nvtx.disable()


def test_the_environment_switch_turns_ranges_on_at_import_where_a_backend_exists(tmp_path):
    code = "from pycudadrv import nvtx; print(nvtx.enabled, nvtx._impl is not None and nvtx._impl.name)"
    env = same_package_env(PYCUDADRV_NVTX="1")
    if nvtx.backend() is None:
        pytest.skip("neither the nvtx package nor an NVTX library is installed here")
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], capture_output=True,
                         text=True, env=env, check=True, cwd=tmp_path)
    assert out.stdout.split()[0] == "True"
    assert out.stdout.split()[1] in ("nvtx", "ctypes")


# --- where pycudadrv opens ranges ----------------------------------------------------------------

def test_timestamps_passes_are_ranges_while_on_and_cost_no_call_while_off(recorder, monkeypatch):
    from pycudadrv import timestamps

    ts = timestamps.Timestamps(FakeStream())
    monkeypatch.setattr(ts, "_new_event", FakeEvent)
    with ts.measure("off"):
        pass
    assert recorder.calls == []
    nvtx.enabled = True
    with ts.measure("frame"):
        with ts.measure("shadow"):
            pass
    assert recorder.calls == [("push", "frame"), ("push", "shadow"), ("pop",), ("pop",)]


def test_a_pass_opened_while_off_pops_nothing_when_nvtx_is_turned_on_inside_it(recorder, monkeypatch):
    from pycudadrv import timestamps

    ts = timestamps.Timestamps(FakeStream())
    monkeypatch.setattr(ts, "_new_event", FakeEvent)
    with ts.measure("outer"):
        nvtx.enabled = True
        with ts.measure("inner"):
            pass
    assert recorder.calls == [("push", "inner"), ("pop",)]


def _pass_pushes(ts, label):
    """Whether one Timestamps pass opened an NVTX range (the pass reads _timing's C copy of the flag)."""
    rec = nvtx._impl
    before = len(rec.calls)
    with ts.measure(label):
        pass
    return rec.calls[before:] == [("push", label), ("pop",)]


def test_a_pass_follows_every_way_nvtx_enabled_changes(recorder, monkeypatch):
    """_timing keeps a C copy of nvtx.enabled: enable()/disable(), an assignment from outside,
    monkeypatch's setattr and its undo, and a delattr all reach it."""
    from pycudadrv import timestamps

    ts = timestamps.Timestamps(FakeStream())
    monkeypatch.setattr(ts, "_new_event", FakeEvent)
    assert not _pass_pushes(ts, "a")
    assert nvtx.enable() == "recorder"                # the backend set already is kept
    assert _pass_pushes(ts, "b") and _pass_pushes(ts, "b")
    nvtx.disable()
    assert not _pass_pushes(ts, "c")
    nvtx.enabled = True
    assert _pass_pushes(ts, "d")
    nvtx.enabled = False
    assert not _pass_pushes(ts, "e")
    setattr(nvtx, "enabled", 1)                       # truthy: on, as the module attribute reads
    assert _pass_pushes(ts, "f")
    with monkeypatch.context() as m:
        m.setattr(nvtx, "enabled", False)
        assert not _pass_pushes(ts, "g")
    assert _pass_pushes(ts, "h")                      # the undo put 1 back
    nvtx.enabled = False
    with monkeypatch.context() as m:
        m.setattr(nvtx, "enabled", True)
        assert _pass_pushes(ts, "i")
    assert not _pass_pushes(ts, "j")
    try:
        del nvtx.enabled                              # gone: off (push() would raise NameError; the pass is off)
        assert not _pass_pushes(ts, "k")
    finally:
        nvtx.enabled = False


def test_a_pass_follows_nvtx_enabled_across_a_reload_and_the_environment(tmp_path):
    code = textwrap.dedent("""
        import importlib
        from pycudadrv import nvtx, timestamps
        class Rec:
            name = "rec"
            def __init__(self): self.calls = []
            def push(self, label): self.calls.append(label)
            def pop(self): pass
        class S: device = None
        class E:
            def record(self, stream): return self
        ts = timestamps.Timestamps(S())
        ts._new_event = E
        def pushed(label):
            rec = nvtx._impl = Rec()
            with ts.measure(label):
                pass
            return rec.calls == [label]
        nvtx.enabled = True
        a = pushed("a")
        importlib.reload(nvtx)                      # enabled = False again, in the same module
        b = pushed("b")
        nvtx.enabled = True
        c = pushed("c")
        print(a, b, c)
    """)
    env = same_package_env()
    env.pop("PYCUDADRV_NVTX", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True"]


def test_dispatch_passes_are_ranges_and_close_when_the_block_raises(recorder):
    from pycudadrv import dispatch

    enc = dispatch.Encoder.__new__(dispatch.Encoder)    # no device: pass_() touches neither
    nvtx.enabled = True
    with pytest.raises(KeyError):
        with enc.pass_("gbuffer"):
            raise KeyError("boom")
    assert recorder.calls == [("push", "gbuffer"), ("pop",)]


class _Fn:
    name = "saxpy"


def test_the_launch_hook_names_each_launch_and_refuses_to_displace_profile_mode(recorder):
    from pycudadrv import _launch, profile

    prev = _launch.set_launch_hook(None)
    try:
        nvtx.annotate_launches(True)
        hook = _launch.get_launch_hook()
        nvtx.enabled = True
        tok = hook.before(_Fn(), None)
        hook.after(tok, _Fn(), None, (1, 1, 1), (1, 1, 1), 0)
        nvtx.enabled = False
        hook.after(hook.before(_Fn(), None), _Fn(), None, (1, 1, 1), (1, 1, 1), 0)
        assert recorder.calls == [("push", "saxpy"), ("pop",)]
        nvtx.annotate_launches(False)
        assert _launch.get_launch_hook() is None
        _launch.set_launch_hook(profile._profiler)
        with pytest.raises(pycudadrv.StateError, match="profile or trace mode"):
            nvtx.annotate_launches(True)
        nvtx.annotate_launches(False)                  # not ours: left in place
        assert _launch.get_launch_hook() is profile._profiler
    finally:
        _launch.set_launch_hook(prev)


@pytest.mark.parametrize("flag, shown", [("no", "str 'no'"), (1, "int 1"), (None, "NoneType None"), ([], "list []")])
def test_annotate_launches_takes_only_a_bool_and_leaves_the_hook_alone_otherwise(flag, shown):
    from pycudadrv import _launch

    prev = _launch.set_launch_hook(None)
    try:
        with pytest.raises(ArgumentTypeError, match="nvtx.annotate_launches: flag must be True or False, got "
                                                    + re.escape(shown)):
            nvtx.annotate_launches(flag)
        assert _launch.get_launch_hook() is None
    finally:
        _launch.set_launch_hook(prev)
