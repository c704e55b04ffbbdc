#include "runtime/conf_watcher.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "runtime/test_helpers.h"
#include "sys/files.h"

namespace weft::runtime {
namespace {

using testing::ScratchDir;
using testing::WriteText;
using namespace std::chrono_literals;

std::string List(const std::string& name) {
  return R"({"cniVersion":"1.0.0","name":")" + name + R"(","plugins":[{"type":"bridge"}]})";
}

// Waits until a reload happened (or ~3 s passed).
bool Reloaded(ConfWatcher& w) {
  for (int i = 0; i < 30; ++i) {
    auto r = w.WaitAndReload(100ms);
    if (!r.ok()) return false;
    if (*r) return true;
  }
  return false;
}

TEST(ConfWatcher, ReloadsWhenAFileIsWrittenOrRenamedAndKeepsTheLastStatus) {
  ScratchDir d;
  WriteText(d / "20-b.conflist", List("b"));
  auto w = ConfWatcher::Start({d.path(), 1});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->report().networks[0].list.name, "b");
  // Write-then-rename, as installers should do.
  ASSERT_TRUE(sys::WriteFileAtomic(d / "10-a.conflist", List("a")).ok());
  ASSERT_TRUE(Reloaded(*w));
  EXPECT_EQ(w->report().networks[0].list.name, "a");
  EXPECT_TRUE(w->last_load_status().ok());
  // Removing every file is a load failure the watcher reports, not hides.
  std::filesystem::remove(d / "10-a.conflist");
  std::filesystem::remove(d / "20-b.conflist");
  ASSERT_TRUE(Reloaded(*w));
  while (w->WaitAndReload(100ms).value()) {
  }
  EXPECT_FALSE(w->last_load_status().ok());
  EXPECT_NE(w->last_load_status().msg().find("no network config found"), std::string::npos);
  // A plain write of a new file brings it back.
  WriteText(d / "30-c.conflist", List("c"));
  ASSERT_TRUE(Reloaded(*w));
  EXPECT_TRUE(w->last_load_status().ok());
  EXPECT_EQ(w->report().networks[0].list.name, "c");
}

TEST(ConfWatcher, AttributeChangesDoNotReload) {
  ScratchDir d;
  WriteText(d / "10-a.conflist", List("a"));
  auto w = ConfWatcher::Start({d.path(), 1});
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(::chmod((d / "10-a.conflist").c_str(), 0600), 0);
  auto r = w->WaitAndReload(300ms);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(w->reloads(), 0);
}

TEST(ConfWatcher, DropInChangesReload) {
  ScratchDir d;
  WriteText(d / "10-net.conflist", List("net"));
  std::filesystem::create_directories(d / "net");
  auto w = ConfWatcher::Start({d.path(), 1});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->report().networks[0].list.plugins.size(), 1u);
  WriteText(d / "net/10-tuning.conf", R"({"type":"tuning"})");
  ASSERT_TRUE(Reloaded(*w));
  EXPECT_EQ(w->report().networks[0].list.plugins.size(), 2u);
}

TEST(ConfWatcher, RemovingTheDirStopsWatchingWithAnError) {
  ScratchDir d;
  std::string conf = d / "net.d";
  std::filesystem::create_directories(conf);
  WriteText(conf + "/10-a.conflist", List("a"));
  auto w = ConfWatcher::Start({conf, 1});
  ASSERT_TRUE(w.ok());
  std::filesystem::remove_all(conf);
  bool stopped = false;
  for (int i = 0; i < 30 && !stopped; ++i) stopped = !w->WaitAndReload(100ms).ok();
  EXPECT_TRUE(stopped);
  EXPECT_NE(w->last_load_status().msg().find("was removed"), std::string::npos);
  EXPECT_FALSE(ConfWatcher::Start({conf, 1}).ok());
}

}  // namespace
}  // namespace weft::runtime
