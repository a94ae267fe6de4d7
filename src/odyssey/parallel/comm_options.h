// The comm.* keys as the ZeRO engine sees them: which compressed collective replaces the parameter
// all-gather and the gradient reduce-scatter, the wire formats they use (spec §1.3, §1.4, §2), and the
// combinations that are refused.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "odyssey/core/enum_names.h"
#include "odyssey/parallel/wire_format.h"

namespace odyssey {

// comm.weights: the parameter all-gather of ZeRO 1-2 (qwd: SDP4Bit's quantized weight differences) or
// ZeRO-3's unit gathers (int8 / int4: ZeRO++'s qwZ).
enum class WeightComm { none, int8, int4, qwd };
inline constexpr EnumNames<WeightComm, 4> kWeightCommNames = {{{"none", WeightComm::none},
                                                               {"int8", WeightComm::int8},
                                                               {"int4", WeightComm::int4},
                                                               {"qwd", WeightComm::qwd}}};
// comm.grads: the gradient reduce-scatter, one level (int8, int4), ZeRO++'s qgZ all-to-all, or
// SDP4Bit's two-level 8-bit intra / 4-bit inter (tlq) with Hadamard smoothing (tlq_hs).
enum class GradComm { none, int8, int4, qgz, tlq, tlq_hs };
inline constexpr EnumNames<GradComm, 6> kGradCommNames = {{{"none", GradComm::none},
                                                           {"int8", GradComm::int8},
                                                           {"int4", GradComm::int4},
                                                           {"qgz", GradComm::qgz},
                                                           {"tlq", GradComm::tlq},
                                                           {"tlq_hs", GradComm::tlq_hs}}};

struct CommOptions {
  WeightComm weights = WeightComm::none;
  GradComm grads = GradComm::none;
  bool hpz = false;        // ZeRO-3: backward gathers from a secondary partition inside the node
  int grad_pipeline = 1;   // two-level gradients: slices whose intra and inter hops overlap
  int ranks_per_node = 0;  // data-parallel ranks per (emulated) node; 0: all on one node
  bool identity = false;   // test only: every format passes fp32 through unrounded
  uint64_t seed = 0;       // stochastic rounding streams

  bool quantized() const { return weights != WeightComm::none || grads != GradComm::none || hpz; }
  // Two-level SDP4Bit gradients, which need several nodes.
  bool tlq_grads() const { return grads == GradComm::tlq || grads == GradComm::tlq_hs; }
  // A gradient format that can reduce-scatter in two levels (intra-node, then inter-node): the config
  // check, before the layout is known.
  bool two_level_grads() const { return tlq_grads() || grads == GradComm::qgz; }
  // Whether it does on this layout: tlq and tlq_hs always (they need several nodes); qgz only with
  // several nodes of several ranks, else ZeRO++'s gradient all-to-all is one level. The one rule ZeRO
  // follows.
  bool two_level_grads(int ranks_per_node, int nodes) const {
    return tlq_grads() || (grads == GradComm::qgz && ranks_per_node > 1 && nodes > 1);
  }
  // The data-parallel ranks of a node among dp_size (nodes are consecutive blocks of them).
  int node_ranks(int dp_size) const {
    return ranks_per_node > 0 ? std::min(ranks_per_node, dp_size) : dp_size;
  }
};

// The checks that need no communicator (config validation). Errors name the comm.* key.
void validate_comm_keys(const CommOptions& c, int zero_stage);
// All checks, with the data-parallel size known.
void validate_comm(const CommOptions& c, int zero_stage, int dp_size);

// qwd: int4, groups of 2048, stochastic (§1.3). int8/int4: block-wise, rounding to nearest (qwZ).
WireFormat weight_format(const CommOptions& c);
// int8/int4 one-level and the intra hop of tlq*: groups of 128, stochastic; tlq_hs adds H32 (§1.4).
// qgz: int4 on both hops, groups of 512, rounding to nearest (§2.4, summed in fp32 here).
WireFormat grad_intra_format(const CommOptions& c);
WireFormat grad_inter_format(const CommOptions& c);
// Alignment of every shard so that groups and Hadamard blocks never straddle shards.
int64_t comm_shard_align(const CommOptions& c);

}  // namespace odyssey
