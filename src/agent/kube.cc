#include "agent/kube.h"

#include <functional>
#include <nlohmann/json.hpp>

#include "base/backoff.h"
#include "base/json_util.h"
#include "base/log.h"
#include "base/strings.h"
#include "kube/informer.h"
#include "kube/kube_client.h"

namespace weft::agent {
namespace {

using nlohmann::json;

KubeNode NodeFromJson(const json& j) {
  KubeNode n;
  const json& meta = j.value("metadata", json::object());
  n.info.name = JsonStr(meta, "name");
  n.resource_version = JsonStr(meta, "resourceVersion");
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
    if (auto p = IpPrefix::Parse(JsonStr(spec, "podCIDR"))) n.info.pod_cidrs.push_back(p->Masked());
  std::stable_sort(n.info.pod_cidrs.begin(), n.info.pod_cidrs.end(),
                   [](const IpPrefix& a, const IpPrefix& b) { return a.is_v4() && !b.is_v4(); });
  if (auto it = n.annotations.find(kAnnotationHostIp); it != n.annotations.end())
    n.info.host_ip = IpAddress::Parse(it->second);
  if (auto it = n.annotations.find(kAnnotationHostIp6); it != n.annotations.end())
    if (auto ip = IpAddress::Parse(it->second); ip && ip->is_v6()) n.info.host_ip6 = ip;
  if (j.contains("status") && j["status"].contains("addresses") && j["status"]["addresses"].is_array()) {
    for (const auto& a : j["status"]["addresses"]) {
      if (JsonStr(a, "type") != "InternalIP") continue;
      auto ip = IpAddress::Parse(JsonStr(a, "address"));
      if (!n.info.host_ip) n.info.host_ip = ip;
      if (ip && ip->is_v6() && !n.info.host_ip6 && !n.annotations.count(kAnnotationHostIp6)) n.info.host_ip6 = ip;
    }
  }
  if (auto it = n.annotations.find(kAnnotationVtepMac); it != n.annotations.end()) n.info.vtep_mac = it->second;
  if (auto it = n.annotations.find(kAnnotationHostMac); it != n.annotations.end()) n.info.host_mac = it->second;
  if (auto it = n.annotations.find(kAnnotationBackend); it != n.annotations.end()) n.info.backend = it->second;
  return n;
}

}  // namespace

Result<KubeNode> ParseNode(std::string_view text) {
  return ParseJsonObject<KubeNode>(text, "node", [](const json& j) -> Result<KubeNode> {
    KubeNode n = NodeFromJson(j);
    if (n.info.name.empty()) return Status::Error(Reason::kMalformed, Domain::kNone, "node: no metadata.name");
    return n;
  });
}

std::string AnnotationPatch(const overlay::LocalNode& self) {
  json j{{"metadata",
          {{"annotations",
            {{kAnnotationVtepMac, self.vtep_mac.empty() ? json(nullptr) : json(self.vtep_mac)},
             {kAnnotationHostIp, self.host_ip.ToString()},
             {kAnnotationHostIp6, self.host_ip6 ? json(self.host_ip6->ToString()) : json(nullptr)},
             {kAnnotationBackend, overlay::BackendName(self.backend)}}}}}};
  if (!self.host_mac.empty()) j["metadata"]["annotations"][kAnnotationHostMac] = self.host_mac;
  return j.dump();
}

bool AnnotationsMatch(const KubeNode& node, const overlay::LocalNode& self) {
  auto get = [&](const char* k) {
    auto it = node.annotations.find(k);
    return it == node.annotations.end() ? std::string() : it->second;
  };
  return get(kAnnotationVtepMac) == self.vtep_mac && get(kAnnotationHostIp) == self.host_ip.ToString() &&
         get(kAnnotationHostIp6) == (self.host_ip6 ? self.host_ip6->ToString() : std::string()) &&
         get(kAnnotationBackend) == overlay::BackendName(self.backend) &&
         (self.host_mac.empty() || get(kAnnotationHostMac) == self.host_mac);
}

namespace {

std::optional<KubeNode> DecodeNode(const json& j) {
  try {
    KubeNode n = NodeFromJson(j);
    if (n.info.name.empty()) return std::nullopt;
    return n;
  } catch (const std::exception& e) {
    WEFT_LOG(kWarn, "node ignored: decode failed", {"err", e.what()});
    return std::nullopt;
  }
}

// The Node informer's handler: peers go to the PeerStore (a list as one
// Replace, events as Upsert/Remove); this node's own object is not a peer,
// but each time it is listed or changes, `on_self` checks its annotations.
// Each list item is decoded as it arrives; no JSON is kept.
class NodeHandler : public kube::InformerHandler {
 public:
  NodeHandler(PeerStore& store, std::string self_name, std::function<void(const KubeNode&)> on_self)
      : store_(store), self_name_(std::move(self_name)), on_self_(std::move(on_self)) {}

  void OnListStart() override {
    staged_.clear();
    staged_self_.reset();
  }
  void OnListItem(json item) override {
    std::optional<KubeNode> n = DecodeNode(item);
    if (!n) return;
    if (n->info.name == self_name_) {
      staged_self_ = std::move(n);
    } else {
      std::string name = n->info.name;
      staged_[name] = std::move(n->info);
    }
  }
  void OnListEnd(bool complete) override {
    overlay::PeerMap peers = std::move(staged_);
    std::optional<KubeNode> self = std::move(staged_self_);
    OnListStart();
    if (!complete) return;
    size_t count = peers.size();
    store_.Replace(std::move(peers));
    WEFT_LOG(kInfo, "listed peers", {"backend", "kubernetes"}, {"peers", count});
    if (self) on_self_(*self);
  }
  void OnReplace(std::vector<json> items) override {
    OnListStart();
    for (auto& item : items) OnListItem(std::move(item));
    OnListEnd(true);
  }
  void OnEvent(kube::EventType type, json object) override {
    std::optional<KubeNode> n = DecodeNode(object);
    if (!n) return;
    if (n->info.name == self_name_) {
      if (type != kube::EventType::kDeleted) on_self_(*n);
    } else if (type == kube::EventType::kDeleted) {
      store_.Remove(n->info.name);
    } else {
      store_.Upsert(std::move(n->info));
    }
  }

 private:
  PeerStore& store_;
  const std::string self_name_;
  const std::function<void(const KubeNode&)> on_self_;
  overlay::PeerMap staged_;
  std::optional<KubeNode> staged_self_;
};

class KubeControlPlane : public ControlPlane {
 public:
  explicit KubeControlPlane(KubeOptions opts) : opts_(std::move(opts)), http_(opts_.endpoint) {}

  Result<std::vector<IpPrefix>> Register(const overlay::LocalNode& self, const std::atomic<bool>& stop) override {
    self_ = self;
    Backoff backoff;
    for (;;) {
      auto r = TryRegister(http_);
      if (r.ok() && !r->empty()) return r;
      if (r.ok()) {
        WEFT_LOG(kInfo, "waiting for the node's spec.podCIDRs", {"node", self_.name});
      } else {
        stats_.errors++;
        WEFT_LOG(kWarn, "kubernetes registration failed; retrying", {"err", r.status()});
      }
      if (!SleepJitteredUnlessStopped(backoff.Next(), stop))
        return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "stopped before registering");
    }
  }

  std::vector<IpPrefix> ClusterCidrs() const override { return {}; }

  Status Run(PeerStore& store, const std::atomic<bool>& stop) override {
    kube::KubeClient patch_http(opts_.endpoint);
    NodeHandler handler(store, self_.name, [&](const KubeNode& node) { EnsureAnnotations(patch_http, node); });
    kube::ResourceSpec spec;
    spec.what = "nodes";
    spec.path = "/api/v1/nodes";
    spec.page_size = opts_.list_page_size;
    spec.watch_timeout_seconds = opts_.watch_timeout_seconds;
    kube::Informer informer(kube::NewKubeApi(opts_.endpoint), std::move(spec), handler, stats_);
    informer.Run(stop);
    return Status::Ok();
  }

  Status Leave() override {
    WEFT_LOG(kInfo, "kubernetes: nothing to withdraw; the Node object belongs to the cluster");
    return Status::Ok();
  }

  ControlPlaneStats& stats() override { return stats_; }

  const AuthHealth* auth_health() const override {
    return opts_.endpoint.credentials ? &opts_.endpoint.credentials->health() : nullptr;
  }

 private:
  static sys::HttpRequest Request(const std::string& method, const std::string& path) {
    sys::HttpRequest r;
    r.method = method;
    r.url = path;
    return r;
  }

  Result<std::vector<IpPrefix>> TryRegister(kube::KubeClient& http) {
    WEFT_ASSIGN_OR_RETURN(auto resp, http.Do(Request("GET", "/api/v1/nodes/" + QueryEscape(self_.name))));
    if (resp.status == 404) return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                                 "node " + self_.name + " does not exist");
    if (resp.status != 200)
      return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                           "get node " + self_.name + ": HTTP " + std::to_string(resp.status),
                           resp.body.substr(0, 512));
    WEFT_ASSIGN_OR_RETURN(auto node, ParseNode(resp.body));
    if (node.info.pod_cidrs.empty()) return std::vector<IpPrefix>{};
    WEFT_RETURN_IF_ERROR(Patch(http));
    return node.info.pod_cidrs;
  }

  Status Patch(kube::KubeClient& http) {
    sys::HttpRequest req = Request("PATCH", "/api/v1/nodes/" + QueryEscape(self_.name));
    req.headers.push_back("Content-Type: application/merge-patch+json");
    req.body = AnnotationPatch(self_);
    WEFT_ASSIGN_OR_RETURN(auto resp, http.Do(req));
    if (resp.status != 200)
      return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                           "patch node " + self_.name + ": HTTP " + std::to_string(resp.status),
                           resp.body.substr(0, 512));
    WEFT_LOG(kInfo, "published node annotations", {"node", self_.name});
    return Status::Ok();
  }

  void EnsureAnnotations(kube::KubeClient& http, const KubeNode& node) {
    if (AnnotationsMatch(node, self_)) return;
    Status st = Patch(http);
    if (!st.ok()) {
      stats_.errors++;
      WEFT_LOG(kWarn, "re-publishing node annotations failed", {"err", st});
    }
  }

  KubeOptions opts_;
  kube::KubeClient http_;  // Register (main thread)
  overlay::LocalNode self_;
  ControlPlaneStats stats_;
};

}  // namespace

std::unique_ptr<ControlPlane> NewKubeControlPlane(KubeOptions opts) {
  return std::make_unique<KubeControlPlane>(std::move(opts));
}

}  // namespace weft::agent
