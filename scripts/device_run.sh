#!/usr/bin/env bash
# GPU work on a lent GPU machine, through the device tool (run from the repo root, carry .whl: made by
# `bash ../shared/gpu-wheels.sh pytest-xdist execnet pytest-timeout`).
#
#   bash scripts/device_run.sh start 'STAGE ARGS' ...   # the stages in the background; wait up to WAIT s, pack
#   bash scripts/device_run.sh wait                     # a later call: wait up to WAIT s more, pack
#   bash scripts/device_run.sh run 'STAGE ARGS' ...     # the stages in the foreground
#
# Stages (each one quoted word list; ARGS go to the command as they are):
#   env                  the GPU, its driver and clock, and the Python packages' versions
#   tests [ARGS]         pytest -m gpu over ARGS (default tests/: the whole GPU suite, on TESTS_N=12 processes where
#                        .whl has pytest-xdist, then the 'timing' tests alone; at most TESTS_S s each, a test
#                        at most TEST_S with pytest-timeout), e.g.
#                        'tests tests/kernel/triton/test_kernel.py -k bf16'
#   bench NAME [ARGS]    python -m benchmarks.NAME ARGS, e.g. 'bench route --write'
#   job [ARGS]           the README's main command as a user, timed, in a fresh folder, e.g. 'job --gpu sm_90'
#   rerun [ARGS]         the same command again on that folder (the warm re-run), timed, and the emitted files compared
#   cold                 empty the Triton and tuner caches: the next job runs from cold caches, as the first does
#   py MODULE [ARGS]     python -m MODULE ARGS, e.g. 'py tuner.profile --gpu sm_90 --top 2'
#   keep PATH...         copy files the stages wrote in the checkout (a table, a config list) into the results
#
# A machine stays warm 30 s after a call, so long work runs in the background (setsid) and
# later calls wait on it. Work files live in .cache/device (git-ignored, kept while the machine
# is warm); every call packs the logs into $OUT/results.tgz, so a lost machine loses only what
# it had not packed yet. Example, the whole GPU suite then the route table:
#   bash scripts/device_run.sh start env tests 'bench route --write docs/results/route.md'
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
W=$PWD/.cache/device; mkdir -p "$W"
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -f "$W/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch "$W/.installed"
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton FA2_TUNER_CACHE=$W/fa2-tuner

versions() {
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)
for name in ('optuna', 'sqlalchemy', 'plotly'):
    try: print(name, __import__(name).__version__)
    except ImportError: print(name, 'not installed')"
}

timed() {   # timed LOG COMMAND...: the command's output to LOG, its wall time and status after it
  local log=$1 started; shift; started=$(date +%s%N)
  "$@" > "$log" 2>&1; local rc=$? ms=$((($(date +%s%N) - started) / 1000000))
  echo "rc=$rc wall_s=$((ms / 1000)).$(printf %03d $((ms % 1000)))" | tee -a "$log"
  return $rc
}

gpu_tests() {   # gpu_tests LOG MARKER ARGS...: pytest -m MARKER ARGS, the slowest tests named at the end
  local log=$1 marker=$2; shift 2
  # -v: each test's line names its worker; a test past 300 s dumps its stack, and (pytest-timeout from .whl)
  # one past TEST_S fails instead of holding its worker until TESTS_S ends the suite.
  local stop=(); python3 -c "import pytest_timeout" 2>/dev/null && stop=(--timeout "${TEST_S:-420}")
  timed "$log" timeout "${TESTS_S:-1800}" python3 -m pytest -m "$marker" -v -p no:cacheprovider -rfE --durations=25 \
    -o faulthandler_timeout=300 "${stop[@]}" "$@"
  grep -E "passed|failed" "$log" | tail -1; grep -E "^(FAILED|ERROR)" "$log" | head -20
}

stage() {
  local name=$1; shift
  local log="$W/$(date +%H%M%S)-$name.log"
  echo "== $name $* ($(date +%T))"
  case $name in
    env) nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv; versions;;
    tests) if [ $# -eq 0 ] && python3 -c "import xdist" 2>/dev/null; then    # compiles on TESTS_N cores, timers alone
             gpu_tests "$log" "gpu and not timing" -n "${TESTS_N:-12}" --dist worksteal tests/
             gpu_tests "${log%.log}-timing.log" "gpu and timing" tests/
           else gpu_tests "$log" gpu "${@:-tests/}"; fi;;
    bench) local bench=$1; shift; timed "$log" python3 -m "benchmarks.$bench" "$@"; tail -60 "$log";;
    job) rm -rf "$W/job"; mkdir -p "$W/job"
         (cd "$W/job" && timed "$log" python3 -m tuner.sweep "$@"); tail -25 "$log"
         cp -r "$W/job/fa2-out/configs" "$W/job-configs" 2>/dev/null;;
    rerun) (cd "$W/job" && timed "$log" python3 -m tuner.sweep "$@"); tail -12 "$log"
           diff -r "$W/job-configs" "$W/job/fa2-out/configs" && echo "emitted files identical";;
    py) local module=$1; shift; timed "$log" python3 -m "$module" "$@"; tail -60 "$log";;
    keep) mkdir -p "$W/kept"; cp -v "$@" "$W/kept/";;
    cold) rm -rf "$W/triton" "$W/fa2-tuner"; echo "caches emptied";;
    *) echo "unknown stage $name: env, tests, bench, job, rerun, cold, py, keep (see the header of $0)"; return 2;;
  esac
}

pack() {
  (cd "$W" && tar czf "$OUT/results.tgz" --exclude=triton --exclude=fa2-tuner --exclude=.installed \
     --exclude='*/plotly.min.js' --exclude='*/dashboards' --exclude='*.db' . 2>/dev/null)
  ls -la "$OUT"
}

wait_for() {
  local limit=${WAIT:-540} started=$SECONDS
  while [ -f "$W/running" ] && [ $((SECONDS - started)) -lt "$limit" ]; do sleep 5; done
  [ -f "$W/running" ] && echo "still running after ${limit} s" || echo "all stages done"
  tail -c 9000 "$W/run.log"
  pack
}

case ${1:-run} in
  start) shift; rm -f "$W/run.log"; touch "$W/running"
         printf '%s\n' "$@" > "$W/stages"
         setsid bash -c "while IFS= read -r s; do bash '$0' run \"\$s\"; done < '$W/stages' >> '$W/run.log' 2>&1
                         rm -f '$W/running'" &
         wait_for;;
  wait) wait_for;;
  run) shift; for s in "$@"; do read -r -a words <<< "$s"; stage "${words[@]}"; done;;
  *) sed -n 2,20p "$0"; exit 2;;
esac
