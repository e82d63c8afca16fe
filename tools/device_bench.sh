#!/usr/bin/env bash
# One batch of benchmarks on the GPU machine: build in place, run each named bench with its own
# time limit, print each one's `summary`, and bring back one tarball of logs and results.
#
# Usage: bash tools/device_bench.sh "name[:seconds[:args...]]" ...
#   e.g. bash tools/device_bench.sh graph_loops:120 "launch_overhead:150:--rounds 15" await_latency:90
set -u
FINAL_OUT=${OUT:-/tmp/out}
LOGS=$(mktemp -d)
mkdir -p "$FINAL_OUT"
trap 'cp bench/results/*.json "$LOGS"/ 2>/dev/null; tar -czf "$FINAL_OUT/bench.tar.gz" -C "$LOGS" .' EXIT
export PYTHONUNBUFFERED=1 PYCUDADRV_CACHE_DIR=${PYCUDADRV_CACHE_DIR:-/tmp/pycudadrv-cache}
python3 setup.py -q build_ext --inplace > "$LOGS/build.log" 2>&1 || { tail -40 "$LOGS/build.log"; exit 1; }
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
for spec in "$@"; do
  IFS=: read -r name limit args <<< "$spec"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout -s KILL "${limit:-120}" python3 "bench/$name.py" ${args:-} > "$LOGS/$name.log" 2>&1
  echo "== $name rc=$? in $(( $(date +%s) - t0 )) s"
  python3 -c "import json,sys;d=json.load(open('bench/results/$name.json'));print(json.dumps(d.get('summary')))" 2>&1 | cut -c1-1500
done
