#include "ipam/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <set>

namespace weft::ipam {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weft-ipam-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = std::string(tmpl) + "/data";
  }
  void TearDown() override { std::system(("rm -rf " + dir_.substr(0, dir_.rfind('/'))).c_str()); }

  static PodRecord Pod(const std::string& cid) {
    PodRecord p;
    p.container_id = cid;
    p.ifname = "eth0";
    p.network = "net1";
    p.netns = "/run/netns/" + cid;
    p.host_ifname = "wft" + cid;
    return p;
  }
  static AllocationRequest Ranges(std::initializer_list<const char*> rs) {
    AllocationRequest r;
    for (auto s : rs) r.ranges.push_back(*IpPrefix::Parse(s));
    return r;
  }
  std::string dir_;
};

TEST_F(StoreTest, CreatesPrivateFilesAndSchema) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((dir_ + "/ipam.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Reopening finds the schema in place.
  EXPECT_TRUE(Store::Open(dir_).ok());
}

// docs/security.md: the write-ahead log and shared memory take the
// database's mode, the lock file is 0600 too; whatever the umask (0 here,
// so nothing but the code decides).
TEST_F(StoreTest, WalShmAndLockFilesArePrivateWhateverTheUmask) {
  const mode_t old_umask = ::umask(0);
  {
    auto s = Store::Open(dir_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto p = s->Reserve(Pod("c1"), Ranges({"10.0.0.0/29"}));  // a write: the WAL has content
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (const char* f : {"ipam.db", "ipam.db-wal", "ipam.db-shm", "ipam.lock"}) {
      struct stat st;
      ASSERT_EQ(stat((dir_ + "/" + f).c_str(), &st), 0) << f;
      EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
    }
  }
  ::umask(old_umask);
}

TEST_F(StoreTest, NeverHandsOutNetworkOrBroadcastAndExhaustsCleanly) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok());
  std::set<std::string> seen;
  for (int i = 0; i < 6; ++i) {
    auto p = s->Reserve(Pod("c" + std::to_string(i)), Ranges({"10.0.0.0/29"}));
    ASSERT_TRUE(p.ok()) << i << ": " << p.status().ToString();
    ASSERT_TRUE(p->ip_v4);
    EXPECT_EQ(p->ip_v4->len(), 29);
    seen.insert(p->ip_v4->addr().ToString());
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_FALSE(seen.count("10.0.0.0"));
  EXPECT_FALSE(seen.count("10.0.0.7"));
  auto full = s->Reserve(Pod("c9"), Ranges({"10.0.0.0/29"}));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().reason(), Reason::kExhausted);
  auto none = s->Find("c9", "eth0");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());  // nothing left behind by the failure
}

TEST_F(StoreTest, ReleasedAddressesAreReusedAfterTheCursorWraps) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(s->Reserve(Pod("c" + std::to_string(i)), Ranges({"10.0.0.0/29"})).ok());
  ASSERT_TRUE(s->Release("c2", "eth0").ok());
  auto p = s->Reserve(Pod("n"), Ranges({"10.0.0.0/29"}));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ip_v4->addr().ToString(), "10.0.0.3");
}

TEST_F(StoreTest, NextFitDoesNotReuseAJustReleasedAddress) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok());
  auto a = s->Reserve(Pod("a"), Ranges({"10.0.0.0/24"}));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(s->Release("a", "eth0").ok());
  auto b = s->Reserve(Pod("b"), Ranges({"10.0.0.0/24"}));
  ASSERT_TRUE(b.ok());
  EXPECT_NE(a->ip_v4->addr(), b->ip_v4->addr());
}

TEST_F(StoreTest, ExcludedAddressesAndDualStack) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok());
  AllocationRequest req = Ranges({"10.1.0.0/24", "fd00:1::/64"});
  req.exclude = {*IpAddress::Parse("10.1.0.1"), *IpAddress::Parse("fd00:1::1")};
  auto p = s->Reserve(Pod("a"), req);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ip_v4->addr().ToString(), "10.1.0.2");
  EXPECT_EQ(p->ip_v6->addr().ToString(), "fd00:1::2");
  EXPECT_EQ(p->ip_v6->len(), 64);
}

TEST_F(StoreTest, DuplicateAttachmentIsAnError) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->Reserve(Pod("a"), Ranges({"10.0.0.0/24"})).ok());
  auto again = s->Reserve(Pod("a"), Ranges({"10.0.0.0/24"}));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().reason(), Reason::kAlreadyExists);
  auto all = s->ListPods("net1");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
}

TEST_F(StoreTest, PortMappingsCascadeAndConflictsNameTheOwner) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->Reserve(Pod("a"), Ranges({"10.0.0.0/24"})).ok());
  ASSERT_TRUE(s->Reserve(Pod("b"), Ranges({"10.0.0.0/24"})).ok());
  PortMapping m{"", 8080, "tcp", "10.0.0.1", 80};
  ASSERT_TRUE(s->AddPortMappings("a", "eth0", {m}).ok());
  PortMapping m2{"192.168.1.1", 8080, "tcp", "10.0.0.2", 80};
  auto st = s->AddPortMappings("b", "eth0", {m2});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.reason(), Reason::kConflict);
  EXPECT_NE(st.msg().find("a/eth0"), std::string::npos) << st.msg();
  PortMapping udp{"", 8080, "udp", "10.0.0.2", 80};
  EXPECT_TRUE(s->AddPortMappings("b", "eth0", {udp}).ok());
  ASSERT_TRUE(s->Release("a", "eth0").ok());
  auto left = s->ListPortMappings();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);  // a's mapping went with it (ON DELETE CASCADE)
  EXPECT_EQ((*left)[0].protocol, "udp");
}

TEST_F(StoreTest, BeginDeleteKeepsTheAddressAndTheMappings) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok());
  auto a = s->Reserve(Pod("a"), Ranges({"10.0.0.0/30"}));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(s->AddPortMappings("a", "eth0", {PortMapping{"", 8080, "tcp", "10.0.0.1", 80}}).ok());
  ASSERT_TRUE(s->BeginDelete("a", "eth0").ok());
  auto row = s->Find("a", "eth0");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->state, kStateDeleting);
  // The mappings stay with the row (nobody else can claim the port until
  // the teardown has removed its rules), but no longer count as live.
  auto maps = s->PortMappingsOf("a", "eth0");
  ASSERT_TRUE(maps.ok());
  ASSERT_EQ(maps->size(), 1u);
  EXPECT_EQ((*maps)[0].host_port, 8080);
  EXPECT_EQ((*maps)[0].container_id, "a");
  auto live = s->HasLivePortMappings();
  ASSERT_TRUE(live.ok());
  EXPECT_FALSE(*live);
  EXPECT_EQ(s->AddPortMappings("x", "eth0", {PortMapping{"", 8080, "tcp", "10.0.0.2", 80}}).reason(),
            Reason::kConflict);
  // The address is still held: the next pod gets the other one, then none.
  auto b = s->Reserve(Pod("b"), Ranges({"10.0.0.0/30"}));
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->ip_v4->addr(), a->ip_v4->addr());
  EXPECT_EQ(s->Reserve(Pod("c"), Ranges({"10.0.0.0/30"})).status().reason(), Reason::kExhausted);
  EXPECT_TRUE(s->BeginDelete("absent", "eth0").ok());
  // Release takes the mappings with the row.
  ASSERT_TRUE(s->AddPortMappings("b", "eth0", {PortMapping{"", 9090, "tcp", "10.0.0.2", 90}}).ok());
  live = s->HasLivePortMappings();
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(*live);
  ASSERT_TRUE(s->Release("a", "eth0").ok());
  maps = s->PortMappingsOf("a", "eth0");
  ASSERT_TRUE(maps.ok());
  EXPECT_TRUE(maps->empty());
}

// Many processes allocating at once never get the same address.
TEST_F(StoreTest, RacingProcessesGetUniqueAddresses) {
  { ASSERT_TRUE(Store::Open(dir_).ok()); }
  constexpr int kProcs = 8, kEach = 25;
  int pipes[kProcs][2];
  pid_t pids[kProcs];
  for (int p = 0; p < kProcs; ++p) {
    ASSERT_EQ(pipe(pipes[p]), 0);
    pids[p] = fork();
    if (pids[p] == 0) {
      close(pipes[p][0]);
      auto s = Store::Open(dir_);
      if (!s.ok()) _exit(2);
      for (int i = 0; i < kEach; ++i) {
        auto r = s->Reserve(Pod("p" + std::to_string(p) + "-" + std::to_string(i)), Ranges({"10.9.0.0/20"}));
        if (!r.ok()) _exit(3);
        std::string ip = r->ip_v4->addr().ToString() + "\n";
        if (write(pipes[p][1], ip.data(), ip.size()) < 0) _exit(4);
      }
      _exit(0);
    }
    close(pipes[p][1]);
  }
  std::multiset<std::string> all;
  for (int p = 0; p < kProcs; ++p) {
    std::string buf;
    char c[4096];
    ssize_t n;
    while ((n = read(pipes[p][0], c, sizeof c)) > 0) buf.append(c, n);
    close(pipes[p][0]);
    size_t pos = 0, nl;
    while ((nl = buf.find('\n', pos)) != std::string::npos) {
      all.insert(buf.substr(pos, nl - pos));
      pos = nl + 1;
    }
    int status = 0;
    waitpid(pids[p], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << p;
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kProcs * kEach));
  std::set<std::string> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), all.size());
}

TEST(UsableOffsets, Families) {
  auto s24 = UsableOffsets(*IpPrefix::Parse("10.0.0.0/24"));
  EXPECT_EQ(s24.lo, 1);
  EXPECT_EQ(s24.hi, 254);
  auto s31 = UsableOffsets(*IpPrefix::Parse("10.0.0.0/31"));
  EXPECT_EQ(s31.lo, 0);
  EXPECT_EQ(s31.hi, 1);
  auto v6 = UsableOffsets(*IpPrefix::Parse("fd00::/120"));
  EXPECT_EQ(v6.lo, 1);
  EXPECT_EQ(v6.hi, 255);
}

TEST_F(StoreTest, BackgroundCheckpointRestartsTheWal) {
  auto s = Store::Open(dir_);
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(s->Reserve(Pod(std::string("c").append(std::to_string(i))), Ranges({"10.0.0.0/24"})).ok());
  const int grown = s->db().wal_frames();
  EXPECT_GT(grown, 20);  // every reservation appended frames; none were copied out
  { BackgroundCheckpoint checkpoint(s->db().path()); }
  // The checkpoint copied everything out and started the WAL over, so the
  // next commit lands near its start and a new process reads only that.
  ASSERT_TRUE(s->Release("c0", "eth0").ok());
  EXPECT_LT(s->db().wal_frames(), grown / 2);
  auto again = Store::Open(dir_);
  ASSERT_TRUE(again.ok());
  auto rows = again->ListPods("net1");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 19u);  // nothing lost on the way
}

TEST_F(StoreTest, WaitsForTheWriteLockThenGivesUpWithTryAgainLater) {
  auto holder = Store::Open(dir_);
  ASSERT_TRUE(holder.ok());
  auto waiter = Store::Open(dir_, /*busy_timeout_ms=*/300);
  ASSERT_TRUE(waiter.ok());
  {
    // Held past the timeout: the waiter gives up with the retryable code.
    auto txn = Txn::Begin(holder->db());
    ASSERT_TRUE(txn.ok());
    auto t0 = std::chrono::steady_clock::now();
    auto r = waiter->Reserve(Pod("late"), Ranges({"10.0.0.0/24"}));
    auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().reason(), Reason::kBusy) << r.status().ToString();
    EXPECT_GE(waited, std::chrono::milliseconds(300));
  }
  // Released while it waits: the waiter gets the lock and goes on.
  auto txn = Txn::Begin(holder->db());
  ASSERT_TRUE(txn.ok());
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(txn->Commit().ok());
  });
  auto r = waiter->Reserve(Pod("patient"), Ranges({"10.0.0.0/24"}));
  release.join();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

}  // namespace
}  // namespace weft::ipam
