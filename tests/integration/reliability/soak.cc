// weft_soak: thousands of random ADD/DEL/CHECK/GC operations against the
// real plugin, N at a time, a small fraction of them crashed (named crash
// points in a WEFT_FAULT_INJECTION build, kill -9 after a random delay in
// any build). Afterwards a checker compares the node's kernel state with the
// database: no leaked, duplicated or orphaned address, link, route or
// hostPort rule. Finally every pod is deleted and the node must be exactly
// as it was before the soak.
//
//   weft_soak [--ops N] [--concurrency C] [--pods P] [--crash-permille K]
//             [--seed S] [--mode routed|bridge]
//
// Runs inside namespaces it creates (root). Prints its numbers and exits 0
// only when every operation behaved and nothing leaked.
#include <dirent.h>
#include <fcntl.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "node_state.h"

namespace weft::testing {
namespace {

struct Options {
  int ops = 3000;
  int concurrency = 8;
  int pods = 32;
  int crash_permille = 40;
  uint64_t seed = 0;
  std::string mode = "routed";
};

enum class SlotState { kDetached, kAttached, kDirty };

struct Slot {
  std::mutex mu;
  SlotState state = SlotState::kDetached;  // guarded by mu
  std::string cid;
  int host_port = 0;  // 0: no mapping
  json last_result;   // guarded by mu
};

struct Counters {
  std::atomic<int> ops{0}, add{0}, del{0}, check{0}, gc{0};
  std::atomic<int> crash_points{0}, kills{0}, kills_too_late{0}, failures{0};
};

class Soak {
 public:
  explicit Soak(Options o) : o_(std::move(o)), rng_seed_(o_.seed ? o_.seed : std::random_device{}()) {}

  int Run() {
    BecomeSubreaper();
    node_ = std::make_unique<TestNode>("soak");
    NoDad(*node_);
    data_dir_ = TempDir("soak");
    slots_.resize(o_.pods);
    for (int i = 0; i < o_.pods; ++i) {
      slots_[i] = std::make_unique<Slot>();
      slots_[i]->cid = "soak" + std::to_string(i);
      slots_[i]->host_port = i % 3 == 0 ? 20000 + i : 0;
      pods_.push_back(std::make_unique<TestNetns>(slots_[i]->cid));
    }
    // Warm up (node-wide state every ADD ensures), then the baseline. Twice:
    // a bridge created with an MTU falls back to 1500 when its last port
    // leaves, and keeps the MTU once the next ADD sets it explicitly.
    for (int i = 0; i < 2; ++i) {
      Weft("ADD", 0, "", std::nullopt);
      Weft("DEL", 0, "", std::nullopt);
    }
    const NodeState baseline = NodeSnapshot(*node_, data_dir_);

    std::printf("soak: %d ops, %d concurrent, %d pods, crash rate %d/1000, mode %s, seed %llu, %s build\n", o_.ops,
                o_.concurrency, o_.pods, o_.crash_permille, o_.mode.c_str(),
                static_cast<unsigned long long>(rng_seed_), WEFT_HAS_CRASH_POINTS ? "fault-injection" : "production");
    std::fflush(stdout);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int w = 0; w < o_.concurrency; ++w) workers.emplace_back([this, w] { Worker(w); });
    for (auto& t : workers) t.join();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }

    // Crashed attachments are finished the way a runtime would: a final GC
    // listing only the attachments it believes in.
    int dirty = 0;
    json gc_valid = json::array();
    for (auto& s : slots_) {
      if (s->state == SlotState::kAttached) gc_valid.push_back({{"containerID", s->cid}, {"ifname", "eth0"}});
      if (s->state == SlotState::kDirty) ++dirty;
    }
    json gc = Conf(0);
    gc["cni.dev/valid-attachments"] = gc_valid;
    auto final_gc = RunWeft(*node_, CniEnv("GC", "", ""), gc.dump());
    if (final_gc.exit_code != 0) Fail("final GC", final_gc);
    for (auto& s : slots_)
      if (s->state == SlotState::kDirty) s->state = SlotState::kDetached;

    Findings f = Check();
    // Then everything goes, and the node must match the baseline exactly.
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i]->state == SlotState::kAttached) {
        auto r = Weft("DEL", i, "", std::nullopt);
        if (r.exit_code != 0) Fail("final DEL", r);
      }
    std::string diff = Diff(baseline, NodeSnapshot(*node_, data_dir_));
    int leftover = 0;
    for (char c : diff) leftover += c == '\n';
    if (!diff.empty()) std::printf("soak: left on the node after deleting every pod:\n%s", diff.c_str());

    std::printf(
        "soak: %d operations in %.1f s (%.0f ops/s): ADD %d, DEL %d, CHECK %d, GC %d; %d concurrent\n"
        "soak: crashes injected: %d (crash points %d, kill -9 mid-operation %d; %d more kills came after the "
        "operation finished); %d attachments left half-done, finished by the final GC\n"
        "soak: checked %d live attachments: leaked %d, duplicated addresses %d, orphans %d, missing %d; left after "
        "deleting all: %d; unexpected results: %d\n",
        c_.ops.load(), secs, c_.ops / secs, c_.add.load(), c_.del.load(), c_.check.load(), c_.gc.load(),
        o_.concurrency, c_.crash_points + c_.kills, c_.crash_points.load(), c_.kills.load(), c_.kills_too_late.load(),
        dirty, f.live, f.leaked, f.duplicated, f.orphans, f.missing, leftover, c_.failures.load());
    const bool ok = f.leaked == 0 && f.duplicated == 0 && f.orphans == 0 && f.missing == 0 && leftover == 0 &&
                    c_.failures == 0 && c_.crash_points + c_.kills > 0;
    std::printf("soak: %s\n", ok ? "PASS" : "FAIL");
    pods_.clear();
    node_.reset();
    RemoveTree(data_dir_);
    return ok ? 0 : 1;
  }

 private:
  json Conf(int host_port) {
    json c = {{"cniVersion", "1.1.0"}, {"name", "soaknet"},  {"type", "weft"},
              {"mode", o_.mode},       {"mtu", 1400},        {"dataDir", data_dir_},
              {"masquerade", true},    {"capabilities", {{"portMappings", true}}}};
    if (o_.mode == "bridge") {
      c["bridge"] = "wsoak0";
      c["ranges"] = {"10.249.0.0/24"};
    } else {
      c["ranges"] = {"10.249.0.0/24", "fd00:249::/64"};
    }
    if (host_port)
      c["runtimeConfig"] = {{"portMappings", json::array({{{"hostPort", host_port}, {"containerPort", 80}},
                                                          {{"HostPort", host_port}, {"ContainerPort", 53},
                                                           {"Protocol", "UDP"}}})}};
    return c;
  }

  WeftRun Weft(const std::string& verb, size_t slot, const std::string& crash_at,
               std::optional<std::chrono::microseconds> kill_after, const json* prev = nullptr) {
    Slot& s = *slots_[slot];
    json conf = Conf(s.host_port);
    if (prev) conf["prevResult"] = *prev;
    auto env = CniEnv(verb, s.cid, pods_[slot]->path());
    if (!crash_at.empty()) env["WEFT_TEST_CRASH_AT"] = crash_at;
    auto r = RunWeft(*node_, env, conf.dump(), kill_after);
    if (r.killed()) KillOrphanedTools();
    return r;
  }

  // A killed plugin's exec'd firewall tool is re-parented to this process
  // (a subreaper). It is killed too, as a process-tree kill (a cgroup kill,
  // or the tools' parent-death signal) would: without that, an nft started
  // before the kill could apply its ruleset after a later sync (until the
  // next sync repairs it; see docs/reliability.md). Direct children of the
  // workers are only ever the plugin itself, never these tools.
  void KillOrphanedTools() {
    static const std::vector<std::string> kTools = {"nft",       "iptables-resto", "ip6tables-rest", "iptables-save",
                                                    "ip6tables-save", "conntrack",  "iptables",       "ip6tables",
                                                    "xtables-nft-mu", "xtables-legacy"};
    const pid_t self = ::getpid();
    DIR* d = ::opendir("/proc");
    if (!d) return;
    while (dirent* e = ::readdir(d)) {
      pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      auto stat = sys::ReadFile("/proc/" + std::to_string(pid) + "/stat", 4096);
      if (!stat.ok()) continue;
      size_t open = stat->find('('), close = stat->rfind(')');
      if (open == std::string::npos || close == std::string::npos) continue;
      std::string comm = stat->substr(open + 1, close - open - 1);
      int ppid = 0;
      std::sscanf(stat->c_str() + close + 2, "%*c %d", &ppid);
      if (ppid != self || std::find(kTools.begin(), kTools.end(), comm) == kTools.end()) continue;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    ::closedir(d);
  }

  void Fail(const std::string& what, const WeftRun& r) {
    ++c_.failures;
    std::lock_guard<std::mutex> l(print_mu_);
    std::printf("soak: unexpected result of %s: exit %d signal %d\n  stdout: %s\n  stderr: %s\n", what.c_str(),
                r.exit_code, r.term_signal, r.out.c_str(), r.err.c_str());
  }

  // Returns the crash point to use ("" none) and the kill delay (if any).
  std::pair<std::string, std::optional<std::chrono::microseconds>> MaybeCrash(std::mt19937_64& rng, bool add) {
    if (std::uniform_int_distribution<int>(0, 999)(rng) >= o_.crash_permille) return {"", std::nullopt};
    if (WEFT_HAS_CRASH_POINTS && std::uniform_int_distribution<int>(0, 9)(rng) < 7) {
      const auto& pts = add ? AddCrashPoints() : DelCrashPoints();
      return {pts[std::uniform_int_distribution<size_t>(0, pts.size() - 1)(rng)], std::nullopt};
    }
    return {"", std::chrono::microseconds(std::uniform_int_distribution<int>(0, 25000)(rng))};
  }

  void Account(const std::string& point, const std::optional<std::chrono::microseconds>& kill, const WeftRun& r) {
    if (!r.killed()) {
      if (kill) ++c_.kills_too_late;
      return;
    }
    if (!point.empty()) ++c_.crash_points;
    else ++c_.kills;
  }

  void Worker(int w) {
    std::mt19937_64 rng(rng_seed_ * 1000003 + static_cast<uint64_t>(w));
    std::uniform_int_distribution<size_t> pick(0, slots_.size() - 1);
    while (true) {
      if (c_.ops.fetch_add(1) >= o_.ops) {
        --c_.ops;
        return;
      }
      if (std::uniform_int_distribution<int>(0, 99)(rng) < 5) {
        DoGc(rng);
        continue;
      }
      size_t i = pick(rng);
      Slot& s = *slots_[i];
      std::unique_lock<std::mutex> lock(s.mu, std::try_to_lock);
      for (int tries = 0; !lock.owns_lock() && tries < 64; ++tries) {
        i = pick(rng);
        lock = std::unique_lock<std::mutex>(slots_[i]->mu, std::try_to_lock);
      }
      if (!lock.owns_lock()) {
        --c_.ops;
        continue;
      }
      Slot& t = *slots_[i];
      if (t.state == SlotState::kDetached) {
        ++c_.add;
        auto [point, kill] = MaybeCrash(rng, true);
        auto r = Weft("ADD", i, point, kill);
        Account(point, kill, r);
        if (r.killed()) {
          t.state = SlotState::kDirty;
        } else if (r.exit_code == 0) {
          t.state = SlotState::kAttached;
          t.last_result = r.Json();
        } else {
          Fail("ADD " + t.cid, r);
          t.state = SlotState::kDirty;
        }
      } else if (t.state == SlotState::kAttached && std::uniform_int_distribution<int>(0, 9)(rng) < 4) {
        ++c_.check;
        auto r = Weft("CHECK", i, "", std::nullopt, &t.last_result);
        if (r.exit_code != 0) Fail("CHECK " + t.cid, r);
      } else {
        ++c_.del;
        auto [point, kill] = MaybeCrash(rng, false);
        auto r = Weft("DEL", i, point, kill);
        Account(point, kill, r);
        if (r.killed()) {
          t.state = SlotState::kDirty;
        } else if (r.exit_code == 0) {
          t.state = SlotState::kDetached;
        } else {
          Fail("DEL " + t.cid, r);
          t.state = SlotState::kDirty;
        }
      }
    }
  }

  // GC as a runtime calls it: every attachment it believes in is listed. A
  // pod being worked on right now counts as believed in; the detached and
  // the half-done ones it holds locked so no ADD starts on them meanwhile.
  void DoGc(std::mt19937_64& rng) {
    ++c_.gc;
    std::vector<std::unique_lock<std::mutex>> held;
    std::vector<Slot*> excluded;
    json valid = json::array();
    for (auto& s : slots_) {
      std::unique_lock<std::mutex> l(s->mu, std::try_to_lock);
      if (l.owns_lock() && s->state != SlotState::kAttached) {
        excluded.push_back(s.get());
        held.push_back(std::move(l));
      } else {
        valid.push_back({{"containerID", s->cid}, {"ifname", "eth0"}});
      }
    }
    json gc = Conf(0);
    gc["cni.dev/valid-attachments"] = valid;
    auto [point, kill] = MaybeCrash(rng, false);
    auto env = CniEnv("GC", "", "");
    if (!point.empty()) env["WEFT_TEST_CRASH_AT"] = point;
    auto r = RunWeft(*node_, env, gc.dump(), kill);
    if (r.killed()) KillOrphanedTools();
    Account(point, kill, r);
    if (!r.killed() && r.exit_code != 0) Fail("GC", r);
    if (!r.killed() && r.exit_code == 0)
      for (Slot* s : excluded) s->state = SlotState::kDetached;  // GC finished the half-done ones
  }

  struct Findings {
    int live = 0, leaked = 0, duplicated = 0, orphans = 0, missing = 0;
  };

  void Report(const std::string& kind, const std::string& what, int* counter) {
    ++*counter;
    std::printf("soak: %s: %s\n", kind.c_str(), what.c_str());
  }

  // Kernel against database, with every pod either attached (and ready) or
  // detached. Leaked: the database holds something no pod uses. Orphan: the
  // kernel holds something the database does not know. Missing: an
  // attached pod lacks what its row says. Duplicated: an address twice.
  Findings Check() {
    Findings f;
    auto store = ipam::Store::Open(data_dir_);
    if (!store.ok()) {
      Report("missing", "cannot open the database: " + store.status().ToString(), &f.missing);
      return f;
    }
    auto rows = store->ListPods("");
    auto maps = store->ListPortMappings();
    if (!rows.ok() || !maps.ok()) {
      Report("missing", "cannot read the database", &f.missing);
      return f;
    }
    std::map<std::string, ipam::PodRecord> by_cid;
    std::map<std::string, int> db_addrs;
    for (const auto& r : *rows) {
      by_cid[r.container_id] = r;
      for (const auto& a : {r.ip_v4, r.ip_v6})
        if (a) ++db_addrs[a->addr().ToString()];
    }
    for (const auto& [a, n] : db_addrs)
      if (n > 1) Report("duplicated", "address " + a + " in " + std::to_string(n) + " rows", &f.duplicated);
    std::set<std::string> want_veths, want_routes;
    std::map<std::string, int> pod_addrs;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = *slots_[i];
      auto it = by_cid.find(s.cid);
      std::set<std::string> in_pod;
      for (auto& l : pods_[i]->IpJson({"addr", "show", "dev", "eth0"}))
        for (auto& a : l.value("addr_info", json::array()))
          if (a.value("scope", "") == "global") {
            in_pod.insert(a["local"].get<std::string>());
            ++pod_addrs[a["local"].get<std::string>()];
          }
      if (s.state != SlotState::kAttached) {
        if (it != by_cid.end()) Report("leaked", "row for detached " + s.cid + " (" + it->second.state + ")", &f.leaked);
        if (pods_[i]->HasLink("eth0")) Report("orphans", "eth0 in detached pod " + s.cid, &f.orphans);
        continue;
      }
      ++f.live;
      if (it == by_cid.end()) {
        Report("missing", "no row for attached " + s.cid, &f.missing);
        continue;
      }
      const auto& r = it->second;
      if (r.state != ipam::kStateReady) Report("missing", s.cid + " is " + r.state + ", not ready", &f.missing);
      want_veths.insert(r.host_ifname);
      std::set<std::string> want;
      for (const auto& a : {r.ip_v4, r.ip_v6})
        if (a) {
          want.insert(a->addr().ToString());
          if (o_.mode == "routed") want_routes.insert(a->addr().ToString() + " " + r.host_ifname);
        }
      if (want != in_pod)
        Report("missing", s.cid + " has " + json(in_pod).dump() + " in its netns, the row says " + json(want).dump(),
               &f.missing);
    }
    // The init-capture: clang 14 cannot capture a structured binding itself.
    for (const auto& [cid, r] : by_cid)
      if (std::none_of(slots_.begin(), slots_.end(), [&id = cid](auto& s) { return s->cid == id; }))
        Report("leaked", "row for unknown container " + cid, &f.leaked);
    for (const auto& [a, n] : pod_addrs)
      if (n > 1) Report("duplicated", "address " + a + " on " + std::to_string(n) + " pods", &f.duplicated);
    // Host veths.
    std::set<std::string> veths;
    for (auto& l : node_->IpJson({"link", "show"}))
      if (l.value("ifname", "").rfind("wft", 0) == 0) veths.insert(l["ifname"]);
    for (const auto& v : veths)
      if (!want_veths.count(v)) Report("orphans", "host veth " + v + " without a row", &f.orphans);
    for (const auto& v : want_veths)
      if (!veths.count(v)) Report("missing", "host veth " + v + " of a ready row", &f.missing);
    // Host routes (proto 201), routed mode.
    std::set<std::string> routes;
    for (const char* fam : {"-4", "-6"})
      for (auto& r : node_->IpJson({fam, "route", "show", "proto", "201"}))
        routes.insert(r.value("dst", "") + " " + r.value("dev", ""));
    for (const auto& r : routes)
      if (!want_routes.count(r)) Report("orphans", "host route " + r, &f.orphans);
    for (const auto& r : want_routes)
      if (!routes.count(r)) Report("missing", "host route " + r, &f.missing);
    // hostPort DNAT rules against the mappings.
    std::multiset<std::string> want_dnat, have_dnat;
    std::set<std::string> live_owners;
    for (auto& s : slots_)
      if (s->state == SlotState::kAttached) live_owners.insert(s->cid);
    for (const auto& m : *maps) {
      if (!live_owners.count(m.container_id)) Report("leaked", "port mapping of " + m.container_id, &f.leaked);
      auto it = by_cid.find(m.container_id);
      if (it == by_cid.end()) continue;
      for (const auto& a : {it->second.ip_v4, it->second.ip_v6})
        if (a)
          want_dnat.insert(m.protocol + "/" + std::to_string(m.host_port) + "->" + a->addr().ToString() + ":" +
                           std::to_string(m.container_port));
    }
    std::string nft;
    node_->Exec({"nft", "list", "ruleset"}, &nft);
    // The DNAT maps' elements ("tcp . 8080 : 10.246.0.5 . 80", with a host
    // IP first for hostIP mappings), and per-mapping DNAT rules of the
    // previous table layout, should one linger.
    static const std::regex kDnat(R"((tcp|udp|sctp) \. (\d+) : ([0-9a-f:.]+) \. (\d+))");
    for (auto it = std::sregex_iterator(nft.begin(), nft.end(), kDnat); it != std::sregex_iterator(); ++it)
      have_dnat.insert((*it)[1].str() + "/" + (*it)[2].str() + "->" + (*it)[3].str() + ":" + (*it)[4].str());
    static const std::regex kRule(
        R"((tcp|udp|sctp) dport (\d+) dnat ip6? to (?:\[([0-9a-f:]+)\]|([0-9.]+)):(\d+))");
    for (auto it = std::sregex_iterator(nft.begin(), nft.end(), kRule); it != std::sregex_iterator(); ++it)
      have_dnat.insert((*it)[1].str() + "/" + (*it)[2].str() + "->" + (*it)[3].str() + (*it)[4].str() + ":" +
                       (*it)[5].str());
    for (const auto& d : have_dnat)
      if (have_dnat.count(d) > want_dnat.count(d)) Report("orphans", "hostPort rule " + d, &f.orphans);
    for (const auto& d : want_dnat)
      if (want_dnat.count(d) > have_dnat.count(d)) Report("missing", "hostPort rule " + d, &f.missing);
    std::printf("soak: checker saw %zu rows, %zu port mappings, %zu host veths, %zu weft routes, %zu DNATs\n",
                rows->size(), maps->size(), veths.size(), routes.size(), have_dnat.size());
    return f;
  }

  Options o_;
  uint64_t rng_seed_;
  Counters c_;
  std::mutex print_mu_;
  std::unique_ptr<TestNode> node_;
  std::vector<std::unique_ptr<TestNetns>> pods_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::string data_dir_;
};

}  // namespace
}  // namespace weft::testing

int main(int argc, char** argv) {
  weft::testing::Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--ops") o.ops = std::atoi(v.c_str());
    else if (k == "--concurrency") o.concurrency = std::atoi(v.c_str());
    else if (k == "--pods") o.pods = std::atoi(v.c_str());
    else if (k == "--crash-permille") o.crash_permille = std::atoi(v.c_str());
    else if (k == "--seed") o.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--mode") o.mode = v;
    else {
      std::fprintf(stderr, "usage: weft_soak [--ops N] [--concurrency C] [--pods P] [--crash-permille K] "
                           "[--seed S] [--mode routed|bridge]\n");
      return 2;
    }
  }
  if (o.ops <= 0 || o.concurrency <= 0 || o.pods < o.concurrency || (o.mode != "routed" && o.mode != "bridge")) {
    std::fprintf(stderr, "weft_soak: need ops > 0, 0 < concurrency <= pods, mode routed|bridge\n");
    return 2;
  }
  return weft::testing::Soak(o).Run();
}
