#!/usr/bin/env bash
# Makes tests/fixtures/ncu/*.csv: real `ncu --csv --page raw` output of our kernel and SDPA's
# two backends on one shape, with tuner.profile's metric set. Run on a GPU machine with ncu:
#   OUT=somewhere bash scripts/ncu_fixture.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/ncu"
export PYTHONPATH=$PWD
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
METRICS=$(python3 -c "from tuner.profile._metrics import metrics_argument; print(metrics_argument())")
S='{"batch":4,"heads":8,"n_q":4096,"n_k":4096,"head_dim":64,"dtype":"bf16","causal":false}'
C='{"block_m":128,"block_n":64,"num_warps":8,"num_stages":3}'
for t in ours flash cudnn; do
  cmd=("$NCU" --csv --page raw --print-units base --clock-control none --profile-from-start off --metrics "$METRICS"
       python3 -m tuner.profile._launch "{\"target\":\"$t\",\"shape\":$S,\"config\":$C}")
  { echo "# command: ${cmd[*]}"; echo "# GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader);" \
      "$("$NCU" --version | tail -1); $(date -u +%F)"; "${cmd[@]}" 2>&1; } > "$OUT/ncu/$t.csv"
  echo "$t rc=$?"
done
