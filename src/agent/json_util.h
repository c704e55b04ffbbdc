#pragma once
// The JSON guard every decoder of the agent shares: nlohmann's exceptions
// stop here and become kMalformed errors naming what was being read.

#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace weft::agent {

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

}  // namespace weft::agent
