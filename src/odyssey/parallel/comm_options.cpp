#include "odyssey/parallel/comm_options.h"

#include <algorithm>

#include "odyssey/core/error.h"

namespace odyssey {

namespace {

WireFormat make(int bits, size_t group, bool hadamard, Rounding rounding, bool identity) {
  WireFormat f;
  f.quant = QuantFormat{bits, group, hadamard};
  f.rounding = rounding;
  f.identity = identity;
  return f;
}

}  // namespace

void validate_comm_keys(const CommOptions& c, int zero_stage) {
  const char* w = enum_name(kWeightCommNames, c.weights);
  const char* g = enum_name(kGradCommNames, c.grads);
  ODY_CHECK(
      c.weights != WeightComm::qwd || zero_stage == 1 || zero_stage == 2,
      "comm.weights=qwd needs parallel.zero_stage 1 or 2 (got {}): weight differences are taken against "
      "replicated model weights, which ZeRO-3 does not keep",
      zero_stage);
  ODY_CHECK(c.weights == WeightComm::none || zero_stage >= 1,
            "comm.weights={} needs parallel.zero_stage >= 1: ZeRO-0 gathers no parameters", w);
  ODY_CHECK(c.grads == GradComm::none || zero_stage >= 1,
            "comm.grads={} needs parallel.zero_stage >= 1: ZeRO-0 all-reduces gradients, there is no "
            "reduce-scatter to compress",
            g);
  ODY_CHECK(c.grad_pipeline >= 1 && c.grad_pipeline <= 64, "comm.grad_pipeline must be in 1..64, got {}",
            c.grad_pipeline);
  ODY_CHECK(c.grad_pipeline == 1 || c.two_level_grads(),
            "comm.grad_pipeline={} slices the two-level gradient reduce-scatter (comm.grads = tlq, tlq_hs or "
            "qgz); comm.grads={} has no second hop to overlap",
            c.grad_pipeline, g);
  ODY_CHECK(!c.hpz || zero_stage == 3,
            "comm.hpz needs parallel.zero_stage 3 (got {}): only ZeRO-3 gathers parameters for the backward",
            zero_stage);
}

void validate_comm(const CommOptions& c, int zero_stage, int dp_size) {
  validate_comm_keys(c, zero_stage);
  const int D = c.node_ranks(dp_size);
  ODY_CHECK(dp_size % D == 0,
            "comm: {} data-parallel ranks do not split into nodes of {} (parallel.ranks_per_node)", dp_size,
            D);
  const int nodes = dp_size / D;
  ODY_CHECK(
      !c.tlq_grads() || nodes > 1,
      "comm.grads={} is the two-level (intra-node 8-bit, inter-node 4-bit) reduce-scatter and needs more "
      "than one node: the {} data-parallel ranks are all on one node (set parallel.ranks_per_node to "
      "emulate nodes)",
      enum_name(kGradCommNames, c.grads), dp_size);
}

WireFormat weight_format(const CommOptions& c) {
  if (c.weights == WeightComm::qwd) return make(4, 2048, false, Rounding::kStochastic, c.identity);
  return make(c.weights == WeightComm::int4 ? 4 : 8, 2048, false, Rounding::kNearest, c.identity);
}

WireFormat grad_intra_format(const CommOptions& c) {
  if (c.grads == GradComm::qgz) return make(4, 512, false, Rounding::kNearest, c.identity);
  return make(c.grads == GradComm::int4 ? 4 : 8, 128, c.grads == GradComm::tlq_hs, Rounding::kStochastic,
              c.identity);
}

WireFormat grad_inter_format(const CommOptions& c) {
  if (c.grads == GradComm::qgz) return make(4, 512, false, Rounding::kNearest, c.identity);
  return make(4, 128, c.grads == GradComm::tlq_hs, Rounding::kStochastic, c.identity);
}

int64_t comm_shard_align(const CommOptions& c) {
  return c.quantized() ? 32 : 1;
}

}  // namespace odyssey
