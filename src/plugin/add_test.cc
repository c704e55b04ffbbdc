// The ADD sequence (add.h) against fakes of its steps, without root: the
#include "cni/errors.h"
// order of the steps, what each is given, and the rollback on every
// failure.
#include "plugin/add.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "sys/files.h"

namespace weft::plugin {
namespace {

// Every call the fakes see, in order, as one line each.
using Calls = std::vector<std::string>;

// A step that fails when the test says so, with a status naming it.
class Failing {
 public:
  explicit Failing(Calls& calls) : calls_(calls) {}
  void FailAt(const std::string& step) { fail_at_ = step; }
  static Status ErrorOf(const std::string& step) { return Status::Error(Reason::kFailed, Domain::kKernel,
                                                                        step + " failed", "injected"); }

 protected:
  Status Step(const std::string& call, const std::string& step) {
    calls_.push_back(call);
    return step == fail_at_ ? ErrorOf(step) : Status::Ok();
  }
  Calls& calls_;

 private:
  std::string fail_at_;
};

class FakeIpam : public AddIpam, public Failing {
 public:
  using Failing::Failing;
  Result<Allocation> Allocate(const ipam::PodRecord& want) override {
    WEFT_RETURN_IF_ERROR(Step("allocate " + want.container_id + "/" + want.ifname, "allocate"));
    ipam::PodRecord rec = want;
    rec.ip_v4 = v4;
    rec.ip_v6 = v6;
    return Allocation{rec, routes, dns, ScopeGuard([this] { calls_.push_back("undo allocation"); })};
  }
  Status ClaimPorts(const ipam::PodRecord&, const std::vector<ipam::PortMapping>& maps) override {
    std::string call = "claim ports";
    for (const auto& m : maps) call += " " + std::to_string(m.host_port) + "->" + m.container_ip;
    return Step(call, "claim");
  }
  Status MarkReady(const ipam::PodRecord&) override { return Step("ready", "ready"); }

  std::optional<IpPrefix> v4 = IpPrefix::Parse("10.1.0.7/24"), v6;
  std::optional<std::vector<cni::Route>> routes;
  cni::Dns dns;
};

class FakeDatapath : public Datapath, public Failing {
 public:
  using Failing::Failing;
  Status CreateLinks(uint32_t host_group) override {
    return Step("create links group " + std::to_string(host_group), "create");
  }
  Status Attach(const ipam::PodRecord& rec, const std::optional<std::vector<cni::Route>>& ipam_routes) override {
    std::string call = "attach " + rec.ip_v4.value_or(IpPrefix()).ToString();
    if (ipam_routes) call += " with " + std::to_string(ipam_routes->size()) + " IPAM routes";
    return Step(call, "attach");
  }
  cni::CniResult Result() const override {
    cni::CniResult r;
    r.interfaces.push_back({"wftpod", "", std::nullopt, "", "", ""});
    return r;
  }
  std::string LocalnetDevice() const override { return "wftpod"; }
  Status Check(const ipam::PodRecord&) override { return Step("check", "check"); }
};

class FakeFirewall : public AddFirewall, public Failing {
 public:
  using Failing::Failing;
  Status EnsureSourceGuard() override { return Step("source guard", "guard"); }
  Status BindSources(const ipam::PodRecord&) override { return Step("bind sources", "bind"); }
  Status EnsureMasquerade(const ipam::PodRecord&) override { return Step("masquerade", "masquerade"); }
  Status SyncHostPorts(const ipam::PodRecord&, const std::string& localnet_dev) override {
    return Step("sync hostports via " + localnet_dev, "hostports");
  }
  Status FlushUdpConntrack(const ipam::PodRecord&) override { return Step("flush conntrack", "conntrack"); }
};

class AddSequenceTest : public ::testing::Test {
 protected:
  AddSequenceTest() {
    req_.cfg.net.name = "net1";
    req_.container_id = "c1";
    req_.ifname = "eth0";
    req_.netns = "/run/netns/c1";
    req_.host_ifname = "wftpod";
  }
  Result<cni::CniResult> Add() {
    PhaseTimer timer;
    AddSteps steps{ipam_, datapath_, firewall_, [this](bool delete_link) {
                     calls_.push_back(delete_link ? "teardown" : "teardown keeping the link");
                   }};
    return RunAdd(req_, steps, timer);
  }
  void WithHostPort() { req_.rt.port_mappings.push_back({"", 8080, 80, "tcp"}); }

  Calls calls_;
  FakeIpam ipam_{calls_};
  FakeDatapath datapath_{calls_};
  FakeFirewall firewall_{calls_};
  AddRequest req_;
};

TEST_F(AddSequenceTest, APlainPodIsAllocatedAttachedAndMarkedReady) {
  auto r = Add();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(calls_, (Calls{"allocate c1/eth0", "claim ports", "source guard", "create links group 0", "bind sources", "attach 10.1.0.7/24", "ready"}));
  ASSERT_EQ(r->interfaces.size(), 1u);
  EXPECT_EQ(r->interfaces[0].name, "wftpod");
}

TEST_F(AddSequenceTest, MasqueradeAndHostPortsComeAfterTheInterfacesAndBeforeReady) {
  req_.cfg.masquerade = true;
  WithHostPort();
  ASSERT_TRUE(Add().ok());
  EXPECT_EQ(calls_, (Calls{"allocate c1/eth0", "claim ports 8080->10.1.0.7", "source guard", "create links group 0", "bind sources",
                           "attach 10.1.0.7/24", "masquerade", "sync hostports via wftpod", "flush conntrack",
                           "ready"}));
}

TEST_F(AddSequenceTest, HostPortsGoToTheIpv4AddressElseTheIpv6One) {
  WithHostPort();
  ipam_.v6 = IpPrefix::Parse("fd00::7/64");
  ipam::PodRecord rec = req_.Record();
  rec.ip_v4 = ipam_.v4;
  rec.ip_v6 = ipam_.v6;
  auto maps = PortMappingsFor(req_, rec);
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].container_ip, "10.1.0.7");
  EXPECT_EQ(maps[0].container_id, "c1");
  EXPECT_EQ(maps[0].ifname, "eth0");
  rec.ip_v4.reset();
  EXPECT_EQ(PortMappingsFor(req_, rec)[0].container_ip, "fd00::7");
}

TEST_F(AddSequenceTest, TheRequestBecomesTheRowToAllocate) {
  req_.pod_name = "web";
  req_.pod_namespace = "shop";
  req_.pod_uid = "u1";
  req_.mtu = 1400;
  ipam::PodRecord rec = req_.Record();
  EXPECT_EQ(rec.network, "net1");
  EXPECT_EQ(rec.netns, "/run/netns/c1");
  EXPECT_EQ(rec.host_ifname, "wftpod");
  EXPECT_EQ(rec.pod_namespace, "shop");
  EXPECT_EQ(rec.mtu, 1400);
  EXPECT_EQ(rec.state, ipam::kStateAdding);
  EXPECT_FALSE(rec.ip_v4 || rec.ip_v6);
}

// Every step after the allocation that can fail: the error comes back as
// the step returned it, the teardown runs exactly once (deleting the link
// only once this ADD created it), the allocation's own undo never runs (the
// teardown owns the row by then), and nothing after the failed step does.
struct FailureCase {
  std::string step;
  std::string last_call;
  bool link_created;
};

class AddRollbackTest : public AddSequenceTest, public ::testing::WithParamInterface<FailureCase> {};

TEST_P(AddRollbackTest, EveryFailureTearsDownOnce) {
  req_.cfg.masquerade = true;
  WithHostPort();
  const FailureCase& c = GetParam();
  ipam_.FailAt(c.step);
  datapath_.FailAt(c.step);
  firewall_.FailAt(c.step);
  auto r = Add();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(cni::CodeOf(r.status()), cni::Code::kKernel);
  EXPECT_EQ(r.status().msg(), c.step + " failed");
  const Calls all = {"allocate c1/eth0",  "claim ports 8080->10.1.0.7", "source guard", "create links group 0", "bind sources",
                     "attach 10.1.0.7/24", "masquerade", "sync hostports via wftpod", "flush conntrack",
                     "ready"};
  Calls want;
  for (const auto& call : all) {
    want.push_back(call);
    if (call == c.last_call) break;
  }
  want.push_back(c.link_created ? "teardown" : "teardown keeping the link");
  EXPECT_EQ(calls_, want);
}

INSTANTIATE_TEST_SUITE_P(
    Steps, AddRollbackTest,
    ::testing::Values(FailureCase{"claim", "claim ports 8080->10.1.0.7", false},
                      FailureCase{"guard", "source guard", false},
                      FailureCase{"create", "create links group 0", false},
                      FailureCase{"bind", "bind sources", true},
                      FailureCase{"attach", "attach 10.1.0.7/24", true},
                      FailureCase{"masquerade", "masquerade", true},
                      FailureCase{"hostports", "sync hostports via wftpod", true},
                      FailureCase{"conntrack", "flush conntrack", true},
                      FailureCase{"ready", "ready", true}),
    [](const auto& i) { return i.param.step; });

TEST_F(AddSequenceTest, AFailedAllocationLeavesNothingToTearDown) {
  ipam_.FailAt("allocate");
  auto r = Add();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().msg(), "allocate failed");
  EXPECT_EQ(calls_, (Calls{"allocate c1/eth0"}));
}

TEST_F(AddSequenceTest, DelegatedRoutesReachTheDatapathAndItsDnsTheResult) {
  ipam_.routes = std::vector<cni::Route>{{*IpPrefix::Parse("0.0.0.0/0"), std::nullopt}};
  ipam_.dns.nameservers = {"10.1.0.10"};
  auto r = Add();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(calls_[5], "attach 10.1.0.7/24 with 1 IPAM routes");
  EXPECT_EQ(r->dns.nameservers, std::vector<std::string>{"10.1.0.10"});
  // runtimeConfig.dns wins over the config's, which wins over IPAM's.
  calls_.clear();
  req_.cfg.net.dns.nameservers = {"10.0.0.53"};
  EXPECT_EQ(Add()->dns.nameservers, std::vector<std::string>{"10.0.0.53"});
  cni::Dns rt;
  rt.nameservers = {"192.0.2.53"};
  req_.rt.dns = rt;
  EXPECT_EQ(Add()->dns.nameservers, std::vector<std::string>{"192.0.2.53"});
}

TEST_F(AddSequenceTest, APodInANamespaceWithPoliciesStartsInThePendingGroup) {
  char tmpl[] = "/tmp/weft-add-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  NetworkPolicyConfig np;
  np.namespaces_file = dir + "/namespaces";
  np.pending_group = 77;
  ASSERT_TRUE(sys::WriteFileAtomic(np.namespaces_file, "shop\n").ok());
  req_.cfg.network_policy = np;
  req_.pod_namespace = "shop";
  ASSERT_TRUE(Add().ok());
  req_.pod_namespace = "default";
  ASSERT_TRUE(Add().ok());
  (void)sys::RemoveFile(np.namespaces_file);
  ::rmdir(dir.c_str());
  EXPECT_EQ(calls_[3], "create links group 77");
  EXPECT_EQ(calls_[10], "create links group 0");
}

}  // namespace
}  // namespace weft::plugin
