#include "runtime/cache.h"

#include <algorithm>

#include "base/strings.h"
#include "sys/files.h"

namespace weft::runtime {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

Result<CachedAttachment> Decode(const std::string& text, const std::string& file) {
  CachedAttachment a;
  a.file = file;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Status::Error(Code::kDecode, "cache file " + file + " is not JSON", e.what());
  }
  if (!j.is_object() || j.value("kind", "") != kCacheKind)
    return Status::Error(Code::kDecode, "cache file " + file + " has the wrong kind (want " + kCacheKind + ")");
  try {
    a.container_id = j.value("containerId", "");
    a.network = j.value("networkName", "");
    a.ifname = j.value("ifName", "");
    a.netns = j.value("netns", "");
    if (j.contains("config") && j["config"].is_string()) {
      WEFT_ASSIGN_OR_RETURN(a.config, Base64Decode(j["config"].get<std::string>()));
    }
    if (j.contains("cniArgs") && j["cniArgs"].is_array()) {
      for (const auto& p : j["cniArgs"]) {
        if (!p.is_array() || p.size() != 2 || !p[0].is_string() || !p[1].is_string())
          return Status::Error(Code::kDecode, "cache file " + file + ": cniArgs must be [key, value] pairs");
        a.args.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
      }
    }
    if (j.contains("capabilityArgs") && j["capabilityArgs"].is_object()) a.capability_args = j["capabilityArgs"];
    if (j.contains("result")) a.result = j["result"];
  } catch (const json::exception& e) {
    return Status::Error(Code::kDecode, "cache file " + file + " has a field of the wrong type", e.what());
  }
  return a;
}

}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += {kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], '='};
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 != 0) return Status::Error(Code::kDecode, "base64 length is not a multiple of 4");
  std::string out;
  for (size_t i = 0; i < in.size(); i += 4) {
    int pad = 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      int d = val(c);
      if (d < 0 || pad) return Status::Error(Code::kDecode, "invalid base64");
      v = (v << 6) | uint32_t(d);
    }
    out.push_back(char((v >> 16) & 0xff));
    if (pad < 2) out.push_back(char((v >> 8) & 0xff));
    if (pad < 1) out.push_back(char(v & 0xff));
  }
  return out;
}

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
    return Status::Error(Code::kInvalidConfig, "cache file path requires network name (\"" + network +
                                                   "\"), container ID (\"" + container_id +
                                                   "\"), and interface name (\"" + ifname + "\")");
  for (const std::string* part : {&network, &container_id, &ifname})
    if (part->find('/') != std::string::npos || *part == "." || *part == "..")
      return Status::Error(Code::kInvalidConfig, "\"" + *part + "\" cannot be part of a cache file name");
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
    return Status::Error(Code::kDecode, "cache file " + path + " is not JSON", e.what());
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
