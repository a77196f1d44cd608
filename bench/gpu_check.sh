#!/usr/bin/env bash
# GPU readiness check: each paper's benchmark, then a short full-profile step of one experiment per paper.
#
#   bench/gpu_check.sh [REPORT]          # default report: bench/gpu_report.md
#
# Sized for < 8 minutes on one modern GPU: every benchmark gets BENCH_S seconds and every full-profile step
# STEP_S seconds (a step still running at its limit has compiled and run on the device, and is reported as
# "ran STEP_S s"; only a non-zero exit other than the timeout is a failure). Full-profile steps run one seed
# and write to runs/gpu_check/ (git-ignored), never to results/.
set -u
cd "$(dirname "$0")/.."
REPORT=${1:-bench/gpu_report.md}
PY=${PYTHON:-.venv/bin/python}
BENCH_S=${BENCH_S:-25}
STEP_S=${STEP_S:-25}
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}

# paper -> the experiment whose full-profile step is run (its headline artefact)
STEPS="swallow:headline maifs:headline_philly petrel:headline canary:tta_bcube9 evogwp:table_short
labelavg:attack fedfoa:headline greenplace:headline"

failures=0
{
  echo "# GPU check $(date -u +%FT%TZ)"
  echo
  echo "git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); BENCH_S=$BENCH_S STEP_S=$STEP_S"
  echo
  echo '```'
  "$PY" -c 'import jax; print("jax", jax.__version__, "backend", jax.default_backend(), jax.devices())' 2>&1
  echo '```'
  echo
  echo "| paper | what | status | wall s |"
  echo "|---|---|---|---|"
} > "$REPORT"
LOGDIR=$(mktemp -d)

run_one() {  # name limit cmd...
  local name=$1 limit=$2; shift 2
  local log="$LOGDIR/${name//\//_}.log" t0 rc status
  t0=$(date +%s)
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then status=ok
  elif [ $rc -eq 124 ]; then status="ran ${limit} s (limit)"
  else status="FAILED rc=$rc"; failures=$((failures + 1)); fi
  echo "| ${name%%/*} | ${name#*/} | $status | $(( $(date +%s) - t0 )) |" >> "$REPORT"
  echo "$name: $status" >&2
}

for pair in $STEPS; do
  key=${pair%%:*} exp=${pair#*:}
  if [ -f "mlsys_repro/papers/$key/bench.py" ]; then
    run_one "$key/bench" "$BENCH_S" "$PY" -m "mlsys_repro.papers.$key.bench"
  fi
  run_one "$key/$exp (full, 1 seed)" "$STEP_S" "$PY" -m mlsys_repro.common.repro.main "experiment=$key/$exp" profile=full \
    profile.num_seeds=1 "hydra.run.dir=runs/gpu_check/$key/$exp"
done

{
  echo
  echo "## Log tails"
  for f in "$LOGDIR"/*.log; do
    echo
    echo "### $(basename "$f" .log)"
    echo '```'
    tail -n 15 "$f"
    echo '```'
  done
} >> "$REPORT"
rm -rf "$LOGDIR"
echo "report: $REPORT ($failures failure(s))" >&2
exit $((failures > 0))
