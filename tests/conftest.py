import os
import sys

import numpy as np
import pytest

# The tests live in one folder per subsystem (launch/, memory/, queue/, ...); the helpers they share
# (_children.py: child processes; _fuzz_programs.py: the differential fuzz) are here, one level up.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _gpu_skip_reason():
    import pycudadrv

    try:
        pycudadrv.require()
    except pycudadrv.CudaUnavailableError as e:
        return f"no usable CUDA device: {e}"
    if pycudadrv.device_count() == 0:
        return "no usable CUDA device: the driver reports none"
    return None


def pytest_configure(config):
    # Also registered in pyproject.toml; here too so the tests run outside the source tree
    # (CI runs a copy of them against the installed wheel).
    config.addinivalue_line("markers", "gpu: needs a usable CUDA device (skipped with the reason when there is none)")


_NO_GPU = None      # the reason every gpu-marked test skips in this run (None: a GPU is there)


def pytest_collection_modifyitems(config, items):
    global _NO_GPU
    reason = None
    if any("gpu" in item.keywords for item in items):
        reason = _gpu_skip_reason()
    _NO_GPU = reason
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A GPU test skipped for want of a GPU is reported at one place (this function), so ``-rs`` folds
    them all into one line with their count instead of one line per test."""
    outcome = yield
    rep = outcome.get_result()
    if _NO_GPU is not None and rep.skipped and isinstance(rep.longrepr, tuple) and rep.longrepr[2].endswith(_NO_GPU):
        where = os.path.relpath(__file__, str(item.config.rootpath))
        rep.longrepr = (where, None, rep.longrepr[2])


@pytest.fixture
def rng(request):
    """A generator seeded freshly for every test (the seed is printed on failure)."""
    seed = int.from_bytes(os.urandom(8), "little")
    print(f"rng seed: {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True, scope="session")
def _private_compile_cache(tmp_path_factory):
    """Keep the test run's compile cache out of the user's cache directory."""
    if "PYCUDADRV_CACHE_DIR" not in os.environ:
        os.environ["PYCUDADRV_CACHE_DIR"] = str(tmp_path_factory.mktemp("nvrtc-cache"))
    yield


@pytest.fixture(autouse=True)
def _switches_read_once_come_back():
    """A switch read once and kept (PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC) is what it was before each
    test: a test that flips it and leaves it flipped would run every later test with foreign
    ordering off (their failures would then point at the launch path, not at that test)."""
    from pycudadrv import _env

    before = _env._foreign_sync
    yield
    after = _env._foreign_sync
    expected = before if before is not None else _env.env_flag("PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC", True)
    if after is not None and after != expected:
        _env._foreign_sync = before
        pytest.fail(f"this test left PYCUDADRV_CUDA_ARRAY_INTERFACE_SYNC's kept value at {after} (it was {expected}); "
                    "restore it (monkeypatch.setattr(_env, '_foreign_sync', ...))")
