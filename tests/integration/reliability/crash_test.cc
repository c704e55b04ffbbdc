// Crash safety: the plugin dies (SIGKILL, no cleanup) at every named crash
// point of ADD and DEL; afterwards a DEL, or a GC that does not list the
// attachment, leaves the node exactly as it was before the ADD: links,
// addresses, routes of every table, permanent neighbours, FDB, nftables,
// iptables, database rows and port mappings. Meanwhile nothing is handed out
// twice. Needs a WEFT_FAULT_INJECTION build (build-fault); in a production
// build the crash tests skip and ProductionBuildIgnoresTheCrashVariable runs
// instead.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "node_fixture.h"

namespace weft::testing {
namespace {

struct CrashCase {
  std::string mode;      // "routed" | "bridge" | "routed-iptables" (hostPorts and masquerade via iptables)
  std::string verb;      // the verb that crashes: "ADD" | "DEL"
  std::string point;     // the crash point
  std::string recovery;  // "DEL" | "GC"
};

std::string CaseName(const ::testing::TestParamInfo<CrashCase>& i) {
  std::string n = i.param.mode + "_" + i.param.point + "_then_" + i.param.recovery;
  for (auto& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

class CrashFixture : protected ReliabilityNode {
 protected:
  // Dual-stack (routed) with a hostPort mapping and the masquerade, so every
  // kind of state weft writes is in play.
  json Conf(const std::string& variant, int host_port) {
    const bool iptables = variant == "routed-iptables";
    const std::string mode = iptables ? "routed" : variant;
    json c = {{"cniVersion", "1.1.0"},
              {"name", "relnet"},
              {"type", "weft"},
              {"mode", mode},
              {"masqueradeBackend", iptables ? "iptables" : "nftables"},
              {"mtu", 1400},
              {"dataDir", data_dir_},
              {"masquerade", true},
              {"capabilities", {{"portMappings", true}}},
              {"runtimeConfig",
               {{"portMappings", json::array({{{"hostPort", host_port}, {"containerPort", 80}, {"protocol", "tcp"}},
                                              {{"HostPort", host_port}, {"ContainerPort", 53}, {"Protocol", "udp"}}})}}}};
    if (host_port == 0) c.erase("runtimeConfig");
    if (mode == "bridge") {
      c["bridge"] = "wrel0";
      c["ranges"] = {"10.246.0.0/24"};
    } else {
      c["ranges"] = {"10.246.0.0/24", "fd00:246::/64"};
    }
    return c;
  }
  WeftRun Weft(const std::string& verb, const std::string& cid, const json& conf, const std::string& crash_at = "") {
    std::map<std::string, std::string> env;
    if (!crash_at.empty()) env["WEFT_TEST_CRASH_AT"] = crash_at;
    return RunPlugin(verb, cid, conf.dump(), env);
  }
  WeftRun Gc(const json& conf, const std::vector<std::string>& keep) {
    json c = conf;
    c["cni.dev/valid-attachments"] = json::array();
    for (const auto& k : keep) c["cni.dev/valid-attachments"].push_back({{"containerID", k}, {"ifname", "eth0"}});
    return Weft("GC", "", c);
  }
  // One ADD+DEL first, so node-wide state every ADD ensures (masquerade
  // table, forwarding sysctls, the bridge) is part of the baseline.
  void WarmUp(const json& conf) {
    ASSERT_EQ(Weft("ADD", "warm", conf).exit_code, 0);
    ASSERT_EQ(Weft("DEL", "warm", conf).exit_code, 0);
  }
  std::string PodAddr(const WeftRun& r) {
    json j = r.Json();
    if (!j.contains("ips") || j["ips"].empty()) return "";
    return j["ips"][0]["address"];
  }
};

class CrashTest : public CrashFixture, public ::testing::TestWithParam<CrashCase> {
 protected:
  void SetUp() override {
    if (!WEFT_HAS_CRASH_POINTS)
      GTEST_SKIP() << "SKIPPED: this build has no crash points; configure with -DWEFT_FAULT_INJECTION=ON "
                      "(scripts/soak.sh and docs/reliability.md use build-fault) to run the crash matrix";
    StartNode(/*reap=*/true);
  }
  void TearDown() override {
    if (node_) StopNode();
  }
};

TEST_P(CrashTest, RecoveryRestoresTheNodeExactly) {
  const CrashCase& c = GetParam();
  // An anchor pod with its own mappings: recovery must restore exactly its
  // rules and addresses, not merely "nothing".
  auto anchor = Weft("ADD", "anchor", Conf(c.mode, 7001));
  ASSERT_EQ(anchor.exit_code, 0) << anchor.out << anchor.err;
  const std::string anchor_addr = PodAddr(anchor);
  const json conf = Conf(c.mode, 7002);
  Pod("victim");
  const NodeState before = NodeSnapshot(*node_, data_dir_);
  const NodeState pod_before = KernelState(Pod("victim"));

  if (c.verb == "DEL") {
    auto add = Weft("ADD", "victim", conf);
    ASSERT_EQ(add.exit_code, 0) << add.out << add.err;
  }
  auto crashed = Weft(c.verb, "victim", conf, c.point);
  ASSERT_TRUE(crashed.killed()) << c.point << " was not reached: exit " << crashed.exit_code << " " << crashed.out
                                << crashed.err;
  EXPECT_NE(crashed.err.find("crashing at " + c.point), std::string::npos) << crashed.err;

  // Half-done: the address stays taken until the recovery, and a new pod
  // never gets it (nor the anchor's).
  auto rows = DbState(data_dir_)["db-rows"];
  std::string held;
  for (const auto& r : rows)
    if (r.rfind("victim/", 0) == 0) held = r.substr(r.find("v4=") + 3, r.find(' ', r.find("v4=")) - r.find("v4=") - 3);
  if (!(c.verb == "DEL" && c.point == "del-after-release")) {
    EXPECT_FALSE(held.empty()) << "the crashed attachment must stay discoverable in the database:\n"
                               << json(rows).dump(1);
  }
  // Without hostPorts: its ADD must not re-sync the ruleset, or it would
  // repair what the recovery is supposed to repair.
  json other_conf = Conf(c.mode, 0);
  auto other = Weft("ADD", "other", other_conf);
  ASSERT_EQ(other.exit_code, 0) << other.out << other.err;
  EXPECT_NE(PodAddr(other), held);
  EXPECT_NE(PodAddr(other), anchor_addr);
  ASSERT_EQ(Weft("DEL", "other", other_conf).exit_code, 0);

  // Recovery.
  WeftRun rec = c.recovery == "DEL" ? Weft("DEL", "victim", conf) : Gc(conf, {"anchor"});
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  EXPECT_EQ(Diff(before, NodeSnapshot(*node_, data_dir_)), "") << c.point << " then " << c.recovery;
  EXPECT_EQ(Diff(pod_before, KernelState(Pod("victim"))), "") << "pod netns after " << c.point;
  // Recovery is idempotent, and the attachment can be made again.
  EXPECT_EQ(Weft("DEL", "victim", conf).exit_code, 0);
  auto again = Weft("ADD", "victim", conf);
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  ASSERT_EQ(Weft("DEL", "victim", conf).exit_code, 0);
  EXPECT_EQ(Diff(before, NodeSnapshot(*node_, data_dir_)), "") << "after a clean ADD+DEL";
  // The anchor was never disturbed.
  json check = Conf(c.mode, 7001);
  check["prevResult"] = anchor.Json();
  auto chk = Weft("CHECK", "anchor", check);
  EXPECT_EQ(chk.exit_code, 0) << chk.out;
}

std::vector<CrashCase> AllCases() {
  std::vector<CrashCase> out;
  for (const char* mode : {"routed", "bridge"})
    for (const char* rec : {"DEL", "GC"}) {
      for (const auto& p : AddCrashPoints()) out.push_back({mode, "ADD", p, rec});
      for (const auto& p : DelCrashPoints()) out.push_back({mode, "DEL", p, rec});
    }
  // The iptables backend where its rules are half-written or stale.
  for (const char* rec : {"DEL", "GC"}) {
    for (const char* p : {"add-after-hostports", "add-before-ready"}) out.push_back({"routed-iptables", "ADD", p, rec});
    for (const char* p : {"del-after-unmap", "del-after-hostports"}) out.push_back({"routed-iptables", "DEL", p, rec});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Points, CrashTest, ::testing::ValuesIn(AllCases()), CaseName);

// A crash inside GC (GC runs the same teardown) is finished by the next GC.
class GcCrashTest : public CrashFixture, public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!WEFT_HAS_CRASH_POINTS) GTEST_SKIP() << "SKIPPED: no crash points in this build (need WEFT_FAULT_INJECTION)";
    StartNode(/*reap=*/true);
  }
  void TearDown() override {
    if (node_) StopNode();
  }
};

TEST_P(GcCrashTest, NextGcFinishes) {
  const json conf = Conf("routed", 7010);
  WarmUp(conf);
  const NodeState before = NodeSnapshot(*node_, data_dir_);
  ASSERT_EQ(Weft("ADD", "g1", conf).exit_code, 0);
  json conf2 = Conf("routed", 7011);
  ASSERT_EQ(Weft("ADD", "g2", conf2).exit_code, 0);
  json gc = conf;
  gc["cni.dev/valid-attachments"] = json::array();
  auto crashed = Weft("GC", "", gc, GetParam());
  ASSERT_TRUE(crashed.killed()) << crashed.out << crashed.err;
  auto fin = Gc(conf, {});
  ASSERT_EQ(fin.exit_code, 0) << fin.out << fin.err;
  EXPECT_EQ(Diff(before, NodeSnapshot(*node_, data_dir_)), "");
}

INSTANTIATE_TEST_SUITE_P(Points, GcCrashTest, ::testing::ValuesIn(DelCrashPoints()),
                         [](const auto& i) {
                           std::string n = i.param;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// A production build carries no crash points: the variable changes nothing,
// and neither its name nor any point's name is in the binary.
TEST(FaultInjectionBuild, ProductionBuildIgnoresTheCrashVariable) {
  if (WEFT_HAS_CRASH_POINTS)
    GTEST_SKIP() << "SKIPPED: this is the fault-injection build; the production build runs this test";
  std::ifstream f(BinaryPath("weft"), std::ios::binary);
  std::string bin((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(bin.size(), 100000u);
  EXPECT_EQ(bin.find("WEFT_TEST_CRASH_AT"), std::string::npos);
  for (const auto& p : AddCrashPoints()) EXPECT_EQ(bin.find(p), std::string::npos) << p;
  for (const auto& p : DelCrashPoints()) EXPECT_EQ(bin.find(p), std::string::npos) << p;

  struct Fx : CrashFixture {
    using CrashFixture::Conf;
    using CrashFixture::StartNode;
    using CrashFixture::StopNode;
    using CrashFixture::node_;
    using CrashFixture::Weft;
    using CrashFixture::data_dir_;
    using CrashFixture::WarmUp;
  } fx;
  fx.StartNode(/*reap=*/true);
  const json conf = fx.Conf("routed", 7020);
  fx.WarmUp(conf);
  const NodeState before = NodeSnapshot(*fx.node_, fx.data_dir_);
  // Every ADD point with ADD, every teardown point with DEL and with GC.
  const auto& adds = AddCrashPoints();
  const auto& dels = DelCrashPoints();
  for (size_t i = 0; i < adds.size(); ++i) {
    auto add = fx.Weft("ADD", "prod", conf, adds[i]);
    EXPECT_FALSE(add.killed()) << adds[i];
    EXPECT_EQ(add.exit_code, 0) << adds[i] << ": " << add.out << add.err;
    const std::string& d = dels[i % dels.size()];
    auto del = fx.Weft("DEL", "prod", conf, d);
    EXPECT_FALSE(del.killed()) << d;
    EXPECT_EQ(del.exit_code, 0) << d << ": " << del.out << del.err;
  }
  for (const auto& d : dels) {
    ASSERT_EQ(fx.Weft("ADD", "prod", conf).exit_code, 0);
    json gc = conf;
    gc["cni.dev/valid-attachments"] = json::array();
    auto r = fx.Weft("GC", "", gc, d);
    EXPECT_FALSE(r.killed()) << d;
    EXPECT_EQ(r.exit_code, 0) << d << ": " << r.out << r.err;
  }
  EXPECT_EQ(Diff(before, NodeSnapshot(*fx.node_, fx.data_dir_)), "");
  fx.StopNode();
}

}  // namespace
}  // namespace weft::testing
