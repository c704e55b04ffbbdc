// The plugin's firewall tables built by the nftables layer against the text
// path each replaced (fw_text.h, a fixture): applied in two network
// namespaces the test creates, `nft -f` of the old script in one and the
// layer's transaction in the other, the kernel holds the same table, object
// for object (sets with nft's metadata, elements, rules expression for
// expression) and as `nft list table` prints it; and a node that ran the old
// path takes the new one over in one transaction.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <tuple>

#include "fw/hostport.h"
#include "fw/masquerade.h"
#include "fw/source_guard.h"
#include "fw_text.h"
#include "nft_netns.h"
#include "sys/netns.h"
#include "sys/nft_kernel.h"
#include "sys/nft_render.h"
#include "testutil/netns_fixture.h"

namespace weft::fw {
namespace {

using sys::nft::Family;
using sys::nft::TableState;
using weft::testing::TestNetns;

class FwNftEquivalenceTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = weft::testing::TempDir("fwequiv"); }
  void TearDown() override { weft::testing::RemoveTree(dir_); }

  Status Apply(const TestNetns& ns, const sys::nft::Transaction& tx) { return weft::testing::NftApplyIn(ns, tx); }
  void ApplyText(const TestNetns& ns, const std::string& script) { weft::testing::NftFileIn(ns, dir_, script); }
  Result<TableState> Dump(const TestNetns& ns, Family f, const std::string& table) {
    return weft::testing::NftDumpIn(ns, f, table);
  }
  std::string List(const TestNetns& ns, const std::string& family, const std::string& table) {
    return weft::testing::NftListIn(ns, family, table);
  }
  // Handles and element order are the kernel's.
  static TableState Normal(TableState t) {
    for (auto& r : t.rules) r.handle = 0;
    for (auto& [set, elems] : t.elements)
      std::sort(elems.begin(), elems.end(), [](const auto& a, const auto& b) {
        return std::tie(a.key, a.flags) < std::tie(b.key, b.flags);
      });
    return t;
  }
  // The two tables agree object for object and as nft lists them.
  void ExpectSame(const TestNetns& text, const TestNetns& layer, Family f, const std::string& family,
                  const std::string& table) {
    const std::string listed = List(layer, family, table);
    EXPECT_EQ(List(text, family, table), listed);
    auto a = Dump(text, f, table), b = Dump(layer, f, table);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    weft::testing::ExpectSameObjects(f, Normal(*a), Normal(*b));
    // The layer's rendering of what it read is nft's listing.
    EXPECT_EQ(sys::nft::RenderTable(*b), listed);
  }
  std::string dir_;
};

MasqueradeSpec Spec(bool dual) {
  MasqueradeSpec s;
  s.network = "weft";
  s.pod_ranges = {*IpPrefix::Parse("10.244.2.0/24")};
  s.no_masq = {*IpPrefix::Parse("10.244.0.0/16"), *IpPrefix::Parse("192.168.0.0/16"),
               *IpPrefix::Parse("255.255.255.0/24")};  // a range to the family's last address
  if (dual) {
    s.pod_ranges.push_back(*IpPrefix::Parse("fd00:10:244:2::/64"));
    s.no_masq.push_back(*IpPrefix::Parse("fd00:10:244::/48"));
    s.no_masq.push_back(*IpPrefix::Parse("fd00:10:96::/112"));
  }
  return s;
}

TEST_F(FwNftEquivalenceTest, MasqueradeTheLayerBuildsTheTableTheTextPathBuilt) {
  for (bool dual : {false, true}) {
    SCOPED_TRACE(dual ? "dual stack" : "IPv4");
    TestNetns text("fwmasqtext"), layer("fwmasqlayer");
    ApplyText(text, weft::testing::MasqueradeText(Spec(dual)));
    ASSERT_TRUE(Apply(layer, NftMasqueradeTransaction(Spec(dual))).ok());
    ExpectSame(text, layer, Family::kInet, "inet", NftTableName("weft"));
  }
}

TEST_F(FwNftEquivalenceTest, MasqueradeTakesTheTextPathsTableOverAndRemovesIt) {
  TestNetns ns("fwmasqup");
  auto old = Spec(false);
  old.pod_ranges = {*IpPrefix::Parse("10.244.9.0/24")};
  ApplyText(ns, weft::testing::MasqueradeText(old));
  ASSERT_TRUE(Apply(ns, NftMasqueradeTransaction(Spec(true))).ok());
  TestNetns fresh("fwmasqfresh");
  ASSERT_TRUE(Apply(fresh, NftMasqueradeTransaction(Spec(true))).ok());
  EXPECT_EQ(List(ns, "inet", NftTableName("weft")), List(fresh, "inet", NftTableName("weft")));
  ASSERT_TRUE(Apply(ns, NftMasqueradeRemoval(Spec(true))).ok());
  auto gone = Dump(ns, Family::kInet, NftTableName("weft"));
  EXPECT_EQ(gone.status().sys_errno(), ENOENT) << gone.status().ToString();
  EXPECT_TRUE(Apply(ns, NftMasqueradeRemoval(Spec(true))).ok());  // none there: no error
}

TEST_F(FwNftEquivalenceTest, SourceGuardTheLayerBuildsTheTablesTheTextPathBuilt) {
  for (GuardMode mode : {GuardMode::kRouted, GuardMode::kBridge}) {
    SCOPED_TRACE(GuardTable(mode));
    TestNetns text("fwguardtext"), layer("fwguardlayer");
    ApplyText(text, weft::testing::GuardText(mode, GuardMarker(mode)));
    ASSERT_TRUE(Apply(layer, GuardTransaction(mode)).ok());
    ExpectSame(text, layer, Family::kNetdev, "netdev", GuardTable(mode));
    // The anonymous set of `icmpv6 type { nd-router-advert, nd-redirect }`
    // is in both, with its two elements.
    auto t = Dump(layer, Family::kNetdev, GuardTable(mode));
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->elements["__set0"].size(), 2u);
  }
}

TEST_F(FwNftEquivalenceTest, SourceGuardTakesTheTextPathsTableOverKeepingItsElements) {
  for (GuardMode mode : {GuardMode::kRouted, GuardMode::kBridge}) {
    SCOPED_TRACE(GuardTable(mode));
    const std::string t = GuardTable(mode);
    const std::string optout = "add element netdev " + t + " allow4 { \"wft0123456789ab\" . 10.9.0.0/16 }\n";
    // A node of the text path, with an operator's opt-out and the marker
    // of an older ruleset: the transaction replaces the shared chains
    // (their anonymous set with them), keeps the elements, and a second
    // application changes nothing.
    TestNetns up("fwguardup"), fresh("fwguardfresh");
    ApplyText(up, weft::testing::GuardText(mode, "weft-guard:0123456789abcdef") + optout);
    ASSERT_TRUE(Apply(up, GuardTransaction(mode)).ok());
    ASSERT_TRUE(Apply(up, GuardTransaction(mode)).ok());
    ASSERT_TRUE(Apply(fresh, GuardTransaction(mode)).ok());
    ApplyText(fresh, optout);
    EXPECT_EQ(List(up, "netdev", t), List(fresh, "netdev", t));
    auto a = Dump(up, Family::kNetdev, t);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->elements["allow4"].size(), 1u);
    EXPECT_EQ(std::count_if(a->sets.begin(), a->sets.end(),
                            [](const auto& s) { return sys::nft::IsAnonymousSetName(s.name); }),
              1);
  }
}

std::vector<HostPortRule> Mappings() {
  return {{"", 8080, "tcp", *IpPrefix::Parse("10.244.2.5/24"), 80},
          {"192.168.1.10", 53, "udp", *IpPrefix::Parse("10.244.2.6/24"), 5353},
          {"", 30000, "tcp", *IpPrefix::Parse("10.99.0.7/16"), 8080},
          {"", 8443, "tcp", *IpPrefix::Parse("fd00:10:244:2::5/64"), 443},
          {"fd00::1", 9000, "sctp", *IpPrefix::Parse("fd00:10:244:2::6/64"), 9001}};
}

TEST_F(FwNftEquivalenceTest, HostPortsTheLayerBuildsTheTableTheTextPathBuilt) {
  const std::string t = HostPortTable("/var/lib/weft");
  for (size_t n : {size_t{1}, size_t{3}, size_t{5}}) {  // IPv4 only, two subnets, dual stack
    SCOPED_TRACE(std::to_string(n) + " mappings");
    auto rules = Mappings();
    rules.resize(n);
    TestNetns text("fwhptext"), layer("fwhplayer");
    ApplyText(text, weft::testing::HostPortText(t, rules));
    ASSERT_TRUE(Apply(layer, NftHostPortTransaction(t, rules)).ok());
    ExpectSame(text, layer, Family::kInet, "inet", t);
  }
}

TEST_F(FwNftEquivalenceTest, HostPortsReplaceTheTextPathsTableAndDeleteIt) {
  const std::string t = HostPortTable("/var/lib/weft");
  TestNetns ns("fwhpup"), fresh("fwhpfresh");
  auto old = Mappings();
  old.resize(2);
  ApplyText(ns, weft::testing::HostPortText(t, old));
  ASSERT_TRUE(Apply(ns, NftHostPortTransaction(t, Mappings())).ok());
  ASSERT_TRUE(Apply(fresh, NftHostPortTransaction(t, Mappings())).ok());
  EXPECT_EQ(List(ns, "inet", t), List(fresh, "inet", t));
  ASSERT_TRUE(Apply(ns, NftHostPortTransaction(t, {})).ok());
  EXPECT_EQ(Dump(ns, Family::kInet, t).status().sys_errno(), ENOENT);
  EXPECT_TRUE(Apply(ns, NftHostPortTransaction(t, {})).ok());  // none there: no error
}

}  // namespace
}  // namespace weft::fw
