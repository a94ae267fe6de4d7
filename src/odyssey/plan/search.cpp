#include "odyssey/plan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <sstream>

#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"
#include "odyssey/model/params.h"
#include "odyssey/plan/byte_model.h"
#include "odyssey/plan/layout.h"
#include "odyssey/plan/memory_model.h"
#include "odyssey/plan/plan.h"
#include "odyssey/plan/time_model.h"

namespace odyssey {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// A refusal's message with its numbers blanked: the reasons counted together.
std::string reason_class(const std::string& message) {
  static const std::regex number("[0-9]+(\\.[0-9]+)?");
  return std::regex_replace(message, number, "#");
}

// The communication bundles of the search: none, SDP4Bit (qWD + TLq-HS, ZeRO 1-2), ZeRO++ (qwZ int8 +
// hpZ + qgZ, ZeRO 3).
struct Bundle {
  const char* name;
  WeightComm weights;
  GradComm grads;
  bool hpz;
  int grad_pipeline;
};
const Bundle kBundles[] = {{"none", WeightComm::none, GradComm::none, false, 1},
                           {"sdp4bit", WeightComm::qwd, GradComm::tlq_hs, false, 8},
                           {"zeropp", WeightComm::int8, GradComm::qgz, true, 1}};

// A layout that fits, ranked by its step time; its full plan is built only when it is reported.
struct Candidate {
  RunConfig config;
  std::string bundle;
  double step_s = 0, tokens_per_s = 0;
  uint64_t memory = 0;
  nlohmann::json plan;  // filled for the reported ones
};

int checkpoint_rank(CheckpointPolicy p) {
  return p == CheckpointPolicy::none             ? 0
         : p == CheckpointPolicy::cheap          ? 1
         : p == CheckpointPolicy::keep_attention ? 2
                                                 : 3;
}

// The term of the time breakdown that grew most from a to b.
std::string grown_term(const nlohmann::json& a, const nlohmann::json& b) {
  std::map<std::string, double> ta, tb;
  auto collect = [](const nlohmann::json& t, std::map<std::string, double>& out) {
    for (const char* k : {"compute_fwd_s", "compute_bwd_s", "recompute_s", "bubble_s", "optimizer_s",
                          "compute_slowdown_s", "quantize_s"})
      out[k] = t.value(k, 0.0);
    for (const auto& [k, v] : t["comm_exposed_s"].items()) out["comm." + k] = v.get<double>();
  };
  collect(a, ta);
  collect(b, tb);
  std::string best;
  double grew = -1e300;
  for (const auto& [k, v] : tb) {
    const double d = v - ta[k];
    if (d > grew) grew = d, best = k;
  }
  return fmt::format("{} (+{:.4g} s)", best, grew);
}

}  // namespace

void apply_search_setting(SearchOptions& o, const std::string& setting) {
  const size_t eq = setting.find('=');
  ODY_CHECK(eq != std::string::npos && setting.rfind("search.", 0) == 0,
            "--search-set {}: expected search.key=value", setting);
  const std::string key = setting.substr(7, eq - 7), value = setting.substr(eq + 1);
  auto integer = [&] {
    try {
      return std::stoi(value);
    } catch (...) {
      ODY_CHECK(false, "search.{}: '{}' is not an integer", key, value);
    }
    return 0;
  };
  if (key == "top")
    o.top = integer();
  else if (key == "world")
    o.world = integer();
  else if (key == "max_tp")
    o.max_tp = integer();
  else if (key == "max_pp")
    o.max_pp = integer();
  else if (key == "max_sp")
    o.max_sp = integer();
  else if (key == "max_micro_batches")
    o.max_micro_batches = integer();
  else if (key == "allow_tp_across_nodes")
    o.allow_tp_across_nodes = value == "true";
  else if (key == "comm_options")
    o.comm_options = value == "true";
  else if (key == "zero_stages") {
    o.zero_stages.clear();
    for (const std::string& s : split_list(value)) o.zero_stages.push_back(std::stoi(s));
  } else if (key == "checkpoints") {
    o.checkpoints = split_list(value);
    for (const std::string& s : o.checkpoints)
      (void)parse_enum(kCheckpointPolicyNames, s, "search.checkpoints");
  } else
    ODY_CHECK(false,
              "unknown search key search.{} (top, world, max_tp, max_pp, max_sp, max_micro_batches, "
              "allow_tp_across_nodes, comm_options, zero_stages, checkpoints)",
              key);
}

nlohmann::json search_layouts(const RunConfig& base, const Cluster& cluster, const SearchOptions& o) {
  Timer timer;
  const int W = o.world > 0 ? o.world : cluster.nodes * cluster.devices_per_node;
  const uint64_t limit = memory_limit(cluster);
  std::vector<Candidate> fits;
  std::map<std::string, int> rejected;
  std::map<std::string, std::string> example;
  int evaluated = 0, valid = 0;
  // Memory first (planner.md §8): a lower bound of the model state per rank, the cheapest refusal.
  const double params = double(ParamTable(base.model).total());
  auto state_lower_bound = [&](int zero, int tp, int pp, int replicas) {
    const double d = replicas;  // bytes per parameter, the smaller of the fp32 and bf16 policies
    const double per_param = zero == 0 ? 16 : zero == 1 ? 6 + 12 / d : zero == 2 ? 2 + 12 / d : 16 / d;
    return params / (double(tp) * pp) * per_param;
  };
  auto reject = [&](const std::string& why, const std::string& layout) {
    const std::string cls = reason_class(why);
    if (rejected[cls]++ == 0) example[cls] = layout + ": " + why;
  };
  for (int tp : divisors(W)) {
    if (o.max_tp && tp > o.max_tp) continue;
    for (int pp : divisors(W / tp)) {
      if (o.max_pp && pp > o.max_pp) continue;
      for (int U : divisors(W / tp / pp))
        for (int R : divisors(W / tp / pp / U)) {
          if (o.max_sp && U * R > o.max_sp) continue;
          const int dp = W / (tp * pp * U * R);
          const std::string dims = fmt::format("dp {} tp {} pp {} ulysses {} ring {}", dp, tp, pp, U, R);
          if (tp > cluster.devices_per_node && !o.allow_tp_across_nodes) {
            ++evaluated;
            reject(fmt::format("the tensor-parallel group of {} spans nodes of {} devices "
                               "(search.allow_tp_across_nodes = false)",
                               tp, cluster.devices_per_node),
                   dims);
            continue;
          }
          if (base.train.global_batch % dp != 0) {
            ++evaluated;
            reject(fmt::format("train.global_batch ({}) does not divide over dp = {}",
                               base.train.global_batch, dp),
                   dims);
            continue;
          }
          std::vector<int> mbs;
          for (int b : divisors(base.train.global_batch / dp))
            if (int(mbs.size()) < o.max_micro_batches) mbs.push_back(b);
          for (int zero : o.zero_stages)
            for (int mb : mbs)
              for (const std::string& ck : o.checkpoints)
                for (const Bundle& bundle : kBundles) {
                  if (!o.comm_options && std::string(bundle.name) != "none") continue;
                  // Each bundle belongs to its ZeRO stages (its own refusals are the engine's).
                  if (std::string(bundle.name) == "sdp4bit" && (zero < 1 || zero > 2)) continue;
                  if (std::string(bundle.name) == "zeropp" && zero != 3) continue;
                  ++evaluated;
                  const double bound = state_lower_bound(zero, tp, pp, dp * U * R);
                  if (limit > 0 && bound > double(limit)) {
                    reject(fmt::format("does not fit: the model state alone is at least {:.1f} GiB per rank "
                                       "> {:.1f} GiB",
                                       bound / double(1 << 30), limit / double(1 << 30)),
                           fmt::format("{} zero {}", dims, zero));
                    continue;
                  }
                  Candidate cand;
                  RunConfig& c = cand.config;
                  c = base;
                  c.parallel.dp = dp, c.parallel.tp = tp, c.parallel.pp = pp;
                  c.parallel.sp_ulysses = U, c.parallel.sp_ring = R, c.parallel.zero_stage = zero;
                  c.parallel.ranks_per_node = 0;
                  c.parallel.pp_layers.clear();
                  c.train.micro_batch = mb;
                  c.memory.checkpoint = parse_enum(kCheckpointPolicyNames, ck, "search.checkpoints");
                  c.comm.weights = bundle.weights, c.comm.grads = bundle.grads, c.comm.hpz = bundle.hpz;
                  c.comm.grad_pipeline = bundle.grad_pipeline;
                  cand.bundle = bundle.name;
                  const std::string name =
                      fmt::format("{} zero {} mb {} {} {}", dims, zero, mb, ck, bundle.name);
                  try {
                    const PlanLayout layout(c, W, cluster.devices_per_node);
                    // The stage that holds most: the first (embeddings, most in flight) and the last (head).
                    uint64_t peak = 0;
                    for (int s : {0, pp - 1}) {
                      const int rank = ProcessGrid::rank_of(layout.dims(), GridCoords{0, 0, 0, 0, s});
                      peak = std::max<uint64_t>(peak, plan_memory(layout, rank).total());
                    }
                    ++valid;
                    if (limit > 0 && peak > limit) {
                      reject(fmt::format("does not fit: {:.1f} GiB per rank > {:.1f} GiB",
                                         peak / double(1 << 30), limit / double(1 << 30)),
                             name);
                      continue;
                    }
                    cand.memory = peak;
                    const StepTime time = slowest_step(layout, cluster);
                    cand.step_s = time.step_s;
                    cand.tokens_per_s = time.tokens_per_s;
                    fits.push_back(std::move(cand));
                  } catch (const Error& e) {
                    reject(e.what(), name);
                  }
                }
        }
    }
  }
  // Fastest first; ties by Hagemann et al.'s order: micro-batch 1, less recompute, smaller TP, more DP.
  std::stable_sort(fits.begin(), fits.end(), [](const Candidate& a, const Candidate& b) {
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    if (a.config.train.micro_batch != b.config.train.micro_batch)
      return a.config.train.micro_batch < b.config.train.micro_batch;
    if (a.config.memory.checkpoint != b.config.memory.checkpoint)
      return checkpoint_rank(a.config.memory.checkpoint) < checkpoint_rank(b.config.memory.checkpoint);
    if (a.config.parallel.tp != b.config.parallel.tp) return a.config.parallel.tp < b.config.parallel.tp;
    return a.config.parallel.dp > b.config.parallel.dp;
  });
  // The full plans of the reported layouts: the top K, the Pareto set, the winner's neighbours.
  auto full_plan = [&](Candidate& cand) -> const nlohmann::json& {
    if (cand.plan.is_null()) {
      cand.plan = plan_layout(PlanLayout(cand.config, W, cluster.devices_per_node), cluster, false);
      cand.plan["memory_per_rank"] = cand.memory;
    }
    return cand.plan;
  };
  nlohmann::json out = {{"world", W},
                        {"cluster", cluster.name},
                        {"evaluated", evaluated},
                        {"valid", valid},
                        {"fits", fits.size()}};
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < fits.size() && int(i) < o.top; ++i) {
    nlohmann::json p = full_plan(fits[i]);
    p["comm_bundle"] = fits[i].bundle;
    top.push_back(p);
  }
  out["top"] = top;
  // The Pareto set over (step time, peak memory): no other layout is both faster and smaller.
  nlohmann::json pareto = nlohmann::json::array();
  std::vector<Candidate*> by_memory;
  for (Candidate& c : fits) by_memory.push_back(&c);
  std::sort(by_memory.begin(), by_memory.end(), [](auto* a, auto* b) {
    return a->memory != b->memory ? a->memory < b->memory : a->step_s < b->step_s;
  });
  double best = 1e300;
  for (Candidate* c : by_memory)
    if (c->step_s < best) {
      best = c->step_s;
      pareto.push_back(
          {{"layout", full_plan(*c)["layout"]}, {"step_s", c->step_s}, {"memory_per_rank", c->memory}});
    }
  out["pareto"] = pareto;
  nlohmann::json why = nlohmann::json::array();
  for (size_t i = 1; i < fits.size() && i < 6; ++i)
    why.push_back({{"layout", full_plan(fits[i])["layout"]},
                   {"step_s", fits[i].step_s},
                   {"slower_by_s", fits[i].step_s - fits[0].step_s},
                   {"grew_most", fits[i].step_s == fits[0].step_s
                                     ? std::string("a tie, ordered by micro-batch 1 first, less recompute, "
                                                   "smaller tp, more dp (Hagemann et al.)")
                                     : grown_term(full_plan(fits[0])["time"], full_plan(fits[i])["time"])}});
  out["winner_vs_neighbours"] = why;
  nlohmann::json rej = nlohmann::json::array();
  for (const auto& [cls, n] : rejected)
    rej.push_back({{"reason", cls}, {"count", n}, {"example", example[cls]}});
  std::sort(rej.begin(), rej.end(), [](const auto& a, const auto& b) { return a["count"] > b["count"]; });
  out["rejected"] = rej;
  out["seconds"] = timer.seconds();
  return out;
}

std::string search_table(const nlohmann::json& r) {
  std::string s =
      fmt::format("search: {} layouts of {} ranks on {} in {:.2f} s: {} valid, {} fit\n",
                  r["evaluated"].get<int>(), r["world"].get<int>(), r["cluster"].get<std::string>(),
                  r["seconds"].get<double>(), r["valid"].get<int>(), r["fits"].get<size_t>());
  s += fmt::format(
      "{:>3}  {:>5} {:>3} {:>3} {:>4} {:>4} {:>4} {:>3} {:>14} {:>8} {:>10} {:>12} {:>6} {:>9}\n", "#", "dp",
      "tp", "pp", "uly", "ring", "zero", "mb", "checkpoint", "comm", "step_s", "tokens/s", "mfu", "mem GiB");
  int i = 0;
  for (const auto& p : r["top"]) {
    const auto& l = p["layout"];
    s += fmt::format(
        "{:>3}  {:>5} {:>3} {:>3} {:>4} {:>4} {:>4} {:>3} {:>14} {:>8} {:>10.4g} {:>12.4g} {:>6.3f} "
        "{:>9.2f}\n",
        ++i, l["dp"].get<int>(), l["tp"].get<int>(), l["pp"].get<int>(), l["sp_ulysses"].get<int>(),
        l["sp_ring"].get<int>(), l["zero_stage"].get<int>(), l["micro_batch"].get<int>(),
        l["checkpoint"].get<std::string>(), p["comm_bundle"].get<std::string>(),
        p["time"]["step_s"].get<double>(), p["time"]["tokens_per_s"].get<double>(),
        p["time"]["mfu"].get<double>(), p["memory_per_rank"].get<double>() / double(1 << 30));
  }
  if (!r["winner_vs_neighbours"].empty()) {
    s += "why the winner wins (each neighbour: the term that grew most):\n";
    for (const auto& w : r["winner_vs_neighbours"])
      s +=
          fmt::format("  +{:.4g} s: {}\n", w["slower_by_s"].get<double>(), w["grew_most"].get<std::string>());
  }
  s += "rejected:\n";
  for (const auto& x : r["rejected"])
    s += fmt::format("  {:>7} x {}\n           e.g. {}\n", x["count"].get<int>(),
                     x["reason"].get<std::string>(), x["example"].get<std::string>());
  return s;
}

}  // namespace odyssey
