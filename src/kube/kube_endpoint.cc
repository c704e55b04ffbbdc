// Endpoint discovery: how weftd finds the API server and its credentials,
// in a cluster (the service-account mount) or from a kubeconfig (YAML or
// JSON, inline *-data fields written to files).
#include "kube/kube_endpoint.h"

#include <yaml.h>

#include <nlohmann/json.hpp>

#include "base/json_util.h"
#include "base/strings.h"
#include "sys/files.h"

namespace weft::kube {
namespace {

using nlohmann::json;

// libyaml's document tree to JSON; every scalar becomes a string (the
// kubeconfig fields we read are strings; booleans are compared as text).
json YamlNodeToJson(yaml_document_t* doc, yaml_node_t* node, int depth) {
  if (!node || depth > 64) return nullptr;
  switch (node->type) {
    case YAML_SCALAR_NODE:
      return std::string(reinterpret_cast<char*>(node->data.scalar.value), node->data.scalar.length);
    case YAML_SEQUENCE_NODE: {
      json arr = json::array();
      for (yaml_node_item_t* it = node->data.sequence.items.start; it < node->data.sequence.items.top; ++it)
        arr.push_back(YamlNodeToJson(doc, yaml_document_get_node(doc, *it), depth + 1));
      return arr;
    }
    case YAML_MAPPING_NODE: {
      json obj = json::object();
      for (yaml_node_pair_t* p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; ++p) {
        yaml_node_t* k = yaml_document_get_node(doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE) continue;
        std::string key(reinterpret_cast<char*>(k->data.scalar.value), k->data.scalar.length);
        obj[key] = YamlNodeToJson(doc, yaml_document_get_node(doc, p->value), depth + 1);
      }
      return obj;
    }
    default:
      return nullptr;
  }
}

Result<json> ParseYaml(std::string_view text) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return Status::Error(Reason::kInternal, Domain::kNone,
                                                             "yaml_parser_initialize");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) {
    std::string err = parser.problem ? parser.problem : "syntax error";
    yaml_parser_delete(&parser);
    return Status::Error(Reason::kMalformed, Domain::kNone, "kubeconfig: bad YAML", err);
  }
  json out = YamlNodeToJson(&doc, yaml_document_get_root_node(&doc), 0);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  return out;
}

const json* Named(const json& list, const std::string& name, const char* field) {
  if (!list.is_array()) return nullptr;
  for (const auto& e : list)
    if (JsonStr(e, "name") == name && e.contains(field)) return &e[field];
  return nullptr;
}

// A file path from `path_key` (relative to the kubeconfig's directory) or
// inline base64 `data_key` written to `scratch_dir/<out_name>`.
Result<std::string> FileOrData(const json& obj, const char* path_key, const char* data_key,
                               const std::string& base_dir, const std::string& scratch_dir,
                               const std::string& out_name) {
  std::string p = JsonStr(obj, path_key);
  if (!p.empty()) return p[0] == '/' ? p : base_dir + "/" + p;
  std::string d = JsonStr(obj, data_key);
  if (d.empty()) return std::string();
  auto raw = Base64Decode(d);
  if (!raw) return Status::Error(Reason::kMalformed, Domain::kNone,
                                 std::string("kubeconfig: ") + data_key + " is not base64");
  WEFT_RETURN_IF_ERROR(sys::MkdirAll(scratch_dir, 0700));
  std::string out = scratch_dir + "/" + out_name;
  WEFT_RETURN_IF_ERROR(sys::WriteFileAtomic(out, *raw, 0600));
  return out;
}

}  // namespace

Result<KubeEndpoint> InClusterEndpoint(const std::vector<std::string>& env, const std::string& sa_dir) {
  std::string host, port;
  for (const auto& kv : env) {
    if (StartsWith(kv, "KUBERNETES_SERVICE_HOST=")) host = kv.substr(24);
    if (StartsWith(kv, "KUBERNETES_SERVICE_PORT=")) port = kv.substr(24);
  }
  if (host.empty() || port.empty())
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                         "not in a cluster: KUBERNETES_SERVICE_HOST/PORT are unset (use --kubeconfig)");
  KubeEndpoint e;
  e.server = "https://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  e.files.token_file = sa_dir + "/token";
  e.files.tls.ca_file = sa_dir + "/ca.crt";
  WEFT_ASSIGN_OR_RETURN(e.credentials, KubeCredentials::Load(e.files));
  return e;
}

Result<KubeEndpoint> ParseKubeconfig(std::string_view text, const std::string& scratch_dir,
                                     const std::string& base_dir) {
  WEFT_ASSIGN_OR_RETURN(json cfg, ParseYaml(text));
  if (!cfg.is_object()) return Status::Error(Reason::kMalformed, Domain::kNone, "kubeconfig: not a mapping");
  std::string ctx_name = JsonStr(cfg, "current-context");
  const json& contexts = JsonMember(cfg, "contexts");
  const json* ctx = Named(contexts, ctx_name, "context");
  if (!ctx && ctx_name.empty() && contexts.is_array() && contexts.size() == 1 && contexts[0].contains("context"))
    ctx = &contexts[0]["context"];
  if (!ctx) return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                 "kubeconfig: no context \"" + ctx_name + "\"");
  const json* cluster = Named(JsonMember(cfg, "clusters"), JsonStr(*ctx, "cluster"), "cluster");
  if (!cluster) return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                     "kubeconfig: no cluster \"" + JsonStr(*ctx, "cluster") + "\"");
  KubeEndpoint e;
  e.server = JsonStr(*cluster, "server");
  while (!e.server.empty() && e.server.back() == '/') e.server.pop_back();
  if (e.server.empty()) return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                             "kubeconfig: the cluster has no server");
  sys::TlsOptions& tls = e.files.tls;
  WEFT_ASSIGN_OR_RETURN(tls.ca_file, FileOrData(*cluster, "certificate-authority", "certificate-authority-data",
                                                base_dir, scratch_dir, "ca.crt"));
  tls.insecure = JsonStr(*cluster, "insecure-skip-tls-verify") == "true";
  std::string user_name = JsonStr(*ctx, "user");
  if (const json* user = Named(JsonMember(cfg, "users"), user_name, "user")) {
    // client-go: an inline token wins over tokenFile. The file is read (and
    // re-read as it rotates) by KubeCredentials.
    e.files.token = JsonStr(*user, "token");
    if (e.files.token.empty() && !JsonStr(*user, "tokenFile").empty()) {
      std::string tf = JsonStr(*user, "tokenFile");
      e.files.token_file = tf[0] == '/' ? tf : base_dir + "/" + tf;
    }
    WEFT_ASSIGN_OR_RETURN(tls.cert_file, FileOrData(*user, "client-certificate", "client-certificate-data",
                                                    base_dir, scratch_dir, "client.crt"));
    WEFT_ASSIGN_OR_RETURN(tls.key_file,
                          FileOrData(*user, "client-key", "client-key-data", base_dir, scratch_dir, "client.key"));
  }
  return e;
}

Result<KubeEndpoint> KubeconfigEndpoint(const std::string& path, const std::string& scratch_dir) {
  WEFT_ASSIGN_OR_RETURN(std::string text, sys::ReadFile(path, 4 * 1024 * 1024));
  std::string base = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  auto e = ParseKubeconfig(text, scratch_dir, base);
  if (!e.ok()) return e.status().WithPrefix(path);
  auto creds = KubeCredentials::Load(e->files);
  if (!creds.ok()) return creds.status().WithPrefix(path);
  e->credentials = std::move(creds).value();
  return e;
}

}  // namespace weft::kube
