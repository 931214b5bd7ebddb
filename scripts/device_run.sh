#!/usr/bin/env bash
# One full GPU session on the device machine: GPU tests, budget launch check, benchmarks.
# Usage (device tool, repo root): bash scripts/device_run.sh [stage ...]; writes under $OUT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache FA2_TUNER_CACHE=/tmp/fa2-cache
stages=${*:-tests bench}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
for stage in $stages; do
  echo "== $stage $(date +%T)"
  case $stage in
    tests) python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/test_kernel.py 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "PASS|FAIL|ERROR|sm_|passed|failed" ;;
    precompile) python3 -c "
from kernel.bench import CANDIDATES
from tuner.budget import compile_many, Problem
from tuner.space import Config
tasks = [(Config(**c), Problem(head_dim=d, causal=k), 90) for c in CANDIDATES for d in (64, 128) for k in (False, True)]
print('precompiled', len(compile_many(tasks)))" ;;
    pick) python3 -m kernel.bench --pick --n 4096 --json "$OUT/pick.json" --markdown "$OUT/pick.md" 2>&1 | tail -12 ;;
    bench) python3 -m kernel.bench --pick --json "$OUT/bench.json" --markdown "$OUT/bench.md" 2>&1 | tail -40 ;;
    budget128) timeout 420 python3 -m pytest -v -s -p no:cacheprovider "tests/test_budget.py::test_verdicts_hold_on_the_device[128]" 2>&1 | tee "$OUT/budget128.log" | grep -E "sm_9|passed|failed|compiled" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
