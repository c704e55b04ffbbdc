#pragma once
// The result cache in libcni's own format and place, so an attachment made
// by weftctl can be torn down by containerd, CRI-O or podman and the other
// way round:
//   <cache_dir>/results/<network>-<containerID>-<ifname>
//   {"kind":"cniCacheV1","containerId":..,"config":<base64 of the list>,
//    "ifName":..,"networkName":..,"netns":..,"cniArgs":[[k,v]..],
//    "capabilityArgs":{..},"result":{..}}
// written 0600 in a 0700 directory. The default cache_dir is /var/lib/cni.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cni/result.h"
#include "runtime/invoke.h"

namespace weft::runtime {

inline constexpr const char* kDefaultCacheDir = "/var/lib/cni";
inline constexpr const char* kCacheKind = "cniCacheV1";

struct CachedAttachment {
  std::string container_id;
  std::string network;
  std::string ifname;
  std::string netns;
  std::string config;  // the network list's JSON text, decoded
  std::vector<std::pair<std::string, std::string>> args;
  nlohmann::json capability_args = nlohmann::json::object();
  nlohmann::json result;  // the raw cached result object (null if none)
  std::string file;

  // The RuntimeConf a DEL from the cache uses.
  RuntimeConf ToRuntimeConf() const;
};

// Not internally locked: concurrent writers of one attachment must be
// serialised by the caller, as with libcni.
class ResultCache {
 public:
  explicit ResultCache(std::string cache_dir = kDefaultCacheDir) : dir_(std::move(cache_dir)) {}
  const std::string& dir() const { return dir_; }
  std::string results_dir() const { return dir_ + "/results"; }

  // Invalid-argument when a part is empty or could escape the directory.
  Result<std::string> PathFor(const std::string& network, const std::string& container_id,
                              const std::string& ifname) const;

  Status Add(const std::string& network, const std::string& config_bytes, const RuntimeConf& rt,
             const nlohmann::json& result) const;
  // nullopt when there is no cache file; an error when it is not ours to
  // read (wrong kind, bad JSON).
  Result<std::optional<CachedAttachment>> Get(const std::string& network, const std::string& container_id,
                                              const std::string& ifname) const;
  // libcni getCachedResult: the cached result converted to `cni_version`;
  // nullopt when nothing is cached. Also reads the legacy format (a bare
  // result object).
  Result<std::optional<cni::CniResult>> GetResult(const std::string& network, const std::string& cni_version,
                                                  const RuntimeConf& rt) const;
  Status Del(const std::string& network, const std::string& container_id, const std::string& ifname) const;
  // Every valid cniCacheV1 entry, sorted by file name; filtered by container
  // ID when it is non-empty. Unreadable or foreign files are skipped.
  Result<std::vector<CachedAttachment>> List(const std::string& container_id = "") const;

 private:
  std::string dir_;
};

}  // namespace weft::runtime
