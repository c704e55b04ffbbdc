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
  const std::vector<log::Field> f = t.LogFields();
  // total_ms=3.xx first_ms=3.xx second_ms=0.xx
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].key(), "total_ms");
  EXPECT_EQ(f[1].key(), "first_ms");
  EXPECT_EQ(f[2].key(), "second_ms");
  EXPECT_EQ(f[2].value().rfind("0.", 0), 0u) << f[2].value();
  const double total = std::stod(f[0].value());
  const double first = std::stod(f[1].value());
  EXPECT_GE(first, 3.0);
  EXPECT_GE(total, first);
}

TEST(PhaseTimerTest, NoPhasesIsJustTheTotal) {
  PhaseTimer t;
  const std::vector<log::Field> f = t.LogFields();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].key(), "total_ms");
  EXPECT_EQ(f[0].value(), "0.00");
}

}  // namespace
}  // namespace weft
