#include "sys/netns.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace weft::sys {
namespace {

// Root-free: only opens paths, never enters a namespace.

TEST(NetnsOpen, MissingPathIsGone) {
  auto ns = Netns::Open("/nonexistent/weft-netns-test");
  ASSERT_FALSE(ns.ok());
  EXPECT_EQ(ns.status().reason(), Reason::kNotFound);
  EXPECT_EQ(ns.status().domain(), Domain::kNetns);
  EXPECT_EQ(ns.status().sys_errno(), ENOENT);
  EXPECT_TRUE(IsNetnsGone(ns.status()));
}

TEST(NetnsOpen, FileThatIsNoNetnsIsGone) {
  auto ns = Netns::Open("/proc/self/status");
  ASSERT_FALSE(ns.ok());
  EXPECT_EQ(ns.status().reason(), Reason::kInvalidArgument);
  EXPECT_EQ(ns.status().domain(), Domain::kNetns);
  EXPECT_TRUE(IsNetnsGone(ns.status()));
}

TEST(NetnsOpen, OwnNetnsOpens) {
  auto ns = Netns::Open("/proc/self/ns/net");
  EXPECT_TRUE(ns.ok()) << ns.status().ToString();
}

TEST(IsNetnsGone, AFailureToOpenIsNoProofOfAbsence) {
  EXPECT_FALSE(IsNetnsGone(Status::FromErrno(Reason::kFailed, Domain::kNetns, "open netns /run/netns/x", EACCES)));
  // Not found elsewhere (a file, a link) says nothing about a namespace.
  EXPECT_FALSE(IsNetnsGone(Status::Error(Reason::kNotFound, Domain::kFile, "open /x", "", ENOENT)));
  EXPECT_FALSE(IsNetnsGone(Status::Ok()));
}

}  // namespace
}  // namespace weft::sys
