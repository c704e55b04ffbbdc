#include "agent/kube.h"

#include <yaml.h>

#include <nlohmann/json.hpp>

#include "agent/etcd.h"  // Base64Decode
#include "base/log.h"
#include "base/strings.h"
#include "sys/files.h"

namespace weft::agent {
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
  if (!yaml_parser_initialize(&parser)) return Status::Error(Code::kInternal, "yaml_parser_initialize");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) {
    std::string err = parser.problem ? parser.problem : "syntax error";
    yaml_parser_delete(&parser);
    return Status::Error(Code::kDecode, "kubeconfig: bad YAML", err);
  }
  json out = YamlNodeToJson(&doc, yaml_document_get_root_node(&doc), 0);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  return out;
}

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// A member by reference (never a copy: callers keep pointers into it).
const json& Field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

const json* Named(const json& list, const std::string& name, const char* field) {
  if (!list.is_array()) return nullptr;
  for (const auto& e : list)
    if (Str(e, "name") == name && e.contains(field)) return &e[field];
  return nullptr;
}

// A file path from `path_key` (relative to the kubeconfig's directory) or
// inline base64 `data_key` written to `scratch_dir/<out_name>`.
Result<std::string> FileOrData(const json& obj, const char* path_key, const char* data_key,
                               const std::string& base_dir, const std::string& scratch_dir,
                               const std::string& out_name) {
  std::string p = Str(obj, path_key);
  if (!p.empty()) return p[0] == '/' ? p : base_dir + "/" + p;
  std::string d = Str(obj, data_key);
  if (d.empty()) return std::string();
  auto raw = Base64Decode(d);
  if (!raw) return Status::Error(Code::kDecode, std::string("kubeconfig: ") + data_key + " is not base64");
  WEFT_RETURN_IF_ERROR(sys::MkdirAll(scratch_dir, 0700));
  std::string out = scratch_dir + "/" + out_name;
  WEFT_RETURN_IF_ERROR(sys::WriteFileAtomic(out, *raw, 0600));
  return out;
}

KubeNode NodeFromJson(const json& j) {
  KubeNode n;
  const json& meta = j.value("metadata", json::object());
  n.info.name = Str(meta, "name");
  n.resource_version = Str(meta, "resourceVersion");
  if (meta.contains("annotations") && meta["annotations"].is_object())
    for (const auto& [k, v] : meta["annotations"].items())
      if (v.is_string()) n.annotations[k] = v.get<std::string>();
  const json& spec = j.value("spec", json::object());
  if (spec.contains("podCIDRs") && spec["podCIDRs"].is_array()) {
    for (const auto& c : spec["podCIDRs"])
      if (c.is_string())
        if (auto p = IpPrefix::Parse(c.get<std::string>())) n.info.pod_cidrs.push_back(p->Masked());
  }
  if (n.info.pod_cidrs.empty())
    if (auto p = IpPrefix::Parse(Str(spec, "podCIDR"))) n.info.pod_cidrs.push_back(p->Masked());
  std::stable_sort(n.info.pod_cidrs.begin(), n.info.pod_cidrs.end(),
                   [](const IpPrefix& a, const IpPrefix& b) { return a.is_v4() && !b.is_v4(); });
  if (auto it = n.annotations.find(kAnnotationHostIp); it != n.annotations.end())
    n.info.host_ip = IpAddress::Parse(it->second);
  if (!n.info.host_ip && j.contains("status") && j["status"].contains("addresses") &&
      j["status"]["addresses"].is_array()) {
    for (const auto& a : j["status"]["addresses"])
      if (Str(a, "type") == "InternalIP" && !n.info.host_ip) n.info.host_ip = IpAddress::Parse(Str(a, "address"));
  }
  if (auto it = n.annotations.find(kAnnotationVtepMac); it != n.annotations.end()) n.info.vtep_mac = it->second;
  if (auto it = n.annotations.find(kAnnotationBackend); it != n.annotations.end()) n.info.backend = it->second;
  return n;
}

template <typename T, typename F>
Result<T> Guarded(std::string_view text, const char* what, F&& fn) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) return Status::Error(Code::kDecode, std::string(what) + ": not a JSON object");
    return fn(j);
  } catch (const std::exception& e) {
    return Status::Error(Code::kDecode, std::string(what) + ": bad JSON", e.what());
  }
}

std::string UrlEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
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
    return Status::Error(Code::kInvalidConfig,
                         "not in a cluster: KUBERNETES_SERVICE_HOST/PORT are unset (use --kubeconfig)");
  KubeEndpoint e;
  e.server = "https://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  WEFT_ASSIGN_OR_RETURN(std::string token, sys::ReadFile(sa_dir + "/token", 64 * 1024));
  e.token = std::string(Trim(token));
  e.tls.ca_file = sa_dir + "/ca.crt";
  return e;
}

Result<KubeEndpoint> ParseKubeconfig(std::string_view text, const std::string& scratch_dir,
                                     const std::string& base_dir) {
  WEFT_ASSIGN_OR_RETURN(json cfg, ParseYaml(text));
  if (!cfg.is_object()) return Status::Error(Code::kDecode, "kubeconfig: not a mapping");
  std::string ctx_name = Str(cfg, "current-context");
  const json& contexts = Field(cfg, "contexts");
  const json* ctx = Named(contexts, ctx_name, "context");
  if (!ctx && ctx_name.empty() && contexts.is_array() && contexts.size() == 1 && contexts[0].contains("context"))
    ctx = &contexts[0]["context"];
  if (!ctx) return Status::Error(Code::kInvalidConfig, "kubeconfig: no context \"" + ctx_name + "\"");
  const json* cluster = Named(Field(cfg, "clusters"), Str(*ctx, "cluster"), "cluster");
  if (!cluster) return Status::Error(Code::kInvalidConfig, "kubeconfig: no cluster \"" + Str(*ctx, "cluster") + "\"");
  KubeEndpoint e;
  e.server = Str(*cluster, "server");
  while (!e.server.empty() && e.server.back() == '/') e.server.pop_back();
  if (e.server.empty()) return Status::Error(Code::kInvalidConfig, "kubeconfig: the cluster has no server");
  WEFT_ASSIGN_OR_RETURN(e.tls.ca_file, FileOrData(*cluster, "certificate-authority", "certificate-authority-data",
                                                  base_dir, scratch_dir, "ca.crt"));
  e.tls.insecure = Str(*cluster, "insecure-skip-tls-verify") == "true";
  std::string user_name = Str(*ctx, "user");
  if (const json* user = Named(Field(cfg, "users"), user_name, "user")) {
    e.token = Str(*user, "token");
    if (e.token.empty() && !Str(*user, "tokenFile").empty()) {
      std::string tf = Str(*user, "tokenFile");
      WEFT_ASSIGN_OR_RETURN(std::string t, sys::ReadFile(tf[0] == '/' ? tf : base_dir + "/" + tf, 64 * 1024));
      e.token = std::string(Trim(t));
    }
    WEFT_ASSIGN_OR_RETURN(e.tls.cert_file, FileOrData(*user, "client-certificate", "client-certificate-data",
                                                      base_dir, scratch_dir, "client.crt"));
    WEFT_ASSIGN_OR_RETURN(e.tls.key_file,
                          FileOrData(*user, "client-key", "client-key-data", base_dir, scratch_dir, "client.key"));
  }
  return e;
}

Result<KubeEndpoint> KubeconfigEndpoint(const std::string& path, const std::string& scratch_dir) {
  WEFT_ASSIGN_OR_RETURN(std::string text, sys::ReadFile(path, 4 * 1024 * 1024));
  std::string base = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  auto e = ParseKubeconfig(text, scratch_dir, base);
  if (!e.ok()) return e.status().WithPrefix(path);
  return e;
}

Result<KubeNode> ParseNode(std::string_view text) {
  return Guarded<KubeNode>(text, "node", [](const json& j) -> Result<KubeNode> {
    KubeNode n = NodeFromJson(j);
    if (n.info.name.empty()) return Status::Error(Code::kDecode, "node: no metadata.name");
    return n;
  });
}

Result<KubeList> ParseNodeList(std::string_view text) {
  return Guarded<KubeList>(text, "node list", [](const json& j) -> Result<KubeList> {
    if (j.value("kind", std::string()) == "Status")
      return Status::Error(Code::kControlPlane, "node list: " + Str(j, "message"));
    KubeList l;
    const json& meta = j.value("metadata", json::object());
    l.resource_version = Str(meta, "resourceVersion");
    l.continue_token = Str(meta, "continue");
    if (j.contains("items") && j["items"].is_array())
      for (const auto& item : j["items"]) {
        KubeNode n = NodeFromJson(item);
        if (!n.info.name.empty()) l.nodes.push_back(std::move(n));
      }
    return l;
  });
}

Result<KubeWatchEvent> ParseWatchEvent(std::string_view line) {
  return Guarded<KubeWatchEvent>(line, "watch event", [](const json& j) -> Result<KubeWatchEvent> {
    KubeWatchEvent e;
    e.type = Str(j, "type");
    if (!j.contains("object") || !j["object"].is_object())
      return Status::Error(Code::kDecode, "watch event without an object");
    const json& obj = j["object"];
    if (e.type == "ERROR") {
      e.error_code = obj.value("code", 0);
      e.error_message = Str(obj, "message");
      return e;
    }
    if (e.type != "ADDED" && e.type != "MODIFIED" && e.type != "DELETED" && e.type != "BOOKMARK")
      return Status::Error(Code::kDecode, "watch event of unknown type \"" + e.type + "\"");
    e.node = NodeFromJson(obj);
    e.resource_version = e.node.resource_version;
    if (e.type != "BOOKMARK" && e.node.info.name.empty())
      return Status::Error(Code::kDecode, "watch event: object without metadata.name");
    return e;
  });
}

std::string AnnotationPatch(const LocalNode& self) {
  return json{{"metadata",
               {{"annotations",
                 {{kAnnotationVtepMac, self.vtep_mac.empty() ? json(nullptr) : json(self.vtep_mac)},
                  {kAnnotationHostIp, self.host_ip.ToString()},
                  {kAnnotationBackend, BackendName(self.backend)}}}}}}
      .dump();
}

bool AnnotationsMatch(const KubeNode& node, const LocalNode& self) {
  auto get = [&](const char* k) {
    auto it = node.annotations.find(k);
    return it == node.annotations.end() ? std::string() : it->second;
  };
  return get(kAnnotationVtepMac) == self.vtep_mac && get(kAnnotationHostIp) == self.host_ip.ToString() &&
         get(kAnnotationBackend) == BackendName(self.backend);
}

namespace {

class KubeControlPlane : public ControlPlane {
 public:
  explicit KubeControlPlane(KubeOptions opts) : opts_(std::move(opts)), http_(opts_.endpoint.tls) {}

  Result<std::vector<IpPrefix>> Register(const LocalNode& self, const std::atomic<bool>& stop) override {
    self_ = self;
    Backoff backoff;
    for (;;) {
      auto r = TryRegister(http_);
      if (r.ok() && !r->empty()) return r;
      if (r.ok()) {
        WEFT_LOG(kInfo, "msg=\"waiting for the node's spec.podCIDRs\" node=" + self_.name);
      } else {
        stats_.errors++;
        WEFT_LOG(kWarn, "msg=\"kubernetes registration failed; retrying\" err=\"" + r.status().ToString() + "\"");
      }
      if (!SleepUnlessStopped(backoff.Next(), stop))
        return Status::Error(Code::kControlPlane, "stopped before registering");
    }
  }

  std::optional<IpPrefix> ClusterCidr() const override { return std::nullopt; }

  Status Run(PeerStore& store, const std::atomic<bool>& stop) override {
    HttpClient watch_http(opts_.endpoint.tls);
    HttpClient patch_http(opts_.endpoint.tls);
    PeerMap peers;
    std::string rv;
    bool need_list = true;
    Backoff backoff;
    while (!stop.load()) {
      if (need_list) {
        auto l = ListAll(watch_http, &peers, &rv, patch_http);
        stats_.relists++;
        if (!l.ok()) {
          stats_.errors++;
          WEFT_LOG(kWarn, "msg=\"node list failed\" err=\"" + l.ToString() + "\"");
          SleepUnlessStopped(backoff.Next(), stop);
          continue;
        }
        store.Replace(peers);
        need_list = false;
        WEFT_LOG(kInfo, "msg=\"listed peers\" backend=kubernetes peers=" + std::to_string(peers.size()) +
                            " resourceVersion=" + rv);
      }
      HttpRequest req = Request("GET", "/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion=" +
                                           UrlEscape(rv) + "&timeoutSeconds=" +
                                           std::to_string(opts_.watch_timeout_seconds));
      bool got_event = false;
      Status line_error;
      auto r = watch_http.Stream(
          req,
          [&](std::string_view line) {
            auto e = ParseWatchEvent(line);
            if (!e.ok()) {
              line_error = e.status();
              return false;
            }
            got_event = true;
            if (e->type == "ERROR") {
              if (e->error_code == 410) need_list = true;
              else line_error = Status::Error(Code::kControlPlane, "watch error " + std::to_string(e->error_code) +
                                                                       ": " + e->error_message);
              return false;
            }
            stats_.events++;
            if (!e->resource_version.empty()) rv = e->resource_version;
            if (e->type == "BOOKMARK") return !stop.load();
            const std::string& name = e->node.info.name;
            if (name == self_.name) {
              if (e->type != "DELETED") EnsureAnnotations(patch_http, e->node);
              return !stop.load();
            }
            if (e->type == "DELETED") {
              peers.erase(name);
              store.Remove(name);
            } else {
              peers[name] = e->node.info;
              store.Upsert(e->node.info);
            }
            return !stop.load();
          },
          stop, std::chrono::seconds(opts_.watch_timeout_seconds + 60));
      if (stop.load()) break;
      if (r.ok() && r->status == 410) need_list = true;
      if (need_list) {
        WEFT_LOG(kInfo, "msg=\"watch expired (410 Gone); re-listing\" resourceVersion=" + rv);
        continue;
      }
      bool clean = r.ok() && r->status >= 200 && r->status < 300 && line_error.ok();
      if (clean) {
        backoff.Reset();  // the server's timeoutSeconds ended the watch
        continue;
      }
      stats_.reconnects++;
      stats_.errors++;
      Status why = !r.ok() ? r.status()
                   : !line_error.ok()
                       ? line_error
                       : Status::Error(Code::kControlPlane, "watch: HTTP " + std::to_string(r->status), r->body);
      WEFT_LOG(kWarn, "msg=\"node watch failed; reconnecting\" err=\"" + why.ToString() + "\"");
      (void)got_event;
      SleepUnlessStopped(backoff.Next(), stop);
    }
    return Status::Ok();
  }

  Status Leave() override {
    WEFT_LOG(kInfo, "msg=\"kubernetes: nothing to withdraw; the Node object belongs to the cluster\"");
    return Status::Ok();
  }

  ControlPlaneStats& stats() override { return stats_; }

 private:
  HttpRequest Request(const std::string& method, const std::string& path) const {
    HttpRequest r;
    r.method = method;
    r.url = opts_.endpoint.server + path;
    r.headers = {"Accept: application/json", "User-Agent: weftd"};
    if (!opts_.endpoint.token.empty()) r.headers.push_back("Authorization: Bearer " + opts_.endpoint.token);
    return r;
  }

  Result<std::vector<IpPrefix>> TryRegister(HttpClient& http) {
    WEFT_ASSIGN_OR_RETURN(auto resp, http.Do(Request("GET", "/api/v1/nodes/" + UrlEscape(self_.name))));
    if (resp.status == 404) return Status::Error(Code::kControlPlane, "node " + self_.name + " does not exist");
    if (resp.status != 200)
      return Status::Error(Code::kControlPlane, "get node " + self_.name + ": HTTP " + std::to_string(resp.status),
                           resp.body.substr(0, 512));
    WEFT_ASSIGN_OR_RETURN(auto node, ParseNode(resp.body));
    if (node.info.pod_cidrs.empty()) return std::vector<IpPrefix>{};
    WEFT_RETURN_IF_ERROR(Patch(http));
    return node.info.pod_cidrs;
  }

  Status Patch(HttpClient& http) {
    HttpRequest req = Request("PATCH", "/api/v1/nodes/" + UrlEscape(self_.name));
    req.headers.push_back("Content-Type: application/merge-patch+json");
    req.body = AnnotationPatch(self_);
    WEFT_ASSIGN_OR_RETURN(auto resp, http.Do(req));
    if (resp.status != 200)
      return Status::Error(Code::kControlPlane, "patch node " + self_.name + ": HTTP " + std::to_string(resp.status),
                           resp.body.substr(0, 512));
    WEFT_LOG(kInfo, "msg=\"published node annotations\" node=" + self_.name);
    return Status::Ok();
  }

  void EnsureAnnotations(HttpClient& http, const KubeNode& node) {
    if (AnnotationsMatch(node, self_)) return;
    Status st = Patch(http);
    if (!st.ok()) {
      stats_.errors++;
      WEFT_LOG(kWarn, "msg=\"re-publishing node annotations failed\" err=\"" + st.ToString() + "\"");
    }
  }

  // Every page of the list; `peers` and `rv` change only when all pages
  // arrived (an expired continue token restarts the list).
  Status ListAll(HttpClient& http, PeerMap* peers, std::string* rv, HttpClient& patch_http) {
    PeerMap out;
    std::string token;
    std::string list_rv;
    std::optional<KubeNode> self_node;
    for (int page = 0; page < 10000; ++page) {
      std::string path = "/api/v1/nodes?limit=" + std::to_string(opts_.list_page_size);
      if (!token.empty()) path += "&continue=" + UrlEscape(token);
      WEFT_ASSIGN_OR_RETURN(auto resp, http.Do(Request("GET", path)));
      if (resp.status == 410 && !token.empty()) {
        out.clear();
        token.clear();
        continue;  // the continue token expired: start over
      }
      if (resp.status != 200)
        return Status::Error(Code::kControlPlane, "list nodes: HTTP " + std::to_string(resp.status),
                             resp.body.substr(0, 512));
      WEFT_ASSIGN_OR_RETURN(auto list, ParseNodeList(resp.body));
      for (auto& n : list.nodes) {
        if (n.info.name == self_.name) self_node = n;
        else out[n.info.name] = std::move(n.info);
      }
      list_rv = list.resource_version;
      token = list.continue_token;
      if (token.empty()) break;
    }
    *peers = std::move(out);
    *rv = list_rv;
    if (self_node) EnsureAnnotations(patch_http, *self_node);
    return Status::Ok();
  }

  KubeOptions opts_;
  HttpClient http_;  // Register (main thread)
  LocalNode self_;
  ControlPlaneStats stats_;
};

}  // namespace

std::unique_ptr<ControlPlane> NewKubeControlPlane(KubeOptions opts) {
  return std::make_unique<KubeControlPlane>(std::move(opts));
}

}  // namespace weft::agent
