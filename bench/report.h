#pragma once
// Turns the results JSON into the targets verdicts, the readable table and
// gnuplot data + script. Targets are reported as ratios, never asserted.

#include <string>

#include <nlohmann/json.hpp>

namespace weft::bench {

// One row per target and weft configuration: {"config", "target",
// "measured", "limit", "unit", "met", "verdict"}; pending ones have "pending".
nlohmann::json EvaluateTargets(const nlohmann::json& results);

std::string RenderTable(const nlohmann::json& results);

// Writes <dir>/*.dat and <dir>/plots.gp (run it with gnuplot from <dir>).
void WritePlotData(const nlohmann::json& results, const nlohmann::json& raw, const std::string& dir);

}  // namespace weft::bench
