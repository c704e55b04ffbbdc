#include "sys/nft_query.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace weft::sys {
namespace {

using Rules = std::vector<NftRuleInfo>;

// A dump that fails with `errs` in turn, then succeeds; counts its calls.
struct FakeDump {
  std::vector<int> errs;
  int calls = 0;
  Result<Rules> operator()() {
    const int i = calls++;
    if (i < static_cast<int>(errs.size()))
      return Status::FromErrno(Reason::kFailed, Domain::kFirewall, "dump nftables rules of t", errs[i]);
    return Rules{{"c", 7, "weft"}};
  }
};

TEST(NftDump, AnInterruptedDumpIsReadAgain) {
  FakeDump d{{EINTR, EINTR}};
  auto r = RetryInterruptedNftDump<Rules>(std::ref(d));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(d.calls, 3);
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].handle, 7u);
}

TEST(NftDump, ADumpInterruptedEveryTimeIsAnErrorAfterTheLastAttempt) {
  FakeDump d{std::vector<int>(100, EINTR)};
  auto r = RetryInterruptedNftDump<Rules>(std::ref(d));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(d.calls, kNftDumpAttempts);
  EXPECT_EQ(r.status().sys_errno(), EINTR);
  EXPECT_NE(r.status().msg().find("interrupted by concurrent changes 5 times: dump nftables rules of t"),
            std::string::npos)
      << r.status().ToString();
}

TEST(NftDump, OtherErrorsAndSuccessAreNotRepeated) {
  FakeDump denied{{EPERM, EINTR}};
  auto r = RetryInterruptedNftDump<Rules>(std::ref(denied));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sys_errno(), EPERM);
  EXPECT_EQ(denied.calls, 1);
  FakeDump fine;
  EXPECT_TRUE(RetryInterruptedNftDump<Rules>(std::ref(fine)).ok());
  EXPECT_EQ(fine.calls, 1);
}

}  // namespace
}  // namespace weft::sys
