#include "odyssey/plan/cluster.h"

#include <fmt/format.h>

#include <toml++/toml.h>
#include <fstream>
#include <set>
#include <sstream>

#include "odyssey/core/error.h"

namespace odyssey {

namespace {

const std::set<std::string> kOverlapClasses = {"dp_grads", "zero3_gather", "weight_gather", "ring_kv",
                                               "tp",       "ulysses",      "pp_p2p"};

struct Reader {
  const std::string& source;

  void only(const toml::table& t, const std::string& where, const std::set<std::string>& keys) const {
    for (const auto& [k, v] : t)
      ODY_CHECK(keys.count(std::string(k.str())), "{}: unknown key {}{}", source, where, k.str());
  }
  double number(const toml::node& n, const std::string& key) const {
    if (auto i = n.value<int64_t>(); i && n.is_integer()) return double(*i);
    auto d = n.value<double>();
    ODY_CHECK(d.has_value(), "{}: {} must be a number", source, key);
    return *d;
  }
  double positive(const toml::table& t, const std::string& prefix, const char* key, double fallback,
                  bool required = false, bool allow_zero = false) const {
    const toml::node* n = t.get(key);
    ODY_CHECK(n || !required, "{}: {}{} is required", source, prefix, key);
    if (!n) return fallback;
    const double v = number(*n, prefix + key);
    ODY_CHECK(allow_zero ? v >= 0 : v > 0, "{}: {}{} must be {}, got {}", source, prefix, key,
              allow_zero ? "non-negative" : "positive", v);
    return v;
  }
  std::string text(const toml::table& t, const std::string& prefix, const char* key,
                   const std::string& fallback) const {
    const toml::node* n = t.get(key);
    if (!n) return fallback;
    auto s = n->value<std::string>();
    ODY_CHECK(s.has_value(), "{}: {}{} must be a string", source, prefix, key);
    return *s;
  }
};

}  // namespace

double Cluster::overlap_of(const std::string& comm_class) const {
  auto it = overlap.find(comm_class);
  return it == overlap.end() ? 0.0 : it->second;
}

Cluster parse_cluster(const std::string& toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    ODY_CHECK(false, "{}: TOML error: {}", source, e.description());
  }
  Reader r{source};
  r.only(
      root, "",
      {"name", "nodes", "devices_per_node", "notes", "device", "level", "overlap", "sources", "calibration"});
  Cluster c;
  c.name = r.text(root, "", "name", source);
  c.notes = r.text(root, "", "notes", "");
  c.nodes = int(r.positive(root, "", "nodes", 1, true));
  c.devices_per_node = int(r.positive(root, "", "devices_per_node", 1, true));

  const toml::table* dev = root["device"].as_table();
  ODY_CHECK(dev, "{}: [device] is required", source);
  r.only(*dev, "device.",
         {"kind", "memory_gib", "memory_bandwidth_gbs", "memory_reserve", "cores_per_node", "matmul_peak",
          "matmul_efficiency", "gemm", "kernels", "attention_efficiency", "elementwise_efficiency"});
  c.device_kind = r.text(*dev, "device.", "kind", "gpu");
  ODY_CHECK(c.device_kind == "gpu" || c.device_kind == "cpu", "{}: device.kind must be gpu or cpu, got {}",
            source, c.device_kind);
  c.memory_gib = r.positive(*dev, "device.", "memory_gib", 0, true);
  c.memory_bandwidth_gbs = r.positive(*dev, "device.", "memory_bandwidth_gbs", 0, true);
  c.memory_reserve = r.positive(*dev, "device.", "memory_reserve", 0.1, false, true);
  ODY_CHECK(c.memory_reserve < 1, "{}: device.memory_reserve must be below 1, got {}", source,
            c.memory_reserve);
  c.cores_per_node = int(r.positive(*dev, "device.", "cores_per_node", 0, false, true));
  c.attention_efficiency = r.positive(*dev, "device.", "attention_efficiency", 0.5);
  c.elementwise_efficiency = r.positive(*dev, "device.", "elementwise_efficiency", 0.5);
  if (const toml::table* peak = (*dev)["matmul_peak"].as_table())
    for (const auto& [k, v] : *peak) {
      const std::string key = "device.matmul_peak." + std::string(k.str());
      c.matmul_peak[std::string(k.str())] = r.number(v, key);
      ODY_CHECK(c.matmul_peak[std::string(k.str())] > 0, "{}: {} must be positive", source, key);
    }
  if (const toml::table* eff = (*dev)["matmul_efficiency"].as_table())
    for (const auto& [k, v] : *eff) {
      const std::string key = "device.matmul_efficiency." + std::string(k.str());
      const toml::array* steps = v.as_array();
      ODY_CHECK(steps && !steps->empty(), "{}: {} must be a list of [gflop, efficiency] pairs", source, key);
      auto& out = c.matmul_efficiency[std::string(k.str())];
      for (const toml::node& s : *steps) {
        const toml::array* pair = s.as_array();
        ODY_CHECK(pair && pair->size() == 2, "{}: {} must be a list of [gflop, efficiency] pairs", source,
                  key);
        const double g = r.number(*pair->get(0), key), e = r.number(*pair->get(1), key);
        ODY_CHECK(g >= 0 && e > 0 && e <= 1,
                  "{}: {}: [{}, {}] is not a [gflop >= 0, 0 < efficiency <= 1] pair", source, key, g, e);
        ODY_CHECK(out.empty() || g < out.back().first, "{}: {}: thresholds must be listed largest first",
                  source, key);
        out.push_back({g, e});
      }
    }
  if (const toml::array* gemms = (*dev)["gemm"].as_array())
    for (const toml::node& g : *gemms) {
      const toml::table* t = g.as_table();
      ODY_CHECK(t, "{}: [[device.gemm]] entries must be tables", source);
      r.only(*t, "device.gemm.", {"m", "n", "k", "dtype", "flops", "measured"});
      GemmRate rate;
      rate.m = int64_t(r.positive(*t, "device.gemm.", "m", 0, true));
      rate.n = int64_t(r.positive(*t, "device.gemm.", "n", 0, true));
      rate.k = int64_t(r.positive(*t, "device.gemm.", "k", 0, true));
      rate.dtype = r.text(*t, "device.gemm.", "dtype", "fp32");
      rate.flops = r.positive(*t, "device.gemm.", "flops", 0, true);
      c.gemm.push_back(rate);
    }
  if (const toml::table* k = (*dev)["kernels"].as_table())
    for (const auto& [name, v] : *k) {
      const std::string key = "device.kernels." + std::string(name.str());
      c.kernels[std::string(name.str())] = r.number(v, key);
      ODY_CHECK(c.kernels[std::string(name.str())] > 0, "{}: {} must be positive", source, key);
    }
  ODY_CHECK(!c.matmul_peak.empty() || !c.gemm.empty(),
            "{}: the device needs device.matmul_peak or measured [[device.gemm]] rates", source);

  const toml::array* levels = root["level"].as_array();
  ODY_CHECK(levels && !levels->empty(), "{}: at least one [[level]] is required", source);
  for (const toml::node& node : *levels) {
    const toml::table* t = node.as_table();
    ODY_CHECK(t, "{}: [[level]] entries must be tables", source);
    r.only(*t, "level.",
           {"name", "span", "topology", "link_bandwidth_gbs", "node_bandwidth_gbs", "latency_us",
            "efficiency", "call_overhead_us"});
    NetworkLevel l;
    l.name = r.text(*t, "level.", "name", "");
    ODY_CHECK(!l.name.empty(), "{}: level.name is required", source);
    const std::string p = "level." + l.name + ".";
    l.span = r.text(*t, p, "span", c.levels.empty() ? "node" : "cluster");
    ODY_CHECK(l.span == "node" || l.span == "cluster", "{}: {}span must be node or cluster, got {}", source,
              p, l.span);
    l.topology = r.text(*t, p, "topology", "switch");
    ODY_CHECK(l.topology == "switch" || l.topology == "ring" || l.topology == "full",
              "{}: {}topology must be switch, ring or full, got {}", source, p, l.topology);
    const char* bw = l.span == "node" ? "link_bandwidth_gbs" : "node_bandwidth_gbs";
    l.bandwidth_gbs = r.positive(*t, p, bw, 0, true);
    l.latency_us = r.positive(*t, p, "latency_us", 0, true, true);
    l.efficiency = r.positive(*t, p, "efficiency", 1.0);
    ODY_CHECK(l.efficiency <= 1, "{}: {}efficiency must be at most 1, got {}", source, p, l.efficiency);
    l.call_overhead_us = r.positive(*t, p, "call_overhead_us", 0, false, true);
    c.levels.push_back(l);
  }
  ODY_CHECK(c.levels.front().span == "node", "{}: the first [[level]] must have span = \"node\"", source);
  ODY_CHECK(c.nodes == 1 || (c.levels.size() > 1 && c.levels[1].span == "cluster"),
            "{}: nodes = {} needs a second [[level]] with span = \"cluster\" (the inter-node network)",
            source, c.nodes);
  ODY_CHECK(c.levels.size() <= 2, "{}: at most two [[level]]s (intra-node, inter-node)", source);

  if (const toml::table* o = root["overlap"].as_table())
    for (const auto& [k, v] : *o) {
      const std::string key(k.str());
      const double x = r.number(v, "overlap." + key);
      if (key == "compute_slowdown") {
        ODY_CHECK(x >= 0, "{}: overlap.compute_slowdown must be non-negative, got {}", source, x);
        c.compute_slowdown = x;
        continue;
      }
      ODY_CHECK(kOverlapClasses.count(key), "{}: unknown key overlap.{}", source, key);
      ODY_CHECK(x >= 0 && x <= 1, "{}: overlap.{} must be in [0, 1], got {}", source, key, x);
      c.overlap[key] = x;
    }
  if (const toml::table* s = root["sources"].as_table())
    for (const auto& [k, v] : *s)
      c.sources[std::string(k.str())] = r.text(*s, "sources.", std::string(k.str()).c_str(), "");
  if (const toml::table* s = root["calibration"].as_table())
    for (const auto& [k, v] : *s)
      c.sources["calibration." + std::string(k.str())] = v.value_or(std::string("?"));
  return c;
}

Cluster load_cluster(const std::string& path) {
  std::ifstream in(path);
  ODY_CHECK(in.good(), "cannot read the cluster file {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_cluster(ss.str(), path);
}

std::string cluster_to_toml(const Cluster& c) {
  std::string out;
  out +=
      fmt::format("name = \"{}\"\nnodes = {}\ndevices_per_node = {}\n", c.name, c.nodes, c.devices_per_node);
  if (!c.notes.empty()) out += fmt::format("notes = \"{}\"\n", c.notes);
  out += fmt::format(
      "\n[device]\nkind = \"{}\"\nmemory_gib = {}\nmemory_bandwidth_gbs = {}\nmemory_reserve = {}\n"
      "cores_per_node = {}\nattention_efficiency = {}\nelementwise_efficiency = {}\n",
      c.device_kind, c.memory_gib, c.memory_bandwidth_gbs, c.memory_reserve, c.cores_per_node,
      c.attention_efficiency, c.elementwise_efficiency);
  if (!c.matmul_peak.empty()) {
    out += "[device.matmul_peak]\n";
    for (const auto& [k, v] : c.matmul_peak) out += fmt::format("{} = {:.6g}\n", k, v);
  }
  if (!c.kernels.empty()) {
    out += "[device.kernels]\n";
    for (const auto& [k, v] : c.kernels) out += fmt::format("{} = {:.6g}\n", k, v);
  }
  for (const GemmRate& g : c.gemm)
    out += fmt::format(
        "[[device.gemm]]\nm = {}\nn = {}\nk = {}\ndtype = \"{}\"\nflops = {:.6g}\nmeasured = true\n", g.m,
        g.n, g.k, g.dtype, g.flops);
  for (const NetworkLevel& l : c.levels)
    out += fmt::format(
        "\n[[level]]\nname = \"{}\"\nspan = \"{}\"\ntopology = \"{}\"\n{} = {:.6g}\nlatency_us = {:.6g}\n"
        "efficiency = {}\ncall_overhead_us = {:.6g}\n",
        l.name, l.span, l.topology, l.span == "node" ? "link_bandwidth_gbs" : "node_bandwidth_gbs",
        l.bandwidth_gbs, l.latency_us, l.efficiency, l.call_overhead_us);
  out += "\n[overlap]\n";
  for (const auto& [k, v] : c.overlap) out += fmt::format("{} = {}\n", k, v);
  out += fmt::format("compute_slowdown = {}\n", c.compute_slowdown);
  out += "\n[sources]\n";
  for (const auto& [k, v] : c.sources)
    if (k.rfind("calibration.", 0) != 0) out += fmt::format("\"{}\" = \"{}\"\n", k, v);
  return out;
}

}  // namespace odyssey
