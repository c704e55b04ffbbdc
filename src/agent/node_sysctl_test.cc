#include "agent/node_sysctl.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "sys/sysctl.h"

namespace weft::agent {
namespace {

TEST(NodeSysctl, ReadOnlyProcSysNamesTheSysctlAndTheFix) {
  Status write = Status::FromErrno(Reason::kFailed, Domain::kFile, "write sysctl net/ipv4/ip_forward", EROFS);
  ASSERT_TRUE(sys::IsSysctlReadOnly(write));
  Status st = NodeSysctlError("net/ipv4/ip_forward", "0", "1", write);
  EXPECT_EQ(st.reason(), Reason::kInvalidArgument);
  EXPECT_EQ(st.sys_errno(), EROFS);
  EXPECT_NE(st.msg().find("sysctl net.ipv4.ip_forward is 0, weftd needs 1"), std::string::npos) << st.msg();
  EXPECT_NE(st.msg().find("/proc/sys is read-only"), std::string::npos) << st.msg();
  EXPECT_NE(st.msg().find("`sysctl -w net.ipv4.ip_forward=1`"), std::string::npos) << st.msg();
  EXPECT_NE(st.msg().find("\"net.ipv4.ip_forward = 1\" in /etc/sysctl.d/"), std::string::npos) << st.msg();
}

TEST(NodeSysctl, PermissionAndUnreadable) {
  Status write = Status::FromErrno(Reason::kFailed, Domain::kFile, "write sysctl net/ipv6/conf/all/forwarding", EACCES);
  ASSERT_TRUE(sys::IsSysctlReadOnly(write));
  Status st = NodeSysctlError("net/ipv6/conf/all/forwarding", "", "1", write);
  EXPECT_NE(st.msg().find("net.ipv6.conf.all.forwarding is unreadable"), std::string::npos) << st.msg();
  EXPECT_NE(st.msg().find("no permission"), std::string::npos) << st.msg();
}

TEST(NodeSysctl, OnlyWritesThisProcessMayNotDoAreReadOnly) {
  EXPECT_FALSE(sys::IsSysctlReadOnly(Status::Ok()));
  EXPECT_FALSE(sys::IsSysctlReadOnly(Status::FromErrno(Reason::kFailed, Domain::kFile, "write", ENOENT)));
  EXPECT_TRUE(sys::IsSysctlReadOnly(Status::FromErrno(Reason::kFailed, Domain::kFile, "write", EPERM)));
}

TEST(NodeSysctl, NamesAsSysctlWritesThem) {
  EXPECT_EQ(sys::SysctlName("net/ipv4/ip_forward"), "net.ipv4.ip_forward");
  EXPECT_EQ(sys::SysctlName("net/ipv4/conf/weft.1/forwarding"), "net.ipv4.conf.weft/1.forwarding");
}

}  // namespace
}  // namespace weft::agent
