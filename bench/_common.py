"""Compatibility: the benchmarks' shared pieces now live in _cfloor (the C floor),
_harness (set-up, peers, interleaved rounds) and _report (JSON, PNG, command
line). Import from those; this module re-exports them for scripts written
before the split."""
from _cfloor import *  # noqa: F401,F403
from _cfloor import dims3 as _dims3  # noqa: F401
from _harness import *  # noqa: F401,F403
from _report import *  # noqa: F401,F403
