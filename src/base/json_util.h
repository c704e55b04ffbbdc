#pragma once
// The JSON guard every decoder of the agent shares: nlohmann's exceptions
// stop here and become kMalformed errors naming what was being read.

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace weft {

// Parses `text` as a JSON object and returns fn(object). Malformed JSON, a
// value that is not an object, and a JSON exception `fn` throws (a field of
// the wrong type) are kMalformed errors: "<what>: not a JSON object",
// "<what>: bad JSON" (details: the parser's message). `fn` gets the parsed
// object as json& (it may move members out) or const json&.
template <typename T, typename F>
Result<T> ParseJsonObject(std::string_view text, std::string_view what, F&& fn) {
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) return Status::Error(Reason::kMalformed, Domain::kNone,
                                             std::string(what) + ": not a JSON object");
    return fn(j);
  } catch (const std::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, std::string(what) + ": bad JSON", e.what());
  }
}

// A string member, or "" when absent, not a string, or `j` is no object.
inline std::string JsonStr(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// A member by reference (never a copy: callers keep pointers into it); null when absent.
inline const nlohmann::json& JsonMember(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// An integer member within [lo, hi]; `def` when absent. Anything else
// (a string, a fraction, a float such as 5e117, an integer out of range) is
// nullopt: converting an out-of-range float to int is undefined behaviour,
// which is what j.value(key, 24) does with {"subnetLen": 5e117}.
inline std::optional<int64_t> JsonIntIn(const nlohmann::json& j, const char* key, int64_t def, int64_t lo,
                                        int64_t hi) {
  const nlohmann::json& v = JsonMember(j, key);
  if (v.is_null()) return def;
  if (!v.is_number_integer()) return std::nullopt;  // true for unsigned ones too
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) return std::nullopt;
  return n;
}

}  // namespace weft
