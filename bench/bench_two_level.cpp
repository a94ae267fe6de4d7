// The pipelined two-level gradient reduce-scatter (TLq-HS and friends) against itself unsliced: how
// much overlapping the intra-node hop of one slice with the inter-node hop of the previous one saves.
//
// The dp ranks split into nodes of --ranks-per-node; every repetition runs each slice count once, in
// rotating order, ranks aligned by a barrier, and the medians are printed as JSON with the ratio to
// slices = 1 (same run, same data). All ranks on one host move the "inter-node" hop through shared
// memory too, so this measures the pipeline's own cost and what overlap there is between MPI progress
// and the encode/decode work, not a network's.
//
// Usage: mpirun -np 4 bench_two_level [--grads tlq_hs] [--ranks-per-node 2] [--elements 16777216]
//                                     [--slices 1,2,4,8] [--reps 5]
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/sdp4bit.h"

#include "odyssey/train/host_info.h"

using namespace odyssey;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int bench(int argc, char** argv) {
  std::string grads = "tlq_hs";
  int ranks_per_node = 2, reps = 5;
  size_t elements = size_t{1} << 24;
  std::vector<size_t> slice_counts = {1, 2, 4, 8};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--grads")
      grads = v;
    else if (k == "--ranks-per-node")
      ranks_per_node = std::atoi(v.c_str());
    else if (k == "--elements")
      elements = size_t(std::atoll(v.c_str()));
    else if (k == "--reps")
      reps = std::atoi(v.c_str());
    else if (k == "--slices") {
      slice_counts.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');) slice_counts.push_back(size_t(std::atoi(s.c_str())));
    } else
      fail("unknown option {}", k);
  }
  Communicator& w = world();
  const int P = w.size(), D = std::min(ranks_per_node, P);
  ODY_CHECK(P % D == 0 && P / D >= 1, "--ranks-per-node {} must divide {} ranks", D, P);
  CommOptions c;
  c.grads = parse_enum(kGradCommNames, grads, "--grads");
  validate_comm_keys(c, 1);
  ODY_CHECK(c.two_level_grads(), "--grads {} is not a two-level format", grads);
  NodeSplit nodes = split_nodes(w, D);
  Communicator &intra = *nodes.intra, &inter = *nodes.inter;
  const WireFormat fi = grad_intra_format(c), fo = grad_inter_format(c);

  // One bucket of `elements`, shard S padded to whole groups.
  const size_t align = two_level_slice_align(fi, fo);
  const size_t S = (elements / size_t(P) + align - 1) / align * align;
  std::vector<float> send(size_t(P) * S), recv(S);
  for (size_t i = 0; i < send.size(); ++i)
    send[i] = float((i * 2654435761u + size_t(w.rank())) % 2001) - 1000;

  std::vector<std::vector<double>> ms(slice_counts.size());
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first repetition warms up and is not kept
    for (size_t j = 0; j < slice_counts.size(); ++j) {
      const size_t which = (j + size_t(rep)) % slice_counts.size();
      const RoundingKey key{7, uint32_t(rep), uint32_t(w.rank()), 0, 0};
      w.barrier();
      Timer t;
      two_level_reduce_scatter(intra, inter, fi, fo, send.data(), recv.data(), S, key, slice_counts[which]);
      double mine = t.seconds() * 1e3;
      std::vector<double> times(static_cast<size_t>(P));
      w.all_gather(&mine, times.data(), sizeof(double), DType::u8);
      if (rep > 0) ms[which].push_back(*std::max_element(times.begin(), times.end()));  // slowest rank
    }
  }
  if (w.rank() == 0) {
    nlohmann::json out;
    out["host"] = odyssey::host_json();
    out["grads"] = grads;
    out["ranks"] = P;
    out["ranks_per_node"] = D;
    out["elements"] = size_t(P) * S;
    out["reps"] = reps;
    const double base = median(ms[0]);
    for (size_t j = 0; j < slice_counts.size(); ++j) {
      const double m = median(ms[j]);
      out["runs"].push_back({{"slices", slice_counts[j]}, {"median_ms", m}, {"ratio_to_first", m / base}});
    }
    std::cout << out.dump(2) << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, bench, "bench_two_level");
}
