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

std::vector<log::Field> PhaseTimer::LogFields() const {
  std::vector<log::Field> fields;
  fields.reserve(phases_.size() + 1);
  fields.emplace_back("total_ms", Fixed2(Ms(last_ - start_)));
  for (const auto& [name, ms] : phases_) {
    fields.push_back(log::Field::Dynamic(name + "_ms", Fixed2(ms)));
  }
  return fields;
}

void PhaseTimer::Log(std::string_view what) const {
  if (log::GetLevel() > log::Level::kDebug) return;
  std::vector<log::Field> fields = LogFields();
  fields.insert(fields.begin(), log::Field("op", what));
  log::Write(log::Level::kDebug, "phase timing", fields);
}

}  // namespace weft
