#include "overlay/filter.h"

#include <gtest/gtest.h>

#include "sys/nft_fake.h"
#include "sys/nft_render.h"

namespace weft::overlay {
namespace {

IpPrefix P(const char* s) { return *IpPrefix::Parse(s); }
IpAddress A(const char* s) { return *IpAddress::Parse(s); }

std::string Script(int port) { return sys::nft::RenderTransaction(OverlayFilterTransaction(port)); }

TEST(OverlayFilter, RendersOneTableWhoseDropRulesAreCounted) {
  const std::string s = Script(8472);
  EXPECT_NE(s.find("add table inet weft-overlay\n"), std::string::npos);
  EXPECT_NE(s.find("add chain inet weft-overlay input { type filter hook input priority filter - 10; policy accept; }"),
            std::string::npos);
  EXPECT_NE(s.find("add rule inet weft-overlay input udp dport 8472 jump vxlan comment \"" +
                   OverlayFilterMarker(8472) + "\""),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("typeof ip saddr . @th,336,32"), std::string::npos) << s;
  // The inner source read at the UDP header + 42 bytes (IPv4) or + 38 (IPv6).
  EXPECT_NE(s.find("@th,224,16 0x800 ip saddr . @th,336,32 @peer4-pod4 return"), std::string::npos) << s;
  EXPECT_NE(s.find("@th,224,16 0x86dd ip6 saddr . @th,304,128 @peer6-pod6 return"), std::string::npos);
  EXPECT_NE(s.find("ip saddr != @peers4 counter name \"vxlan-unknown-peer\" drop"), std::string::npos);
  EXPECT_NE(s.find("vxlan counter name \"vxlan-foreign-source\" drop"), std::string::npos);
  // Sets are declared (kept when present), never flushed.
  EXPECT_EQ(s.find("flush set"), std::string::npos);
  EXPECT_NE(OverlayFilterMarker(8472), OverlayFilterMarker(4789));
}

TEST(OverlayFilter, ElementsRoundTrip) {
  for (const FilterEntry& e : {FilterEntry{A("192.0.2.12"), std::nullopt}, FilterEntry{A("2001:db8::12"), std::nullopt},
                               FilterEntry{A("192.0.2.12"), P("10.244.2.0/24")},
                               FilterEntry{A("192.0.2.12"), P("fd00:2::/64")},
                               FilterEntry{A("2001:db8::12"), P("10.244.2.0/24")},
                               FilterEntry{A("2001:db8::12"), P("fd00:2::/64")},
                               FilterEntry{A("192.0.2.12"), P("10.0.0.0/8")},
                               FilterEntry{A("192.0.2.12"), P("10.244.2.7/32")}}) {
    sys::NftElement el = FilterElement(e);
    auto back = ParseFilterElement(el);
    ASSERT_TRUE(back.has_value()) << el.set;
    EXPECT_EQ(*back, e) << el.set;
  }
  sys::NftElement el = FilterElement({A("192.0.2.12"), P("10.244.2.0/24")});
  EXPECT_EQ(el.set, "peer4-pod4");
  EXPECT_EQ(el.key, std::string("\xc0\x00\x02\x0c\x0a\xf4\x02\x00", 8));
  EXPECT_EQ(el.key_end, std::string("\xc0\x00\x02\x0c\x0a\xf4\x02\xff", 8));
  // A range that is no prefix, or of another table, is not ours.
  el.key_end[7] = '\x7e';
  EXPECT_FALSE(ParseFilterElement(el).has_value());
  EXPECT_FALSE(ParseFilterElement({"mac", "x", "", "", 0}).has_value());
}

TEST(OverlayFilter, HostGwElementsRoundTrip) {
  for (const HostGwEntry& e : {HostGwEntry{P("10.244.2.0/24"), "up0", ""}, HostGwEntry{P("fd00:2::/64"), "eth1", ""},
                               HostGwEntry{P("10.244.2.0/24"), "", "0a:00:00:00:00:02"},
                               HostGwEntry{P("fd00:2::/64"), "", "0a:00:00:00:00:02"}}) {
    sys::NftElement el = HostGwElement(e);
    auto back = ParseHostGwElement(el);
    ASSERT_TRUE(back.has_value()) << el.set;
    EXPECT_EQ(*back, e) << el.set;
  }
  sys::NftElement el = HostGwElement({P("10.244.2.0/24"), "", "0a:00:00:00:00:02"});
  EXPECT_EQ(el.set, "gw4");
  EXPECT_EQ(el.key, std::string("\x0a\xf4\x02\x00\x0a\x00\x00\x00\x00\x02\x00\x00", 12));
  EXPECT_EQ(el.key_end, std::string("\x0a\xf4\x02\xff\x0a\x00\x00\x00\x00\x02\x00\x00", 12));
  el = HostGwElement({P("10.244.2.0/24"), "up0", ""});
  EXPECT_EQ(el.set, "pods4-on");
  EXPECT_EQ(el.key.size(), 20u);
  const std::string s = Script(8472);
  EXPECT_NE(s.find("add chain inet weft-overlay hostgw { type filter hook prerouting priority raw; policy accept; }"),
            std::string::npos);
  EXPECT_NE(s.find("add rule inet weft-overlay hostgw ip saddr . iifname @pods4-on ip saddr . ether saddr != @gw4 "
                   "counter name \"hostgw-foreign-source\" drop"),
            std::string::npos)
      << s;
}

TEST(OverlayFilter, CountersAndMetrics) {
  const OverlayFilterCounters c =
      OverlayFilterCountersFrom({{"vxlan-unknown-peer", 3, 300}, {"vxlan-foreign-source", 5, 500}, {"other", 9, 9}});
  EXPECT_TRUE(c.installed);
  EXPECT_EQ(c.unknown_peer, 3u);
  EXPECT_EQ(c.foreign_source, 5u);
  EXPECT_EQ(c.hostgw_foreign_source, 0u);
  const std::string m = RenderOverlayFilterMetrics(c);
  EXPECT_NE(m.find("weft_overlay_filter_installed 1\n"), std::string::npos);
  EXPECT_NE(m.find("weft_overlay_filter_dropped_packets_total{reason=\"unknown_peer\"} 3\n"), std::string::npos);
  EXPECT_NE(m.find("weft_overlay_filter_dropped_packets_total{reason=\"foreign_source\"} 5\n"), std::string::npos);
  EXPECT_NE(RenderOverlayFilterMetrics({}).find("weft_overlay_filter_installed 0\n"), std::string::npos);
}

// Applied again over a table that has elements, the transaction keeps them
// and replaces only the rules (the fake holds the kernel's semantics).
TEST(OverlayFilter, ReapplyKeepsElementsAndReplacesRules) {
  sys::nft::Fake fake;
  ASSERT_TRUE(fake.Apply(OverlayFilterTransaction(8472)).ok());
  sys::nft::Transaction el(sys::nft::Family::kInet, kOverlayTable);
  el.Add(sys::nft::Elements{"peers4", {{std::string("\xc0\x00\x02\x0c", 4)}}});
  ASSERT_TRUE(fake.Apply(el).ok());
  auto first = fake.Dump(sys::nft::Family::kInet, kOverlayTable);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(fake.Apply(OverlayFilterTransaction(4789)).ok());
  auto again = fake.Dump(sys::nft::Family::kInet, kOverlayTable);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->elements["peers4"].size(), 1u);
  EXPECT_EQ(again->rules.size(), first->rules.size());
  EXPECT_EQ(again->sets, first->sets);
  int with_marker = 0;
  for (const auto& r : again->rules) with_marker += r.comment == OverlayFilterMarker(4789);
  EXPECT_EQ(with_marker, 1);
}

}  // namespace
}  // namespace weft::overlay
