#include "base/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace weft {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::Error(Code::kInvalidConfig, "odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  WEFT_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(Status, CarriesCodeMessageAndErrno) {
  Status s = Status::FromErrno(Code::kKernel, "create veth", ENOENT);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code_int(), 103);
  EXPECT_EQ(s.sys_errno(), ENOENT);
  s.Prefix("ADD c1/eth0");
  EXPECT_EQ(s.msg(), "ADD c1/eth0: create veth");
  EXPECT_EQ(s.details(), "No such file or directory");
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidConfig);
}

}  // namespace
}  // namespace weft
