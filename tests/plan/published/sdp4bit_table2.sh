#!/usr/bin/env bash
# SDP4Bit Table 2 on the shipped cluster files (docs/planner.md, planner.md §9.4): predicted speedup of
# qWD + TLq-HS (grad_pipeline 8) over the bf16-weights / fp32-gradients baseline, per model and cluster.
#   bash tests/plan/published/sdp4bit_table2.sh [odyssey binary]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
B=${1:-$root/build/odyssey}
C=$root/configs/clusters
step() {  # model cluster tp pp world [--set ...]
  local m=$1 cl=$2 tp=$3 pp=$4 W=$5
  shift 5
  local dp=$((W / tp / pp))
  "$B" plan --config "$here/$m.toml" --cluster "$C/$cl.toml" --world "$W" --set parallel.tp="$tp" \
    --set parallel.pp="$pp" --set parallel.dp="$dp" --set train.global_batch="$dp" "$@" --json | jq '.time.step_s'
}
for cl in sdp4bit-a100 sdp4bit-h800; do
  if [ $cl = sdp4bit-a100 ]; then W=64 big="4 2"; else W=128 big="8 1"; fi
  for row in "g1.3b 1 1" "g2.7b 1 1" "g6.7b 4 1" "g13b $big" "g18b $big"; do
    read -r m tp pp <<< "$row"
    base=$(step "$m" $cl "$tp" "$pp" $W)
    sdp=$(step "$m" $cl "$tp" "$pp" $W --set comm.weights=qwd --set comm.grads=tlq_hs --set comm.grad_pipeline=8)
    awk -v c=$cl -v m="$m" -v t="$tp" -v p="$pp" -v b="$base" -v s="$sdp" \
      'BEGIN { printf "%-13s %-6s tp%s pp%s baseline %.4f s  sdp4bit %.4f s  speedup %.2f\n", c, m, t, p, b, s, b / s }'
  done
done
