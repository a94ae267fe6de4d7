#include "odyssey/plan/time_model.h"

#include <algorithm>
#include <cmath>

#include "odyssey/core/error.h"
#include "odyssey/model/architecture.h"
#include "odyssey/plan/stage_cache.h"

namespace odyssey {

namespace {

// Declared efficiency of a GEMM of `gflop` GFLOP: the step function, largest threshold first (Calculon).
double declared_efficiency(const std::vector<std::pair<double, double>>& steps, double gflop) {
  for (const auto& [threshold, eff] : steps)
    if (gflop >= threshold) return eff;
  return steps.empty() ? 1.0 : steps.back().second;
}

// Compute resources of one rank: a GPU is a device; a CPU rank has cores_per_node / ranks_on_node cores
// (fewer than one: the ranks time-slice the cores).
double cpu_share(const Cluster& c, int ranks_on_node) {
  if (c.device_kind != "cpu") return 1.0;
  const int cores = c.cores_per_node > 0 ? c.cores_per_node : c.devices_per_node;
  return double(cores) / double(std::max(1, ranks_on_node));
}

// Memory bandwidth of one rank (bytes/s) for memory-bound kernels.
double rank_bandwidth(const Cluster& c, int ranks_on_node) {
  const double bw = c.memory_bandwidth_gbs * 1e9 * c.elementwise_efficiency;
  return c.device_kind == "cpu" ? bw / double(std::max(1, ranks_on_node)) : bw;
}

const char* comm_class(const CommRecord& r) {
  switch (r.purpose) {
    case CommPurpose::grads:
      return "dp_grads";
    case CommPurpose::weights:
      return "weight_gather";
    case CommPurpose::zero3_gather:
      return "zero3_gather";
    case CommPurpose::sp:
      return r.kind == CommKind::send_recv ? "ring_kv" : "ulysses";
    case CommPurpose::tp:
      return "tp";
    case CommPurpose::pp:
      return "pp_p2p";
    case CommPurpose::scalars:
      return "scalars";
  }
  return "scalars";
}

// The bucket (or unit) a record belongs to: "bucket 3 slice 1" -> "bucket 3".
std::string record_unit(const std::string& what) {
  const size_t slice = what.find(" slice");
  return slice == std::string::npos ? what : what.substr(0, slice);
}

}  // namespace

double gemm_rate(const Cluster& cluster, const std::string& dtype, int64_t m, int64_t n, int64_t k,
                 int ranks_per_node, std::string* how) {
  const double share = cpu_share(cluster, ranks_per_node);
  // Measured: inverse-distance weights of the three nearest shapes in log space (exact when measured).
  std::vector<std::pair<double, double>> near;  // (distance, rate)
  for (const GemmRate& g : cluster.gemm) {
    if (g.dtype != dtype) continue;
    const double d = std::fabs(std::log(double(m) / g.m)) + std::fabs(std::log(double(n) / g.n)) +
                     std::fabs(std::log(double(k) / g.k));
    near.push_back({d, g.flops});
  }
  if (!near.empty()) {
    std::sort(near.begin(), near.end());
    if (how) *how = "measured";
    if (near.front().first < 1e-9) return near.front().second * share;
    double wsum = 0, rsum = 0;
    for (size_t i = 0; i < std::min<size_t>(3, near.size()); ++i) {
      const double w = 1.0 / near[i].first;
      wsum += w;
      rsum += w * near[i].second;
    }
    return rsum / wsum * share;
  }
  auto peak = cluster.matmul_peak.find(dtype);
  ODY_CHECK(peak != cluster.matmul_peak.end(),
            "cluster {}: no GEMM rate for dtype {} (device.matmul_peak.{})", cluster.name, dtype, dtype);
  auto eff = cluster.matmul_efficiency.find(dtype);
  const double gflop = 2.0 * double(m) * double(n) * double(k) / 1e9;
  if (how) *how = "declared";
  return peak->second *
         (eff == cluster.matmul_efficiency.end() ? 1.0 : declared_efficiency(eff->second, gflop)) * share;
}

std::vector<GemmShape> micro_batch_gemms(const PlanLayout& layout, int layers, bool head) {
  const RunConfig& c = layout.config();
  const ModelConfig& m = c.model;
  const int64_t t = c.parallel.tp, N = int64_t(c.train.micro_batch) * layout.local_tokens();
  const int64_t C = m.d_model, H = m.n_head, Hkv = m.kv_heads(), D = m.head_dim(), F = m.ffn_dim();
  const bool gated = m.arch != Arch::gpt2;  // Llama-style SwiGLU: gate and up projections
  std::vector<GemmShape> g;
  if (layers > 0) {
    g.push_back({"qkv", N, (H + 2 * Hkv) * D / t, C, layers});
    g.push_back({"attn_proj", N, C, H * D / t, layers});
    g.push_back({"fc", N, F / t, C, layers * (gated ? 2 : 1)});
    g.push_back({"fc_proj", N, C, F / t, layers});
  }
  if (head) g.push_back({"lm_head", N, (m.vocab_size + t - 1) / t, C, 1});
  return g;
}

Crossing crossing_bytes(const CommRecord& r) {
  Crossing x;
  const int P = r.group_size, n = std::max(1, r.group_nodes), g = std::max(1, P / n);
  const double B = double(r.bus_bytes);
  x.steps = 1, x.steps_inter = n > 1 ? 1 : 0, x.intra_per_device = B;
  switch (r.kind) {
    case CommKind::all_reduce:
      x.steps = 2.0 * (P - 1), x.steps_inter = 2.0 * (n - 1);
      break;
    case CommKind::reduce_scatter:
    case CommKind::all_gather:
    case CommKind::broadcast:
      x.steps = P - 1, x.steps_inter = n - 1;
      break;
    case CommKind::all_to_all:
      x.steps = P - 1, x.steps_inter = n > 1 ? P - g : 0;
      break;
    case CommKind::send_recv:
      break;
  }
  if (n > 1 && B > 0) {
    // A ring's inter-node hop per node carries one rank's bus bytes; a flat all-to-all loads each node's
    // NIC with g (P - g) / P of a rank's buffer (pitfall 1); a send crosses once. Every rank of the node
    // runs its own copy of the call at once (node_ranks / g groups through the same NIC).
    if (r.kind == CommKind::all_to_all) {
      const double buffer = B * P / double(P - 1);
      x.inter_per_node = g * double(P - g) / P * buffer;
      x.intra_per_device = double(g - 1) / P * buffer;
    } else if (r.kind == CommKind::send_recv) {
      x.inter_per_node = B, x.intra_per_device = 0;
    } else {
      x.inter_per_node = B;
    }
    x.inter_per_node *= double(std::max(1, r.node_ranks / g));
  }
  return x;
}

double collective_seconds(const CommRecord& r, const Cluster& cluster) {
  if (r.bus_bytes == 0) return 0.0;  // a receive (the sender's record carries the message) or one rank
  const NetworkLevel& intra = cluster.intra();
  const NetworkLevel& inter = cluster.inter() ? *cluster.inter() : intra;  // one host: both are copies
  const Crossing x = crossing_bytes(r);
  if (cluster.device_kind == "cpu") {
    // One host: every hop is a memory copy by the ranks' own cores, at the measured shared-memory beta.
    return intra.call_overhead_us * 1e-6 + x.steps * intra.latency_us * 1e-6 +
           double(r.bus_bytes) / (intra.bandwidth_gbs * 1e9 * intra.efficiency);
  }
  const bool spans = r.group_nodes > 1;
  const double latency =
      (x.steps - x.steps_inter) * intra.latency_us * 1e-6 + x.steps_inter * inter.latency_us * 1e-6;
  const double t_intra = x.intra_per_device / (intra.bandwidth_gbs * 1e9 * intra.efficiency);
  const double t_inter = spans ? x.inter_per_node / (inter.bandwidth_gbs * 1e9 * inter.efficiency) : 0.0;
  return (spans ? inter : intra).call_overhead_us * 1e-6 + latency + std::max(t_intra, t_inter);
}

StepTime step_time(const PlanLayout& layout, const std::vector<CommRecord>& records, const Cluster& cluster,
                   int rank) {
  const RunConfig& c = layout.config();
  const ModelConfig& model = c.model;
  StepTime st;
  const std::string dtype = c.train.precision == Precision::bf16 ? "bf16" : "fp32";
  const int m = layout.micro_steps(), pp = c.parallel.pp;
  // The ranks sharing a device's compute: a GPU's one; a CPU host's cores are shared by every rank the
  // host runs, whatever nodes the layout emulates on it (parallel.ranks_per_node splits only the groups).
  const int rpn = cluster.device_kind == "cpu" ? (layout.world() + cluster.nodes - 1) / cluster.nodes
                                               : layout.ranks_per_node();
  const int stage = layout.coords(rank).pp;
  const int layers = (model.n_layer + pp - 1) / pp;
  const bool head = stage == pp - 1;
  const double share = cpu_share(cluster, rpn);

  // GEMMs: forward once, backward twice (dX, dW) at the same shapes' rates.
  double gemm_f = 0, layer_gemm_f = 0;
  std::string how;
  for (const GemmShape& g : micro_batch_gemms(layout, layers, head)) {
    const double s = g.flops() / gemm_rate(cluster, dtype, g.m, g.n, g.k, rpn, &how);
    gemm_f += s;
    if (g.name != "lm_head") layer_gemm_f += s;
  }
  (how == "measured" ? st.measured : st.declared).push_back("gemm rates (" + dtype + ")");
  // The rate MFU divides by: the best measured rate, or the declared peak.
  double ref = 0;
  for (const GemmRate& g : cluster.gemm)
    if (g.dtype == dtype) ref = std::max(ref, g.flops * share);
  if (ref == 0) ref = gemm_rate(cluster, dtype, 8192, 8192, 8192, rpn);
  st.gemm_rate = ref;

  // Attention: causal 2 * 2 * b * H * T^2 * D / 2 per layer forward over the whole sequence, a 1 / (U R)
  // share per rank (zigzag balances the ring), H / t heads; backward 2.5x.
  const double T = c.seq_len(), b = c.train.micro_batch;
  const double sp = double(c.parallel.sp_ulysses) * c.parallel.sp_ring;
  const double attn_flops = 2.0 * b * (double(model.n_head) / c.parallel.tp) * T * T * model.head_dim() / sp;
  const auto measured_attn = cluster.kernels.find("attention_flops");
  const double attn_rate = measured_attn != cluster.kernels.end() ? measured_attn->second * share
                                                                  : ref * cluster.attention_efficiency;
  (measured_attn != cluster.kernels.end() ? st.measured : st.declared).push_back("attention rate");
  const double attn_f = layers * attn_flops / attn_rate, attn_b = 2.5 * attn_f;

  // Memory-bound kernels: norms, residuals, activation, bias, conversions (~12 C + 2 F/t floats read or
  // written per token per layer forward, twice that backward) and the head's softmax cross-entropy
  // (3 V / t floats per token).
  const double N = b * layout.local_tokens();
  const double per_token = 4.0 * (12.0 * model.d_model + 2.0 * model.ffn_dim() / c.parallel.tp);
  const double bw = rank_bandwidth(cluster, rpn);
  (cluster.sources.count("device.memory_bandwidth_gbs") &&
           cluster.sources.at("device.memory_bandwidth_gbs").rfind("measured", 0) == 0
       ? st.measured
       : st.declared)
      .push_back("memory bandwidth");
  const double elem_f =
      N * layers * per_token / bw + (head ? N * 12.0 * model.vocab_size / c.parallel.tp / bw : 0);
  const double elem_b = 2.0 * elem_f;

  // Recompute (memory.checkpoint): full reruns each layer's forward, keep_attention all but the attention,
  // cheap the norms and the activation.
  double recompute = 0;
  switch (c.memory.checkpoint) {
    case CheckpointPolicy::full:
      recompute = layer_gemm_f + attn_f + N * layers * per_token / bw;
      break;
    case CheckpointPolicy::keep_attention:
      recompute = layer_gemm_f + N * layers * per_token / bw;
      break;
    case CheckpointPolicy::cheap:
      recompute = 0.3 * N * layers * per_token / bw;
      break;
    default:
      break;
  }
  const double t_f = gemm_f + attn_f + elem_f, t_b = 2 * gemm_f + attn_b + elem_b + recompute;
  st.compute_fwd_s = m * t_f;
  st.compute_bwd_s = m * (t_b - recompute);
  st.recompute_s = m * recompute;
  st.gemm_s = m * 3 * gemm_f + m * (recompute > 0 ? layer_gemm_f : 0);
  st.attention_s = m * (attn_f + attn_b);
  st.elementwise_s = m * (elem_f + elem_b);

  // Communication per class, then what overlap leaves exposed (§6.3).
  std::map<std::string, double> t;
  std::map<int, std::map<std::string, double>> grads_by_micro;  // micro -> bucket -> seconds
  std::map<int, std::string> last_bucket;
  std::map<int, std::pair<double, double>> first_gather;  // micro -> (first fwd, first bwd) seconds
  std::map<int, std::pair<bool, bool>> seen_gather;
  double twolevel_intra = 0, twolevel_inter = 0, quantized = 0;
  for (const CommRecord& r : records) {
    quantized += double(r.quantized_elements) * double(r.repeat);
    const double s = collective_seconds(r, cluster) * double(r.repeat);
    const std::string cls = comm_class(r);
    t[cls] += s;
    if (r.purpose == CommPurpose::grads) {
      grads_by_micro[r.micro][record_unit(r.what)] += s;
      last_bucket[r.micro] = record_unit(r.what);
      if (r.group.size() > 6 && r.group.substr(r.group.size() - 6) == "_intra") twolevel_intra += s;
      if (r.group.size() > 6 && r.group.substr(r.group.size() - 6) == "_inter") twolevel_inter += s;
    }
    if (r.purpose == CommPurpose::zero3_gather) {
      auto& seen = seen_gather[r.micro];
      auto& first = first_gather[r.micro];
      const bool fwd = std::string(r.phase) == "fwd";
      if (fwd && !seen.first) first.first = s, seen.first = true;
      if (!fwd && !seen.second) first.second = s, seen.second = true;
    }
  }
  // Two-level gradients pipelined over `grad_pipeline` slices overlap their hops on a real two-level
  // network (§6.2); on one host both hops are copies by the same cores and simply add.
  const int slices = c.comm.grad_pipeline;
  if (slices > 1 && cluster.device_kind != "cpu" && twolevel_intra > 0 && twolevel_inter > 0) {
    const double piped =
        std::max(twolevel_intra, twolevel_inter) + std::min(twolevel_intra, twolevel_inter) / slices;
    t["dp_grads"] -= twolevel_intra + twolevel_inter - piped;
  }
  st.comm_s = t;
  auto phi = [&](const char* cls) { return cluster.overlap_of(cls); };
  double hidden = 0;
  for (const auto& [cls, s] : t) {
    double exposed = s;
    if (cls == "dp_grads") {
      // Per reduction round: everything but the last bucket can hide behind the rest of the backward.
      const double scale = s > 0 ? s /
                                       [&] {
                                         double sum = 0;
                                         for (const auto& [micro, buckets] : grads_by_micro)
                                           for (const auto& [bucket, x] : buckets) sum += x;
                                         return sum > 0 ? sum : 1.0;
                                       }()
                                 : 0.0;
      exposed = 0;
      for (const auto& [micro, buckets] : grads_by_micro) {
        double round = 0;
        for (const auto& [bucket, x] : buckets) round += x * scale;
        const double last = buckets.at(last_bucket[micro]) * scale;
        exposed += round - phi("dp_grads") * std::min(round - last, t_b);
      }
    } else if (cls == "zero3_gather") {
      double first = 0;
      for (const auto& [micro, f] : first_gather) first += f.first + f.second;
      exposed = s - phi("zero3_gather") * std::min(s - first, m * (t_f + t_b));
    } else if (cls == "ring_kv") {
      exposed = s - phi("ring_kv") * std::min(s, m * (attn_f + attn_b));
    } else if (cls == "weight_gather" || cls == "ulysses" || cls == "tp" || cls == "pp_p2p") {
      exposed = s * (1 - phi(cls.c_str()));
    }
    exposed = std::max(0.0, exposed);
    hidden += s - exposed;
    const std::string out = cls == "ulysses" || cls == "ring_kv" ? "sp" : cls == "pp_p2p" ? "pp" : cls;
    st.comm_exposed_s[out] += exposed;
  }
  st.slowdown_s = cluster.compute_slowdown * hidden;
  // Quantize / dequantize (and Hadamard) kernels are memory-bound compute on the collectives' critical path
  // (§6.2): ~12 bytes touched per fp32 element encoded or decoded (read 4, write or read the packed value,
  // write or accumulate 4) at the memory-bound kernels' bandwidth.
  st.quantize_s = quantized * 12.0 / bw;

  // The slowest stage's idle micro-batch slots per schedule (§6.4); zb1's deferred weight gradients are
  // the backward's dW GEMMs.
  st.bubble_s =
      pp > 1 ? pipeline_bubble_seconds(c.parallel.pp_schedule, pp, c.parallel.pp_virtual, t_f, t_b, gemm_f)
             : 0.0;
  // Optimizer: AdamW over this rank's share of the parameters.
  const double params =
      double(planned_stage(model, StageRange{0, model.n_layer}, TpPiece{c.parallel.tp, 0}).table().total()) /
      pp;
  const double local = c.parallel.zero_stage > 0 ? params / layout.dims().dp / sp : params;
  const auto adamw = cluster.kernels.find("adamw_per_param");
  st.optimizer_s = adamw != cluster.kernels.end() ? local * adamw->second / share : local * 28.0 / bw;
  (adamw != cluster.kernels.end() ? st.measured : st.declared).push_back("optimizer rate");
  (cluster.intra().call_overhead_us > 0 ? st.measured : st.declared).push_back("network alpha-beta");

  double comm = 0;
  for (const auto& [cls, s] : st.comm_exposed_s) comm += s;
  st.step_s = st.compute_fwd_s + st.compute_bwd_s + st.recompute_s + comm + st.slowdown_s + st.quantize_s +
              st.bubble_s + st.optimizer_s;
  st.tokens_per_s = double(c.train.global_batch) * T / st.step_s;
  st.mfu = architecture(model.arch).training_flops_per_token(model, int(T)) * st.tokens_per_s /
           (double(layout.world()) * ref);
  return st;
}

double pipeline_bubble_seconds(PipelineSchedule schedule, int P, int v, double t_f, double t_b, double t_w) {
  if (P <= 1) return 0.0;
  switch (schedule) {
    case PipelineSchedule::interleaved:
      return (P - 1) * (t_f + t_b) / std::max(1, v);
    case PipelineSchedule::zb1: {
      // The deferred W's fill the gaps only as far as they reach: the F's and I's still cross the
      // P - 1 stages one after the other (the engine's simulation of the table, tests/plan).
      const double t_i = t_b - t_w;
      return (P - 1) * std::max({t_f, t_i, t_f + t_i - t_w});
    }
    case PipelineSchedule::gpipe:
    case PipelineSchedule::one_f_one_b:
      break;
  }
  return (P - 1) * (t_f + t_b);
}

nlohmann::json StepTime::to_json() const {
  return {{"step_s", step_s},
          {"compute_fwd_s", compute_fwd_s},
          {"compute_bwd_s", compute_bwd_s},
          {"recompute_s", recompute_s},
          {"compute_split_s", {{"gemm", gemm_s}, {"attention", attention_s}, {"elementwise", elementwise_s}}},
          {"comm_s", comm_s},
          {"comm_exposed_s", comm_exposed_s},
          {"compute_slowdown_s", slowdown_s},
          {"quantize_s", quantize_s},
          {"bubble_s", bubble_s},
          {"optimizer_s", optimizer_s},
          {"tokens_per_s", tokens_per_s},
          {"mfu", mfu},
          {"mfu_rate_flops", gemm_rate}};
}

}  // namespace odyssey
