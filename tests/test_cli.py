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
        'python3 -m venv .venv && . .venv/bin/activate && python -m pip install -e ".[nvrtc]" && python -m pycudadrv',
        'python -m pip install -e ".[test]" && python -m pytest -rs',
    ]
    ci = os.path.join(os.path.dirname(PKG), ".ci", "run")
    if os.path.isfile(ci):      # CI runs the README's test command as written
        assert commands[1] in open(ci, encoding="utf-8").read().splitlines()


def test_the_readme_quotes_the_line_the_main_job_ends_with_without_a_gpu():
    (line,) = [ln for ln in _readme_setup().splitlines() if ln.startswith("pycudadrv: CUDA unavailable: ")]
    assert line.endswith(". " + cli.INFO_HINT)
