// weft-bench-guard: the source guard's per-packet cost as a paired A/B
// (issue 22 §1; docs/performance.md, "The source guard per port"). Usually
// started by bench/guard_ab.sh.
//
//   weft-bench-guard --out DIR [--prefix wbNNN] [--build-dir DIR]
//                    [--topologies weft-routed,weft-bridge,weft-vxlan,weft-host-gw]
//                    [--pairs N] [--window-ms MS] [--settle-ms MS] [--cpus C,S] [--fifo] [--no-stream]
//                    [--on FILE] [--off FILE] [--on-label L] [--off-label L]
//                    [--rp-filter on|off|both] [--baseline FILE] [--baseline-label L]
//                    [--interleave-ms MS [--concurrent-stream]]
//
// --on/--off: an nft -f script applied in each node's netns instead of the
// guard as ADD installed it / no guard (bench/guard_variants/ has the ones
// docs/performance.md measured). --rp-filter: strict rp_filter=1 on every pod
// port in the "on" state, the "off" state, or both. --interleave-ms: TCP_RR
// on two identical nodes at once, alternated every MS (datapath.h
// GuardAbOptions); --concurrent-stream adds the bulk stream of both nodes
// at once in every window, the two senders sharing the client's CPU
// (SCHED_OTHER).
//
// Prints one line per topology and metric: the median of the per-pair ratios
// on/off, its bootstrap 95 % interval and the cost next to the 2 % target;
// writes DIR/guard_ab.json. Exit status 0 when it measured (whatever the
// target says), 1 when it could not, 130 on Ctrl-C.

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/datapath.h"
#include "bench/ns.h"
#include "sys/files.h"

namespace weft::bench {
namespace {

using nlohmann::json;

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

int Main(int argc, char** argv) {
  GuardAbOptions opt;
  std::string out, build_dir = WEFT_BUILD_DIR, on_file, off_file, baseline_file, baseline_label = "bare node";
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--out") out = val();
    else if (k == "--prefix") opt.prefix = val();
    else if (k == "--build-dir") build_dir = val();
    else if (k == "--topologies") opt.topologies = Split(val());
    else if (k == "--pairs") opt.pairs = std::atoi(val().c_str());
    else if (k == "--window-ms") opt.window_ms = std::atoi(val().c_str());
    else if (k == "--settle-ms") opt.settle_ms = std::atoi(val().c_str());
    else if (k == "--cpus") {
      for (const auto& c : Split(val())) opt.cpus.push_back(std::atoi(c.c_str()));
    } else if (k == "--fifo") opt.fifo = true;
    else if (k == "--no-stream") opt.stream = false;
    else if (k == "--on") on_file = val();
    else if (k == "--off") off_file = val();
    else if (k == "--on-label") opt.on_label = val();
    else if (k == "--baseline") baseline_file = val();
    else if (k == "--interleave-ms") opt.interleave_ms = std::atoi(val().c_str());
    else if (k == "--concurrent-stream") opt.concurrent_stream = true;
    else if (k == "--baseline-label") baseline_label = val();
    else if (k == "--off-label") opt.off_label = val();
    else if (k == "--rp-filter") {
      std::string v = val();
      opt.rp_filter_on = v == "on" || v == "both";
      opt.rp_filter_off = v == "off" || v == "both";
      ok = ok && (opt.rp_filter_on || opt.rp_filter_off);
    } else ok = false;
  }
  if (opt.prefix.empty()) opt.prefix = "wb" + std::to_string(::getpid());
  if (!ok || out.empty() || opt.prefix.rfind("wb", 0) != 0 || opt.pairs < 2 || opt.window_ms < 50 || opt.interleave_ms < 0 || opt.settle_ms < 0 ||
      opt.cpus.size() > 2) {
    std::fprintf(stderr,
                 "usage: weft-bench-guard --out DIR [--prefix wbNNN] [--build-dir DIR] [--topologies K,...]\n"
                 "         [--pairs N>=2] [--window-ms MS>=50] [--settle-ms MS] [--cpus C,S] [--fifo] [--no-stream]\n"
                 "         [--on FILE] [--off FILE] [--on-label L] [--off-label L] [--rp-filter on|off|both]\n"
                 "         [--baseline FILE] [--baseline-label L] [--interleave-ms MS [--concurrent-stream]]\n");
    return 2;
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "weft-bench-guard: needs root (it creates network namespaces)\n");
    return 2;
  }
  for (auto [file, dest] : {std::pair{&on_file, &opt.on_script}, std::pair{&off_file, &opt.off_script},
                            std::pair{&baseline_file, &opt.baseline_script}}) {
    if (file->empty()) continue;
    auto text = sys::ReadFile(*file, 1 << 20);
    if (!text.ok()) {
      std::fprintf(stderr, "weft-bench-guard: %s\n", text.status().ToString().c_str());
      return 2;
    }
    *dest = *text;
  }
  opt.weftd_bin = build_dir + "/cmd/weftd/weftd";
  if (Status st = StartBenchDriver(out, build_dir, {"/cmd/weft/weft"}); !st.ok()) {
    std::fprintf(stderr, "weft-bench-guard: %s\n", st.msg().c_str());
    return 1;
  }
  Runner runner({build_dir + "/cmd/weft", "/usr/lib/cni"});
  json r;
  try {
    r = RunGuardAb(opt, runner, SuiteConfigs("/tmp"));
  } catch (const Interrupted&) {
    std::cerr << "[guard-ab] interrupted: removing " << opt.prefix << "-* namespaces and dirs\n";
    CleanupPrefix(opt.prefix);
    return 130;
  }
  CleanupPrefix(opt.prefix);
  std::ofstream(out + "/guard_ab.json") << r.dump(2) << "\n";
  int rc = 0;
  std::printf("source guard A/B: %d pairs of %d ms windows%s; %s / %s; node: %s; target: costs <= 2 %% (ratio >= 0.98)\n",
              opt.pairs, opt.window_ms,
              opt.interleave_ms > 0 ? (" (interleaved every " + std::to_string(opt.interleave_ms) +
                                       " ms on two nodes, roles swapped each window)").c_str()
                                    : "",
              opt.on_label.c_str(), opt.off_label.c_str(), baseline_label.c_str());
  r["baseline_label"] = baseline_label;
  std::ofstream(out + "/guard_ab.json") << r.dump(2) << "\n";
  std::printf("%-14s %-11s %12s %12s %8s %17s %8s  %s\n", "topology", "metric", "on", "off", "on/off", "95% CI",
              "cost", "verdict (load)");
  for (const auto& row : r["rows"]) {
    if (row.contains("error") && !row.contains("metric")) {
      std::printf("%-14s error: %s\n", row.value("topology", "").c_str(), row.value("error", "").c_str());
      rc = 1;
      continue;
    }
    const bool rr = row["metric"] == "TCP_RR";
    std::printf("%-14s %-11s %12.*f %12.*f %8.3f %8.3f..%-8.3f %7.1f%%  %s (%s -> %s)\n",
                row.value("topology", "").c_str(), row.value("metric", "").c_str(), rr ? 0 : 2,
                row.value("on", 0.0), rr ? 0 : 2, row.value("off", 0.0), row.value("ratio", 0.0),
                row.value("ci_low", 0.0), row.value("ci_high", 0.0), row.value("cost_pct", 0.0),
                row.value("verdict", "").c_str(), row.value("loadavg_start", "").c_str(),
                row.value("loadavg_end", "").c_str());
    if (rr && row.contains("node_tables")) {
      std::string t;
      for (const auto& x : row["node_tables"]) t += (t.empty() ? "" : "; ") + x.get<std::string>();
      std::printf("%-14s   tables besides the guard, both states: %s\n", "", t.c_str());
    }
    if (row.contains("error")) {
      std::printf("%-14s   stopped early: %s\n", "", row.value("error", "").c_str());
      rc = 1;
    }
  }
  std::printf("(TCP_RR in transactions/s, stream in Gbit/s; medians over the pairs)\n");
  return rc;
}

}  // namespace
}  // namespace weft::bench

int main(int argc, char** argv) { return weft::bench::RunDriverMain("weft-bench-guard", argc, argv, weft::bench::Main); }
