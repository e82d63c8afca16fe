#!/bin/bash
# usage: tools/cg_launch_layers.sh WORKTREE row...  (rows: see tools/cg_launch_layers.py; needs valgrind and /work/fakecuda)   -> main-thread Ir per iteration, minus the empty loop, and the fake driver's share
wt=$1; shift
cd $wt && . /work/venv/bin/activate
N=${CGN:-20000}
tag=$(basename $wt)
for w in empty "$@"; do
  out=${CG_OUT:-/tmp}/cg.$w.$tag
  rm -f $out.*
  PYTHONPATH=$wt OPENBLAS_NUM_THREADS=1 PYCUDADRV_LIBCUDA=${PYCUDADRV_LIBCUDA:-/work/fakecuda/libcuda.so.1} CGN=$N valgrind --tool=callgrind --callgrind-out-file=$out.%p python $(dirname $(readlink -f $0))/cg_launch_layers.py $w >/dev/null 2>${CG_OUT:-/tmp}/cg.err.$w.$tag
  f=$(ls $out.*.1 2>/dev/null | head -1)
  if [ -z "$f" ]; then echo "$w: no profile (see ${CG_OUT:-/tmp}/cg.err.$w.$tag)"; continue; fi
  tot=$(callgrind_annotate --inclusive=yes $f 2>/dev/null | grep -m1 "Modules/main.c:Py_BytesMain" | awk '{gsub(",","",$1); print $1}')
  fk=$(callgrind_annotate --inclusive=yes $f 2>/dev/null | grep -E ":fk_cu[A-Za-z0-9_]+ \[" | awk '{gsub(",","",$1); s+=$1} END {print s+0}')
  if [ $w = empty ]; then base=$((tot / N)); continue; fi
  echo "$w: Ir/iter=$((tot / N - base)) (empty loop $base subtracted)  fake driver fk_cu*/iter=$((fk / N))"
done
