// kill -9 of the plugin at random moments (any build): ADD or DEL is
// SIGKILLed a random delay after exec; once the tools it had exec'd are done,
// a DEL (or a GC that does not list it) must leave the node exactly as before
// the ADD. The delays span the whole measured duration of the verb, so kills
// land before, during and after every step.
#include <gtest/gtest.h>

#include <random>

#include "node_fixture.h"

namespace weft::testing {
namespace {

class KillTest : public ::testing::Test, protected ReliabilityNode {
 protected:
  void SetUp() override { StartNode(/*reap=*/true); }
  void TearDown() override { StopNode(); }
  json Conf(int host_port) {
    return {{"cniVersion", "1.1.0"},
            {"name", "killnet"},
            {"type", "weft"},
            {"mode", "routed"},
            {"mtu", 1400},
            {"dataDir", data_dir_},
            {"masquerade", true},
            {"ranges", {"10.247.0.0/24", "fd00:247::/64"}},
            {"capabilities", {{"portMappings", true}}},
            {"runtimeConfig",
             {{"portMappings", json::array({{{"hostPort", host_port}, {"containerPort", 80}, {"protocol", "tcp"}}})}}}};
  }
  WeftRun Weft(const std::string& verb, const std::string& cid, const json& conf,
               std::optional<std::chrono::microseconds> kill_after = std::nullopt) {
    return RunPlugin(verb, cid, conf.dump(), {}, kill_after);
  }
  // Median wall time of a clean ADD and DEL of `cid`.
  std::pair<int64_t, int64_t> Measure(const std::string& cid, const json& conf) {
    std::vector<int64_t> add, del;
    for (int i = 0; i < 5; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(Weft("ADD", cid, conf).exit_code, 0);
      auto t1 = std::chrono::steady_clock::now();
      EXPECT_EQ(Weft("DEL", cid, conf).exit_code, 0);
      auto t2 = std::chrono::steady_clock::now();
      add.push_back(std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
      del.push_back(std::chrono::duration_cast<std::chrono::microseconds>(t2 - t1).count());
    }
    std::sort(add.begin(), add.end());
    std::sort(del.begin(), del.end());
    return {add[2], del[2]};
  }
};

TEST_F(KillTest, RandomKillsOfAddAndDelAreRecovered) {
  constexpr int kRounds = 36;
  ASSERT_EQ(Weft("ADD", "anchor", Conf(7100)).exit_code, 0);
  const json conf = Conf(7101);
  auto [add_us, del_us] = Measure("victim", conf);
  const NodeState before = NodeSnapshot(*node_, data_dir_);
  const NodeState pod_before = KernelState(Pod("victim"));
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 8);
  int killed_add = 0, killed_del = 0, finished = 0;
  // kRounds at least; more (up to twice as many) while too few plugins were
  // really killed mid-way, which happens when load makes the ADDs and DELs
  // that follow run faster than the five that were measured.
  for (int i = 0; i < kRounds || (i < 2 * kRounds && killed_add + killed_del < kRounds / 2); ++i) {
    const bool kill_del = i % 3 == 2;  // one round in three kills the DEL instead
    const bool recover_with_gc = i % 2 == 1;
    const int64_t span = kill_del ? del_us : add_us;
    std::chrono::microseconds delay(std::uniform_int_distribution<int64_t>(0, span * 11 / 10)(rng));
    std::string what = std::string(kill_del ? "DEL" : "ADD") + " killed after " + std::to_string(delay.count()) +
                       "us, recovered by " + (recover_with_gc ? "GC" : "DEL");
    if (kill_del) {
      ASSERT_EQ(Weft("ADD", "victim", conf).exit_code, 0) << what;
      auto r = Weft("DEL", "victim", conf, delay);
      r.killed() ? ++killed_del : ++finished;
    } else {
      auto r = Weft("ADD", "victim", conf, delay);
      r.killed() ? ++killed_add : ++finished;
    }
    WeftRun rec;
    if (recover_with_gc) {
      json gc = conf;
      gc["cni.dev/valid-attachments"] = {{{"containerID", "anchor"}, {"ifname", "eth0"}}};
      rec = Weft("GC", "", gc);
    } else {
      rec = Weft("DEL", "victim", conf);
    }
    ASSERT_EQ(rec.exit_code, 0) << what << ": " << rec.out << rec.err;
    std::string d = Diff(before, NodeSnapshot(*node_, data_dir_)) + Diff(pod_before, KernelState(Pod("victim")));
    ASSERT_EQ(d, "") << what;
  }
  std::printf("kill -9: %d ADDs and %d DELs killed mid-way, %d finished before the kill (ADD p50 %lld us, DEL p50 "
              "%lld us)\n",
              killed_add, killed_del, finished, static_cast<long long>(add_us), static_cast<long long>(del_us));
  // The test must really have killed plugins mid-operation.
  EXPECT_GE(killed_add + killed_del, kRounds / 2);
  // And the anchor is intact.
  json check = Conf(7100);
  check.erase("runtimeConfig");
  auto chk = Weft("CHECK", "anchor", check);
  EXPECT_EQ(chk.exit_code, 0) << chk.out;
}

}  // namespace
}  // namespace weft::testing
