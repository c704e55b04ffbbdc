#include "policy/netpol_sets.h"

#include <gtest/gtest.h>

namespace weft::policy::netpol {
namespace {

TEST(SetLedger, ChangesAreWhatTheKernelLacksAndReferencesBeyondTheFirstAreNone) {
  std::map<std::string, SetDef> sets;
  SetLedger l(&sets);
  l.Create("s", SetDef{"ipv4_addr", false, {"10.0.0.1"}});
  l.Element("s", "10.0.0.2", true);
  ASSERT_EQ(l.changes().size(), 1u);
  EXPECT_TRUE(l.changes().at("s").created);  // rendered whole: no element changes kept
  EXPECT_TRUE(l.changes().at("s").adds.empty());
  l.Applied(true);
  EXPECT_TRUE(l.changes().empty());
  EXPECT_TRUE(l.InKernel("s"));
  // A second reference is no change; the element stays until the last goes.
  l.Element("s", "10.0.0.2", true);
  EXPECT_TRUE(l.changes().at("s").adds.empty());
  l.Element("s", "10.0.0.2", false);
  EXPECT_EQ(sets["s"].elements.count("10.0.0.2"), 1u);
  EXPECT_TRUE(l.changes().at("s").dels.empty());
  l.Element("s", "10.0.0.2", false);
  EXPECT_EQ(sets["s"].elements.count("10.0.0.2"), 0u);
  EXPECT_EQ(l.changes().at("s").dels, std::set<std::string>{"10.0.0.2"});
  // An add after a delete of the same element cancels out.
  l.Element("s", "10.0.0.2", true);
  EXPECT_TRUE(l.changes().at("s").dels.empty());
  EXPECT_TRUE(l.changes().at("s").adds.empty());
  // Deleted, then made again in the same batch: flushed and refilled.
  l.Delete("s");
  EXPECT_TRUE(l.changes().at("s").deleted);
  l.Create("s", SetDef{"ipv4_addr", false, {"10.0.0.9"}});
  EXPECT_TRUE(l.changes().at("s").flushed);
  l.Applied(false);
  EXPECT_TRUE(l.InKernel("s"));
  // A set the kernel never had leaves no change when it goes.
  l.Create("t", SetDef{"ipv4_addr", false, {}});
  l.Delete("t");
  EXPECT_EQ(l.changes().count("t"), 0u);
  l.Delete("s");
  l.Applied(false);
  EXPECT_FALSE(l.InKernel("s"));
}

}  // namespace
}  // namespace weft::policy::netpol
