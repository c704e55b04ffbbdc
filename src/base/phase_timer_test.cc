#include "base/phase_timer.h"

#include <gtest/gtest.h>

#include <thread>

namespace weft {
namespace {

TEST(PhaseTimerTest, NamesEveryPhaseAndTheTotal) {
  PhaseTimer t;
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  t.Mark("first");
  t.Mark("second");
  const std::string s = t.Summary("ADD");
  // "ADD 3.xx ms: first 3.xx, second 0.xx"
  ASSERT_EQ(s.rfind("ADD ", 0), 0u) << s;
  EXPECT_NE(s.find(" ms: first "), std::string::npos) << s;
  EXPECT_NE(s.find(", second 0."), std::string::npos) << s;
  const double total = std::stod(s.substr(4));
  const double first = std::stod(s.substr(s.find("first ") + 6));
  EXPECT_GE(first, 3.0);
  EXPECT_GE(total, first);
}

TEST(PhaseTimerTest, NoPhasesIsJustTheTotal) {
  PhaseTimer t;
  EXPECT_EQ(t.Summary("DEL"), "DEL 0.00 ms");
}

}  // namespace
}  // namespace weft
