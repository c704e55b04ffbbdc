#include "cni/errors.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <set>

namespace weft::cni {
namespace {

Status E(Reason r, Domain d) { return Status::Error(r, d, "x"); }

// What each layer returns for each failure, and the code a runtime saw for it
// before the layers spoke their own reasons: the table must keep every one.
TEST(ErrorTable, EveryLayersReasonKeepsItsCniCode) {
  struct Case {
    Reason reason;
    Domain domain;
    Code code;
    const char* where;
  };
  const Case cases[] = {
      {Reason::kUnsupported, Domain::kNone, Code::kIncompatibleVersion, "cni: cniVersion"},
      {Reason::kNotFound, Domain::kNetns, Code::kUnknownContainer, "sys: CNI_NETNS missing"},
      {Reason::kNotFound, Domain::kNone, Code::kUnknownContainer, "runtime: no cached attachment"},
      {Reason::kInvalidArgument, Domain::kEnvironment, Code::kInvalidEnv, "cni: CNI_* variables"},
      {Reason::kInvalidArgument, Domain::kNetns, Code::kInvalidEnv, "sys: not a network namespace"},
      {Reason::kFailed, Domain::kNetns, Code::kInvalidEnv, "sys: netns cannot be opened"},
      {Reason::kFailed, Domain::kFile, Code::kIo, "sys: files"},
      {Reason::kMalformed, Domain::kNone, Code::kDecode, "cni: stdin JSON"},
      {Reason::kMalformed, Domain::kConfig, Code::kDecode, "plugin: network config JSON"},
      {Reason::kInvalidArgument, Domain::kConfig, Code::kInvalidConfig, "plugin: a config key"},
      {Reason::kInvalidArgument, Domain::kExec, Code::kInvalidConfig, "sys: invalid plugin name"},
      {Reason::kInvalidArgument, Domain::kKernel, Code::kInvalidConfig, "sys: bad MAC address"},
      {Reason::kBusy, Domain::kStore, Code::kTryAgainLater, "ipam: database locked"},
      {Reason::kUnavailable, Domain::kNone, Code::kNotAvailable, "plugin: STATUS"},
      {Reason::kExhausted, Domain::kStore, Code::kNoFreeAddress, "ipam: range full"},
      {Reason::kAlreadyExists, Domain::kStore, Code::kAlreadyAttached, "ipam: second ADD"},
      {Reason::kFailed, Domain::kStore, Code::kStore, "ipam: SQLite"},
      {Reason::kFailed, Domain::kKernel, Code::kKernel, "sys: netlink"},
      {Reason::kFailed, Domain::kFirewall, Code::kFirewall, "fw: nft"},
      {Reason::kConflict, Domain::kStore, Code::kHostPortConflict, "ipam: hostPort held"},
      {Reason::kAlreadyExists, Domain::kKernel, Code::kNameTaken, "plugin: link name taken"},
      {Reason::kConflict, Domain::kKernel, Code::kNameTaken, "plugin: a link of another kind"},
      {Reason::kFailed, Domain::kPlugin, Code::kDelegatedIpam, "plugin: delegated IPAM"},
      {Reason::kMismatch, Domain::kNone, Code::kCheckFailed, "plugin: CHECK"},
      {Reason::kFailed, Domain::kExec, Code::kExec, "sys: exec"},
      {Reason::kNotFound, Domain::kExec, Code::kExec, "sys: not in CNI_PATH"},
      {Reason::kUnavailable, Domain::kControlPlane, Code::kControlPlane, "agent: API server"},
      {Reason::kFailed, Domain::kControlPlane, Code::kControlPlane, "agent: etcd"},
      {Reason::kInternal, Domain::kNone, Code::kInternal, "a bug"},
      {Reason::kInternal, Domain::kPlugin, Code::kInternal, "runtime: error object without a code"},
  };
  for (const Case& c : cases) EXPECT_EQ(CodeOf(E(c.reason, c.domain)), c.code) << c.where;
}

TEST(ErrorTable, CodesKeepTheirNumbers) {
  EXPECT_EQ(static_cast<int>(Code::kIncompatibleVersion), 1);
  EXPECT_EQ(static_cast<int>(Code::kUnknownContainer), 3);
  EXPECT_EQ(static_cast<int>(Code::kInvalidEnv), 4);
  EXPECT_EQ(static_cast<int>(Code::kIo), 5);
  EXPECT_EQ(static_cast<int>(Code::kDecode), 6);
  EXPECT_EQ(static_cast<int>(Code::kInvalidConfig), 7);
  EXPECT_EQ(static_cast<int>(Code::kTryAgainLater), 11);
  EXPECT_EQ(static_cast<int>(Code::kNotAvailable), 50);
  EXPECT_EQ(static_cast<int>(Code::kNoFreeAddress), 100);
  EXPECT_EQ(static_cast<int>(Code::kAlreadyAttached), 101);
  EXPECT_EQ(static_cast<int>(Code::kStore), 102);
  EXPECT_EQ(static_cast<int>(Code::kKernel), 103);
  EXPECT_EQ(static_cast<int>(Code::kFirewall), 104);
  EXPECT_EQ(static_cast<int>(Code::kHostPortConflict), 105);
  EXPECT_EQ(static_cast<int>(Code::kNameTaken), 106);
  EXPECT_EQ(static_cast<int>(Code::kDelegatedIpam), 107);
  EXPECT_EQ(static_cast<int>(Code::kCheckFailed), 108);
  EXPECT_EQ(static_cast<int>(Code::kExec), 109);
  EXPECT_EQ(static_cast<int>(Code::kControlPlane), 110);
  EXPECT_EQ(static_cast<int>(Code::kInternal), 999);
}

// Every (reason, domain) pair gets a code, and a non-OK one: no failure can
// reach a runtime as "code 0".
TEST(ErrorTable, EveryPairMapsToAnErrorCode) {
  for (int r = static_cast<int>(Reason::kInvalidArgument); r <= static_cast<int>(Reason::kInternal); ++r)
    for (int d = static_cast<int>(Domain::kNone); d <= static_cast<int>(Domain::kControlPlane); ++d) {
      Code c = CodeOf(E(static_cast<Reason>(r), static_cast<Domain>(d)));
      EXPECT_NE(c, Code::kOk) << ReasonName(static_cast<Reason>(r)) << "/" << DomainName(static_cast<Domain>(d));
    }
}

// A row after a catch-all of the same reason would never be read.
TEST(ErrorTable, NoRowIsShadowed) {
  std::set<Reason> caught_all;
  for (const ErrorRow& row : ErrorTable()) {
    EXPECT_EQ(caught_all.count(row.reason), 0u) << "a row for " << ReasonName(row.reason) << " after its catch-all";
    if (!row.domain) caught_all.insert(row.reason);
  }
}

TEST(CodeOf, OkIsZero) { EXPECT_EQ(CodeOf(Status::Ok()), Code::kOk); }

TEST(CodeOf, AReportedCodePassesThroughUnchanged) {
  EXPECT_EQ(CodeNumber(Status::Reported(7, "fake refuses DEL")), 7);
  EXPECT_EQ(CodeNumber(Status::Reported(123, "a third-party code")), 123);
  EXPECT_EQ(CodeNumber(Status::Reported(11, "busy").WithPrefix("plugin bridge")), 11);
}

TEST(CodeOf, FollowsTheErrorUpThroughPrefixes) {
  Status st = Status::FromErrno(Reason::kNotFound, Domain::kNetns, "open netns /run/netns/x", ENOENT);
  st.Prefix("ADD c1/eth0");
  EXPECT_EQ(CodeOf(st), Code::kUnknownContainer);
}

TEST(Predicates, IncompatibleVersionAndExecFailure) {
  EXPECT_TRUE(IsIncompatibleVersion(1));
  EXPECT_FALSE(IsIncompatibleVersion(7));
  EXPECT_TRUE(IsExecFailure(E(Reason::kFailed, Domain::kExec)));
  EXPECT_TRUE(IsExecFailure(Status::Reported(109, "nested plugin could not run its helper")));
  EXPECT_FALSE(IsExecFailure(E(Reason::kFailed, Domain::kKernel)));
}

}  // namespace
}  // namespace weft::cni
