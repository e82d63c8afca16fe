#!/usr/bin/env bash
# One batch on the GPU machine: build in place (no build isolation: nothing can be
# downloaded there), run the whole test suite, the main job and the benchmarks,
# and write every log under $OUT. Usage: bash tools/device_run.sh [tests|main|bench|all]...
set -u
FINAL_OUT=${OUT:-/tmp/out}
OUT=$(mktemp -d)   # logs gather here; one tarball goes back (the device tool returns at most 8 files)
mkdir -p "$FINAL_OUT"
trap 'tar -czf "$FINAL_OUT/logs.tar.gz" -C "$OUT" . ; cp "$OUT"/pytest.log "$FINAL_OUT"/ 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1
what=${*:-all}
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv || true
  python3 -c "import Cython, numpy; print('Cython', Cython.__version__, 'numpy', numpy.__version__)"
} 2>&1 | tee "$OUT/env.txt"
t0=$(date +%s)
# Build the wheel, then install that wheel: the suite runs against the installed package.
wheel_dir=$(mktemp -d)
{ python3 -m pip wheel --no-build-isolation --no-deps --no-index -w "$wheel_dir" . &&
  python3 -m pip install --no-deps --no-index --force-reinstall -q "$wheel_dir"/pycudadrv-*.whl; } \
  > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
echo "installed wheel: $(basename "$wheel_dir"/pycudadrv-*.whl)"
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
for w in $what; do
  case $w in
    tests|all)
      python3 -m pytest -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -25
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;&
    examples|all)
      [ -f examples/particles.py ] && { python3 examples/particles.py 2>&1 | tee "$OUT/particles.log" | tail -25; [ "${PIPESTATUS[0]}" = 0 ] || rc=1; } ;;&
    main|all)
      python3 -m pycudadrv 2>&1 | tee "$OUT/main.log"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;&
    bench|all)
      for b in bench/launch_overhead.py bench/graph_replay.py bench/step_loop.py bench/timestamps_cost.py; do
        [ -f "$b" ] && { python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).log" | tail -30; }
      done
      cp bench/results/*.json bench/results/*.png "$OUT/" 2>/dev/null || true ;;
  esac
done
exit $rc
