"""``python -m pycudadrv``'s arguments are checked before the GPU is (CPU)."""

import pytest

import pycudadrv as cd
from pycudadrv import __main__ as cli
from pycudadrv import heat


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
    assert capsys.readouterr().err == "pycudadrv: CUDA unavailable: no driver on this test machine\n"
