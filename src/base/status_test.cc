#include "base/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace weft {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  WEFT_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(Status, CarriesReasonDomainMessageAndErrno) {
  Status s = Status::FromErrno(Reason::kFailed, Domain::kKernel, "create veth", ENOENT);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.reason(), Reason::kFailed);
  EXPECT_EQ(s.domain(), Domain::kKernel);
  EXPECT_EQ(s.sys_errno(), ENOENT);
  EXPECT_EQ(s.reported_code(), 0);
  s.Prefix("ADD c1/eth0");
  EXPECT_EQ(s.msg(), "ADD c1/eth0: create veth");
  EXPECT_EQ(s.details(), "No such file or directory");
  EXPECT_EQ(s.ToString(), "kernel/failed: ADD c1/eth0: create veth (No such file or directory)");
}

TEST(Status, OkIsOkAndNothingElse) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.reason(), Reason::kOk);
  EXPECT_EQ(ok.ToString(), "OK");
  EXPECT_FALSE(ok.IsNotFound());
  // An error built with kOk by mistake is still an error.
  EXPECT_FALSE(Status::Error(Reason::kOk, Domain::kNone, "oops").ok());
}

TEST(Status, PredicatesNameOneReasonEach) {
  struct Case {
    Reason reason;
    bool (Status::*pred)() const;
  };
  const Case cases[] = {
      {Reason::kInvalidArgument, &Status::IsInvalidArgument}, {Reason::kNotFound, &Status::IsNotFound},
      {Reason::kAlreadyExists, &Status::IsAlreadyExists},     {Reason::kExhausted, &Status::IsExhausted},
      {Reason::kBusy, &Status::IsBusy},                       {Reason::kUnavailable, &Status::IsUnavailable},
  };
  for (const Case& c : cases)
    for (const Case& other : cases) {
      Status st = Status::Error(other.reason, Domain::kNone, "x");
      EXPECT_EQ((st.*c.pred)(), c.reason == other.reason) << ReasonName(c.reason) << " vs " << ReasonName(other.reason);
    }
}

TEST(Status, ReportedKeepsTheOtherProgramsCode) {
  Status s = Status::Reported(7, "fake refuses DEL", "as configured");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.reported_code(), 7);
  EXPECT_EQ(s.domain(), Domain::kPlugin);
  EXPECT_EQ(s.WithPrefix("DEL").reported_code(), 7);
  EXPECT_EQ(s.ToString(), "plugin/failed (code 7): fake refuses DEL (as configured)");
}

TEST(Status, WithMsgKeepsEverythingButTheMessage) {
  Status s = Status::FromErrno(Reason::kBusy, Domain::kStore, "reserve", EAGAIN).WithMsg("reserve; retry");
  EXPECT_EQ(s.msg(), "reserve; retry");
  EXPECT_TRUE(s.IsBusy());
  EXPECT_EQ(s.domain(), Domain::kStore);
  EXPECT_EQ(s.sys_errno(), EAGAIN);
  EXPECT_TRUE(Status::Ok().WithMsg("x").ok());
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_EQ(r.status().domain(), Domain::kConfig);
}

}  // namespace
}  // namespace weft
