#pragma once
// Wall time of the named steps of one operation, for one debug log line that
// tells an operator where a slow ADD or DEL spent its time:
//   "ADD 2.41 ms: config 0.05, netlink 0.31, ipam 0.83, veth 0.62, ..."

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft {

class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;
  PhaseTimer() : start_(Clock::now()), last_(start_) {}
  // Closes the step running since the previous mark (or construction).
  void Mark(std::string_view phase);
  // "<what> <total> ms: <phase> <ms>, ..." with two decimals.
  std::string Summary(std::string_view what) const;

 private:
  Clock::time_point start_, last_;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace weft
