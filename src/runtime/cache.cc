#include "runtime/cache.h"

#include <algorithm>

#include "base/strings.h"
#include "sys/files.h"

namespace weft::runtime {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

Result<CachedAttachment> Decode(const std::string& text, const std::string& file) {
  CachedAttachment a;
  a.file = file;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, "cache file " + file + " is not JSON", e.what());
  }
  if (!j.is_object() || j.value("kind", "") != kCacheKind)
    return Status::Error(Reason::kMalformed, Domain::kNone,
                         "cache file " + file + " has the wrong kind (want " + kCacheKind + ")");
  try {
    a.container_id = j.value("containerId", "");
    a.network = j.value("networkName", "");
    a.ifname = j.value("ifName", "");
    a.netns = j.value("netns", "");
    if (j.contains("config") && j["config"].is_string()) {
      std::optional<std::string> config = Base64Decode(j["config"].get<std::string>());
      if (!config) return Status::Error(Reason::kMalformed, Domain::kNone, "cache file " + file + ": config is not base64");
      a.config = std::move(*config);
    }
    if (j.contains("cniArgs") && j["cniArgs"].is_array()) {
      for (const auto& p : j["cniArgs"]) {
        if (!p.is_array() || p.size() != 2 || !p[0].is_string() || !p[1].is_string())
          return Status::Error(Reason::kMalformed, Domain::kNone,
                               "cache file " + file + ": cniArgs must be [key, value] pairs");
        a.args.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
      }
    }
    if (j.contains("capabilityArgs") && j["capabilityArgs"].is_object()) a.capability_args = j["capabilityArgs"];
    if (j.contains("result")) a.result = j["result"];
  } catch (const json::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone,
                         "cache file " + file + " has a field of the wrong type", e.what());
  }
  return a;
}

}  // namespace

RuntimeConf CachedAttachment::ToRuntimeConf() const {
  RuntimeConf rt;
  rt.container_id = container_id;
  rt.netns = netns;
  rt.ifname = ifname;
  rt.args = args;
  rt.capability_args = capability_args;
  return rt;
}

Result<std::string> ResultCache::PathFor(const std::string& network, const std::string& container_id,
                                         const std::string& ifname) const {
  if (network.empty() || container_id.empty() || ifname.empty())
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                         "cache file path requires network name (\"" + network +
                                                   "\"), container ID (\"" + container_id +
                                                   "\"), and interface name (\"" + ifname + "\")");
  for (const std::string* part : {&network, &container_id, &ifname})
    if (part->find('/') != std::string::npos || *part == "." || *part == "..")
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                           "\"" + *part + "\" cannot be part of a cache file name");
  return results_dir() + "/" + network + "-" + container_id + "-" + ifname;
}

Status ResultCache::Add(const std::string& network, const std::string& config_bytes, const RuntimeConf& rt,
                        const json& result) const {
  WEFT_ASSIGN_OR_RETURN(std::string path, PathFor(network, rt.container_id, rt.ifname));
  // Field order and omitempty as Go's encoding of libcni's cachedInfo.
  ojson j;
  j["kind"] = kCacheKind;
  j["containerId"] = rt.container_id;
  j["config"] = Base64Encode(config_bytes);
  j["ifName"] = rt.ifname;
  j["networkName"] = network;
  if (!rt.netns.empty()) j["netns"] = rt.netns;
  if (!rt.args.empty()) {
    ojson args = ojson::array();
    for (const auto& [k, v] : rt.args) args.push_back({k, v});
    j["cniArgs"] = args;
  }
  if (rt.capability_args.is_object() && !rt.capability_args.empty())
    j["capabilityArgs"] = ojson::parse(rt.capability_args.dump());
  if (result.is_object() && !result.empty()) j["result"] = ojson::parse(result.dump());
  WEFT_RETURN_IF_ERROR(sys::MkdirAll(results_dir(), 0700));
  return sys::WriteFileAtomic(path, j.dump(), 0600);
}

Result<std::optional<CachedAttachment>> ResultCache::Get(const std::string& network, const std::string& container_id,
                                                         const std::string& ifname) const {
  WEFT_ASSIGN_OR_RETURN(std::string path, PathFor(network, container_id, ifname));
  if (!sys::PathExists(path)) return std::optional<CachedAttachment>();
  WEFT_ASSIGN_OR_RETURN(std::string text, sys::ReadFile(path));
  WEFT_ASSIGN_OR_RETURN(CachedAttachment a, Decode(text, path));
  return std::optional<CachedAttachment>(std::move(a));
}

Result<std::optional<cni::CniResult>> ResultCache::GetResult(const std::string& network,
                                                             const std::string& cni_version,
                                                             const RuntimeConf& rt) const {
  WEFT_ASSIGN_OR_RETURN(std::string path, PathFor(network, rt.container_id, rt.ifname));
  auto text = sys::ReadFile(path);
  if (!text.ok()) return std::optional<cni::CniResult>();  // libcni: a missing cache is no error
  json raw;
  try {
    json j = json::parse(*text);
    // A bare result object is the legacy (pre-cniCacheV1) format.
    raw = j.is_object() && j.value("kind", "") == kCacheKind ? j.value("result", json()) : j;
  } catch (const json::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, "cache file " + path + " is not JSON", e.what());
  }
  if (!raw.is_object() || raw.empty()) return std::optional<cni::CniResult>();
  auto decoded = cni::DecodeResult(raw, cni_version);
  if (!decoded.ok()) return decoded.status().WithPrefix("cached result in " + path);
  // Converting proves the result can be shown to plugins at cni_version.
  auto encoded = cni::EncodeResult(*decoded, cni_version);
  if (!encoded.ok())
    return encoded.status().WithPrefix("failed to convert cached result to config version " + cni_version);
  return std::optional<cni::CniResult>(std::move(decoded).value());
}

Status ResultCache::Del(const std::string& network, const std::string& container_id, const std::string& ifname) const {
  WEFT_ASSIGN_OR_RETURN(std::string path, PathFor(network, container_id, ifname));
  return sys::RemoveFile(path);
}

Result<std::vector<CachedAttachment>> ResultCache::List(const std::string& container_id) const {
  std::vector<CachedAttachment> out;
  if (!sys::PathExists(results_dir())) return out;
  WEFT_ASSIGN_OR_RETURN(auto names, sys::ListDir(results_dir()));
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    if (!container_id.empty() && name.find("-" + container_id + "-") == std::string::npos) continue;
    std::string path = results_dir() + "/" + name;
    auto text = sys::ReadFile(path);
    if (!text.ok()) continue;
    auto a = Decode(*text, path);
    if (!a.ok()) continue;
    if (!container_id.empty() && a->container_id != container_id) continue;
    if (a->ifname.empty() || a->network.empty()) continue;
    out.push_back(std::move(a).value());
  }
  return out;
}

}  // namespace weft::runtime
