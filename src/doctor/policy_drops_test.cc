#include "doctor/policy_drops.h"

#include <gtest/gtest.h>

namespace weft::doctor {
namespace {

TEST(PolicyDrops, FollowAsksFromTheLastSeq) {
  EXPECT_EQ(LastDropSeq("", 7), 7u);
  EXPECT_EQ(LastDropSeq("ts=2026-11-27T06:00:00.000Z seq=8 src=y/a\nts=2026-11-27T06:00:01.000Z seq=12 src=-\n", 7),
            12u);
  EXPECT_EQ(LastDropSeq("ts=x seq=3 src=y/a\n", 7), 7u);
}

}  // namespace
}  // namespace weft::doctor
