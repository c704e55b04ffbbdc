#pragma once
// Small statistics over latency samples (milliseconds unless noted).

#include <vector>

#include <nlohmann/json.hpp>

namespace weft::bench {

// Linear-interpolated percentile, p in [0, 100]. 0 for an empty sample.
double Percentile(std::vector<double> v, double p);
double Median(const std::vector<double>& v);

// {"n", "p50", "p99", "min", "max", "mean"} of `v`.
nlohmann::json Summary(const std::vector<double>& v);

}  // namespace weft::bench
