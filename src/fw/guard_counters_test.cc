#include "fw/guard_counters.h"

#include <gtest/gtest.h>

namespace weft::fw {
namespace {

// The layer's dump of each table's named counters, as the kernel holds
// them (names the guard does not know are ignored).
TEST(GuardCounters, AreTakenFromEachTablesNamedCounters) {
  GuardCounters c;
  AddGuardCounters(GuardMode::kRouted, {{"spoofed4", 5, 420}, {"spoofed6", 3, 300}, {"other", 9, 9}}, &c);
  EXPECT_TRUE(c.routed_installed);
  EXPECT_FALSE(c.bridge_installed);
  EXPECT_EQ(c.routed4, 5u);
  EXPECT_EQ(c.routed6, 3u);
  EXPECT_EQ(c.bridge4 + c.bridge6 + c.bridge_mac, 0u);
  AddGuardCounters(GuardMode::kBridge, {{"spoofed-mac", 2, 128}, {"spoofed4", 1, 60}}, &c);
  EXPECT_TRUE(c.bridge_installed);
  EXPECT_EQ(c.bridge_mac, 2u);
  EXPECT_EQ(c.bridge4, 1u);
  EXPECT_EQ(c.routed4, 5u) << "the bridge table's spoofed4 is not the routed one's";
  EXPECT_EQ(c.total(), 11u);
  const std::string m = RenderGuardMetrics(c);
  EXPECT_NE(m.find("weft_source_guard_installed{mode=\"routed\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("weft_source_guard_dropped_packets_total{mode=\"routed\",kind=\"ipv4\"} 5\n"), std::string::npos)
      << m;
  EXPECT_NE(m.find("weft_source_guard_dropped_packets_total{mode=\"bridge\",kind=\"mac\"} 2\n"), std::string::npos)
      << m;
}

TEST(GuardCounters, AnEmptyTableIsInstalledWithZeros) {
  GuardCounters c;
  AddGuardCounters(GuardMode::kBridge, {}, &c);
  EXPECT_TRUE(c.bridge_installed);
  EXPECT_FALSE(c.routed_installed);
  EXPECT_EQ(c.total(), 0u);
  const std::string m = RenderGuardMetrics(c);
  EXPECT_NE(m.find("weft_source_guard_installed{mode=\"bridge\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("weft_source_guard_installed{mode=\"routed\"} 0\n"), std::string::npos) << m;
}

}  // namespace
}  // namespace weft::fw
