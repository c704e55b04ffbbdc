#include "sys/files.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "base/log.h"
#include "sys/log_file.h"

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

// The plugin reads its stdin with ReadFd: a read error must not pass as the
// end of a (shorter) input. A directory opens but cannot be read (EISDIR).
TEST(Files, ReadFdStopsAtTheCapAndReportsReadErrors) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], "0123456789", 10), 10);
  close(p[1]);
  auto r = ReadFd(p[0], 4, "stdin");
  close(p[0]);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "0123");
  UniqueFd dir(open("/", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(dir.valid());
  auto e = ReadFd(dir.get(), 100, "stdin");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().sys_errno(), EISDIR);
  EXPECT_NE(e.status().ToString().find("read stdin"), std::string::npos) << e.status().ToString();
}

TEST(Files, ReadWholeFileReadsAllAndRefusesTooLarge) {
  char tmpl[] = "/tmp/weft-files-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string f = std::string(tmpl) + "/names";
  std::string big;
  for (int i = 0; i < 5000; ++i) big += "namespace-" + std::to_string(i) + "\n";  // past any one buffer
  ASSERT_TRUE(WriteFileAtomic(f, big).ok());
  auto r = ReadWholeFile(f, big.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, big);
  auto small = ReadWholeFile(f, big.size() - 1);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().sys_errno(), EFBIG);
  ASSERT_TRUE(WriteFileAtomic(f, "").ok());
  auto empty = ReadWholeFile(f, 10);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
  auto missing = ReadWholeFile(std::string(tmpl) + "/nope", 10);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().sys_errno(), ENOENT);
  // Files whose size stat does not know (procfs) are read to the end too.
  auto proc = ReadWholeFile("/proc/self/status", 1 << 20);
  ASSERT_TRUE(proc.ok());
  EXPECT_NE(proc->find("VmRSS"), std::string::npos);
  std::string cmd = std::string("rm -rf ") + tmpl;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

TEST(LogFile, AppendsLinesAndNamesTheFileItCannotOpen) {
  char tmpl[] = "/tmp/weft-logfile-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/weft.log";
  ASSERT_TRUE(WriteFileAtomic(path, "earlier\n", 0600).ok());
  log::SetLevel(log::Level::kInfo);
  ASSERT_TRUE(SetLogFile(path).ok());
  WEFT_LOG(kInfo, "into the file", {"k", "v"});
  Status bad = SetLogFile(std::string(tmpl) + "/no/such/dir/x.log");
  EXPECT_EQ(bad.sys_errno(), ENOENT);
  EXPECT_NE(bad.msg().find("/no/such/dir/x.log"), std::string::npos) << bad.ToString();
  WEFT_LOG(kInfo, "still into the file");  // a failed open keeps the sink
  ASSERT_TRUE(SetLogFile("").ok());        // stderr again: the file is closed
  WEFT_LOG(kInfo, "to stderr");
  log::SetLevel(log::Level::kWarn);
  auto text = ReadFile(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->rfind("earlier\n", 0), 0u);  // appended, not truncated
  EXPECT_NE(text->find(" msg=\"into the file\" k=v\n"), std::string::npos) << *text;
  EXPECT_NE(text->find(" msg=\"still into the file\"\n"), std::string::npos) << *text;
  EXPECT_EQ(text->find("to stderr"), std::string::npos);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string cmd = std::string("rm -rf ") + tmpl;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace weft::sys
