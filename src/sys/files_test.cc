#include "sys/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

namespace weft::sys {
namespace {

TEST(Files, AtomicWriteReadBackAndMode) {
  char tmpl[] = "/tmp/weft-files-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = std::string(tmpl) + "/a/b";
  ASSERT_TRUE(MkdirAll(dir, 0700).ok());
  std::string f = dir + "/x.conflist";
  ASSERT_TRUE(WriteFileAtomic(f, "hello", 0600).ok());
  ASSERT_TRUE(WriteFileAtomic(f, "world", 0600).ok());
  auto r = ReadFile(f);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "world");
  struct stat st;
  ASSERT_EQ(stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto names = ListDir(dir);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 1u);  // no temp file left behind
  EXPECT_TRUE(RemoveFile(f).ok());
  EXPECT_TRUE(RemoveFile(f).ok());
  std::string cmd = std::string("rm -rf ") + tmpl;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace weft::sys
