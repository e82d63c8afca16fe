#!/usr/bin/env bash
# One batch on the GPU machine: build in place (no build isolation: nothing can be
# downloaded there), then any of: the whole test suite, the examples, the main job,
# the benchmarks, the MPI checks; every log goes under $OUT (one tarball, plus the
# pytest log and the benchmark JSON/PNG files).
#
# Usage: bash tools/device_run.sh [tests] [examples] [main] [bench] [mpi] [all]
#   PYTEST_ARGS   extra pytest arguments (e.g. "-k loops" or a test file)
#   BENCHES       benchmark scripts to run (default: every bench/*.py)
#   BENCH_ARGS    arguments given to every benchmark (e.g. "--rounds 5")
# Wheels under .whl/ (carried: `run(..., carry=[".whl"])`) are installed first.
set -u
FINAL_OUT=${OUT:-/tmp/out}
LOGS=$(mktemp -d)   # logs gather here; one tarball goes back (the device tool returns at most 8 files)
mkdir -p "$FINAL_OUT"
trap 'tar -czf "$FINAL_OUT/logs.tar.gz" -C "$LOGS" . ; cp "$LOGS"/pytest.log "$FINAL_OUT"/ 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1 PYCUDADRV_CACHE_DIR=${PYCUDADRV_CACHE_DIR:-/tmp/pycudadrv-cache}
what=${*:-all}
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv || true
  python3 -c "import Cython, numpy, setuptools, sys; print('Python', sys.version.split()[0], 'Cython', Cython.__version__, 'numpy', numpy.__version__, 'setuptools', setuptools.__version__)"
} 2>&1 | tee "$LOGS/env.txt"
t0=$(date +%s)
# Wheels carried with the call (nothing can be downloaded there), e.g. nvidia-nvfatbin.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$LOGS/wheels.log" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# An in-place build (what the README's editable install does, minus the copy into site-packages),
# so the tests, the examples and `python -m pycudadrv` all run the built extension of this checkout.
# A setuptools older than 77 refuses pyproject.toml's SPDX licence (nothing newer can be fetched
# there): then build from a copy of the sources without pyproject.toml and copy the extensions back.
if ! python3 setup.py -q build_ext --inplace > "$LOGS/build.log" 2>&1; then
  tmp=$(mktemp -d)
  cp -r setup.py pycudadrv include "$tmp"/
  { (cd "$tmp" && python3 setup.py -q build_ext --inplace) >> "$LOGS/build.log" 2>&1 && cp "$tmp"/pycudadrv/*.so pycudadrv/; } \
    || { tail -60 "$LOGS/build.log"; exit 1; }
fi
# Scripts run as `python3 bench/x.py` or `examples/x.py` put their own folder first on sys.path:
# the checkout goes on PYTHONPATH so they import this build.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "built in place: $(python3 -c 'import pycudadrv; print(pycudadrv.__file__)') in $(( $(date +%s) - t0 )) s"
rc=0
has() { case " $what " in *" $1 "*|*" all "*) return 0 ;; esac; return 1; }
if has tests; then
  # shellcheck disable=SC2086
  python3 -m pytest -q -rs -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$LOGS/pytest.log" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
if has examples; then
  for e in examples/*.py; do
    case $e in *_mpi.py) continue ;; esac
    python3 "$e" 2>&1 | tee "$LOGS/$(basename "$e" .py).log" | tail -15
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
fi
if has main; then
  python3 -m pycudadrv 2>&1 | tee "$LOGS/main.log"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  python3 -m pycudadrv --info > "$LOGS/info.log" 2>&1 || true
fi
if has bench; then
  for b in ${BENCHES:-bench/[a-z]*.py}; do
    [ -f "$b" ] || continue
    # shellcheck disable=SC2086
    timeout 540 python3 "$b" ${BENCH_ARGS:-} 2>&1 | tee "$LOGS/$(basename "$b" .py).log" | tail -25
  done
  cp bench/results/*.json bench/results/*.png "$LOGS/" 2>/dev/null || true
  tar -czf "$FINAL_OUT/results.tar.gz" -C bench/results . 2>/dev/null || true
fi
if has mpi && [ -f tools/run_mpi_checks.sh ]; then
  OUT="$LOGS" bash tools/run_mpi_checks.sh 2>&1 | tee "$LOGS/mpi.log" | tail -30
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
echo "device_run: done in $(( $(date +%s) - t0 )) s, status $rc"
exit $rc
