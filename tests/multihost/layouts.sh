# Layouts across 2 hosts x 2 ranks (network namespaces, Open MPI over TCP only), on one cluster:
#
# Same numbers. Each layout against the same layout with all 4 ranks on this host and the nodes
# emulated (parallel.ranks_per_node = 2): dp 2 x Ulysses 2 under ZeRO-3 with hpZ, SDP4Bit's qWD +
# TLq-HS (with grad_pipeline), ZeRO++'s qwZ + hpZ + qgZ, tp 2 inside a host x dp 2 across, pp 2 across
# the hosts x dp 2, and fp32 ZeRO-1. Across hosts the node structure is MPI's (no ranks_per_node): the
# grid must see 2 real nodes. Every step's loss, gradient norm and the validation loss are bitwise the
# one-host run's (the same MPI algorithms in the same order, whatever the transport). Across hosts
# ZeRO's collectives run on the communication thread (comm.overlap_thread = auto: dp spans nodes), on
# one host on the main thread (off): the thread changes no number either.
#
# Bytes on the wire. The metric comm.inter_node_sent_bytes_all_ranks (each step's payload bytes the
# ranks sent to ranks on other hosts, summed over every rank: comm/wire_bytes.h) against what the
# hosts' network interfaces counted (/sys/class/net/ody0/statistics/tx_bytes and tx_packets inside
# each host's namespace), for fp32 ZeRO-1, ZeRO-3 with ZeRO++'s qwZ + hpZ + qgZ, tp 2 x dp 2 and
# pp 2 x dp 2. What the interfaces count besides the metric, and how the test takes it out:
#   - every packet's Ethernet, IPv4 and TCP headers (14 + 20 + 32 bytes with the timestamp option),
#     and the acknowledgements, which are headers alone: tx_packets x 66 bytes. The veth links
#     segment late (GSO), so a packet here can carry up to 64 KiB: headers count once per packet sent;
#   - what is not a training step: MPI's start-up (the daemons' wire-up with mpirun, the modex), the
#     first weights' broadcast, the validation at the end, the final checkpoint's gathers, the job's
#     end. Two runs of the same layout, of S and 2S steps, send all of this alike; their difference is
#     S steps' traffic alone. The 2S-step run is the layout's run above.
# Then the interfaces' payload (bytes minus 66 per packet) of the S extra steps must be within 10% of
# the metric's S extra steps, and is printed beside it with the raw ratio.
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
small_model_config gpt2 4 2 256
cfg="$WORK/gpt2.toml"
cluster_up 2
S=2
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

# measured NAME STEPS ARGS...: runs across the hosts, then sets WIRE_BYTES, WIRE_PACKETS and METRIC.
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

# name|wire (compared with the interfaces)|args
layouts=(
  "dp2_ulysses2_zero3_hpz||--set parallel.sp_ulysses=2 --set parallel.zero_stage=3 --set comm.hpz=true"
  "sdp4bit_qwd_tlqhs||--set parallel.zero_stage=2 --set comm.weights=qwd --set comm.grads=tlq_hs --set comm.grad_pipeline=2"
  "zeropp_qwz_hpz_qgz|wire|--set parallel.zero_stage=3 --set comm.weights=int4 --set comm.grads=qgz --set comm.hpz=true"
  "tp2_dp2_zero1|wire|--set parallel.tp=2 --set parallel.zero_stage=1"
  "pp2_dp2_zero1|wire|--set parallel.pp=2 --set parallel.zero_stage=1"
  "fp32_zero1|wire|--set parallel.zero_stage=1"
)
for entry in "${layouts[@]}"; do
  name="${entry%%|*}"
  rest="${entry#*|}"
  wire="${rest%%|*}"
  read -ra args <<<"${rest#*|}"
  # 2S = 4 optimizer steps (warm-up included) show the order as well as 10 would.
  one_host_run "$name.one_host" 4 "${args[@]}" --set train.steps=$((2 * S)) --set log.every=1 \
    --set parallel.ranks_per_node=2 --set comm.overlap_thread=off
  measured "$name.hosts" $((2 * S)) "${args[@]}"
  b2=$WIRE_BYTES p2=$WIRE_PACKETS m2=$METRIC
  nodes_seen "$name.hosts" 2
  # pp 2 x dp 2 keeps each dp pair inside a host: no thread there.
  [ "$name" = pp2_dp2_zero1 ] || grep -q '"thread":true' "$WORK/$name.hosts/metrics.jsonl" ||
    fail "$name.hosts: ZeRO's collectives were not on the communication thread"
  same_run "$name.hosts" "$name.one_host"
  [ -n "$wire" ] || continue
  measured "$name.short" $S "${args[@]}"
  b1=$WIRE_BYTES p1=$WIRE_PACKETS m1=$METRIC
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
