// A cluster description (planner.md §3.3): devices, their compute and memory, the network levels with
// α-β figures, and the overlap factors. Modelled on Calculon's system files and ASTRA-sim's per-dimension
// network. Units: bytes, seconds, FLOP/s; bandwidths in GB/s (1e9 B/s) per direction. Every value says
// where it comes from: `sources` maps a key to "paper", "assumed", "nominal" or "measured".
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace odyssey {

// One GEMM rate measured on the device (calibration): C[m, n] = A[m, k] B[k, n].
struct GemmRate {
  int64_t m = 0, n = 0, k = 0;
  std::string dtype = "fp32";
  double flops = 0;  // FLOP/s
};

struct NetworkLevel {
  std::string name;                 // "intra", "inter"
  std::string span = "node";        // "node" (inside a node) or "cluster"
  std::string topology = "switch";  // "switch", "ring", "full"
  double bandwidth_gbs = 0;  // intra: per device (link_bandwidth_gbs); inter: per node (node_bandwidth_gbs)
  double latency_us = 0;     // per algorithm step
  double efficiency = 1.0;
  double call_overhead_us = 0;  // per collective call (scheduling, progress), measured on CPUs
};

struct Cluster {
  std::string name;
  int nodes = 1;
  int devices_per_node = 1;
  // [device]
  std::string device_kind = "gpu";  // "gpu" | "cpu" (a CPU device is one rank with its share of cores)
  double memory_gib = 0;
  double memory_bandwidth_gbs = 0;
  double memory_reserve = 0.1;
  int cores_per_node = 0;                     // cpu: the cores the node's ranks share (0: one per device)
  std::map<std::string, double> matmul_peak;  // FLOP/s per dtype (per device)
  // Efficiency as a step function of GFLOP per GEMM, largest threshold first: [[gflop, eff], ...].
  std::map<std::string, std::vector<std::pair<double, double>>> matmul_efficiency;
  std::vector<GemmRate> gemm;                  // measured rates (per node for a cpu: all its cores)
  double attention_efficiency = 0.5;           // attention FLOP rate as a fraction of the GEMM rate
  double elementwise_efficiency = 0.5;         // fraction of memory_bandwidth the memory-bound kernels reach
  std::map<std::string, double> kernels;       // measured seconds: "adamw_per_param", ...
  std::vector<NetworkLevel> levels;            // "intra" first, then "inter" (nodes > 1)
  std::map<std::string, double> overlap;       // per comm class, planner.md §6.3
  double compute_slowdown = 0;                 // compute inflation while overlapped communication runs
  std::map<std::string, std::string> sources;  // key -> "paper" | "nominal" | "assumed" | "measured"
  std::string notes;

  const NetworkLevel& intra() const { return levels.front(); }
  const NetworkLevel* inter() const { return levels.size() > 1 ? &levels[1] : nullptr; }
  double overlap_of(const std::string& comm_class) const;
};

// Parses a cluster TOML; unknown keys, missing levels and non-positive numbers are errors naming the key
// and the file.
Cluster parse_cluster(const std::string& toml_text, const std::string& source);
Cluster load_cluster(const std::string& path);
// The TOML text of a cluster (what --calibrate writes), with the sources as comments.
std::string cluster_to_toml(const Cluster& c);

}  // namespace odyssey
