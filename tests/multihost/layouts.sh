# Layouts across 2 hosts x 2 ranks (network namespaces, Open MPI over TCP only) against the same layout
# with all 4 ranks on this host and the nodes emulated (parallel.ranks_per_node = 2): dp 2 x Ulysses 2
# under ZeRO-3 with hpZ, SDP4Bit's qWD + TLq-HS (with grad_pipeline), ZeRO++'s qwZ + hpZ + qgZ, tp 2
# inside a host x dp 2 across, and pp 2 across the hosts x dp 2. Across hosts the node structure is
# MPI's (no ranks_per_node): the grid must see 2 real nodes. Every step's loss, gradient norm and
# the validation loss are bitwise the one-host run's (the same MPI algorithms in the same order,
# whatever the transport). Across hosts ZeRO's collectives run on the communication thread
# (comm.overlap_thread = auto: dp spans nodes), on one host on the main thread (off): the thread
# changes no number either.
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
small_model_config gpt2 4 2 256
cfg="$WORK/gpt2.toml"
cluster_up 2

layouts=(
  "dp2_ulysses2_zero3_hpz|--set parallel.sp_ulysses=2 --set parallel.zero_stage=3 --set comm.hpz=true"
  "sdp4bit_qwd_tlqhs|--set parallel.zero_stage=2 --set comm.weights=qwd --set comm.grads=tlq_hs --set comm.grad_pipeline=2"
  "zeropp_qwz_hpz_qgz|--set parallel.zero_stage=3 --set comm.weights=int4 --set comm.grads=qgz --set comm.hpz=true"
  "tp2_dp2_zero1|--set parallel.tp=2 --set parallel.zero_stage=1"
  "pp2_dp2_zero1|--set parallel.pp=2 --set parallel.zero_stage=1"
)
for entry in "${layouts[@]}"; do
  name="${entry%%|*}"
  read -ra args <<<"${entry#*|}"
  one_host_run "$name.one_host" 4 "${args[@]}" --set parallel.ranks_per_node=2 --set comm.overlap_thread=off
  hosts_run "$name.hosts" 4 "${args[@]}"
  nodes_seen "$name.hosts" 2
  # pp 2 x dp 2 keeps each dp pair inside a host: no thread there.
  [ "$name" = pp2_dp2_zero1 ] || grep -q '"thread":true' "$WORK/$name.hosts/metrics.jsonl" ||
    fail "$name.hosts: ZeRO's collectives were not on the communication thread"
  same_run "$name.hosts" "$name.one_host"
done
finish
