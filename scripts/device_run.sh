#!/usr/bin/env bash
# GPU work on the device machine: GPU tests, sweeps, benchmarks. Writes logs under $OUT.
# Usage (device tool, repo root, carry .whl): bash scripts/device_run.sh [stage ...]
# Caches and the database live under .cache/ and studies/ (git-ignored), so a warm
# machine keeps them from one call to the next.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.cache/triton FA2_TUNER_CACHE=$PWD/.cache/fa2-tuner
DB=studies/h200.db
stages=${*:-gputests}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, triton, optuna; print('torch', torch.__version__, 'triton', triton.__version__, 'optuna', optuna.__version__)" | tee -a "$OUT/env.txt"
sweep() { python3 -m tuner.sweep --gpu sm_90 --storage "sqlite:///$DB" --no-outputs "$@"; }
for stage in $stages; do
  echo "== $stage $(date +%T)"
  case $stage in
    gputests)
      timeout ${TESTS_LIMIT:-200} python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_sweep.py tests/test_kernel.py 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "passed|failed|error|Error|best config|% flash|B2 H4"
      python3 -m pytest -q -p no:cacheprovider tests/test_outputs.py -k autotuned 2>&1 | tee "$OUT/gpu_tests_outputs.log" | tail -3 ;;
    kill9)  # the article grid, killed with SIGKILL after KILL_AFTER seconds
      setsid python3 -m tuner.sweep --gpu sm_90 --storage "sqlite:///$DB" --no-outputs --study article --sampler grid \
        > "$OUT/article_run1.log" 2>&1 & pid=$!
      sleep "${KILL_AFTER:-150}"; kill -9 -- -"$pid"; sleep 2
      python3 scripts/store_report.py "$DB" article | tee "$OUT/after_kill.txt" ;;
    article) sweep --study article --sampler grid 2>&1 | tee "$OUT/article_run2.log" | grep -v "^\[" ;
      python3 scripts/store_report.py "$DB" article | tee "$OUT/article_report.txt" ;;
    hd128) timeout "${HD128_LIMIT:-330}" python3 -m tuner.sweep --gpu sm_90 --storage "sqlite:///$DB" --no-outputs --study head_dim_128 --sampler grid 2>&1 | tee "$OUT/hd128.log" | grep -v "^\[" ;;
    verify) python3 -m tuner.emit --study article --gpu sm_90 --storage "sqlite:///$DB" --out "$OUT/emitted.py" --verify "$OUT/verify.md" > "$OUT/emit.log" 2>&1; echo "verify rc=$?"; cat "$OUT/verify.md" ;;
    stability) python3 -m tuner.bench_search stability --storage "sqlite:///$DB" --study article --gpu sm_90 --markdown "$OUT/stability.md" 2>&1 | tail -15 ;;
    race) timeout ${RACE_LIMIT:-300} python3 -m tuner.bench_search speed --markdown "$OUT/race.md" 2>&1 | tail -20 ;;
    copydb) python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" "$DB" "$OUT/$(basename $DB)" ;;
    bench) python3 -m kernel.bench --pick --json "$OUT/bench.json" --markdown "$OUT/bench.md" 2>&1 | tail -40 ;;
    *) echo "unknown stage $stage" ;;
  esac
done
