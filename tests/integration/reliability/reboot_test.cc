// After a reboot: pod namespaces and host veths are gone, the database is
// not. Simulated by deleting the pods' namespaces (their veth pairs go with
// them) and keeping the dataDir and the node's firewall. weftd's reclaim
// (plugin/reclaim.h) and the plugin's GC free those attachments, rules
// included, and the next ADDs find free addresses; attachments that may
// still exist are never touched.
#include <gtest/gtest.h>

#include "node_fixture.h"
#include "plugin/reclaim.h"
#include "sys/netns.h"

namespace weft::testing {
namespace {

class RebootTest : public ::testing::Test, protected ReliabilityNode {
 protected:
  void SetUp() override { StartNode(); }
  void TearDown() override { StopNode(); }
  // A /29: six usable addresses, so a node full before the reboot is full
  // after it until the stale rows are reclaimed.
  json Conf(int host_port = 0) {
    json c = {{"cniVersion", "1.1.0"}, {"name", "bootnet"},   {"type", "weft"},
              {"mode", "routed"},      {"mtu", 1400},         {"dataDir", data_dir_},
              {"ranges", {"10.248.0.0/29"}}, {"capabilities", {{"portMappings", true}}}};
    if (host_port)
      c["runtimeConfig"] = {{"portMappings", json::array({{{"hostPort", host_port}, {"containerPort", 80}}})}};
    return c;
  }
  WeftRun Weft(const std::string& verb, const std::string& cid, const json& conf) {
    return RunPlugin(verb, cid, conf.dump());
  }
  // Fills the range: six pods, two of them with hostPorts.
  void FillNode(const std::string& prefix) {
    for (int i = 0; i < 6; ++i) {
      auto r = Weft("ADD", prefix + std::to_string(i), Conf(i < 2 ? 7200 + i : 0));
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    }
    auto full = Weft("ADD", "overflow", Conf());
    ASSERT_EQ(full.Json().value("code", 0), 100) << full.out;
  }
  // The reboot: every pod netns is deleted, which destroys its veth pair.
  void Reboot() {
    pods_.clear();
    for (int i = 0; i < 50 && !HostVeths().empty(); ++i) ::usleep(20 * 1000);
    ASSERT_TRUE(HostVeths().empty());
  }
  std::vector<std::string> HostVeths() {
    std::vector<std::string> out;
    for (auto& l : node_->IpJson({"link", "show"}))
      if (l.value("ifname", "").rfind("wft", 0) == 0) out.push_back(l["ifname"]);
    return out;
  }
  // Runs ReclaimVanished in the node's netns (never in the test's own).
  Result<plugin::ReclaimReport> Reclaim() {
    auto ns = sys::Netns::Open(node_->path());
    if (!ns.ok()) return ns.status();
    std::optional<Result<plugin::ReclaimReport>> got;
    Status st = sys::RunInNetns(*ns, [&] {
      got.emplace(plugin::ReclaimVanished({data_dir_, "", plugin::FwBackend::kNftables}));
      return got->ok() ? Status::Ok() : got->status();
    });
    if (!st.ok()) return st;
    return std::move(*got);
  }
  std::string HostPortTable() { return NodeOut({"nft", "list", "tables"}); }
  std::string NodeOut(const std::vector<std::string>& argv) {
    std::string out;
    node_->Exec(argv, &out);
    return out;
  }
};

TEST_F(RebootTest, ReclaimFreesEverythingAndNextAddsFindAddresses) {
  auto empty = Reclaim();  // no database yet: nothing to do, nothing created
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->examined, 0);
  const NodeState before = NodeSnapshot(*node_, data_dir_);
  FillNode("p");
  EXPECT_NE(HostPortTable().find("weft-hp-"), std::string::npos);
  Reboot();
  // Still full: the database remembers six attachments.
  EXPECT_EQ(Weft("ADD", "early", Conf()).Json().value("code", 0), 100);
  auto r = Reclaim();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->examined, 6);
  EXPECT_EQ(r->reclaimed.size(), 6u);
  EXPECT_TRUE(r->failed.empty());
  // Rows, mappings and the hostPort rules are gone: the node is as before.
  EXPECT_EQ(Diff(before, NodeSnapshot(*node_, data_dir_)), "");
  // Idempotent.
  auto again = Reclaim();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->reclaimed.empty());
  // The next ADDs get the six addresses, hostPorts included.
  std::set<std::string> ips;
  for (int i = 0; i < 6; ++i) {
    auto a = Weft("ADD", "q" + std::to_string(i), Conf(i < 2 ? 7200 + i : 0));
    ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
    ips.insert(a.Json()["ips"][0]["address"].get<std::string>());
  }
  EXPECT_EQ(ips.size(), 6u);
}

TEST_F(RebootTest, GcReclaimsListedAttachmentsWhoseNetnsAndVethAreGone) {
  const NodeState before = NodeSnapshot(*node_, data_dir_);
  FillNode("p");
  Reboot();
  // After the reboot the runtime recreates one sandbox before its GC, and
  // still lists every old one as valid.
  auto live = Weft("ADD", "live", Conf());
  EXPECT_EQ(live.Json().value("code", 0), 100);  // nothing free yet
  json gc = Conf();
  gc["cni.dev/valid-attachments"] = json::array();
  for (int i = 0; i < 6; ++i) gc["cni.dev/valid-attachments"].push_back({{"containerID", "p" + std::to_string(i)}, {"ifname", "eth0"}});
  auto r = Weft("GC", "", gc);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Diff(before, NodeSnapshot(*node_, data_dir_)), "");
  ASSERT_EQ(Weft("ADD", "live", Conf(7300)).exit_code, 0);
  // A listed attachment that exists is kept by the next GC.
  gc["cni.dev/valid-attachments"].push_back({{"containerID", "live"}, {"ifname", "eth0"}});
  ASSERT_EQ(Weft("GC", "", gc).exit_code, 0);
  EXPECT_TRUE(Pod("live").HasLink("eth0"));
  EXPECT_EQ(DbState(data_dir_)["db-rows"].size(), 1u);
  EXPECT_EQ(DbState(data_dir_)["db-portmaps"].size(), 1u);
}

TEST_F(RebootTest, AttachmentsThatMayStillExistAreNeverReclaimed) {
  // (a) a live pod; (b) a pod whose netns path was removed while a process
  // still holds the namespace (its veth lives on); (c) a pod whose host veth
  // someone deleted but whose netns exists; (d) an ADD in flight: row
  // "adding", netns present, no veth yet.
  ASSERT_EQ(Weft("ADD", "a", Conf()).exit_code, 0);
  ASSERT_EQ(Weft("ADD", "b", Conf(7400)).exit_code, 0);
  ASSERT_EQ(Weft("ADD", "c", Conf()).exit_code, 0);
  pid_t holder = ::fork();
  if (holder == 0) {
    ::execlp("ip", "ip", "netns", "exec", Pod("b").name().c_str(), "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::usleep(300 * 1000);
  Cmd({"ip", "netns", "del", Pod("b").name()});  // path gone, namespace held by `sleep`
  std::string veth_c;
  {
    auto s = ipam::Store::Open(data_dir_);
    ASSERT_TRUE(s.ok());
    auto row = s->Find("c", "eth0");
    ASSERT_TRUE(row.ok() && row->has_value());
    veth_c = (*row)->host_ifname;
    ipam::PodRecord d;
    d.container_id = "d";
    d.ifname = "eth0";
    d.network = "bootnet";
    d.netns = Pod("d").path();
    d.host_ifname = "wftinflight0";
    ASSERT_TRUE(s->Reserve(d, {{*IpPrefix::Parse("10.248.0.0/29")}, {}}).ok());
  }
  Cmd({"ip", "-n", node_->name(), "link", "del", veth_c});
  const auto rows_before = DbState(data_dir_);
  auto r = Reclaim();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->examined, 4);
  EXPECT_TRUE(r->reclaimed.empty()) << json(r->reclaimed).dump();
  EXPECT_EQ(Diff(rows_before, DbState(data_dir_)), "");
  // Once b's namespace really dies, its veth goes and b is reclaimed.
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  for (int i = 0; i < 100 && HostVeths().size() > 1; ++i) ::usleep(20 * 1000);
  r = Reclaim();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reclaimed, std::vector<std::string>{"b/eth0"});
  EXPECT_EQ(DbState(data_dir_)["db-portmaps"].size(), 0u);
  EXPECT_EQ(HostPortTable().find("weft-hp-"), std::string::npos) << HostPortTable();
}

}  // namespace
}  // namespace weft::testing
