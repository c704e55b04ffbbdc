// weft-bench: the benchmark driver (issue 7). Usually started by
// bench/run.sh; see docs/performance.md.
//
//   weft-bench [--quick] --out DIR [--prefix wbNNN] [--build-dir DIR]
//              [--only floor,control,datapath,weftd,netpol] [--configs key,key]
//              [--rounds N] [--same-node] [--cpus client,server|none]
//
// Writes DIR/results.json (summary), DIR/raw.json (every sample), DIR/table.txt
// and gnuplot inputs, prints the JSON and the table. Exit status: 0 when the
// benchmark ran (whatever the targets say), 1 when it is broken (a required
// configuration or a baseline could not be measured), 130 on Ctrl-C.

#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "bench/control.h"
#include "bench/datapath.h"
#include "bench/ns.h"
#include "bench/report.h"
#include "sys/exec.h"
#include "sys/files.h"

namespace weft::bench {
namespace {

using nlohmann::json;

struct Args {
  bool quick = false;
  bool report = false;  // --report: render DIR's results.json again, measure nothing
  std::string out, prefix, build_dir = WEFT_BUILD_DIR, commit;
  std::set<std::string> only, configs;
  std::vector<int> levels;  // pods already on the node before sampling
  int samples = 0;          // ADD+DEL pairs timed at each level
  int rounds = 0;           // datapath rounds (0: 5, quick 1)
  bool same_node = false;   // datapath: the same-node rows only
  std::string cpus;         // datapath: "client,server" CPUs or "none"; "": 0,0
  // The NetworkPolicy section's scale and run flags, passed on to
  // weft-bench-netpol as they are (--pods, --policies, --namespaces,
  // --nodes, --local-pods, --iterations, --events-only).
  std::vector<std::string> netpol_args;
};

std::set<std::string> SplitSet(const std::string& s) {
  std::set<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) out.insert(part);
  return out;
}

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--quick") a->quick = true;
    else if (k == "--report") a->report = true;
    else if (k == "--out") a->out = val();
    else if (k == "--prefix") a->prefix = val();
    else if (k == "--build-dir") a->build_dir = val();
    else if (k == "--commit") a->commit = val();
    else if (k == "--only") a->only = SplitSet(val());
    else if (k == "--configs") a->configs = SplitSet(val());
    else if (k == "--levels") {
      for (const auto& l : SplitSet(val())) a->levels.push_back(std::atoi(l.c_str()));
      std::sort(a->levels.begin(), a->levels.end());
    } else if (k == "--samples") {
      a->samples = std::atoi(val().c_str());
    } else if (k == "--rounds") {
      a->rounds = std::atoi(val().c_str());
    } else if (k == "--same-node") {
      a->same_node = true;
    } else if (k == "--cpus") {
      a->cpus = val();
    } else if (k == "--pods" || k == "--policies" || k == "--namespaces" || k == "--nodes" || k == "--local-pods" ||
               k == "--iterations") {
      a->netpol_args.push_back(k);
      a->netpol_args.push_back(val());
    } else if (k == "--events-only") {
      a->netpol_args.push_back(k);
    } else {
      return false;
    }
  }
  if (a->prefix.empty()) a->prefix = "wb" + std::to_string(::getpid());
  return !a->out.empty() && a->prefix.rfind("wb", 0) == 0;
}

std::string FirstLine(const std::string& path, const std::string& key) {
  auto f = sys::ReadFile(path, 1 << 20);
  if (!f.ok()) return "";
  std::stringstream ss(*f);
  for (std::string line; std::getline(ss, line);) {
    if (key.empty()) return line;
    if (line.rfind(key, 0) == 0) {
      auto c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  }
  return "";
}

// Sections measured by a hook: an executable bench/<name> (today a script
// running a C++ tool built beside weft-bench) run as
// `<name> --out DIR --prefix P --build-dir B [--quick]` that prints one JSON
// object. weftd_hook (weft-bench-weftd, bench/weftd_main.cc) prints at least
// rss_mb_1000_peers, converge_s_1000_peers and peer_change_ms; netpol_hook
// (weft-bench-netpol, bench/netpol_main.cc) enforce_p99_ms, resync_s,
// rss_mb, add_ratio_p50, dp_gbps_ratio and dp_rr_ratio.
json RunHook(const Args& a, const std::string& name, const std::string& tag, const std::string& missing) {
  const std::string hook = std::string(WEFT_SOURCE_DIR) + "/bench/" + name;
  if (::access(hook.c_str(), X_OK) != 0) return {{"pending", true}, {"reason", missing}};
  sys::ExecRequest req;
  req.path = hook;
  req.argv = {hook, "--out", a.out, "--prefix", a.prefix + "-" + tag, "--build-dir", a.build_dir};
  if (a.quick) req.argv.push_back("--quick");
  if (name == "netpol_hook") req.argv.insert(req.argv.end(), a.netpol_args.begin(), a.netpol_args.end());
  req.env = sys::CurrentEnv();
  // The 100,000-pod row populates the stand-in server for minutes.
  req.timeout = std::chrono::minutes(a.netpol_args.empty() ? 20 : 60);
  auto r = sys::Exec(req);
  if (!r.ok() || r->exit_code != 0) {
    std::string err = r.ok() ? r->err : r.status().ToString();
    if (err.size() > 600) err = "..." + err.substr(err.size() - 600);
    return {{"pending", true}, {"broken", true}, {"reason", "bench/" + name + " failed: " + err}};
  }
  try {
    json j = json::parse(r->out);
    j["pending"] = false;
    return j;
  } catch (...) {
    return {{"pending", true}, {"broken", true}, {"reason", "bench/" + name + " printed no JSON"}};
  }
}

int Main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: weft-bench [--quick] --out DIR [--prefix wbNNN] [--build-dir DIR] [--commit SHA]\n"
                 "                  [--only floor,control,datapath,weftd,netpol] [--configs key,...]\n"
                 "                  [--rounds N] [--same-node] [--cpus C,S|none]   (datapath: rounds; the same-node\n"
                 "                   rows only; client and server CPUs, default 0,0)\n"
                 "                  [--pods N --policies N --namespaces N --nodes N --local-pods N --iterations N\n"
                 "                   --events-only]   (the NetworkPolicy section's scale, for weft-bench-netpol)\n"
                 "       weft-bench --report --out DIR   (table.txt and plots again from DIR/results.json)\n");
    return 2;
  }
  if (a.report) {
    auto results = sys::ReadFile(a.out + "/results.json", 1 << 28);
    if (!results.ok()) {
      std::fprintf(stderr, "weft-bench: %s\n", results.status().ToString().c_str());
      return 1;
    }
    auto raw_text = sys::ReadFile(a.out + "/raw.json", 1 << 28);
    json r = json::parse(*results, nullptr, false);
    json raw = raw_text.ok() ? json::parse(*raw_text, nullptr, false) : json::object();
    if (r.is_discarded()) {
      std::fprintf(stderr, "weft-bench: %s/results.json is not JSON\n", a.out.c_str());
      return 1;
    }
    if (raw.is_discarded()) raw = json::object();
    r["targets"] = EvaluateTargets(r);
    std::ofstream(a.out + "/results.json") << r.dump(2) << "\n";
    std::string table = RenderTable(r);
    std::ofstream(a.out + "/table.txt") << table;
    WritePlotData(r, raw, a.out);
    std::cout << table;
    return 0;
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "weft-bench: needs root (it creates network namespaces)\n");
    return 2;
  }
  if (Status st = StartBenchDriver(a.out, a.build_dir, {}); !st.ok()) {
    std::fprintf(stderr, "weft-bench: %s\n", st.msg().c_str());
    return 1;
  }
  auto want = [&](const std::string& s) { return a.only.empty() || a.only.count(s); };

  json r;
  json raw = {{"fill", json::object()}};
  {
    char ts[64];
    std::time_t now = std::time(nullptr);
    std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    r["started"] = ts;
  }
  r["mode"] = a.quick ? "quick" : "full";
  r["prefix"] = a.prefix;
  if (!a.commit.empty()) r["commit"] = a.commit;
  utsname u{};
  ::uname(&u);
  r["machine"] = {{"cpu", FirstLine("/proc/cpuinfo", "model name")},
                  {"cores", static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN))},
                  {"kernel", u.release},
                  {"os", FirstLine("/etc/debian_version", "")},
                  {"loadavg_start", FirstLine("/proc/loadavg", "")}};

  const std::string weft_dir = a.build_dir + "/cmd/weft";
  Runner runner({weft_dir, "/usr/lib/cni"});
  std::vector<NetConfig> configs;
  for (auto& c : SuiteConfigs("/tmp"))
    if (a.configs.empty() || a.configs.count(c.key)) configs.push_back(c);
  bool broken = false;
  int rc = 0;
  try {
    if (want("floor")) {
      std::cerr << "[bench] floor\n";
      FloorOptions fo{a.prefix, a.build_dir + "/bench/weft-bench-floor", a.build_dir + "/bench/weft-bench-noop",
                      a.quick ? 15 : 200};
      r["floor"] = RunFloor(fo);
      if (r["floor"].contains("error") || r["floor"]["errors"].value("count", 0) > 0) broken = true;
      Settle(a.prefix, fo.samples);
    }
    if (want("control")) {
      ControlOptions co;
      co.prefix = a.prefix;
      co.quick = a.quick;
      co.levels = a.quick ? std::vector<int>{3, 10} : std::vector<int>{10, 100, 500, 1000};
      if (!a.levels.empty()) co.levels = a.levels;
      co.samples = a.quick ? 4 : 40;
      if (a.samples > 0) co.samples = a.samples;
      co.parallel_pods = a.quick ? 8 : 240;
      co.parallel_rounds = a.quick ? 1 : 5;
      co.budget_s = a.quick ? 30 : 420;
      r["control"] = json::array();
      for (size_t i = 0; i < configs.size(); ++i) {
        if (!configs[i].control) continue;
        std::cerr << "[bench] control: " << configs[i].label << "\n";
        json c = RunControl(configs[i], static_cast<int>(i), co, runner);
        if (c.contains("fill")) {
          raw["fill"][configs[i].key] = c["fill"];
          c.erase("fill");
        }
        if (c.value("broken", false) || (configs[i].required && !c.value("available", false))) broken = true;
        std::cerr << "[bench]   " << (c.value("available", false) ? "done" : "not available: " + c.value("reason", ""))
                  << "\n";
        r["control"].push_back(c);
      }
    }
    if (want("datapath")) {
      std::cerr << "[bench] datapath\n";
      DatapathOptions dopt{a.prefix, a.quick ? 1 : 3, a.quick ? 1 : 5, a.build_dir + "/cmd/weftd/weftd"};
      if (a.rounds > 0) dopt.rounds = a.rounds;
      dopt.same_node_only = a.same_node;
      // Every row's client and server on CPU 0: unpinned, a row's two ends
      // share a CPU in some runs and not in others; on two CPUs every
      // transaction wakes the other CPU, and on this VM that wake-up's cost
      // varies by tens of percent from second to second. On one CPU the
      // rounds of a row agree within a few percent (docs/performance.md,
      // "The datapath rows compared like with like").
      if (a.cpus.empty()) dopt.cpus = {0, 0};
      if (!a.cpus.empty() && a.cpus != "none") {
        std::stringstream ss(a.cpus);
        for (std::string c; std::getline(ss, c, ',');) dopt.cpus.push_back(std::atoi(c.c_str()));
      }
      r["datapath"] = RunDatapath(dopt, runner, configs, r.value("control", json::array()));
      // A row that ran and broke is a broken benchmark, whichever row; a
      // configuration may be unavailable (not run, with its reason), the
      // baselines never.
      for (const auto& row : r["datapath"]["rows"]) {
        const std::string key = row.value("key", row.value("topology", std::string("?")));
        bool baseline = key == "veth" || key == "underlay" || key == "vxlan";
        const bool setup_failed = row.value("reason", std::string()).rfind("setup failed", 0) == 0;
        if (row.contains("error") || setup_failed || (baseline && !row.value("available", false))) {
          const json e = row.contains("error") ? row["error"] : json(row.value("reason", std::string("not available")));
          std::cerr << "[bench] BROKEN datapath row " << key << ": " << (e.is_string() ? e.get<std::string>() : e.dump())
                    << "\n";
          broken = true;
        }
      }
    }
    if (want("weftd")) std::cerr << "[bench] weftd\n";
    r["weftd"] = want("weftd") ? RunHook(a, "weftd_hook", "wd",
                                         "weftd is not built yet (issue 5); an executable bench/weftd_hook printing "
                                         "{rss_mb_1000_peers, converge_s_1000_peers, peer_change_ms, ...} plugs it in")
                               : json{{"pending", true}, {"reason", "skipped (--only)"}};
    if (r["weftd"].value("broken", false)) broken = true;
    if (want("netpol")) std::cerr << "[bench] NetworkPolicy\n";
    r["netpol"] = want("netpol") ? RunHook(a, "netpol_hook", "np", "bench/netpol_hook is missing")
                                 : json{{"pending", true}, {"reason", "skipped (--only)"}};
    if (r["netpol"].value("broken", false)) broken = true;
  } catch (const Interrupted&) {
    std::cerr << "[bench] interrupted: removing " << a.prefix << "-* namespaces and dirs\n";
    CleanupPrefix(a.prefix);
    return 130;
  }
  CleanupPrefix(a.prefix);
  r["machine"]["loadavg_end"] = FirstLine("/proc/loadavg", "");
  r["targets"] = EvaluateTargets(r);
  r["broken"] = broken;
  std::ofstream(a.out + "/results.json") << r.dump(2) << "\n";
  std::ofstream(a.out + "/raw.json") << raw.dump() << "\n";
  std::string table = RenderTable(r);
  std::ofstream(a.out + "/table.txt") << table;
  WritePlotData(r, raw, a.out);
  std::cout << r.dump(2) << "\n\n" << table;
  if (broken) {
    std::cerr << "[bench] BROKEN: a required configuration or baseline could not be measured (see above)\n";
    rc = 1;
  }
  return rc;
}

}  // namespace
}  // namespace weft::bench

int main(int argc, char** argv) { return weft::bench::RunDriverMain("weft-bench", argc, argv, weft::bench::Main); }
