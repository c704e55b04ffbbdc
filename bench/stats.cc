#include "bench/stats.h"

#include <algorithm>
#include <numeric>

namespace weft::bench {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(rank);
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

double Median(const std::vector<double>& v) { return Percentile(v, 50); }

nlohmann::json Summary(const std::vector<double>& v) {
  nlohmann::json j = {{"n", v.size()}};
  if (v.empty()) return j;
  j["p50"] = Percentile(v, 50);
  j["p99"] = Percentile(v, 99);
  j["min"] = *std::min_element(v.begin(), v.end());
  j["max"] = *std::max_element(v.begin(), v.end());
  j["mean"] = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return j;
}

}  // namespace weft::bench
