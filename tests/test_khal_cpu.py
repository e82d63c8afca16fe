"""khal's remaining behaviours that need no GPU: BufferUsages and its argument
checks, PYCUDADRV_PROFILE=host, and profile mode's hooks (the serialised
host clock, a report that clears what it printed, trace and profile together),
driven with stand-in kernels and streams."""
import io
import os
import subprocess
import sys

import pytest

import pycudadrv as cd
from pycudadrv import _launch, profile
from pycudadrv._usage import ALL_BITS, INDIRECT_BIT, missing_usage, names, usage_bits


# --- BufferUsages ------------------------------------------------------------------------

def test_buffer_usages_are_khals_flags_with_webgpu_bit_values():
    U = cd.BufferUsages
    assert {m.name: m.value for m in (U.MAP_READ, U.MAP_WRITE, U.COPY_SRC, U.COPY_DST, U.INDEX, U.VERTEX,
                                      U.UNIFORM, U.STORAGE, U.INDIRECT, U.QUERY_RESOLVE)} == {
        "MAP_READ": 1, "MAP_WRITE": 2, "COPY_SRC": 4, "COPY_DST": 8, "INDEX": 16, "VERTEX": 32, "UNIFORM": 64,
        "STORAGE": 128, "INDIRECT": 256, "QUERY_RESOLVE": 512}
    assert U.ALL.value == ALL_BITS == 1023 and INDIRECT_BIT == 256
    assert U.STORAGE in U.ALL and U.INDIRECT in (U.STORAGE | U.INDIRECT)
    assert U.INDIRECT not in U.STORAGE | U.COPY_DST


def test_usage_names_read_as_the_flags_written():
    U = cd.BufferUsages
    assert names(ALL_BITS) == "ALL"
    assert names((U.STORAGE | U.COPY_DST).value) == "COPY_DST|STORAGE"
    assert names(0) == "none"


def test_no_usage_means_all_and_a_flag_set_is_its_bits():
    assert usage_bits(None, "Buffer.empty") == ALL_BITS
    assert usage_bits(cd.BufferUsages.STORAGE | cd.BufferUsages.INDIRECT, "Buffer.empty") == 128 + 256


@pytest.mark.parametrize("usage, shown", [(256, "int 256"), ("INDIRECT", "str 'INDIRECT'"), (True, "bool True")])
def test_a_usage_that_is_not_a_flag_set_is_refused_before_the_driver_is_asked(usage, shown):
    # Buffer.empty checks usage= before it looks at the device: this runs without a GPU.
    with pytest.raises(cd.ArgumentTypeError, match=f"Buffer.empty: usage must be a pycudadrv.BufferUsages .* got "
                                                   f"{shown}"):
        cd.Buffer.empty(16, usage=usage)


def test_an_empty_usage_is_refused():
    with pytest.raises(cd.ArgumentValueError, match="Buffer.empty: usage is empty"):
        cd.Buffer.empty(16, usage=cd.BufferUsages(0))
    with pytest.raises(cd.ArgumentValueError, match="Buffer.empty: usage is empty"):
        cd.Buffer.zeros(4, "f4", usage=cd.BufferUsages(0))


def test_the_missing_usage_error_names_the_buffer_the_usage_needed_and_the_one_it_has():
    e = missing_usage("<Buffer 0x10>", INDIRECT_BIT, (cd.BufferUsages.STORAGE | cd.BufferUsages.COPY_DST).value,
                      "Dispatch of 'k', indirect=")
    assert isinstance(e, cd.ArgumentValueError)
    assert str(e).startswith("Dispatch of 'k', indirect=: '<Buffer 0x10>' needs usage INDIRECT, it has "
                             "COPY_DST|STORAGE")

