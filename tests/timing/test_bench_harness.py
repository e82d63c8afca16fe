"""The benchmarks' shared reporting (bench/_harness.py, bench/_report.py), on the CPU: the JSON
keys every bench writes (the lead's tools and the issues read them), the targets' verdicts, the
printed ratio table, the common options and the batching of timed launches. Synthetic rounds:
no driver is touched."""
import argparse
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
if not os.path.isfile(os.path.join(BENCH, "_harness.py")):
    pytest.skip("needs the source tree's bench/", allow_module_level=True)
sys.path.insert(0, BENCH)

import _harness  # noqa: E402
import _report  # noqa: E402

SUMMARY_KEYS = {"median", "p25", "p75", "min", "max", "mean", "n"}


def _fixed(name, ns_per_round, target=None):
    """A Row whose run(n) takes ``ns_per_round[k]`` in its k-th call (warm-up included)."""
    it = iter(ns_per_round)
    return _harness.Row(name, lambda n: next(it), lambda: None, target=target)


def _run(floor_first_last=(1000, 1000), rows=(), rounds=3):
    """rounds with the floor at 1000 ns first and last (unless given) and each row at its value."""
    fl = [v for _ in range(rounds) for v in floor_first_last]
    return _harness.run_interleaved(_fixed("C floor", fl), [_fixed(n, [v] * rounds, t) for n, v, t in rows],
                                    rounds=rounds, launches=10, warmup_rounds=0, rotate=False,
                                    log=lambda m: None)


def test_row_report_has_the_keys_launch_overhead_writes():
    res = _run(rows=[("pycudadrv prepared", 1100, 1.2)])
    rep = res.row_report("pycudadrv prepared")
    assert set(rep) == {"per_round_ns", "per_launch_us", "ratio_to_floor", "drain_us", "per_launch_us_summary",
                        "ratio_summary", "target", "pass"}
    assert set(rep["ratio_summary"]) == SUMMARY_KEYS
    assert rep["per_round_ns"] == [1100, 1100, 1100]
    assert rep["per_launch_us"] == pytest.approx([0.11] * 3)       # 1100 ns / 10 launches
    assert rep["ratio_to_floor"] == pytest.approx([1.1] * 3)
    assert rep["target"] == 1.2 and rep["pass"] is True             # the Row's own target


def test_floor_report_has_the_keys_launch_overhead_writes():
    res = _run(floor_first_last=(1000, 1100))
    rep = res.floor_report()
    assert set(rep) == {"name", "first_ns", "last_ns", "per_launch_us", "drain_us", "per_launch_us_summary",
                        "drift_last_over_first", "drift_summary"}
    assert rep["name"] == "C floor"
    assert rep["per_launch_us"] == pytest.approx([0.105] * 3)      # mean of first and last
    assert rep["drift_last_over_first"] == pytest.approx([1.1] * 3)


def test_reports_take_another_unit_and_key():
    """graph_replay: microseconds per kernel (R x K per round) under the key "us"."""
    res = _run(rows=[("pycudadrv", 2000, None)])
    rep = res.table_report(per=1000, key="us")
    assert set(rep) == {"floor", "rows", "dropped"}
    assert rep["floor"]["us"] == pytest.approx([0.001] * 3) and "us_summary" in rep["floor"]
    row = rep["rows"]["pycudadrv"]
    assert row["us"] == pytest.approx([0.002] * 3) and "us_summary" in row and "per_launch_us" not in row
    assert "target" not in row and "pass" not in row


@pytest.mark.parametrize("ns, target, passed", [(1100, 1.10, True), (1101, 1.10, False), (900, 0.95, True)])
def test_a_target_passes_when_the_median_ratio_is_at_most_it(ns, target, passed):
    res = _run(rows=[("row", ns, None)])
    assert res.row_report("row", target)["pass"] is passed


def test_rate_report_gives_units_per_second_and_the_floor_its_two_runs():
    res = _run(rows=[("graph", 500, None)])
    way = res.rate_report("graph", per=10)
    assert way["steps_per_s"] == pytest.approx([2e7] * 3)          # 10 steps in 500 ns
    assert way["us_per_step"] == pytest.approx([0.05] * 3)
    assert {"per_round_ns", "steps_per_s_summary", "us_per_step_summary"} <= set(way)
    fl = res.rate_report("C floor", per=10)
    assert fl["first_ns"] == [1000] * 3 and fl["last_ns"] == [1000] * 3
    assert res.ratios("C floor") == [1.0] * 3
    assert res.ratios_between("graph", "C floor") == pytest.approx([0.5] * 3)


def test_ratio_median_is_none_for_a_missing_or_empty_row():
    res = _run(rows=[("row", 1500, None)])
    rows = {"row": res.row_report("row"), "empty": {"ratio_summary": _harness.summarize([])}}
    assert _harness.ratio_median(rows, "row") == pytest.approx(1.5)
    assert _harness.ratio_median(rows, "empty") is None
    assert _harness.ratio_median(rows, "absent") is None


def test_print_ratio_table_shows_every_row_its_ratio_and_verdict(capsys):
    res = _run(rows=[("fast", 1050, 1.10), ("slow", 1300, 1.10), ("peer", 2000, None)])
    _report.print_ratio_table(res.table_report(), heading="--- table ---", note="(a note)")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "--- table ---" and lines[-1] == "(a note)"
    assert lines[2].split() == ["row", "us/launch", "x", "floor", "min", "max", "drain", "us", "target", "result"]
    body = {ln.split()[0]: ln.split() for ln in lines[4:-1]}
    assert body["fast"][1:3] == ["0.105", "1.050"] and body["fast"][-2:] == ["1.10", "PASS"]
    assert body["slow"][-1] == "FAIL"
    assert body["peer"][2] == "2.000" and "PASS" not in body["peer"] and "FAIL" not in body["peer"]


def test_print_ratio_table_without_targets_has_no_verdict_columns(capsys):
    res = _run(rows=[("row", 1200, None)])
    _report.print_ratio_table(res.table_report(), drain=False)
    out = capsys.readouterr().out
    assert "target" not in out and "result" not in out and "drain" not in out


def _parser(**kw):
    ap = argparse.ArgumentParser()
    _report.common_args(ap, **kw)
    return ap


def test_common_args_give_the_options_every_interleaved_bench_has():
    args = _report.check_common_args(ap := _parser(rounds=15, launches=20_000, peers="CuPy"), ap.parse_args([]))
    assert (args.rounds, args.launches, args.warmup_rounds, args.no_peers, args.no_rotate) == (15, 20_000, 1,
                                                                                               False, False)
    ap = _parser(rounds=7, warmup=False, rotate=False)
    args = ap.parse_args(["--rounds", "3"])
    assert args.rounds == 3 and not hasattr(args, "warmup_rounds") and not hasattr(args, "no_rotate")


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--launches", "0"], ["--warmup-rounds", "-1"]])
def test_common_args_refuse_counts_out_of_range(argv, capsys):
    ap = _parser(rounds=15, launches=100)
    with pytest.raises(SystemExit) as e:
        _report.check_common_args(ap, ap.parse_args(argv))
    assert e.value.code == 2
    assert "--rounds and --launches must be >= 1, --warmup-rounds >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("n, batch, batches", [(10, 4, [4, 4, 2]), (10, 0, [10]), (3, 5, [3])])
def test_batched_sums_the_timed_batches_and_syncs_only_between_them(n, batch, batches):
    seen, syncs = [], []

    def run_batch(k):
        seen.append(k)
        return 100 * k

    run = _harness.batched(run_batch, lambda: syncs.append(len(seen)), batch)
    assert run(n) == 100 * n
    assert seen == batches
    assert syncs == list(range(1, len(batches)))      # after every batch but the last


def test_report_header_has_the_keys_of_every_benchmark_json():
    class Dev:
        name, ordinal, compute_capability, arch = "GPU", 0, (9, 0), "sm_90"

    class CD:
        __version__ = "1.2.3"

        @staticmethod
        def driver_version():
            return (13, 0)

        @staticmethod
        def nvrtc_version():
            raise RuntimeError("no NVRTC")

    h = _report.report_header("bench_x", CD, Dev, env={"cpu": "x"})
    assert h == {"benchmark": "bench_x", "cpu": "x",
                 "device": {"name": "GPU", "ordinal": 0, "compute_capability": [9, 0], "arch": "sm_90"},
                 "driver_version": "13.0", "pycudadrv_version": "1.2.3", "nvrtc_version": None}


def test_paired_rounds_give_each_row_the_floor_runs_beside_it():
    # the floor drifts within a round: 1000, 2000, 3000 ns (first, between the rows, last); row a
    # (between 1000 and 2000) costs 1500 and row b (between 2000 and 3000) 2500: both at the floor
    # beside them. Unpaired, a would read 0.75 and b 1.25 of the round's mean floor (2000).
    floor = _fixed("C floor", [1000, 2000, 3000] * 2)
    rows = [_fixed("a", [1500] * 2), _fixed("b", [2500] * 2)]
    res = _harness.run_interleaved(floor, rows, rounds=2, launches=10, warmup_rounds=0, rotate=False,
                                   log=lambda m: None, paired=True)
    assert res.ratios("a") == [1.0, 1.0]
    assert res.ratios("b") == [1.0, 1.0]
    assert res.floor_first_ns == [1000, 1000] and res.floor_last_ns == [3000, 3000]
    assert res.ratios("C floor") == [1.0, 1.0]
    unpaired = _harness.run_interleaved(_fixed("C floor", [1000, 3000] * 2),
                                        [_fixed("a", [1500] * 2), _fixed("b", [2500] * 2)], rounds=2,
                                        launches=10, warmup_rounds=0, rotate=False, log=lambda m: None)
    assert unpaired.ratios("a") == [0.75, 0.75] and unpaired.ratios("b") == [1.25, 1.25]


def test_paired_rounds_pair_around_a_row_dropped_in_the_round():
    # a non-essential row that raises is dropped; the rows around it keep adjacent floors
    def boom(n):
        raise RuntimeError("peer failed")
    floor = _fixed("C floor", [1000, 2000, 4000])
    rows = [_fixed("a", [1500]), _harness.Row("peer", boom, lambda: None, essential=False), _fixed("b", [3000])]
    res = _harness.run_interleaved(floor, rows, rounds=1, launches=10, warmup_rounds=0, rotate=False,
                                   log=lambda m: None, paired=True)
    assert "peer" in res.dropped and "peer" not in res.rows and "peer" not in res.row_floor_ns
    assert res.ratios("a") == [1.0] and res.ratios("b") == [1.0]
