"""``python -m pycudadrv``'s arguments are checked before the GPU is, its help is plain text, a run
without CUDA ends with one line pointing to ``--info`` (as README.md shows, beside its two set-up
commands), and an unbuilt checkout that would borrow another installation's compiled extensions
refuses to import (CPU)."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pycudadrv as cd
from pycudadrv import __main__ as cli
from pycudadrv import heat

PKG = os.path.dirname(os.path.abspath(cd.__file__))


@pytest.mark.parametrize("argv, message", [
    (["--size", "-5"], "argument --size: -5 is out of range (allowed: from 3 to 46340)"),
    (["--size", "0"], "argument --size: 0 is out of range (allowed: from 3 to 46340)"),
    (["--size", "46341"], "argument --size: 46341 is out of range (allowed: from 3 to 46340)"),
    (["--size", "2.5"], "argument --size: '2.5' is not an integer (allowed: from 3 to 46340)"),
    (["--steps", "-1"], "argument --steps: -1 is out of range (allowed: 1 or more)"),
    (["--steps", "0"], "argument --steps: 0 is out of range (allowed: 1 or more)"),
])
def test_an_argument_out_of_range_is_a_usage_error_naming_the_flag_and_the_range(argv, message, capsys, monkeypatch):
    def no_gpu_check():
        raise AssertionError("the GPU was checked before the arguments")

    monkeypatch.setattr(cd, "require", no_gpu_check)
    with pytest.raises(SystemExit) as ei:
        cli.main(argv)
    assert ei.value.code == 2
    assert f"python -m pycudadrv: error: {message}\n" in capsys.readouterr().err


def test_the_size_limits_are_an_interior_cell_and_the_kernels_int_index():
    assert (heat.MIN_SIZE, heat.MAX_SIZE) == (3, 46340)
    assert heat.MAX_SIZE ** 2 < 2 ** 31 <= (heat.MAX_SIZE + 1) ** 2


def test_arguments_in_range_reach_the_gpu_check(capsys, monkeypatch):
    def no_driver():
        raise cd.CudaUnavailableError("no driver on this test machine")

    monkeypatch.setattr(cd, "require", no_driver)
    assert cli.main(["--size", "3", "--steps", "1"]) == 1
    assert capsys.readouterr().err == ("pycudadrv: CUDA unavailable: no driver on this test machine. For what "
                                       "pycudadrv found (driver, devices, NVRTC, environment): python -m "
                                       "pycudadrv --info\n")


def test_a_driver_without_devices_ends_with_the_same_pointer_to_info(capsys, monkeypatch):
    monkeypatch.setattr(cd, "require", lambda: None)
    monkeypatch.setattr(cd, "device_count", lambda: 0)
    assert cli.main([]) == 1
    assert capsys.readouterr().err == ("pycudadrv: CUDA unavailable: the driver reports no device. For what "
                                       "pycudadrv found (driver, devices, NVRTC, environment): python -m "
                                       "pycudadrv --info\n")


def test_the_help_is_plain_text_without_rst_markup(capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["--help"])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    assert "\npython -m pycudadrv: the driver, the devices, and a real workload.\n" in out
    assert "CUDA C++ compiled with pycudadrv.compile(), checks" in out
    assert "python -m pycudadrv --info prints the report of\npycudadrv.show_config instead" in out
    assert "`" not in out and ":func:" not in out


def test_an_unbuilt_tree_that_would_borrow_another_trees_extensions_refuses_to_import(tmp_path):
    # An unbuilt clone first on sys.path, and a meta-path finder that serves what it lacks from the built
    # tree, as pip's editable finder (__editable___*_finder) does for an editable install.
    clone = tmp_path / "clone" / "pycudadrv"
    shutil.copytree(PKG, clone, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__", "*.pyd"))
    code = textwrap.dedent(f"""
        import importlib.machinery, sys
        BUILT = {PKG!r}

        class EditableFinder:
            @classmethod
            def find_spec(cls, fullname, path=None, target=None):
                parent, _, child = fullname.rpartition(".")
                if parent == "pycudadrv":
                    return importlib.machinery.PathFinder.find_spec(fullname, [BUILT])
                return None

        sys.meta_path.append(EditableFinder)
        sys.path.insert(0, {str(clone.parent)!r})
        try:
            import pycudadrv
        except ImportError as e:
            print("MSG:", e)
        else:
            print("imported from", pycudadrv.__file__)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"MSG: pycudadrv's compiled extensions were found in {os.path.realpath(PKG)}, "
                               f"not beside this package's Python files in {os.path.realpath(clone)}: this "
                               "source tree was never built"), r.stdout
    assert "python -m pip install -e ." in r.stdout


# --- what README.md says about the two set-up commands ------------------------------------------------

def _readme_setup():
    readme = os.path.join(os.path.dirname(PKG), "README.md")
    if not os.path.isfile(readme):
        pytest.skip("README.md is not beside the package (run the tests from a checkout)")
    text = open(readme, encoding="utf-8").read()
    return text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]


def test_the_readme_sets_up_in_two_commands_the_first_making_the_virtual_environment():
    commands = re.findall(r"^```sh\n(.*?)\n```", _readme_setup(), re.S | re.M)
    assert commands == [
        'python3 -m venv .venv && . .venv/bin/activate && python -m pip install -e ".[nvrtc]" --config-settings editable_mode=compat && python -m pycudadrv',
        'python -m pip install -e ".[test]" --config-settings editable_mode=compat && python -m pytest -rs',
    ]
    ci = os.path.join(os.path.dirname(PKG), ".ci", "run")
    if os.path.isfile(ci):      # CI runs the README's test command as written
        assert commands[1] in open(ci, encoding="utf-8").read().splitlines()


def test_the_readme_quotes_the_line_the_main_job_ends_with_without_a_gpu():
    (line,) = [ln for ln in _readme_setup().splitlines() if ln.startswith("pycudadrv: CUDA unavailable: ")]
    assert line.endswith(". " + cli.INFO_HINT)


# --- the main job's ladder -------------------------------------------------------------------------

#: The line the main job ends with on a GPU (README.md quotes it).
SUMMARY_RE = re.compile(r"^pycudadrv: (\d+)x\1 heat, (\d+) steps: eager ([\d,]+) \| prepared ([\d,]+) \| graph "
                        r"([\d,]+|n/a) \| device loop ([\d,]+|n/a) steps/s; best ([\d,]+) GB/s = ([\d.]+) of copy "
                        r"bandwidth ([\d,]+) GB/s; check vs NumPy float64 (OK|FAIL)$")


@pytest.mark.parametrize("n, steps", [(3, 4), (8, 7), (17, 31), (64, 50), (130, 400), (40, 0), (300, 1000)])
def test_the_closed_form_reference_is_the_stepped_reference(n, steps):
    u0 = heat.initial_grid(n)
    stepped = heat.reference(u0, steps)
    fast = heat.reference_fast(u0, steps)
    assert fast.dtype == np.float64 and fast.shape == (n, n)
    np.testing.assert_allclose(fast, stepped, rtol=1e-12, atol=1e-12 * np.abs(stepped).max())
    assert (fast[0] == u0[0]).all() and (fast[:, -1] == u0[:, -1]).all()      # the edges stay fixed


def test_the_closed_form_reference_of_a_grid_with_uneven_edges_is_the_stepped_one(rng):
    u0 = rng.uniform(0.0, 2.0, (24, 31))      # edges all different: the closed form does not apply
    np.testing.assert_array_equal(heat.reference_fast(u0, 9), heat.reference(u0, 9))


def test_a_step_moves_each_cell_read_once_and_written_once():
    assert heat.bytes_per_step(2048) == 2 * 4 * 2048 * 2048


def _fake_gpu(monkeypatch, n, steps, wrong=()):
    """heat.run and heat.copy_bandwidth without a GPU: the reference's grid (or a wrong one for the
    modes in ``wrong``) in a known time, and 400 GB/s of copy bandwidth."""
    ref32 = heat.reference(heat.initial_grid(n), steps).astype(np.float32)
    seconds = {"launch": 1.6e-5, "prepared": 1.25e-5, "graph": 1e-5, "device_loop": 8e-6}

    def run(size, k, *, mode="prepared", **kw):
        if size != n:
            return heat.initial_grid(size), 1.0      # the warm-up
        return (ref32 + 1.0 if mode in wrong else ref32.copy()), seconds[mode]
    monkeypatch.setattr(heat, "run", run)
    monkeypatch.setattr(heat, "copy_bandwidth", lambda *a, **k: (4e11, 1 << 30))


def test_the_ladder_ends_with_one_line_of_steps_per_second_and_the_bandwidth_fraction(capsys, monkeypatch):
    _fake_gpu(monkeypatch, 100, 10)
    assert cli._ladder(cd, heat, 100, 10) == 0
    out = capsys.readouterr().out.splitlines()
    m = SUMMARY_RE.match(out[-1])
    assert m, out[-1]
    assert m.group(1, 2) == ("100", "10")
    assert [m.group(k) for k in range(3, 7)] == ["625,000", "800,000", "1,000,000", "1,250,000"]  # 10 steps / s
    # the best rung moves 8 * 100**2 bytes a step 1.25 million times a second: 100 GB/s, a quarter of 400
    assert m.group(7, 8, 9, 10) == ("100", "0.25", "400", "OK")
    rows = [ln.split()[0] for ln in out if ln.startswith("  ") and " OK" in ln]
    assert rows == ["eager", "prepared", "graph", "device"]


def test_a_rung_whose_result_is_wrong_fails_the_check_and_the_exit_status(capsys, monkeypatch):
    _fake_gpu(monkeypatch, 48, 20, wrong={"graph"})
    assert cli._ladder(cd, heat, 48, 20) == 2
    out = capsys.readouterr().out
    graph_row = [ln for ln in out.splitlines() if ln.startswith("  graph ")][0]
    assert "FAIL" in graph_row and "bits differ from the first rung" in graph_row
    assert out.splitlines()[-1].endswith("check vs NumPy float64 FAIL")


@pytest.mark.gpu
def test_the_main_job_prints_the_ladder_and_the_fraction_of_copy_bandwidth():
    r = subprocess.run([sys.executable, "-m", "pycudadrv"], capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(PKG))
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.rstrip("\n").splitlines()[-1]
    m = SUMMARY_RE.match(last)
    assert m, last
    assert m.group(1, 2, 10) == ("2048", "1000", "OK")
    rungs = [m.group(k) for k in range(3, 7)]
    if cd.driver_version() < (12, 3):
        rungs = [v for v in rungs if v != "n/a"]       # no conditional nodes: no device loop
    assert all(float(v.replace(",", "")) > 0 for v in rungs), rungs
    assert 0 < float(m.group(8)) <= 1.5, last
    assert float(m.group(7).replace(",", "")) > 0 and float(m.group(9).replace(",", "")) > 0, last


def test_the_readme_quotes_the_line_the_main_job_ends_with_on_a_gpu_in_its_format():
    (line,) = [ln for ln in _readme_setup().splitlines() if ln.startswith("pycudadrv: 2048x2048 heat")]
    assert SUMMARY_RE.match(line.replace("X", "9")), line      # XX: placeholders for the H200's figures
