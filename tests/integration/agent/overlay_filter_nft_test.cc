// The overlay filter (table inet weft-overlay) built by the nftables layer
// against the text path it replaced (overlay_filter_text.h), in network
// namespaces the test creates: both make the same table, object for object
// (sets with nft's metadata, rules expression for expression) and as
// `nft list table` prints it; the layer's own rendering prints it the same
// way; and applied over a table the text path made (a node upgraded from
// 0.4.0), the transaction keeps the elements and replaces the rules.

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "overlay/filter.h"
#include "overlay_filter_text.h"
#include "sys/netns.h"
#include "sys/nft_kernel.h"
#include "sys/nft_render.h"
#include "nft_netns.h"
#include "testutil/netns_fixture.h"

namespace weft::overlay {
namespace {

using sys::nft::Family;
using sys::nft::TableState;
using weft::testing::TestNetns;

class OverlayFilterNftTest : public ::testing::Test {
 protected:
  Status Apply(const TestNetns& ns, const sys::nft::Transaction& tx) { return weft::testing::NftApplyIn(ns, tx); }
  void ApplyText(const TestNetns& ns, int port, const std::string& marker) {
    weft::testing::NftFileIn(ns, dir_, weft::testing::OverlayFilterText(port, marker));
  }
  Result<TableState> Dump(const TestNetns& ns) { return weft::testing::NftDumpIn(ns, Family::kInet, kOverlayTable); }
  std::string List(const TestNetns& ns) { return weft::testing::NftListIn(ns, "inet", kOverlayTable); }
  static TableState WithoutHandles(TableState t) {
    for (auto& r : t.rules) r.handle = 0;
    return t;
  }
  void SetUp() override { dir_ = weft::testing::TempDir("ovfilter"); }
  void TearDown() override { weft::testing::RemoveTree(dir_); }
  std::string dir_;
};

TEST_F(OverlayFilterNftTest, TheLayerBuildsTheTableTheTextPathBuilt) {
  TestNetns text("ovtext"), layer("ovlayer");
  ApplyText(text, 8472, OverlayFilterMarker(8472));
  ASSERT_TRUE(Apply(layer, OverlayFilterTransaction(8472)).ok());
  const std::string listed = List(layer);
  EXPECT_EQ(List(text), listed);
  EXPECT_NE(listed.find("typeof ip saddr . @th,336,32"), std::string::npos) << listed;
  auto a = Dump(text), b = Dump(layer);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(WithoutHandles(*a).sets, WithoutHandles(*b).sets);
  ASSERT_EQ(a->rules.size(), b->rules.size());
  for (size_t i = 0; i < a->rules.size(); ++i)
    EXPECT_EQ(WithoutHandles(*a).rules[i], WithoutHandles(*b).rules[i])
        << "rule " << i << ": " << sys::nft::RenderRule(Family::kInet, a->rules[i]);
  EXPECT_EQ(a->chains, b->chains);
  EXPECT_EQ(a->counters, b->counters);
  // The layer's rendering of what it read is nft's listing.
  EXPECT_EQ(sys::nft::RenderTable(*b), listed);
}

TEST_F(OverlayFilterNftTest, AnUpgradedNodeKeepsItsElementsAndGetsTheNewRules) {
  TestNetns ns("ovupgrade");
  ApplyText(ns, 8472, "weft-overlay:0123456789abcdef");  // a 0.4.0 weftd's marker
  std::string out;
  ASSERT_EQ(ns.Exec({"nft", "add", "element", "inet", kOverlayTable, "peers4", "{ 192.0.2.12 }"}, &out), 0) << out;
  // A raw field's elements are bytes to nft's parser too: written as weftd writes them.
  const sys::NftElement pods = FilterElement({*IpAddress::Parse("192.0.2.12"), *IpPrefix::Parse("10.244.2.0/24")});
  sys::nft::Transaction el(Family::kInet, kOverlayTable);
  el.Add(sys::nft::Elements{pods.set, {{pods.key, pods.key_end}}});
  ASSERT_TRUE(Apply(ns, el).ok());
  ASSERT_TRUE(Apply(ns, OverlayFilterTransaction(8472)).ok());
  const std::string listed = List(ns);
  EXPECT_NE(listed.find("192.0.2.12 . 0xaf40200-0xaf402ff"), std::string::npos) << listed;
  EXPECT_NE(listed.find("elements = { 192.0.2.12 }"), std::string::npos) << listed;
  EXPECT_NE(listed.find(OverlayFilterMarker(8472)), std::string::npos) << listed;
  EXPECT_EQ(listed.find("0123456789abcdef"), std::string::npos) << listed;
  // Applying it again changes nothing.
  auto before = Dump(ns);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(Apply(ns, OverlayFilterTransaction(8472)).ok());
  auto after = Dump(ns);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(WithoutHandles(*before).sets, WithoutHandles(*after).sets);
  EXPECT_EQ(before->elements, after->elements);
  EXPECT_EQ(WithoutHandles(*before).rules.size(), WithoutHandles(*after).rules.size());
}

}  // namespace
}  // namespace weft::overlay
