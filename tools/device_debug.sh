#!/usr/bin/env bash
# One short batch: build, the awaited-Queue test with a stack dump on a hang, then the issue-22 benches at fewer rounds.
set -u
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYCUDADRV_CACHE_DIR=/tmp/pycudadrv-cache
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
export PYTHONPATH="$PWD"
timeout -s KILL 75 python3 -X faulthandler -m pytest -x -q -p no:cacheprovider -o faulthandler_timeout=30 \
  tests/aio/test_aio.py -k "queue_submission or waiter_thread_reports" > "$OUT/hang.log" 2>&1; echo "hang test rc=$?" >> "$OUT/hang.log"
tail -5 "$OUT/hang.log"
run() { local t=$1; shift; timeout -s KILL "$t" python3 "$@" > "$OUT/$(basename "$1" .py).log" 2>&1; echo "$1 rc=$?"; }
run 60 bench/queue_dag.py --rounds 5
run 60 bench/await_latency.py --samples 150
run 60 bench/launch_overhead.py --rounds 5
run 70 bench/triton_launch.py --rounds 5
run 40 bench/timestamps_cost.py --rounds 5
cp bench/results/*.json "$OUT"/ 2>/dev/null
for f in queue_dag await_latency launch_overhead triton_launch timestamps_cost; do
  python3 -c "import json;d=json.load(open('bench/results/$f.json'));print('$f', json.dumps(d.get('summary')))" 2>&1 | cut -c1-900
done
