"""pycudadrv.show_config() / python -m pycudadrv --info: every part reported, nothing raised for
what is missing. The driver and devices are faked where a test needs them on the CPU; the GPU test
checks the report against the driver itself."""
import importlib.machinery
import io
import os
import subprocess
import sys
import types

import pytest

import pycudadrv as cd
from pycudadrv import config, nvrtc
from pycudadrv._env import ENVIRONMENT_VARIABLES

from _fakes import FakeDevice


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No pycudadrv variable set except a private, empty cache directory."""
    for name in [*ENVIRONMENT_VARIABLES, *config.OTHER_VARIABLES]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYCUDADRV_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _report():
    """show_config()'s text, printed into a throwaway buffer."""
    return config.show_config(file=io.StringIO())


def _no_driver(monkeypatch):
    def require():
        raise cd.CudaUnavailableError("no driver on this test machine")

    monkeypatch.setattr(cd, "require", require)
    monkeypatch.setattr(cd, "device_count", require)


def _fake_gpus(monkeypatch, n=2, selected=None):
    monkeypatch.setattr(cd, "require", lambda: None)
    monkeypatch.setattr(cd, "driver_version", lambda: (13, 0))
    monkeypatch.setattr(cd._driver, "driver_library", lambda: "libcuda.so.1")
    monkeypatch.setattr(cd, "device_count", lambda: n)
    monkeypatch.setattr(cd, "Device", FakeDevice)
    monkeypatch.setattr(cd, "selected_devices",
                        lambda: [FakeDevice(i) for i in (selected if selected is not None else range(n))])
    monkeypatch.setattr(config, "_mapped_path", lambda fragment: None)


def test_show_config_prints_and_returns_the_same_text(capsys, clean_env, monkeypatch):
    _no_driver(monkeypatch)
    text = cd.show_config()
    assert capsys.readouterr().out == text
    assert text.startswith(f"pycudadrv {cd.__version__} at {os.path.dirname(os.path.abspath(cd.__file__))}\n")


def test_the_build_header_version_is_reported(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    hv = cd._driver.HEADER_CUDA_VERSION
    text = _report()
    assert (f"built against cuda.h of CUDA {hv // 1000}.{hv % 1000 // 10} (HEADER_CUDA_VERSION {hv}); "
            "oldest driver supported: CUDA 12.0") in text


def test_without_a_driver_it_says_so_instead_of_raising(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    text = _report()
    assert "driver:\n  unavailable: CudaUnavailableError: no driver on this test machine\n" in text
    assert "devices: unknown (no usable driver, see above)\n" in text


def test_each_device_has_name_compute_capability_memory_and_sms(clean_env, monkeypatch):
    _fake_gpus(monkeypatch, n=2)
    text = _report()
    assert "driver:\n  library: libcuda.so.1\n  version: CUDA 13.0\n" in text
    assert ("devices: 2\n"
            "  0: NVIDIA H200, compute capability 9.0 (sm_90), 139.8 GiB, 132 SMs\n"
            "  1: NVIDIA H200, compute capability 9.0 (sm_90), 139.8 GiB, 132 SMs\n") in text


def test_devices_outside_the_selection_are_listed_as_not_selected(clean_env, monkeypatch):
    _fake_gpus(monkeypatch, n=2, selected=[1])
    info = config.config_info()
    assert info["devices"]["devices"][0] == {"ordinal": 0, "selected": False}
    assert info["devices"]["devices"][1]["name"] == "NVIDIA H200"
    assert "  0: not selected (PYCUDADRV_DEVICES / select_devices())\n" in config._format(info)


def test_a_driver_with_no_device_is_reported(clean_env, monkeypatch):
    _fake_gpus(monkeypatch, n=0)
    assert "devices: 0 (the driver reports none)\n" in _report()


def test_nvrtc_missing_is_reported_with_the_reason(clean_env, monkeypatch):
    _no_driver(monkeypatch)

    def missing():
        raise cd.NvrtcUnavailableError("NVRTC (libnvrtc) not found; looked at: nowhere")

    monkeypatch.setattr(nvrtc, "nvrtc_version", missing)
    text = _report()
    assert "NVRTC:\n  unavailable: NvrtcUnavailableError: NVRTC (libnvrtc) not found; looked at: nowhere\n" in text


def test_nvrtc_version_path_and_include_dirs_are_those_compile_uses(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (13, 0))
    monkeypatch.setattr(nvrtc, "nvrtc_path", lambda: "/opt/nvrtc/lib/libnvrtc.so.13")
    monkeypatch.setattr(nvrtc, "default_include_dirs", lambda: ["/opt/cuda/include", "/opt/cuda/include/cccl"])
    text = _report()
    assert ("NVRTC:\n  library: /opt/nvrtc/lib/libnvrtc.so.13\n  version: 13.0\n"
            "  include directories: /opt/cuda/include; /opt/cuda/include/cccl\n") in text


def test_cache_directory_files_and_bytes(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    clean_env.mkdir()
    (clean_env / "a.nvrtc").write_bytes(b"x" * 100)
    (clean_env / "b.nvrtc").write_bytes(b"y" * 28)
    text = _report()
    assert f"compile cache: {clean_env} (2 entries, 128 bytes; limit 1.0 GiB)\n" in text


def test_cache_not_created_yet_and_disabled(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    assert f"compile cache: {clean_env} (not created yet)\n" in _report()
    monkeypatch.setenv("PYCUDADRV_CACHE", "0")
    assert "compile cache: disabled (PYCUDADRV_CACHE)\n" in _report()


def test_only_the_environment_variables_that_are_set_are_listed(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    monkeypatch.setenv("PYCUDADRV_TRACE", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    env = config.config_info()["environment"]
    assert sorted(env) == ["CUDA_VISIBLE_DEVICES", "PYCUDADRV_CACHE_DIR", "PYCUDADRV_TRACE"]
    text = config._format(config.config_info())
    assert f"  PYCUDADRV_TRACE='1': {ENVIRONMENT_VARIABLES['PYCUDADRV_TRACE']}\n" in text
    assert "  CUDA_VISIBLE_DEVICES='0,1': which GPUs the driver shows\n" in text


def _fake_module(monkeypatch, name, **functions):
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for k, v in functions.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)


def test_optional_modules_absent_are_said_to_be_absent(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    monkeypatch.setattr(config, "_has_module", lambda name: False)
    text = _report()
    assert ("  nvJitLink: not part of this pycudadrv\n  nvFatbin: not part of this pycudadrv\n"
            "  cuDNN: not part of this pycudadrv\n") in text


def test_optional_modules_present_report_availability_version_and_library(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    _fake_module(monkeypatch, "pycudadrv.cudnn", is_available=lambda: True, version=lambda: (9, 10, 2),
                 library_path=lambda: "/x/libcudnn.so.9")
    text = _report()
    assert "  cuDNN (pycudadrv.cudnn): available; version 9.10.2; /x/libcudnn.so.9\n" in text


def test_the_linker_libraries_report_their_versions(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    _fake_module(monkeypatch, "pycudadrv.link", nvjitlink_version=lambda: (13, 0), nvfatbin_version=lambda: (13, 0))
    monkeypatch.setattr(config, "_mapped_path", lambda fragment: {"libnvJitLink.so": "/x/libnvJitLink.so.13"}.get(fragment))
    text = _report()
    assert "  nvJitLink (pycudadrv.link): version 13.0; /x/libnvJitLink.so.13\n" in text
    assert "  nvFatbin (pycudadrv.link): version 13.0\n" in text


def test_an_unavailable_optional_library_says_why(clean_env, monkeypatch):
    _no_driver(monkeypatch)

    def missing():
        raise cd.LinkerUnavailableError("nvJitLink not found; looked at: nowhere")

    _fake_module(monkeypatch, "pycudadrv.link", nvjitlink_version=missing, nvfatbin_version=missing)
    text = _report()
    assert "  nvJitLink (pycudadrv.link): LinkerUnavailableError: nvJitLink not found; looked at: nowhere\n" in text


def test_an_optional_module_whose_probe_fails_is_reported_not_raised(clean_env, monkeypatch):
    _no_driver(monkeypatch)

    def broken():
        raise cd.CudnnUnavailableError("cuDNN cannot be used: not installed")

    _fake_module(monkeypatch, "pycudadrv.cudnn", is_available=lambda: False, version=broken,
                 unavailable_reason=lambda: "switched off (PYCUDADRV_CUDNN=0)")
    text = _report()
    assert ("  cuDNN (pycudadrv.cudnn): unavailable; switched off (PYCUDADRV_CUDNN=0); CudnnUnavailableError: "
            "cuDNN cannot be used: not installed\n" in text)


def test_nvtx_state_is_reported(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    from pycudadrv import nvtx

    monkeypatch.setattr(nvtx, "backend", lambda: None)
    text = _report()
    assert ("  NVTX: off (PYCUDADRV_NVTX=1 or pycudadrv.nvtx.enable()); no backend found (pip install nvtx, "
            "or nvidia-nvtx for the library)\n") in text


def test_python_m_pycudadrv_info_exits_0_with_the_report(tmp_path):
    here = os.path.dirname(os.path.dirname(os.path.abspath(cd.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = subprocess.run([sys.executable, "-m", "pycudadrv", "--info"], capture_output=True, text=True, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"pycudadrv {cd.__version__} at ")
    for heading in ("\ndriver:\n", "\nNVRTC:\n", "\ncompile cache: ", "\noptional libraries:\n",
                    "\nenvironment variables in effect:"):
        assert heading in out.stdout


@pytest.mark.gpu
def test_the_report_matches_the_driver_on_a_gpu(clean_env):
    info = config.config_info()
    assert info["driver"]["available"] is True
    assert info["driver"]["version"] == "%d.%d" % cd.driver_version()
    assert info["devices"]["count"] == cd.device_count()
    d0 = cd.Device(0)
    first = info["devices"]["devices"][0]
    assert (first["name"], first["compute_capability"], first["total_memory_bytes"],
            first["multiprocessor_count"]) == (d0.name, "%d.%d" % d0.compute_capability, d0.total_memory,
                                               d0.multiprocessor_count)
    assert os.path.basename(info["driver"]["path"]).startswith("libcuda.so")


def test_a_cache_directory_that_is_a_file_is_reported_as_such(clean_env, monkeypatch, tmp_path):
    _no_driver(monkeypatch)
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    monkeypatch.setenv("PYCUDADRV_CACHE_DIR", str(afile))
    assert (f"compile cache: {afile} is a file, not a directory: compile() warns once and goes on without the "
            "disk cache\n") in _report()


def test_an_unavailable_reason_is_said_once_when_the_probes_fail_with_the_same_text(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    why = "cuDNN not found: libcudnn.so.9 could not be loaded."

    def missing():
        raise cd.CudnnUnavailableError(why)

    _fake_module(monkeypatch, "pycudadrv.cudnn", is_available=lambda: False, unavailable_reason=lambda: why,
                 version=missing, library_path=missing)
    text = _report()
    assert f"  cuDNN (pycudadrv.cudnn): unavailable; {why}\n" in text
    assert text.count("could not be loaded") == 1


@pytest.mark.parametrize("name, value, why", [
    ("PYCUDADRV_DEVICES", "x", "'x' is not a device ordinal: the first call that lists devices raises "
                               "ArgumentValueError"),
    ("PYCUDADRV_DEVICES", " , ", "an empty selection"),
    ("PYCUDADRV_DEVICES", "0,-1", "'-1' is not a device ordinal (they count from 0)"),
    ("PYCUDADRV_MPI_CUDA_AWARE", "maybe", "not a switch (1/0, true/false, yes/no, on/off): "
                                          "pycudadrv.mpi.detect_cuda_aware() raises ArgumentValueError"),
    ("PYCUDADRV_CACHE_MAX_BYTES", "-4", "below the minimum 0: it warns once and the default applies"),
    ("PYCUDADRV_CACHE_MAX_BYTES", "1GB", "not an integer: it warns once and the default applies"),
    ("PYCUDADRV_PERSISTENT_BLOCKS", "0", "below the minimum 1"),
    ("PYCUDADRV_TRACE", "2", "not a switch (1/0, true/false, yes/no, on/off): it warns once and the default applies"),
    ("PYCUDADRV_CACHE_DIR", "   ", "only blanks: the default "),
    ("PYCUDADRV_NVJITLINK", "/nonexistent/libnvJitLink.so", "no such file"),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the reading itself warns too: not what is tested here
def test_a_value_pycudadrv_does_not_use_as_given_is_flagged_with_why(clean_env, monkeypatch, name, value, why):
    _no_driver(monkeypatch)
    monkeypatch.setenv(name, value)
    assert why in config.config_info()["environment"][name]["invalid"]
    text = _report()
    assert f"  {name}={value!r}: {ENVIRONMENT_VARIABLES[name]}\n    INVALID: {why}" in text


@pytest.mark.parametrize("name, value", [("PYCUDADRV_DEVICES", "0, 1"), ("PYCUDADRV_MPI_CUDA_AWARE", " Yes "),
                                         ("PYCUDADRV_CACHE_MAX_BYTES", "0x1000"), ("PYCUDADRV_TRACE", ""),
                                         ("PYCUDADRV_NVJITLINK", "libnvJitLink.so.13"), ("PYCUDADRV_GRAPH_DOT", "g.dot")])
def test_values_in_use_are_not_flagged(clean_env, monkeypatch, name, value):
    _no_driver(monkeypatch)
    monkeypatch.setenv(name, value)
    assert "invalid" not in config.config_info()["environment"][name]


def test_every_pycudadrv_variable_has_a_kind_for_the_check():
    assert sorted(config.VARIABLE_KINDS) == sorted(ENVIRONMENT_VARIABLES)


def test_nvidia_tf32_override_is_reported_among_the_other_variables(clean_env, monkeypatch):
    _no_driver(monkeypatch)
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    assert "  NVIDIA_TF32_OVERRIDE='0': 0 (set before the process starts): NVIDIA's libraries" in _report()


def test_a_linker_library_that_cannot_load_names_its_path_once(clean_env, monkeypatch):
    from pycudadrv import _linklibs, link

    monkeypatch.setattr(_linklibs, "_libs", {})
    monkeypatch.setenv("PYCUDADRV_NVJITLINK", "/nonexistent/libnvJitLink.so")
    with pytest.raises(cd.LinkerUnavailableError) as ei:
        link._load("nvjitlink")
    assert str(ei.value).count("/nonexistent/libnvJitLink.so") == 2     # the variable's value, then dlerror's
    assert str(ei.value).startswith("PYCUDADRV_NVJITLINK='/nonexistent/libnvJitLink.so' is not a loadable "
                                    "nvJitLink library: /nonexistent/libnvJitLink.so: cannot open")
