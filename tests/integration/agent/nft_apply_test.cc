// sys::NftApply (nft_set.h) against the kernel, in a test netns: a batch of
// thousands of messages commits (the overlay filter at 999 peers alternates
// between two sets, one message per change, and its batch once failed with
// ENOBUFS: the kernel's answer to each message overflowed the socket's
// receive buffer), a bad message anywhere in a batch refuses all of it with
// the kernel's errno, and an empty batch is a no-op.

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <string>
#include <vector>

#include "sys/netns.h"
#include "sys/nft_set.h"
#include "testutil/netns_fixture.h"

namespace weft {
namespace {

using testing::TestNetns;

constexpr char kTable[] = "wnftapply";

std::string Addr(uint32_t host) {
  uint32_t be = htonl(0x0a000000u | host);  // 10.x.y.z
  return std::string(reinterpret_cast<const char*>(&be), sizeof be);
}

sys::NftChange Add(const std::string& set, uint32_t host) {
  return {sys::NftChange::kAddElement, sys::NftElement{set, Addr(host)}};
}

class NftApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = std::make_unique<TestNetns>("nftapply");
    std::string out;
    ASSERT_EQ(ns_->Exec({"nft", "add table inet wnftapply; "
                                "add set inet wnftapply a { type ipv4_addr; }; "
                                "add set inet wnftapply b { type ipv4_addr; }"},
                        &out),
              0)
        << out;
  }
  Status Apply(const std::vector<sys::NftChange>& changes) {
    auto h = sys::Netns::Open(ns_->path());
    if (!h.ok()) return h.status();
    return sys::RunInNetns(*h, [&] { return sys::NftApply(sys::NftFamily::kInet, kTable, changes); });
  }
  // The number of elements `set` holds, as nft lists them.
  int Count(const std::string& set) {
    std::string out;
    EXPECT_EQ(ns_->Exec({"nft", "-j", "list", "set", "inet", kTable, set}, &out), 0) << out;
    int n = 0;
    for (size_t p = out.find("10."); p != std::string::npos; p = out.find("10.", p + 1)) ++n;
    return n;
  }
  std::unique_ptr<TestNetns> ns_;
};

TEST_F(NftApplyTest, ThousandsOfMessagesInOneBatchCommit) {
  // Alternating sets: each change is a message of its own (4,000 messages).
  std::vector<sys::NftChange> changes;
  for (uint32_t i = 1; i <= 2000; ++i) {
    changes.push_back(Add("a", i));
    changes.push_back(Add("b", i));
  }
  Status st = Apply(changes);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Count("a"), 2000);
  EXPECT_EQ(Count("b"), 2000);
  // And their removal, again one message each.
  std::vector<sys::NftChange> removals;
  for (uint32_t i = 1; i <= 2000; ++i) {
    removals.push_back({sys::NftChange::kDeleteElement, sys::NftElement{"a", Addr(i)}});
    removals.push_back({sys::NftChange::kDeleteElement, sys::NftElement{"b", Addr(i)}});
  }
  st = Apply(removals);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Count("a"), 0);
  EXPECT_EQ(Count("b"), 0);
}

TEST_F(NftApplyTest, ABadMessageAnywhereRefusesTheWholeBatch) {
  for (size_t bad_at : {size_t{0}, size_t{1500}, size_t{2999}}) {
    std::vector<sys::NftChange> changes;
    for (uint32_t i = 1; i <= 1500; ++i) {
      changes.push_back(Add("a", i));
      changes.push_back(Add("b", i));
    }
    // A set the table does not have: ENOENT.
    changes[bad_at].elem.set = "nosuch";
    Status st = Apply(changes);
    ASSERT_FALSE(st.ok()) << "bad message at " << bad_at;
    EXPECT_NE(st.ToString().find("No such file or directory"), std::string::npos) << st.ToString();
    EXPECT_EQ(Count("a"), 0) << "bad message at " << bad_at;
    EXPECT_EQ(Count("b"), 0) << "bad message at " << bad_at;
  }
  // Deleting an element the set does not hold: ENOENT, nothing else applied.
  Status st = Apply({Add("a", 1), {sys::NftChange::kDeleteElement, sys::NftElement{"b", Addr(7)}}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("No such file or directory"), std::string::npos) << st.ToString();
  EXPECT_EQ(Count("a"), 0);
}

TEST_F(NftApplyTest, EmptyBatchIsANoOp) {
  ASSERT_TRUE(Apply({}).ok());
  EXPECT_EQ(Count("a"), 0);
}

}  // namespace
}  // namespace weft
