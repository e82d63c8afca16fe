"""Environment switches: one rule for every PYCUDADRV_* flag (CPU)."""
import warnings

import pytest

from pycudadrv import _env


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), (" Yes ", True), ("ON", True),
                                             ("0", False), ("false", False), ("no", False), ("Off", False)])
def test_switches_accept_the_usual_spellings(monkeypatch, value, expected):
    monkeypatch.setenv("PYCUDADRV_TEST_FLAG", value)
    assert _env.env_flag("PYCUDADRV_TEST_FLAG", default=not expected) is expected


def test_an_unset_or_empty_switch_is_its_default(monkeypatch):
    monkeypatch.delenv("PYCUDADRV_TEST_FLAG", raising=False)
    assert _env.env_flag("PYCUDADRV_TEST_FLAG", default=True) is True
    monkeypatch.setenv("PYCUDADRV_TEST_FLAG", "  ")
    assert _env.env_flag("PYCUDADRV_TEST_FLAG") is False


def test_a_switch_that_is_not_a_switch_warns_once_and_keeps_the_default(monkeypatch):
    monkeypatch.setenv("PYCUDADRV_TEST_ODD", "maybe")
    with pytest.warns(RuntimeWarning, match="PYCUDADRV_TEST_ODD='maybe' is not a switch"):
        assert _env.env_flag("PYCUDADRV_TEST_ODD", default=True) is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _env.env_flag("PYCUDADRV_TEST_ODD", default=False) is False   # no second warning


def test_integers_fall_back_to_the_default_with_one_warning(monkeypatch):
    monkeypatch.setenv("PYCUDADRV_TEST_INT", "lots")
    with pytest.warns(RuntimeWarning, match="not an integer"):
        assert _env.env_int("PYCUDADRV_TEST_INT", 7) == 7
    monkeypatch.setenv("PYCUDADRV_TEST_INT2", "-3")
    with pytest.warns(RuntimeWarning, match=">= 1"):
        assert _env.env_int("PYCUDADRV_TEST_INT2", 5, minimum=1) == 5
    monkeypatch.setenv("PYCUDADRV_TEST_INT3", "0x40")
    assert _env.env_int("PYCUDADRV_TEST_INT3") == 64


def test_every_variable_read_is_documented():
    import os
    import re

    import pycudadrv

    pkg = os.path.dirname(pycudadrv.__file__)
    used = set()
    for f in os.listdir(pkg):
        if f.endswith((".py", ".pyx", ".pxi")):
            used |= set(re.findall(r"PYCUDADRV_[A-Z_]+", open(os.path.join(pkg, f)).read()))
    used -= {"PYCUDADRV_TEST_FLAG", "PYCUDADRV_HEADER_CUDA_VERSION", "PYCUDADRV_MIN_DRIVER_VERSION",
             "PYCUDADRV_N_ENTRY_POINTS", "PYCUDADRV_MAX_ABI_VARIANTS", "PYCUDADRV_ARENA_INLINE_SLOTS"}
    used = {u for u in used if not u.startswith(("PYCUDADRV_kDL", "PYCUDADRV_UNTIL", "PYCUDADRV_K"))}
    missing = sorted(used - set(_env.ENVIRONMENT_VARIABLES))
    assert missing == []


def _docs(page):
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return open(os.path.join(root, "docs", page), encoding="utf-8").read()


def test_every_variable_is_in_the_overview_table():
    rows = [line for line in _docs("index.md").splitlines() if line.startswith("| `")]
    missing = [name for name in _env.ENVIRONMENT_VARIABLES if not any(f"`{name}`" in r for r in rows)]
    assert missing == []


def test_the_overview_says_what_a_switch_takes_as_env_flag_reads_it():
    import re

    text = _docs("index.md")
    preface = text[text.index("## Environment variables"):text.index("| variable | read | effect |")]
    on = set(re.findall(r"`(\w+)`", preface[preface.index("is on for"):preface.index("and off for")]))
    off = set(re.findall(r"`(\w+)`", preface[preface.index("and off for"):preface.index("(any case")]))
    assert (on, off) == (set(_env._TRUE), set(_env._FALSE))


def test_every_switch_row_says_it_is_a_switch():
    from pycudadrv import config

    rows = {line.split("`")[1]: line for line in _docs("index.md").splitlines() if line.startswith("| `PYCUDADRV_")}
    switches = [n for n, kind in config.VARIABLE_KINDS.items() if kind in ("switch", "strict switch")]
    assert [n for n in switches if "switch" not in rows[n]] == []


@pytest.mark.parametrize("page", ["index.md", "tutorial.md", "compile.md"])
def test_no_page_says_any_value_turns_a_switch_on(page):
    text = _docs(page)
    assert "any value but" not in text and "count as on" not in text
