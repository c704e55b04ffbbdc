// sys::NftRunScript (libnftables, in-process) against the kernel, in a test
// netns, as weftd's NetworkPolicy controller applies table inet weft-netpol
// in the node's: a script is one transaction — all of it is in force
// afterwards, or (a refused command anywhere in it, a syntax error) none of
// it, with nft's own message in the error.

#include <gtest/gtest.h>

#include "sys/netns.h"
#include "sys/nft_script.h"
#include "testutil/netns_fixture.h"

namespace weft {
namespace {

using testing::TestNetns;

class NftScriptTest : public ::testing::Test {
 protected:
  void SetUp() override { node_ = std::make_unique<TestNetns>("nftscript"); }

  Status Run(const std::string& script) {
    auto ns = sys::Netns::Open(node_->path());
    if (!ns.ok()) return ns.status();
    return sys::RunInNetns(*ns, [&] { return sys::NftRunScript(script); });
  }

  std::string Ruleset() {
    std::string out;
    node_->Exec({"nft", "list", "ruleset"}, &out);
    return out;
  }

  std::unique_ptr<TestNetns> node_;
};

constexpr char kTable[] =
    "table inet wt-script {\n"
    "  set peers { type ipv4_addr; elements = { 10.1.0.1, 10.1.0.2 } }\n"
    "  map in4 { type ipv4_addr : verdict; elements = { 10.2.0.1 : jump in-a } }\n"
    "  chain in-a { ip saddr @peers accept; counter drop; }\n"
    "  chain forward { type filter hook forward priority 0; ip daddr vmap @in4; }\n"
    "}\n";

TEST_F(NftScriptTest, AppliesAWholeScript) {
  ASSERT_TRUE(Run(kTable).ok());
  std::string r = Ruleset();
  EXPECT_NE(r.find("10.1.0.2"), std::string::npos) << r;
  EXPECT_NE(r.find("10.2.0.1 : jump in-a"), std::string::npos) << r;
  // A delta as the controller sends one: elements out and in, a chain
  // rewritten.
  Status st = Run(
      "delete element inet wt-script peers { 10.1.0.1 }\n"
      "add element inet wt-script peers { 10.1.0.3 }\n"
      "flush chain inet wt-script in-a\n"
      "add rule inet wt-script in-a ip saddr @peers tcp dport 80 accept\n");
  ASSERT_TRUE(st.ok()) << st.ToString();
  r = Ruleset();
  EXPECT_EQ(r.find("10.1.0.1,"), std::string::npos) << r;
  EXPECT_NE(r.find("10.1.0.3"), std::string::npos) << r;
  EXPECT_NE(r.find("tcp dport 80 accept"), std::string::npos) << r;
  EXPECT_EQ(r.find("counter"), std::string::npos) << r;
}

TEST_F(NftScriptTest, ARefusedCommandLeavesTheKernelAsItWas) {
  ASSERT_TRUE(Run(kTable).ok());
  const std::string before = Ruleset();
  // The first commands are valid; the last names a chain that does not
  // exist, which only the kernel (or nft's evaluation) can refuse.
  Status st = Run(
      "add element inet wt-script peers { 10.1.0.9 }\n"
      "flush chain inet wt-script in-a\n"
      "add element inet wt-script in4 { 10.2.0.2 : jump no-such-chain }\n");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.domain(), Domain::kFirewall);
  EXPECT_NE(st.details().find("no-such-chain"), std::string::npos) << st.ToString();
  EXPECT_EQ(Ruleset(), before);
}

TEST_F(NftScriptTest, ASyntaxErrorNamesItsLineAndChangesNothing) {
  ASSERT_TRUE(Run(kTable).ok());
  const std::string before = Ruleset();
  Status st = Run("add element inet wt-script peers { 10.1.0.9 }\nadd rule inet wt-script in-a ip saddr frob\n");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.details().find("line 2"), std::string::npos) << st.ToString();
  EXPECT_EQ(Ruleset(), before);
}

TEST_F(NftScriptTest, AKernelRefusalAfterEvaluationIsAtomicToo) {
  ASSERT_TRUE(Run(kTable).ok());
  const std::string before = Ruleset();
  // nft evaluates this fine; the kernel refuses to delete a chain that a
  // map element still jumps to (EBUSY), after the element add was queued.
  Status st = Run("add element inet wt-script peers { 10.1.0.9 }\ndelete chain inet wt-script in-a\n");
  ASSERT_FALSE(st.ok());
  EXPECT_FALSE(st.details().empty()) << st.ToString();
  EXPECT_EQ(Ruleset(), before);
}

}  // namespace
}  // namespace weft
