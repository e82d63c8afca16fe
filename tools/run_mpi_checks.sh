#!/usr/bin/env bash
# Every mpirun check of issue 15 (pycudadrv.mpi, examples/heat_mpi.py) on the GPU machine, in one go:
#   1. build in place (as tools/device_run.sh does; quick when up to date; --no-build skips it) and
#      put the checkout first on PYTHONPATH, so every rank imports this build;
#   2. the MPI library, its CUDA-aware answer and each rank's device (mpirun -n 2 and -n 4);
#   3. the example under mpirun -n 1/2/4: detected path, pinned staging forced, device path forced
#      (only where the MPI library says it is CUDA-aware: device pointers would crash another one),
#      graphs, no overlap -- each must print "all checks passed" (bit-identical to the
#      single-process run, NumPy float64 within 1e-5);
#   4. the mistakes that must abort every rank with the message: a device that does not exist,
#      a rank count that does not divide the grid;
#   5. python -m pytest tests/interop/test_mpi.py (CPU and GPU tests, mpirun subprocesses);
#   6. bench/mpi_scaling.py (strong and weak scaling, 1/2/4 ranks).
# Logs and bench/results/mpi_scaling.{json,png} go under $OUT (mpi_checks.log is the summary,
# mpi_logs.tar.gz every log). Exit status 1 when any check fails.
# Usage: bash tools/run_mpi_checks.sh [--no-build]   (PYTHON=..., MPI_BENCH_ARGS="--rounds 1" are honoured)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
FINAL_OUT=${OUT:-/tmp/out}
mkdir -p "$FINAL_OUT"
logs=$(mktemp -d)
summary="$logs/mpi_checks.log"
: > "$summary"
trap 'cp "$summary" "$FINAL_OUT/mpi_checks.log"; cp "$repo"/bench/results/mpi_scaling.json "$repo"/bench/results/mpi_scaling.png "$FINAL_OUT/" 2>/dev/null; tar -czf "$FINAL_OUT/mpi_logs.tar.gz" -C "$logs" .' EXIT
export PYTHONUNBUFFERED=1
py=${PYTHON:-$(command -v python3)}   # absolute: mpirun may put its own prefix first on PATH
fails=0
work=$repo               # commands run from the checkout, whose in-place build every rank imports

say() { echo "$*" | tee -a "$summary"; }

# check NAME CMD...: run CMD from $work (log in NAME.log); pass on exit status 0.
check() {
  local name=$1; shift
  ( cd "$work" && timeout 600 "$@" ) > "$logs/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then say "PASS $name"; else say "FAIL $name (exit $rc)"; tail -15 "$logs/$name.log" | sed 's/^/    /' | tee -a "$summary"; fails=$((fails + 1)); fi
  return $rc
}

# example NAME RANKS ARGS...: the example under mpirun; passes when it exits 0 and says "all checks passed".
example() {
  local name=$1 ranks=$2; shift 2
  check "$name" "${mpirun[@]/NP/$ranks}" "$py" "$repo/examples/heat_mpi.py" "$@" --json "$logs/$name.json"
  local rc=$?
  grep -E "^(transfer|time|overlap|single-process|check)" "$logs/$name.log" | sed 's/^/    /' | tee -a "$summary"
  if [ $rc -eq 0 ] && ! grep -q "all checks passed" "$logs/$name.log"; then
    say "FAIL $name: exit 0 without 'all checks passed'"; fails=$((fails + 1))
  fi
}

# must_abort NAME RANKS MESSAGE ARGS...: must fail (not hang, exit != 0) and print MESSAGE on stderr.
must_abort() {
  local name=$1 ranks=$2 message=$3; shift 3
  ( cd "$work" && timeout 120 "${mpirun[@]/NP/$ranks}" "$py" "$repo/examples/heat_mpi.py" "$@" ) > "$logs/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "$message" "$logs/$name.log"; then
    say "PASS $name (aborted, exit $rc): $(grep -F "$message" "$logs/$name.log" | head -1)"
  else
    say "FAIL $name (exit $rc; expected an abort saying: $message)"; tail -15 "$logs/$name.log" | sed 's/^/    /' | tee -a "$summary"
    fails=$((fails + 1))
  fi
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv || true
  command -v mpirun && mpirun --version | head -2
  "$py" -c "import mpi4py; from mpi4py import MPI; print('mpi4py', mpi4py.__version__, '|', MPI.Get_library_version().replace(chr(0), '').strip().splitlines()[0])"
} 2>&1 | tee -a "$summary"

if [ "${1:-}" != "--no-build" ]; then
  check build bash -c "cd '$repo' && '$py' setup.py -q build_ext --inplace" || exit 1
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c "import pycudadrv; print('pycudadrv', pycudadrv.__version__, 'from', pycudadrv.__file__)" 2>&1 | tee -a "$summary"

# The launcher line for this machine (Open MPI as root: --allow-run-as-root --oversubscribe ...), NP = ranks.
read -r -a mpirun <<< "$(cd "$work" && "$py" -c "from pycudadrv import mpi; print(' '.join(mpi.mpirun_command(99)).replace(' -n 99', ' -n NP'))")"
say "launcher: ${mpirun[*]}"

tmp=$(mktemp -d)
cat > "$tmp/ranks.py" <<'EOF'
from pycudadrv import mpi
comm = mpi.require_mpi().COMM_WORLD
with mpi.abort_on_error(comm):
    a = mpi.assign_device(comm)
    dev = a.use()
    lines = comm.gather(f"  {a}: {dev.name}; {mpi.detect_cuda_aware()}", root=0)
    if comm.Get_rank() == 0:
        print("\n".join(lines))
        print("CUDA_AWARE=%d" % mpi.detect_cuda_aware().cuda_aware)
EOF
for n in 2 4; do
  check "ranks-$n" "${mpirun[@]/NP/$n}" "$py" "$tmp/ranks.py"
  grep -E "^  rank|CUDA_AWARE" "$logs/ranks-$n.log" | tee -a "$summary"
done
aware=$(grep -o "CUDA_AWARE=[01]" "$logs/ranks-2.log" | tail -1 | cut -d= -f2)

example example-1-auto 1 --n 1024 --steps 300
example example-2-auto 2 --n 1024 --steps 300
example example-4-auto 4 --n 1024 --steps 300
example example-2-staged 2 --n 1024 --steps 300 --transfer staged
example example-4-staged 4 --n 1024 --steps 300 --transfer staged --seed 7
example example-2-staged-graph 2 --n 1024 --steps 301 --transfer staged --graph
example example-4-staged-graph 4 --n 512 --ny 1024 --steps 300 --transfer staged --graph --seed 11
example example-2-serial 2 --n 1024 --steps 300 --transfer staged --no-overlap
example example-4-serial-graph 4 --n 1024 --steps 300 --transfer staged --no-overlap --graph
if [ "$aware" = "1" ]; then
  example example-2-device 2 --n 1024 --steps 300 --transfer device
  example example-4-device 4 --n 1024 --steps 300 --transfer device --graph --seed 5
else
  say "SKIP example-2-device, example-4-device: the MPI library is not CUDA-aware (detect_cuda_aware); forcing device pointers into it would crash it"
fi
must_abort abort-no-such-device 2 "rank 1 (local rank 1) was given device 99, which does not exist" --n 64 --steps 4 --devices 0,99
must_abort abort-not-divisible 3 "the communicator size 3 does not divide the 1024 grid rows" --n 1024 --steps 4

check pytest-mpi "$py" -m pytest -q -rs -p no:cacheprovider "$repo/tests/interop/test_mpi.py"
tail -25 "$logs/pytest-mpi.log" | grep -E "passed|failed|SKIPPED|FAILED|error" | sed 's/^/    /' | tee -a "$summary"

# shellcheck disable=SC2086
check bench-mpi-scaling "$py" "$repo/bench/mpi_scaling.py" ${MPI_BENCH_ARGS:-}
sed -n '/^=== mpi_scaling/,$p' "$logs/bench-mpi-scaling.log" | tee -a "$summary"

say "mpi checks: $fails failure(s)"
[ "$fails" -eq 0 ]
