#pragma once
// The CNI_* environment of one plugin invocation, validated as the spec and
// the reference skeleton require. Every violation is error code 4.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace weft::cni {

enum class Command { kAdd, kDel, kCheck, kStatus, kVersion, kGc };
const char* CommandName(Command c);

// K=V pairs from CNI_ARGS.
struct CniArgs {
  std::map<std::string, std::string> values;
  bool ignore_unknown = false;
  std::string Get(const std::string& k) const {
    auto it = values.find(k);
    return it == values.end() ? std::string() : it->second;
  }
};

// Parses "K1=V1;K2=V2". Malformed pairs are errors. Keys not in `known` are
// errors unless IgnoreUnknown is 1/true.
Result<CniArgs> ParseCniArgs(const std::string& raw, const std::vector<std::string>& known);

struct Env {
  Command command = Command::kVersion;
  std::string container_id;
  std::string netns;   // may be empty for DEL
  std::string ifname;
  std::string args_raw;
  std::vector<std::string> path;  // CNI_PATH split on ':'
};

using EnvLookup = std::function<const char*(const char*)>;
// Reads and validates CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME,
// CNI_ARGS and CNI_PATH with the per-command requirements of the spec.
Result<Env> ParseEnv(const EnvLookup& lookup);

}  // namespace weft::cni
