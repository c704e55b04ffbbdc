#pragma once
// The network configuration every plugin receives on stdin: the fields the
// spec defines for all plugins. Plugin-specific keys stay in `raw`.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cni/result.h"

namespace weft::cni {

struct NetConf {
  std::string cni_version;  // "0.1.0" when the config has none (spec)
  std::string name;
  std::string type;
  nlohmann::json raw;             // the whole config object
  nlohmann::json capabilities;    // object or null
  nlohmann::json runtime_config;  // object or null
  nlohmann::json prev_result;     // as given; null when absent
  nlohmann::json ipam;            // object or null
  Dns dns;

  // prevResult decoded, or nullopt when absent or empty ({}).
  Result<std::optional<CniResult>> PrevResult() const;
};

// JSON syntax errors and non-objects: malformed. Unsupported cniVersion:
// unsupported. Wrong types or missing/invalid name: invalid-argument.
Result<NetConf> ParseNetConf(std::string_view data);

struct Attachment {
  std::string container_id;
  std::string ifname;
  bool operator==(const Attachment&) const = default;
};
// GC's list: "cni.dev/valid-attachments", or the older "cni.dev/attachments".
Result<std::vector<Attachment>> ValidAttachments(const NetConf& conf);

}  // namespace weft::cni
