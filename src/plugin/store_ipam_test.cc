// ADD's IPAM step (store_ipam.h) against a real SQLite database in a temp
#include "cni/errors.h"
// dir and, for delegation, a stand-in IPAM plugin (a shell script that logs
// its commands): allocation in both modes, its undo, the hostPort claims and
// the "ready" mark. No root needed.
#include "plugin/store_ipam.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "sys/files.h"

namespace weft::plugin {
namespace {

class StoreIpamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weft-storeipam-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    cfg_.net.name = "net1";
    cfg_.data_dir = dir_ + "/data";
    cfg_.ranges = {*IpPrefix::Parse("10.9.0.0/29")};
    auto store = ipam::Store::Open(cfg_.data_dir);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_.emplace(std::move(store).value());
  }
  void TearDown() override {
    store_.reset();
    (void)std::system(("rm -rf " + dir_).c_str());
  }

  static ipam::PodRecord Want(const std::string& cid) {
    ipam::PodRecord rec;
    rec.container_id = cid;
    rec.ifname = "eth0";
    rec.network = "net1";
    rec.host_ifname = "wft" + cid;
    return rec;
  }
  std::optional<ipam::PodRecord> Row(const std::string& cid) {
    auto row = store_->Find(cid, "eth0");
    EXPECT_TRUE(row.ok());
    return row.ok() ? *row : std::nullopt;
  }
  // A stand-in IPAM plugin named "fakeipam" that appends each CNI_COMMAND
  // to <dir>/calls and answers ADD with `result`.
  void InstallIpamPlugin(const std::string& result) {
    ASSERT_TRUE(sys::WriteFileAtomic(dir_ + "/result", result).ok());
    ASSERT_TRUE(sys::WriteFileAtomic(dir_ + "/fakeipam",
                                     "#!/bin/sh\ncat >/dev/null\nd=$(dirname \"$0\")\n"
                                     "echo \"$CNI_COMMAND\" >>\"$d/calls\"\n"
                                     "[ \"$CNI_COMMAND\" = ADD ] && cat \"$d/result\"\nexit 0\n",
                                     0755)
                    .ok());
    cfg_.delegated_ipam = "fakeipam";
    delegated_.emplace("fakeipam", R"({"cniVersion":"1.0.0","name":"net1","type":"weft"})", "1.0.0");
  }
  std::string PluginCalls() {
    auto f = sys::ReadWholeFile(dir_ + "/calls", 4096);
    return f.ok() ? *f : "";
  }
  StoreIpam Ipam() {
    return StoreIpam(*store_, cfg_, delegated_ ? &*delegated_ : nullptr, {"c1", "/run/netns/c1", "eth0", "", {dir_}});
  }

  std::string dir_;
  Config cfg_;
  std::optional<ipam::Store> store_;
  std::optional<DelegatedIpam> delegated_;
};

// Each range below has two usable addresses, .1 and .2.
TEST_F(StoreIpamTest, BuiltinAllocationKeepsTheBridgeGatewayFree) {
  auto ipam = Ipam();
  auto allocate = [&](const std::string& cid, const char* range) -> std::string {
    cfg_.ranges = {*IpPrefix::Parse(range)};
    auto a = ipam.Allocate(Want(cid));
    if (!a.ok()) return a.status().IsExhausted() ? "exhausted" : a.status().ToString();
    a->undo.Dismiss();
    EXPECT_FALSE(a->routes.has_value());  // the datapath chooses the routes
    return a->rec.ip_v4->ToString();
  };
  // Routed: both addresses are the pods'.
  EXPECT_EQ(allocate("r1", "10.9.0.0/30"), "10.9.0.1/30");
  EXPECT_EQ(allocate("r2", "10.9.0.0/30"), "10.9.0.2/30");
  // Bridge: the first usable address is the bridge's gateway.
  cfg_.mode = Mode::kBridge;
  EXPECT_EQ(allocate("b1", "10.9.1.0/30"), "10.9.1.2/30");
  EXPECT_EQ(allocate("b2", "10.9.1.0/30"), "exhausted");
  // ... unless the config names another.
  cfg_.gateways = {*IpAddress::Parse("10.9.2.2")};
  EXPECT_EQ(allocate("g1", "10.9.2.0/30"), "10.9.2.1/30");
  EXPECT_EQ(allocate("g2", "10.9.2.0/30"), "exhausted");
}

TEST_F(StoreIpamTest, TheRowIsAddingUntilReadyAndTheUndoReleasesIt) {
  auto ipam = Ipam();
  {
    auto undone = ipam.Allocate(Want("c1"));
    ASSERT_TRUE(undone.ok());
    ASSERT_TRUE(Row("c1").has_value());
    EXPECT_EQ(Row("c1")->state, ipam::kStateAdding);
  }  // not dismissed: released
  EXPECT_FALSE(Row("c1").has_value());

  auto kept = ipam.Allocate(Want("c1"));
  ASSERT_TRUE(kept.ok());
  kept->undo.Dismiss();
  ASSERT_TRUE(ipam.MarkReady(kept->rec).ok());
  EXPECT_EQ(Row("c1")->state, ipam::kStateReady);
  // A second ADD of the same attachment is refused, and the row stays.
  auto again = ipam.Allocate(Want("c1"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(cni::CodeOf(again.status()), cni::Code::kAlreadyAttached);
  EXPECT_TRUE(Row("c1").has_value());
}

TEST_F(StoreIpamTest, AllocationFailuresNameTheStep) {
  cfg_.ranges = {*IpPrefix::Parse("10.9.0.0/30")};  // two usable addresses
  auto ipam = Ipam();
  for (const char* cid : {"c1", "c2"}) {
    auto a = ipam.Allocate(Want(cid));
    ASSERT_TRUE(a.ok()) << cid;
    a->undo.Dismiss();
  }
  auto full = ipam.Allocate(Want("c3"));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(cni::CodeOf(full.status()), cni::Code::kNoFreeAddress);
  EXPECT_EQ(full.status().msg().rfind("allocate address: ", 0), 0u) << full.status().msg();
}

TEST_F(StoreIpamTest, AHostPortHasOneOwner) {
  auto ipam = Ipam();
  auto a = ipam.Allocate(Want("c1"));
  auto b = ipam.Allocate(Want("c2"));
  ASSERT_TRUE(a.ok() && b.ok());
  a->undo.Dismiss();
  b->undo.Dismiss();
  EXPECT_TRUE(ipam.ClaimPorts(a->rec, {}).ok());
  ipam::PortMapping m{"", 8080, "tcp", "10.9.0.1", 80, "c1", "eth0"};
  ASSERT_TRUE(ipam.ClaimPorts(a->rec, {m}).ok());
  m.container_ip = "10.9.0.2";
  Status clash = ipam.ClaimPorts(b->rec, {m});
  EXPECT_EQ(cni::CodeOf(clash), cni::Code::kHostPortConflict) << clash.ToString();
  auto maps = store_->ListPortMappings();
  ASSERT_TRUE(maps.ok());
  ASSERT_EQ(maps->size(), 1u);
  EXPECT_EQ((*maps)[0].container_id, "c1");
}

TEST_F(StoreIpamTest, DelegatedAddressesAreRecordedWithABridgeGateway) {
  InstallIpamPlugin(R"({"cniVersion":"1.0.0","ips":[{"address":"10.77.0.5/24"}],)"
                    R"("routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.77.0.53"]}})");
  cfg_.mode = Mode::kBridge;
  auto ipam = Ipam();
  auto a = ipam.Allocate(Want("c1"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  a->undo.Dismiss();
  EXPECT_EQ(PluginCalls(), "ADD\n");
  EXPECT_EQ(a->rec.ip_v4, IpPrefix::Parse("10.77.0.5/24"));
  EXPECT_EQ(a->rec.gateway_v4, IpAddress::Parse("10.77.0.1"));  // the subnet's first: IPAM named none
  ASSERT_TRUE(a->routes.has_value());
  EXPECT_EQ(a->routes->size(), 1u);
  EXPECT_EQ(a->dns.nameservers, std::vector<std::string>{"10.77.0.53"});
  auto row = Row("c1");
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->ip_v4, a->rec.ip_v4);
  EXPECT_EQ(row->gateway_v4, a->rec.gateway_v4);
}

TEST_F(StoreIpamTest, TheUndoOfADelegatedAllocationReleasesTheLeaseAndTheRow) {
  InstallIpamPlugin(R"({"cniVersion":"1.0.0","ips":[{"address":"10.77.0.5/24"}]})");
  auto ipam = Ipam();
  {
    auto a = ipam.Allocate(Want("c1"));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_TRUE(Row("c1").has_value());
  }
  EXPECT_EQ(PluginCalls(), "ADD\nDEL\n");
  EXPECT_FALSE(Row("c1").has_value());
}

TEST_F(StoreIpamTest, AnUnusableDelegatedResultReleasesTheLease) {
  InstallIpamPlugin(R"({"cniVersion":"1.0.0","ips":[{"address":"10.77.0.5/24"},{"address":"10.77.0.6/24"}]})");
  auto ipam = Ipam();
  auto a = ipam.Allocate(Want("c1"));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(cni::CodeOf(a.status()), cni::Code::kDelegatedIpam);
  EXPECT_EQ(PluginCalls(), "ADD\nDEL\n");
  EXPECT_FALSE(Row("c1").has_value());
}

TEST_F(StoreIpamTest, ASecondDelegatedAddNeverReachesThePlugin) {
  InstallIpamPlugin(R"({"cniVersion":"1.0.0","ips":[{"address":"10.77.0.5/24"}]})");
  ipam::PodRecord existing = Want("c1");
  existing.ip_v4 = IpPrefix::Parse("10.77.0.9/24");
  ASSERT_TRUE(store_->Insert(existing).ok());
  auto ipam = Ipam();
  auto a = ipam.Allocate(Want("c1"));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(cni::CodeOf(a.status()), cni::Code::kAlreadyAttached);
  EXPECT_EQ(PluginCalls(), "");  // its rollback DEL would have freed the first attachment's address
  EXPECT_EQ(Row("c1")->ip_v4, existing.ip_v4);
}

}  // namespace
}  // namespace weft::plugin
