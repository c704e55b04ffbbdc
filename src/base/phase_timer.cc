#include "base/phase_timer.h"

#include <cstdio>

namespace weft {

namespace {
double Ms(PhaseTimer::Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string Fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}
}  // namespace

void PhaseTimer::Mark(std::string_view phase) {
  const auto now = Clock::now();
  phases_.emplace_back(std::string(phase), Ms(now - last_));
  last_ = now;
}

std::string PhaseTimer::Summary(std::string_view what) const {
  std::string s = std::string(what) + " " + Fixed2(Ms(last_ - start_)) + " ms";
  for (size_t i = 0; i < phases_.size(); ++i)
    s += (i == 0 ? ": " : ", ") + phases_[i].first + " " + Fixed2(phases_[i].second);
  return s;
}

}  // namespace weft
