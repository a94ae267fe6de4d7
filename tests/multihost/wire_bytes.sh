# The metric comm.inter_node_sent_bytes_all_ranks (each step's payload bytes the ranks sent to ranks on
# other hosts, summed over every rank: comm/wire_bytes.h) against what the hosts' network interfaces
# counted (/sys/class/net/ody0/statistics/tx_bytes and tx_packets inside each host's namespace), on 2
# hosts x 2 ranks, per layout: fp32 ZeRO-1, ZeRO-3 with ZeRO++'s qwZ + hpZ + qgZ, tp 2 inside a host x
# dp 2, pp 2 across the hosts x dp 2.
#
# What the interfaces count besides the metric, and how the test takes it out:
#   - every packet's Ethernet, IPv4 and TCP headers (14 + 20 + 32 bytes with the timestamp option),
#     and the acknowledgements, which are headers alone: tx_packets x 66 bytes. The veth links
#     segment late (GSO), so a packet here can carry up to 64 KiB: headers count once per packet sent;
#   - what is not a training step: MPI's start-up (the daemons' wire-up with mpirun, the modex), the
#     first weights' broadcast, the validation at the end, the final checkpoint's gathers, the job's
#     end. Two runs of the same layout, of S and 2S steps, send all of this alike; their difference is
#     S steps' traffic alone.
# Then the interfaces' payload (bytes minus 66 per packet) of the S extra steps must be within 10% of
# the metric's S extra steps, and is printed beside it with the raw ratio.
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
small_model_config gpt2 4 2 256
cfg="$WORK/gpt2.toml"
cluster_up 2
S=4
HEADER_BYTES=66

# tx_counts: "bytes packets" sent by all hosts' ody0 so far.
tx_counts() {
  local b=0 p=0 ns
  for ns in $(awk '{print $2}' "$CLUSTER_DIR/hosts"); do
    b=$((b + $(ip netns exec "$ns" cat /sys/class/net/ody0/statistics/tx_bytes)))
    p=$((p + $(ip netns exec "$ns" cat /sys/class/net/ody0/statistics/tx_packets)))
  done
  echo "$b $p"
}
metric_sum() { grep -oE '"inter_node_sent_bytes_all_ranks":[0-9]+' "$WORK/$1/metrics.jsonl" | cut -d: -f2 | awk '{s += $1} END {print s + 0}'; }

# measured NAME STEPS ARGS...: runs, then sets WIRE_BYTES, WIRE_PACKETS and METRIC for the run.
measured() {
  local name="$1" steps="$2" before after
  shift 2
  read -ra before <<<"$(tx_counts)"
  hosts_run "$name" 4 --set train.steps="$steps" --set log.every=1 "$@"
  read -ra after <<<"$(tx_counts)"
  WIRE_BYTES=$((after[0] - before[0]))
  WIRE_PACKETS=$((after[1] - before[1]))
  METRIC=$(metric_sum "$name")
}

layouts=(
  "fp32_zero1|--set parallel.zero_stage=1"
  "zeropp_zero3|--set parallel.zero_stage=3 --set comm.weights=int4 --set comm.grads=qgz --set comm.hpz=true"
  "tp2_dp2|--set parallel.tp=2 --set parallel.zero_stage=1"
  "pp2_dp2|--set parallel.pp=2 --set parallel.zero_stage=1"
)
for entry in "${layouts[@]}"; do
  name="${entry%%|*}"
  read -ra args <<<"${entry#*|}"
  measured "$name.short" $S "${args[@]}"
  b1=$WIRE_BYTES p1=$WIRE_PACKETS m1=$METRIC
  measured "$name.long" $((2 * S)) "${args[@]}"
  b2=$WIRE_BYTES p2=$WIRE_PACKETS m2=$METRIC
  [ "$m2" -gt "$m1" ] || fail "$name: the metric did not grow with the steps ($m1 -> $m2)"
  awk -v b=$((b2 - b1)) -v p=$((p2 - p1)) -v m=$((m2 - m1)) -v h=$HEADER_BYTES -v name="$name" -v s=$S 'BEGIN {
    payload = b - h * p
    printf "%s: %d steps: metric %d B; interfaces %d B in %d packets = %d B payload + %d B headers; payload/metric %.4f, raw %.4f\n",
      name, s, m, b, p, payload, h * p, payload / m, b / m
    d = payload / m - 1; if (d < 0) d = -d
    exit !(m > 0 && d <= 0.10)
  }' && echo "ok: $name: interface payload within 10% of the metric" ||
    fail "$name: the interfaces' payload is not within 10% of the metric"
done
finish
