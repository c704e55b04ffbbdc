// The NetworkPolicy controller's element-only deltas (netpol_model.h
// ElementOnlyDelta, sent by the kernel seam's ApplyElements as one raw
// nfnetlink batch) against the kernel, in test netns: after pod events that
// move addresses and named ports in and out of peer sets, the table the raw
// batches leave is the one libnftables builds from the same model's full
// script (`nft list table` prints the two alike), and an element the kernel
// does not have refuses the whole batch.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "policy/netpol_controller.h"
#include "policy/netpol_model.h"
#include "policy/netpol_testing.h"
#include "sys/netns.h"
#include "testutil/netns_fixture.h"

namespace weft {
namespace {

using namespace policy::netpol;
using testing::TestNetns;

using test_util::MakePod;

Policy Parse(const std::string& text) { return *DecodePolicy(nlohmann::json::parse(text)); }

class NetpolElementsTest : public ::testing::Test {
 protected:
  NetpolElementsTest() : e_(EngineOptions{"n1", kDefaultPendingGroup}) {}
  void SetUp() override {
    raw_ = std::make_unique<TestNetns>("npelem-raw");
    script_ = std::make_unique<TestNetns>("npelem-script");
  }

  Status InNetns(const TestNetns& ns, const std::function<Status(policy::NetpolKernel&)>& fn) {
    auto h = sys::Netns::Open(ns.path());
    if (!h.ok()) return h.status();
    return sys::RunInNetns(*h, [&] {
      auto k = policy::NewNetpolKernel();
      return fn(*k);
    });
  }

  // The element-only delta encoded as the controller sends it.
  std::vector<sys::NftChange> Encode(const std::vector<ElementChange>& elems) {
    std::vector<sys::NftChange> out;
    for (const auto& e : elems) {
      auto key = ElementKey(e_.desired().sets.at(e.set).type, e.element);
      EXPECT_TRUE(key.ok()) << key.status().ToString();
      sys::NftChange c;
      c.op = e.add ? sys::NftChange::kAddElement : sys::NftChange::kDeleteElement;
      c.elem.set = e.set;
      c.elem.key = key.ok() ? *key : "";
      out.push_back(c);
    }
    return out;
  }

  std::string Table(const TestNetns& ns) {
    std::string out;
    ns.Exec({"nft", "list", "table", "inet", kTable}, &out);
    return out;
  }

  Engine e_;
  std::unique_ptr<TestNetns> raw_, script_;
};

TEST_F(NetpolElementsTest, RawElementBatchesLeaveTheTableTheScriptBuilds) {
  e_.UpsertNamespace({"x", {{"ns", "x"}}});
  e_.UpsertNamespace({"y", {{"ns", "y"}}});
  e_.UpsertPod(MakePod("x", "a", {{"app", "db"}}, "n1", "10.0.1.1", {{"serve", Proto::kTcp, 5432}}));
  e_.UpsertPod(MakePod("x", "b", {{"app", "web"}}, "n2", "10.0.1.2", {{"serve", Proto::kTcp, 8080}}));
  e_.UpsertPod(MakePod("y", "c", {{"app", "web"}}, "n2", "10.0.2.1", {{"serve", Proto::kUdp, 53}}));
  e_.UpsertPod(MakePod("y", "d", {{"app", "db"}}, "n2", "fd00::21", {{"serve", Proto::kSctp, 7}}));
  e_.UpsertPolicy(Parse(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{"matchLabels":{"app":"db"}},
     "policyTypes":["Ingress","Egress"],
     "ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"web"}}},
                         {"namespaceSelector":{"matchLabels":{"ns":"y"}},"podSelector":{"matchLabels":{"app":"web"}}}]}],
     "egress":[{"to":[{"namespaceSelector":{}}],"ports":[{"port":"serve"},{"port":"serve","protocol":"UDP"},
                                                       {"port":"serve","protocol":"SCTP"}]}]}})"));
  const std::string full = e_.RenderFull();
  ASSERT_TRUE(InNetns(*raw_, [&](policy::NetpolKernel& k) { return k.Apply(full); }).ok());
  e_.MarkApplied(true);

  // Remote pods relabelled, readdressed, renumbered and gone: each an
  // element-only delta, sent raw.
  auto step = [&](const char* what) {
    auto d = e_.ElementOnlyDelta();
    ASSERT_TRUE(d.has_value()) << what;
    ASSERT_FALSE(d->empty()) << what;
    Status st = InNetns(*raw_, [&](policy::NetpolKernel& k) { return k.ApplyElements(Encode(*d)); });
    ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
    e_.MarkApplied(false);
  };
  e_.UpsertPod(MakePod("x", "b", {{"app", "batch"}}, "n2", "10.0.1.2", {{"serve", Proto::kTcp, 8080}}));
  step("relabelled out of the peers");
  e_.UpsertPod(MakePod("y", "c", {{"app", "web"}}, "n2", "10.0.2.7", {{"serve", Proto::kUdp, 5353}}));
  step("a new address and port");
  e_.UpsertPod(MakePod("y", "e", {{"app", "web"}}, "n2", "fd00::22", {{"serve", Proto::kTcp, 65535}}));
  step("a new IPv6 pod");
  e_.RemovePod("y/d");
  step("a pod gone");

  // The same model as one script in a fresh netns.
  const std::string now = e_.RenderFull();
  ASSERT_TRUE(InNetns(*script_, [&](policy::NetpolKernel& k) { return k.Apply(now); }).ok());
  const std::string a = Table(*raw_), b = Table(*script_);
  ASSERT_NE(a.find("10.0.2.7 . udp . 5353"), std::string::npos) << a;
  ASSERT_NE(a.find("fd00::22 . tcp . 65535"), std::string::npos) << a;
  ASSERT_NE(a.find("10.0.1.2 . tcp . 8080"), std::string::npos) << a;  // still a named-port peer
  EXPECT_EQ(a.find("fd00::21"), std::string::npos) << a;
  EXPECT_EQ(a, b);

  // An element the kernel does not hold: the batch is refused whole.
  std::vector<ElementChange> bad = {{"local4", "10.0.1.99", true}, {"local4", "10.0.1.98", false}};
  Status st = InNetns(*raw_, [&](policy::NetpolKernel& k) { return k.ApplyElements(Encode(bad)); });
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(Table(*raw_), a);
}

}  // namespace
}  // namespace weft
