#pragma once
// Wall time of the named steps of one operation, for one debug log line that
// tells an operator where a slow ADD or DEL spent its time:
//   msg="phase timing" op=ADD total_ms=2.41 config_ms=0.05 netlink_ms=0.31 ...

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/log.h"

namespace weft {

class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;
  PhaseTimer() : start_(Clock::now()), last_(start_) {}
  // Closes the step running since the previous mark (or construction).
  void Mark(std::string_view phase);
  // total_ms, then <phase>_ms for each step, in milliseconds with two decimals.
  std::vector<log::Field> LogFields() const;
  // Writes one "phase timing" line at debug level with op=<what>.
  void Log(std::string_view what) const;

 private:
  Clock::time_point start_, last_;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace weft
