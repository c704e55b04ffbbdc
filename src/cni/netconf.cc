#include "cni/netconf.h"

#include "base/strings.h"
#include "cni/version.h"

namespace weft::cni {

using nlohmann::json;

Result<std::optional<CniResult>> NetConf::PrevResult() const {
  if (prev_result.is_null() || (prev_result.is_object() && prev_result.empty()))
    return std::optional<CniResult>();
  WEFT_ASSIGN_OR_RETURN(CniResult r, DecodeResult(prev_result, cni_version));
  return std::optional<CniResult>(std::move(r));
}

namespace {
Status Invalid(const std::string& msg) { return Status::Error(Reason::kInvalidArgument, Domain::kConfig, msg); }
}  // namespace

Result<NetConf> ParseNetConf(std::string_view data) {
  NetConf c;
  try {
    c.raw = json::parse(data);
  } catch (const json::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, "network config is not valid JSON", e.what());
  }
  if (!c.raw.is_object()) return Status::Error(Reason::kMalformed, Domain::kNone,
                                               "network config must be a JSON object");
  const json& j = c.raw;

  if (j.contains("cniVersion")) {
    if (!j["cniVersion"].is_string()) return Invalid("cniVersion must be a string");
    c.cni_version = j["cniVersion"].get<std::string>();
  }
  if (c.cni_version.empty()) c.cni_version = "0.1.0";
  if (!IsSupported(c.cni_version)) {
    std::string all;
    for (const auto& v : SupportedVersions()) all += (all.empty() ? "" : ", ") + v;
    return Status::Error(Reason::kUnsupported, Domain::kNone,
                         "incompatible CNI versions: config is \"" + c.cni_version + "\"",
                         "this plugin supports " + all);
  }
  if (!j.contains("name") || !j["name"].is_string()) return Invalid("network config needs a string \"name\"");
  c.name = j["name"].get<std::string>();
  if (!IsValidCniName(c.name))
    return Invalid("network name \"" + c.name + "\" is invalid (must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$)");
  if (j.contains("type")) {
    if (!j["type"].is_string()) return Invalid("type must be a string");
    c.type = j["type"].get<std::string>();
  }
  auto object_field = [&](const char* k, json* into) -> Status {
    if (!j.contains(k) || j[k].is_null()) return Status::Ok();
    if (!j[k].is_object()) return Invalid(std::string(k) + " must be an object");
    *into = j[k];
    return Status::Ok();
  };
  WEFT_RETURN_IF_ERROR(object_field("capabilities", &c.capabilities));
  WEFT_RETURN_IF_ERROR(object_field("runtimeConfig", &c.runtime_config));
  WEFT_RETURN_IF_ERROR(object_field("prevResult", &c.prev_result));
  WEFT_RETURN_IF_ERROR(object_field("ipam", &c.ipam));
  if (j.contains("dns")) {
    auto d = DecodeDns(j["dns"]);
    if (!d.ok()) return Invalid("dns: " + d.status().msg());
    c.dns = *d;
  }
  return c;
}

Result<std::vector<Attachment>> ValidAttachments(const NetConf& conf) {
  const json& j = conf.raw;
  const char* key = j.contains("cni.dev/valid-attachments") ? "cni.dev/valid-attachments"
                                                            : "cni.dev/attachments";
  std::vector<Attachment> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  if (!j[key].is_array()) return Invalid(std::string(key) + " must be an array");
  for (const auto& a : j[key]) {
    if (!a.is_object() || !a.contains("containerID") || !a["containerID"].is_string() ||
        !a.contains("ifname") || !a["ifname"].is_string())
      return Invalid(std::string(key) + ": each entry needs string containerID and ifname");
    out.push_back({a["containerID"].get<std::string>(), a["ifname"].get<std::string>()});
  }
  return out;
}

}  // namespace weft::cni
