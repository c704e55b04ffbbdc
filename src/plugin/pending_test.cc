#include "plugin/pending.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "sys/files.h"

namespace weft::plugin {
namespace {

TEST(Pending, ListedNamespacesArePending) {
  const std::string file = "prod\nteam-a\n";
  EXPECT_TRUE(IsPendingNamespace(file, true, "prod"));
  EXPECT_TRUE(IsPendingNamespace(file, true, "team-a"));
  EXPECT_FALSE(IsPendingNamespace(file, true, "default"));
  // Whole names only: no prefixes, suffixes or substrings.
  EXPECT_FALSE(IsPendingNamespace(file, true, "pro"));
  EXPECT_FALSE(IsPendingNamespace(file, true, "production"));
  EXPECT_FALSE(IsPendingNamespace(file, true, "team"));
  EXPECT_FALSE(IsPendingNamespace(file, true, "a"));
}

TEST(Pending, CommentsBlankLinesAndSpacesAreIgnored) {
  const std::string file = "# written by weftd\n\n  prod  \r\nteam-a # two policies\n#staging\n   \n\tlast";
  EXPECT_TRUE(IsPendingNamespace(file, true, "prod"));
  EXPECT_TRUE(IsPendingNamespace(file, true, "team-a"));
  EXPECT_TRUE(IsPendingNamespace(file, true, "last"));  // no final newline
  EXPECT_FALSE(IsPendingNamespace(file, true, "staging"));  // commented out
  EXPECT_FALSE(IsPendingNamespace(file, true, "written"));
  EXPECT_FALSE(IsPendingNamespace(file, true, "default"));
}

TEST(Pending, OnlyANameAloneOnItsLineCounts) {
  EXPECT_FALSE(IsPendingNamespace("#prod\n", true, "prod"));
  EXPECT_FALSE(IsPendingNamespace("  # prod\n", true, "prod"));
  EXPECT_FALSE(IsPendingNamespace("x # prod\n", true, "prod"));
  EXPECT_FALSE(IsPendingNamespace("x prod\n", true, "prod"));
  EXPECT_FALSE(IsPendingNamespace("prod x\n", true, "prod"));
  EXPECT_FALSE(IsPendingNamespace("a-prod\nprod-b\n", true, "prod"));
  EXPECT_TRUE(IsPendingNamespace("a-prod\nprod-b\nprod\n", true, "prod"));  // a later candidate matches
  EXPECT_TRUE(IsPendingNamespace("prod#x", true, "prod"));
  EXPECT_TRUE(IsPendingNamespace("x\r\nprod\r\n", true, "prod"));
  EXPECT_TRUE(IsPendingNamespace("prod", true, "prod"));
  EXPECT_FALSE(IsPendingNamespace("pro", true, "prod"));
  EXPECT_FALSE(IsPendingNamespace("", true, "prod"));
}

TEST(Pending, ANamespaceNoListCouldHoldIsPending) {
  // Not a DNS label: it cannot be looked up, so the pod is held.
  EXPECT_TRUE(IsPendingNamespace("prod\n", true, "prod x"));
  EXPECT_TRUE(IsPendingNamespace("prod\n", true, "#"));
  EXPECT_TRUE(IsPendingNamespace("", true, "a\nb"));
}

TEST(Pending, AnUnreadableFileMakesEveryPodPending) {
  EXPECT_TRUE(IsPendingNamespace("", false, "default"));
  EXPECT_TRUE(IsPendingNamespace("", false, ""));
  EXPECT_TRUE(IsPendingNamespace("other\n", false, "default"));
}

TEST(Pending, WithoutANamespaceOnlyAnEmptyListIsNotPending) {
  EXPECT_FALSE(IsPendingNamespace("", true, ""));
  EXPECT_FALSE(IsPendingNamespace("# nothing yet\n\n", true, ""));
  EXPECT_TRUE(IsPendingNamespace("prod\n", true, ""));
  EXPECT_TRUE(IsPendingNamespace("# c\nprod\n", true, ""));
}

TEST(Pending, ThousandsOfNames) {
  std::string file;
  for (int i = 0; i < 5000; ++i) file += "ns-" + std::to_string(i) + "\n";
  EXPECT_TRUE(IsPendingNamespace(file, true, "ns-0"));
  EXPECT_TRUE(IsPendingNamespace(file, true, "ns-4999"));
  EXPECT_FALSE(IsPendingNamespace(file, true, "ns-5000"));
  EXPECT_FALSE(IsPendingNamespace(file, true, "ns-4999x"));
}

class HostVethGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weft-pending-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    np_.namespaces_file = dir_ + "/netpol-namespaces";
  }
  void TearDown() override {
    (void)sys::RemoveFile(np_.namespaces_file);
    ::rmdir(dir_.c_str());
  }
  std::string dir_;
  NetworkPolicyConfig np_;
};

TEST_F(HostVethGroupTest, GroupFollowsTheFile) {
  EXPECT_EQ(HostVethGroup(std::nullopt, "prod"), 0u);  // no networkPolicy: never pending
  EXPECT_EQ(HostVethGroup(np_, "prod"), kDefaultPendingGroup);  // missing file: fail closed
  EXPECT_EQ(HostVethGroup(np_, "default"), kDefaultPendingGroup);
  ASSERT_TRUE(sys::WriteFileAtomic(np_.namespaces_file, "prod\n").ok());
  EXPECT_EQ(HostVethGroup(np_, "prod"), kDefaultPendingGroup);
  EXPECT_EQ(HostVethGroup(np_, "default"), 0u);
  EXPECT_EQ(HostVethGroup(np_, ""), kDefaultPendingGroup);
  np_.pending_group = 7;
  EXPECT_EQ(HostVethGroup(np_, "prod"), 7u);
  ASSERT_TRUE(sys::WriteFileAtomic(np_.namespaces_file, "").ok());
  EXPECT_EQ(HostVethGroup(np_, ""), 0u);
  EXPECT_EQ(HostVethGroup(np_, "prod"), 0u);
}

TEST_F(HostVethGroupTest, ATooLargeFileFailsClosed) {
  std::string big(kMaxNamespacesFileBytes + 1, '#');
  ASSERT_TRUE(sys::WriteFileAtomic(np_.namespaces_file, big).ok());
  EXPECT_EQ(HostVethGroup(np_, "default"), kDefaultPendingGroup);
}

}  // namespace
}  // namespace weft::plugin
