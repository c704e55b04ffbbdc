#include "policy/cnp_status.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace weft::policy {
namespace {

using Clock = CnpStatusWriter::Clock;
using std::chrono::seconds;

struct Fixture {
  std::map<std::string, std::string> patches;  // what ConditionPatch would say
  std::vector<std::string> sent;
  long answer = 200;
  std::atomic<int> written{0}, failed{0};
  std::mutex mu;
  CnpStatusWriter writer{[this](const std::string& n) {
                           std::lock_guard lock(mu);
                           return patches.count(n) ? patches[n] : std::string();
                         },
                         [this](const std::string& n, const std::string& p) -> Result<sys::HttpResponse> {
                           std::lock_guard lock(mu);
                           sent.push_back(n + " " + p);
                           return sys::HttpResponse{answer, ""};
                         },
                         CnpStatusWriter::Counters{[this] { ++written; }, [this] { ++failed; }},
                         std::chrono::milliseconds(10000), std::chrono::milliseconds(1000)};
};

TEST(CnpStatusWriter, TheFirstNodeWritesAtOnceTheOthersAfterTheGrace) {
  Fixture f;
  f.patches = {{"a", "{a}"}, {"b", "{b}"}};
  const auto t0 = Clock::now();
  f.writer.Enforced({{"a", t0}}, /*writer=*/true);
  EXPECT_EQ(f.writer.WriteDue(t0), Clock::time_point::max());
  EXPECT_EQ(f.sent, std::vector<std::string>{"a {a}"});
  EXPECT_EQ(f.written, 1);
  // Another node: not before the grace is over.
  f.writer.Enforced({{"b", t0}}, /*writer=*/false);
  EXPECT_EQ(f.writer.WriteDue(t0 + seconds(1)), t0 + seconds(10));
  EXPECT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.writer.WriteDue(t0 + seconds(10)), Clock::time_point::max());
  EXPECT_EQ(f.sent.back(), "b {b}");
  EXPECT_EQ(f.writer.pending(), 0u);
}

TEST(CnpStatusWriter, InPlaceOrGoneIsDroppedAndAFailureIsRetried) {
  Fixture f;
  const auto t0 = Clock::now();
  f.writer.Enforced({{"in-place", t0}}, true);  // ConditionPatch says nothing to write
  f.writer.WriteDue(t0);
  EXPECT_TRUE(f.sent.empty());
  EXPECT_EQ(f.writer.pending(), 0u);
  f.patches["x"] = "{x}";
  f.answer = 500;
  f.writer.Enforced({{"x", t0}}, true);
  EXPECT_EQ(f.writer.WriteDue(t0), t0 + seconds(1));  // the writer retries after `retry`
  EXPECT_EQ(f.failed, 1);
  EXPECT_EQ(f.writer.pending(), 1u);
  f.answer = 404;  // deleted meanwhile: done, not counted as written
  f.writer.WriteDue(t0 + seconds(1));
  EXPECT_EQ(f.sent.size(), 2u);
  EXPECT_EQ(f.written, 0);
  EXPECT_EQ(f.writer.pending(), 0u);
  // A policy offered again keeps the earlier time it became due.
  f.writer.Enforced({{"x", t0 + seconds(5)}}, false);
  f.writer.Enforced({{"x", t0 + seconds(7)}}, false);
  EXPECT_EQ(f.writer.WriteDue(t0), t0 + seconds(15));
}

TEST(CnpStatusWriter, ItsThreadWritesWhatIsOfferedAndStops) {
  Fixture f;
  f.patches["a"] = "{a}";
  f.writer.Start();
  f.writer.Enforced({{"a", Clock::now()}}, true);
  for (int i = 0; i < 300 && f.written == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(f.written, 1);
  f.writer.Stop();
  std::lock_guard lock(f.mu);
  EXPECT_EQ(f.sent, std::vector<std::string>{"a {a}"});
}

}  // namespace
}  // namespace weft::policy
