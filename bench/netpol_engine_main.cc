// weft-bench-netpol-engine: the NetworkPolicy engine alone on the
// benchmark's cluster (bench/netpol_cluster.h), without weftd, the API
// server or the kernel: where the CPU and the memory of a full resync go
// inside weftd, phase by phase, at any scale. No root; a profiling aid
// (`perf record -g build/bench/weft-bench-netpol-engine ...`), not a
// measurement of the target (weft-bench-netpol is).
//
//   weft-bench-netpol-engine [--namespaces N] [--pods N] [--nodes N] [--local-pods N] [--dump FILE]
//                            [--iterations N] [--apply 1]
//
// --iterations N then runs weft-bench-netpol's seven events N times against
// the engine (update, Tightened, Delta, MarkApplied per event) and
// prints their p50/p99 by kind: weftd's own part of the CPU per event.
//
// --apply 1 (root) also sends the full transaction to a private network
// namespace, as weftd's first apply does (the phase apply_full).
//
// --dump writes the full transaction (what weftd's first apply sends) to
// FILE as nft commands.
//
// Prints one JSON object: the objects' count, the CPU ms of each phase (decode
// the JSON into the informers' types, feed the engine as the controller's
// first Drain does, build the full transaction), its number of ops, and the
// process's RSS and heap after each.

#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <unordered_map>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "bench/netpol_cluster.h"
#include "policy/netpol_model.h"
#include "sys/netns.h"
#include "sys/nft_kernel.h"
#include "sys/nft_render.h"

namespace {

// CPU time of the calling thread: the machine this runs on is shared, and
// wall time would count the waits for a CPU.
struct Clock {
  using time_point = double;  // ms
  static double now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
  }
};
using nlohmann::json;
namespace np = weft::policy::netpol;

double MsSince(Clock::time_point t) { return Clock::now() - t; }

double RssMb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0;
}

double HeapMb() { return static_cast<double>(mallinfo2().uordblks) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  weft::bench::netpol::Scale scale;
  int pods = 0, nodes = 0;
  std::string dump;
  int iterations = 0;
  bool apply = false;
  // The memory regression check (ctest bench_engine_memory): budgets for the
  // heap after the events and the table's element count; 0 = no check.
  double max_heap_mb = 0;
  long max_elements = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--namespaces") scale.namespaces = v;
    else if (k == "--pods") pods = v;
    else if (k == "--nodes") nodes = v;
    else if (k == "--local-pods") scale.local_pods = v;
    else if (k == "--dump") dump = argv[i + 1];
    else if (k == "--iterations") iterations = v;
    else if (k == "--max-heap-mb") max_heap_mb = std::atof(argv[i + 1]);
    else if (k == "--max-elements") max_elements = std::atol(argv[i + 1]);
    else if (k == "--apply") apply = std::string(argv[i + 1]) == "1";
    else {
      std::cerr << "usage: weft-bench-netpol-engine [--namespaces N] [--pods N] [--nodes N] [--local-pods N] [--dump FILE] "
                   "[--iterations N] [--max-heap-mb MB] [--max-elements N] [--apply 1]\n";
      return 2;
    }
  }
  if (pods > 0) scale.pods_per_ns = pods / scale.namespaces;
  if (nodes > 0) scale.fake_nodes = nodes - 1;
  json out;
  auto phase = [&](const char* name, Clock::time_point t0) {
    out[name] = {{"ms", MsSince(t0)}, {"rss_mb", RssMb()}, {"heap_mb", HeapMb()}};
  };

  auto t = Clock::now();
  auto c = weft::bench::netpol::MakeCluster(scale);
  std::vector<json> pod_objects;
  pod_objects.reserve(c.pods.size());
  for (const auto& p : c.pods) pod_objects.push_back(c.PodObject(p));
  out["objects"] = {{"pods", c.pods.size()}, {"policies", c.policies.size()}, {"namespaces", c.namespaces.size()},
                    {"nodes", c.nodes.size()}};
  phase("generate", t);

  t = Clock::now();
  std::vector<np::Namespace> nss;
  std::vector<np::PodPtr> shared;  // as the informer's cache holds them, shared with the engine
  std::vector<np::Policy> pols;
  for (const auto& o : c.namespaces) nss.push_back(*np::DecodeNamespace(o));
  for (const auto& o : pod_objects) shared.push_back(np::DecodeSharedPod(o)->pod);
  for (const auto& o : c.policies) pols.push_back(*np::DecodePolicy(o));
  pod_objects.clear();
  pod_objects.shrink_to_fit();
  c = {};
  malloc_trim(0);
  phase("decode", t);

  np::Engine engine(np::EngineOptions{weft::bench::netpol::kNode});
  t = Clock::now();
  engine.BeginBatch();
  for (const auto& n : nss) engine.UpsertNamespace(n);
  for (const auto& p : shared) engine.UpsertPod(p);
  for (const auto& p : pols) engine.UpsertPolicy(p);
  engine.EndBatch();
  phase("engine", t);

  t = Clock::now();
  auto full = engine.Full();
  phase("build_full", t);
  if (!full.ok()) {
    std::cerr << full.status().ToString() << "\n";
    return 1;
  }
  out["ops"] = full->ops().size();
  if (apply) {
    // What weftd's first apply costs beyond building the transaction: the
    // encoding and the kernel's answer, in a private netns (root).
    auto ns = weft::sys::Netns::NewPrivate();
    if (!ns.ok()) {
      std::cerr << ns.status().ToString() << "\n";
      return 1;
    }
    t = Clock::now();
    // Sent from this thread (its CPU and heap counted) in the private netns.
    weft::Status st = weft::sys::RunInNetnsOnThisThread(*ns, [&] { return weft::sys::nft::Kernel().Apply(*full); });
    phase("apply_full", t);
    if (!st.ok()) {
      std::cerr << st.ToString() << "\n";
      return 1;
    }
  }
  if (!dump.empty()) std::ofstream(dump) << weft::sys::nft::RenderTransaction(*full);
  size_t elements = 0;
  for (const auto& [name, s] : engine.desired().sets) elements += s.elements.size();
  out["model"] = {{"sets", engine.desired().sets.size()}, {"chains", engine.desired().chains.size()},
                  {"elements", elements}};
  *full = weft::sys::nft::Transaction(full->family(), full->table());
  malloc_trim(0);
  phase("after_full", Clock::now());

  t = Clock::now();
  engine.MarkApplied(true);
  phase("mark_applied", t);

  // The events of weft-bench-netpol, against the engine alone: each is the
  // controller's work between a drained batch and the apply (update, the
  // addresses to recheck, the delta script, marking it applied).
  std::map<std::string, std::vector<double>> by_kind;
  std::vector<double> all;
  auto event = [&](const std::string& kind, const std::function<void()>& fn) {
    auto t0 = Clock::now();
    engine.BeginBatch();
    fn();
    engine.EndBatch();
    auto tight = engine.Tightened();
    auto delta = engine.Delta();
    engine.MarkApplied(false);
    double ms = MsSince(t0);
    by_kind[kind].push_back(ms);
    all.push_back(ms);
    (void)tight;
    (void)delta;
  };
  std::vector<np::Pod> ps;  // the events' copies to relabel
  if (iterations > 0)
    for (const auto& p : shared) ps.push_back(*p);
  std::unordered_map<std::string, size_t> pod_index;
  for (size_t i = 0; i < ps.size(); ++i) pod_index[ps[i].key()] = i;
  std::vector<size_t> local, remote;
  for (size_t i = 0; i < ps.size(); ++i) (ps[i].node == weft::bench::netpol::kNode ? local : remote).push_back(i);
  auto relabel = [&](size_t i) {
    static const char* kTiers[] = {"frontend", "backend", "db"};
    auto& l = ps[i].labels["tier"];
    l = l == kTiers[0] ? kTiers[1] : l == kTiers[1] ? kTiers[2] : kTiers[0];
    engine.UpsertPod(ps[i]);
  };
  std::vector<int> movable;
  for (int n = 3; n < scale.namespaces; ++n)
    if (n % 3 != 0) movable.push_back(n);
  for (int i = 0; i < iterations && !local.empty(); ++i) {
    const np::Pod& lp = ps[local[static_cast<size_t>(i) % local.size()]];
    const size_t rp = remote[(static_cast<size_t>(i) * 37) % remote.size()];
    const std::string ns = lp.ns, name = "bench-lat-" + std::to_string(i);
    auto policy = [&](int port, const std::string& app) {
      return *np::DecodePolicy(json{
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec",
           {{"podSelector", json::object()},
            {"policyTypes", {"Ingress"}},
            {"ingress",
             {{{"from",
                {{{"podSelector", {{"matchLabels", {{"app", app}}}}}},
                 {{"namespaceSelector", {{"matchLabels", {{"team", "t" + std::to_string(i % 10)}}}}},
                  {"podSelector", {{"matchLabels", {{"tier", "frontend"}}}}}}}},
               {"ports", {{{"protocol", "TCP"}, {"port", port}}}}}}}}}});
    };
    const int moved = movable[static_cast<size_t>(i * 7 + 1) % movable.size()];
    const std::string nsname = weft::bench::netpol::NamespaceName(moved);
    np::Namespace orig = nss[static_cast<size_t>(moved)];
    event("policy_create", [&] { engine.UpsertPolicy(policy(7100 + i, "app-" + std::to_string(i % 10))); });
    event("pod_relabel", [&] { relabel(rp); });
    event("namespace_relabel", [&] {
      np::Namespace m = orig;
      m.labels["team"] = "moved";
      m.labels["env"] = "prod";
      engine.UpsertNamespace(m);
    });
    event("policy_update", [&] { engine.UpsertPolicy(policy(17100 + i, "app-" + std::to_string((i + 3) % 10))); });
    event("pod_relabel", [&] { relabel(pod_index[lp.key()]); });
    event("namespace_relabel", [&] { engine.UpsertNamespace(orig); });
    event("policy_delete", [&] { engine.RemovePolicy(ns + "/" + name); });
  }
  auto pct = [](std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  for (const auto& [k, v] : by_kind)
    out["events"][k] = {{"n", v.size()}, {"p50_ms", pct(v, 0.5)}, {"p99_ms", pct(v, 0.99)}, {"max_ms", pct(v, 1.0)}};
  if (!all.empty()) out["events"]["all"] = {{"n", all.size()}, {"p50_ms", pct(all, 0.5)}, {"p99_ms", pct(all, 0.99)}};
  out["after_events"] = {{"rss_mb", RssMb()}, {"heap_mb", HeapMb()}};
  std::cout << out.dump(2) << "\n";
  // Memory, not time: the heap and the element count of one generated
  // cluster are the same on every machine and every run, so a budget a few
  // MB above today's catches a regression without a timed assertion.
  int rc = 0;
  auto check = [&](const char* what, double value, double budget, const char* unit) {
    if (budget <= 0) return;
    const bool over = value > budget;
    std::cerr << "memory check: " << what << " " << value << unit << " (budget " << budget << unit << "): "
              << (over ? "REGRESSED" : "ok") << "\n";
    if (over) rc = 1;
  };
  check("engine heap after the events", out["after_events"]["heap_mb"].get<double>(), max_heap_mb, " MB");
  check("table elements", out["model"]["elements"].get<double>(), static_cast<double>(max_elements), "");
  return rc;
}
