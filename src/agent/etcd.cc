#include "agent/etcd.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/families.h"
#include "base/log.h"
#include "base/strings.h"
#include "sys/files.h"

namespace weft::agent {
namespace {

using nlohmann::json;

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The gateway renders int64 as strings ("42"); accept numbers too.
int64_t I64(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    try {
      size_t used = 0;
      long long v = std::stoll(s, &used);
      if (used == s.size()) return v;
    } catch (...) {
    }
  }
  throw std::runtime_error(std::string("field ") + key + " is not an integer");
}

std::string B64Field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  auto d = Base64Decode(it->get_ref<const std::string&>());
  if (!d) throw std::runtime_error(std::string("field ") + key + " is not base64");
  return *d;
}

EtcdKv ParseKv(const json& j) {
  EtcdKv kv;
  kv.key = B64Field(j, "key");
  kv.value = B64Field(j, "value");
  kv.create_revision = I64(j, "create_revision");
  kv.mod_revision = I64(j, "mod_revision");
  kv.lease = I64(j, "lease");
  return kv;
}

// Gateway errors: {"error":"...","code":N,"message":"..."} on unary calls and
// {"error":{"grpc_code":N,"http_code":N,"message":"..."}} inside streams.
std::optional<std::string> GatewayError(const json& j) {
  auto it = j.find("error");
  if (it == j.end()) return std::nullopt;
  if (it->is_object()) return it->value("message", std::string("etcd error"));
  if (j.contains("message") && j["message"].is_string() && j.contains("code"))
    return j["message"].get<std::string>();
  if (it->is_string()) {
    if (it->get_ref<const std::string&>().empty()) return std::nullopt;
    return it->get<std::string>();
  }
  return std::string("etcd error");
}

template <typename F>
auto Parsed(std::string_view body, const char* what, F&& fn) -> decltype(fn(json())) {
  try {
    json j = json::parse(body);
    if (!j.is_object()) return Status::Error(Code::kDecode, std::string(what) + ": not a JSON object");
    if (auto e = GatewayError(j)) return Status::Error(Code::kControlPlane, std::string(what) + ": " + *e);
    return fn(j);
  } catch (const std::exception& e) {
    return Status::Error(Code::kDecode, std::string(what) + ": bad response", e.what());
  }
}

std::string ReadStateFile(const std::string& path) {
  if (path.empty()) return "";
  auto r = sys::ReadFile(path, 256);
  return r.ok() ? std::string(Trim(*r)) : "";
}

}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = val(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string PrefixRangeEnd(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char c = static_cast<unsigned char>(prefix.back());
    if (c < 0xff) {
      prefix.back() = static_cast<char>(c + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Result<EtcdRange> ParseRangeResponse(std::string_view body) {
  return Parsed(body, "range", [](const json& j) -> Result<EtcdRange> {
    EtcdRange r;
    if (j.contains("header")) r.revision = I64(j["header"], "revision");
    if (j.contains("kvs") && j["kvs"].is_array())
      for (const auto& kv : j["kvs"]) r.kvs.push_back(ParseKv(kv));
    return r;
  });
}

Result<EtcdWatchMessage> ParseWatchLine(std::string_view line) {
  return Parsed(line, "watch", [](const json& top) -> Result<EtcdWatchMessage> {
    if (!top.contains("result") || !top["result"].is_object())
      return Status::Error(Code::kDecode, "watch: message without result");
    const json& j = top["result"];
    EtcdWatchMessage m;
    if (j.contains("header")) m.revision = I64(j["header"], "revision");
    m.created = j.value("created", false);
    m.canceled = j.value("canceled", false);
    m.compact_revision = I64(j, "compact_revision");
    m.cancel_reason = j.value("cancel_reason", std::string());
    if (j.contains("events") && j["events"].is_array()) {
      for (const auto& e : j["events"]) {
        EtcdEvent ev;
        // PUT is the enum's zero value, so the gateway omits it.
        ev.is_delete = e.value("type", std::string("PUT")) == "DELETE";
        if (e.contains("kv")) ev.kv = ParseKv(e["kv"]);
        m.events.push_back(std::move(ev));
      }
    }
    return m;
  });
}

Result<bool> ParseTxnResponse(std::string_view body, int64_t* revision) {
  return Parsed(body, "txn", [&](const json& j) -> Result<bool> {
    if (revision && j.contains("header")) *revision = I64(j["header"], "revision");
    return j.value("succeeded", false);
  });
}

Result<int64_t> ParseLeaseGrant(std::string_view body) {
  return Parsed(body, "lease grant", [](const json& j) -> Result<int64_t> {
    int64_t id = I64(j, "ID");
    if (id == 0) return Status::Error(Code::kControlPlane, "lease grant: no lease ID in the answer");
    return id;
  });
}

Result<int64_t> ParseLeaseKeepAlive(std::string_view body) {
  // A keepalive is a stream: the gateway answers with one {"result":...}
  // line per request; a lease that is gone comes back with no TTL.
  std::string_view first = body.substr(0, body.find('\n'));
  return Parsed(first, "lease keepalive", [](const json& top) -> Result<int64_t> {
    const json& j = top.contains("result") ? top["result"] : top;
    return I64(j, "TTL");
  });
}

std::vector<IpPrefix> NetworkConfig::Networks() const {
  std::vector<IpPrefix> out;
  if (network) out.push_back(*network);
  if (network6) out.push_back(*network6);
  return out;
}

Result<NetworkConfig> ParseNetworkConfig(std::string_view value) {
  try {
    json j = json::parse(value);
    if (!j.is_object()) return Status::Error(Code::kDecode, "network config: not a JSON object");
    NetworkConfig c;
    if (j.contains("network")) {
      auto net = IpPrefix::Parse(j.value("network", std::string()), /*strict=*/true);
      if (!net || !net->is_v4())
        return Status::Error(Code::kInvalidConfig, "network config: \"network\" must be an IPv4 CIDR");
      c.network = *net;
      c.subnet_len = j.value("subnetLen", 24);
      if (c.subnet_len < net->len() || c.subnet_len > 30)
        return Status::Error(Code::kInvalidConfig, "network config: \"subnetLen\" must be between " +
                                                        std::to_string(net->len()) + " and 30");
    }
    if (j.contains("ipv6Network")) {
      auto net = IpPrefix::Parse(j.value("ipv6Network", std::string()), /*strict=*/true);
      if (!net || net->is_v4())
        return Status::Error(Code::kInvalidConfig, "network config: \"ipv6Network\" must be an IPv6 CIDR");
      c.network6 = *net;
      c.subnet_len6 = j.value("ipv6SubnetLen", 64);
      if (c.subnet_len6 < net->len() || c.subnet_len6 > 126)
        return Status::Error(Code::kInvalidConfig, "network config: \"ipv6SubnetLen\" must be between " +
                                                        std::to_string(net->len()) + " and 126");
    }
    if (!c.network && !c.network6)
      return Status::Error(Code::kInvalidConfig,
                           "network config: neither \"network\" (IPv4) nor \"ipv6Network\" (IPv6) is set");
    return c;
  } catch (const std::exception& e) {
    return Status::Error(Code::kDecode, "network config: bad JSON", e.what());
  }
}

std::string EncodeNetworkConfig(const NetworkConfig& c) {
  json j = json::object();
  if (c.network) {
    j["network"] = c.network->ToString();
    j["subnetLen"] = c.subnet_len;
  }
  if (c.network6) {
    j["ipv6Network"] = c.network6->ToString();
    j["ipv6SubnetLen"] = c.subnet_len6;
  }
  return j.dump();
}

namespace {

std::string SubnetDir(const std::string& prefix, bool v6) { return prefix + (v6 ? "/subnets6/" : "/subnets/"); }

}  // namespace

std::string SubnetKey(const std::string& prefix, const IpPrefix& subnet) {
  return SubnetDir(prefix, !subnet.is_v4()) + subnet.addr().ToString() + "-" + std::to_string(subnet.len());
}

std::optional<IpPrefix> SubnetFromKey(const std::string& prefix, std::string_view key) {
  for (bool v6 : {false, true}) {
    std::string head = SubnetDir(prefix, v6);
    if (!StartsWith(key, head)) continue;
    std::string s(key.substr(head.size()));
    size_t dash = s.rfind('-');
    if (dash == std::string::npos) return std::nullopt;
    s[dash] = '/';
    auto p = IpPrefix::Parse(s, /*strict=*/true);
    if (!p || p->is_v4() == v6) return std::nullopt;
    return p;
  }
  return std::nullopt;
}

std::string SubnetsKeyPrefix(const std::string& prefix) { return prefix + "/subnets"; }

std::string EncodeSubnetValue(const LocalNode& self) {
  json j{{"node", self.name},
         {"hostIP", self.host_ip.ToString()},
         {"vtepMAC", self.vtep_mac},
         {"backend", BackendName(self.backend)}};
  if (self.host_ip6) j["hostIP6"] = self.host_ip6->ToString();
  return j.dump();
}

Result<NodeInfo> DecodeSubnet(const std::string& prefix, const EtcdKv& kv) {
  auto subnet = SubnetFromKey(prefix, kv.key);
  if (!subnet)
    return Status::Error(Code::kDecode,
                         "subnet key " + kv.key + " is not <prefix>/subnets/<ipv4>-<len> or <prefix>/subnets6/<ipv6>-<len>");
  try {
    json j = json::parse(kv.value);
    if (!j.is_object()) return Status::Error(Code::kDecode, "subnet " + kv.key + ": not a JSON object");
    NodeInfo n;
    n.name = j.value("node", std::string());
    if (n.name.empty()) return Status::Error(Code::kDecode, "subnet " + kv.key + " names no node");
    n.pod_cidrs = {*subnet};
    n.host_ip = IpAddress::Parse(j.value("hostIP", std::string()));
    n.host_ip6 = IpAddress::Parse(j.value("hostIP6", std::string()));
    if (n.host_ip6 && !n.host_ip6->is_v6()) n.host_ip6.reset();
    n.vtep_mac = j.value("vtepMAC", std::string());
    n.backend = j.value("backend", std::string());
    return n;
  } catch (const std::exception& e) {
    return Status::Error(Code::kDecode, "subnet " + kv.key + ": bad JSON", e.what());
  }
}

namespace {

// The i-th subnet of length `len` in `network` (REQUIRES: i < 2^(len - network.len())).
IpPrefix NthSubnet(const IpPrefix& network, int len, uint64_t i) {
  const IpAddress base = network.Masked().addr();
  uint8_t raw[16];
  std::memcpy(raw, base.bytes(), base.size());
  for (int b = 0; b < 64 && (i >> b) != 0; ++b) {
    if (((i >> b) & 1) == 0) continue;
    int pos = len - 1 - b;  // bit index from the most significant
    raw[pos / 8] |= static_cast<uint8_t>(0x80 >> (pos % 8));
  }
  return IpPrefix(IpAddress::FromBytes(base.is_v6(), raw), len);
}

}  // namespace

std::optional<IpPrefix> PickSubnet(const IpPrefix& network, int subnet_len, const std::vector<IpPrefix>& taken,
                                   const std::optional<IpPrefix>& preferred) {
  if (subnet_len < network.len() || subnet_len > network.addr().family_bits()) return std::nullopt;
  auto free = [&](const IpPrefix& p) {
    if (p.is_v4() != network.is_v4() || !network.Contains(p.addr()) || p.len() != subnet_len) return false;
    for (const auto& t : taken)
      if (t.is_v4() == p.is_v4() && t.Overlaps(p)) return false;
    return true;
  };
  if (preferred && free(preferred->Masked())) return preferred->Masked();
  int bits = subnet_len - network.len();
  uint64_t count = bits >= 32 ? (1ull << 32) : (1ull << bits);
  for (uint64_t i = 0; i < count; ++i) {
    IpPrefix p = NthSubnet(network, subnet_len, i);
    if (free(p)) return p;
  }
  return std::nullopt;
}

std::vector<std::string> SubnetRecords::Put(const std::string& key, NodeInfo record, int64_t mod_revision) {
  std::vector<std::string> changed = Delete(key);
  std::string name = record.name;
  by_key_[key] = Record{std::move(record), mod_revision};
  keys_by_node_[name].insert(key);
  if (changed.empty() || changed[0] != name) changed.push_back(name);
  return changed;
}

std::vector<std::string> SubnetRecords::Delete(const std::string& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return {};
  std::string name = it->second.info.name;
  by_key_.erase(it);
  auto k = keys_by_node_.find(name);
  if (k != keys_by_node_.end()) {
    k->second.erase(key);
    if (k->second.empty()) keys_by_node_.erase(k);
  }
  return {name};
}

void SubnetRecords::Clear() {
  by_key_.clear();
  keys_by_node_.clear();
}

std::optional<NodeInfo> SubnetRecords::Node(const std::string& name) const {
  auto k = keys_by_node_.find(name);
  if (k == keys_by_node_.end()) return std::nullopt;
  const Record* latest = nullptr;
  const Record* per_family[2] = {nullptr, nullptr};  // IPv4, IPv6
  for (const auto& key : k->second) {
    const Record& r = by_key_.at(key);
    if (!latest || r.mod_revision > latest->mod_revision) latest = &r;
    const Record*& f = per_family[r.info.pod_cidrs.empty() || r.info.pod_cidrs[0].is_v4() ? 0 : 1];
    if (!f || r.mod_revision > f->mod_revision) f = &r;
  }
  NodeInfo n = latest->info;
  n.pod_cidrs.clear();
  for (const Record* f : per_family)
    if (f) n.pod_cidrs.insert(n.pod_cidrs.end(), f->info.pod_cidrs.begin(), f->info.pod_cidrs.end());
  return n;
}

PeerMap SubnetRecords::Peers(const std::string& except) const {
  PeerMap out;
  for (const auto& [name, keys] : keys_by_node_)
    if (name != except)
      if (auto n = Node(name)) out.emplace(name, std::move(*n));
  return out;
}

// --- EtcdClient ---------------------------------------------------------------

EtcdClient::EtcdClient(std::vector<std::string> endpoints, TlsOptions tls, AuthHealth* health)
    : endpoints_(std::move(endpoints)), http_(std::move(tls)), health_(health) {
  for (auto& e : endpoints_)
    while (!e.empty() && e.back() == '/') e.pop_back();
}

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  if (endpoints_.empty()) return Status::Error(Code::kInvalidConfig, "no etcd endpoints");
  Status last;
  bool tls_retried = false;
  size_t attempts = endpoints_.size();  // one per endpoint, and one more after a TLS failure
  for (size_t attempt = 0; attempt < attempts; ++attempt) {
    HttpRequest req;
    req.method = "POST";
    req.url = endpoints_[current_] + path;
    req.headers = {"Content-Type: application/json"};
    req.body = body;
    auto r = http_.Do(req);
    if (!r.ok()) {
      last = r.status();
      if (IsTlsFailure(r.status())) {
        if (health_) health_->RecordRefusal("POST " + req.url + ": " + r.status().details());
        // The client dropped its connection: the retry, on the same endpoint,
        // reads the TLS files again.
        if (!tls_retried) {
          tls_retried = true;
          ++attempts;
          continue;
        }
      }
      current_ = (current_ + 1) % endpoints_.size();
      continue;
    }
    if (health_) {
      if (r->status == 401 || r->status == 403) {
        health_->RecordRefusal("POST " + req.url + ": HTTP " + std::to_string(r->status) + " " +
                               r->body.substr(0, 200));
      } else {
        health_->RecordSuccess();
      }
    }
    if (r->status >= 500 && r->status != 503 && r->body.empty()) {
      last = Status::Error(Code::kControlPlane, "POST " + req.url + ": HTTP " + std::to_string(r->status));
      current_ = (current_ + 1) % endpoints_.size();
      continue;
    }
    return std::move(r->body);
  }
  return last;
}

Result<EtcdRange> EtcdClient::Range(const std::string& key, const std::string& range_end, int64_t revision) {
  json req{{"key", Base64Encode(key)}};
  if (!range_end.empty()) req["range_end"] = Base64Encode(range_end);
  if (revision > 0) req["revision"] = std::to_string(revision);
  WEFT_ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/range", req.dump()));
  return ParseRangeResponse(body);
}

Result<bool> EtcdClient::Txn(const std::string& body_json, int64_t* revision) {
  WEFT_ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/txn", body_json));
  return ParseTxnResponse(body, revision);
}

Result<int64_t> EtcdClient::LeaseGrant(int64_t ttl) {
  WEFT_ASSIGN_OR_RETURN(std::string body, Post("/v3/lease/grant", json{{"TTL", std::to_string(ttl)}}.dump()));
  return ParseLeaseGrant(body);
}

Result<int64_t> EtcdClient::LeaseKeepAlive(int64_t id) {
  WEFT_ASSIGN_OR_RETURN(std::string body, Post("/v3/lease/keepalive", json{{"ID", std::to_string(id)}}.dump()));
  return ParseLeaseKeepAlive(body);
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  auto body = Post("/v3/lease/revoke", json{{"ID", std::to_string(id)}}.dump());
  if (!body.ok()) return body.status();
  return Parsed(*body, "lease revoke", [](const json&) -> Result<bool> { return true; }).status();
}

Status EtcdClient::Compact(int64_t revision) {
  auto body = Post("/v3/kv/compaction", json{{"revision", std::to_string(revision)}, {"physical", true}}.dump());
  if (!body.ok()) return body.status();
  return Parsed(*body, "compaction", [](const json&) -> Result<bool> { return true; }).status();
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  json req{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease) req["lease"] = std::to_string(lease);
  auto body = Post("/v3/kv/put", req.dump());
  if (!body.ok()) return body.status();
  return Parsed(*body, "put", [](const json&) -> Result<bool> { return true; }).status();
}

Status EtcdClient::Delete(const std::string& key) {
  auto body = Post("/v3/kv/deleterange", json{{"key", Base64Encode(key)}}.dump());
  if (!body.ok()) return body.status();
  return Parsed(*body, "delete", [](const json&) -> Result<bool> { return true; }).status();
}

Status EtcdClient::Watch(const std::string& key, const std::string& range_end, int64_t start_revision,
                         const std::function<bool(const EtcdWatchMessage&)>& on_msg, const std::atomic<bool>& stop) {
  if (endpoints_.empty()) return Status::Error(Code::kInvalidConfig, "no etcd endpoints");
  json create{{"key", Base64Encode(key)}, {"range_end", Base64Encode(range_end)}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  create["progress_notify"] = true;  // periodic empty messages keep the stream observably alive
  HttpRequest req;
  req.method = "POST";
  req.url = endpoints_[current_] + "/v3/watch";
  req.headers = {"Content-Type: application/json"};
  req.body = json{{"create_request", create}}.dump();
  Status parse_error;
  auto r = http_.Stream(
      req,
      [&](std::string_view line) {
        if (health_) health_->RecordSuccess();
        auto m = ParseWatchLine(line);
        if (!m.ok()) {
          parse_error = m.status();
          return false;
        }
        return on_msg(*m);
      },
      stop, std::chrono::seconds(0));
  if (!r.ok()) {
    if (health_ && IsTlsFailure(r.status()))
      health_->RecordRefusal("POST " + req.url + ": " + r.status().details());
    current_ = (current_ + 1) % endpoints_.size();
    return r.status();
  }
  if (!parse_error.ok()) return parse_error;
  if (r->status != 0 && (r->status < 200 || r->status >= 300))
    return Status::Error(Code::kControlPlane, "watch: HTTP " + std::to_string(r->status), r->body);
  return Status::Ok();
}

// --- The control plane ----------------------------------------------------------

namespace {

constexpr auto kRelistPeriod = std::chrono::minutes(10);

class EtcdControlPlane : public ControlPlane {
 public:
  explicit EtcdControlPlane(EtcdOptions opts)
      : opts_(std::move(opts)), client_(opts_.endpoints, opts_.tls, &health_) {}

  ~EtcdControlPlane() override = default;

  Result<std::vector<IpPrefix>> Register(const LocalNode& self, const std::atomic<bool>& stop) override {
    self_ = self;
    Backoff backoff;
    for (;;) {
      auto r = TryRegister(client_, {});
      if (r.ok()) {
        std::lock_guard lock(mu_);
        subnets_ = *r;
        return *r;
      }
      if (r.status().code() == Code::kInvalidConfig || r.status().code() == Code::kNoFreeAddress) return r.status();
      stats_.errors++;
      WEFT_LOG(kWarn, "msg=\"etcd registration failed; retrying\" err=\"" + r.status().ToString() + "\"");
      if (!SleepUnlessStopped(backoff.Next(), stop))
        return Status::Error(Code::kControlPlane, "stopped before registering");
    }
  }

  std::vector<IpPrefix> ClusterCidrs() const override {
    std::lock_guard lock(mu_);
    if (!config_) return {};
    return config_->Networks();
  }

  Status Run(PeerStore& store, const std::atomic<bool>& stop) override {
    std::atomic<bool> fatal{false};
    Status fatal_status;
    std::atomic<bool> local_stop{false};
    std::thread keepalive([&] {
      Status st = KeepAliveLoop(stop, local_stop);
      if (!st.ok()) {
        fatal_status = st;
        fatal = true;
      }
    });
    WatchLoop(store, stop, fatal);
    local_stop = true;
    keepalive.join();
    return fatal ? fatal_status : Status::Ok();
  }

  // Deletes every subnet recorded for this node and revokes the leases they
  // hang on; works without Register() (weftd --leave).
  Status Leave() override {
    std::string prefix = SubnetsKeyPrefix(opts_.prefix);
    WEFT_ASSIGN_OR_RETURN(auto range, client_.Range(prefix, PrefixRangeEnd(prefix)));
    // All of them in one transaction: peers see the node go at once, not
    // one family after the other.
    json deletes = json::array();
    std::set<int64_t> leases;
    std::string keys;
    for (const auto& kv : range.kvs) {
      auto n = DecodeSubnet(opts_.prefix, kv);
      if (!n.ok() || n->name != self_name()) continue;
      deletes.push_back({{"request_delete_range", {{"key", Base64Encode(kv.key)}}}});
      if (kv.lease != 0) leases.insert(kv.lease);
      keys += (keys.empty() ? "" : ",") + kv.key;
    }
    if (!deletes.empty()) {
      WEFT_ASSIGN_OR_RETURN(bool done, client_.Txn(json{{"success", deletes}}.dump()));
      if (!done) return Status::Error(Code::kControlPlane, "etcd did not apply the transaction deleting " + keys);
      WEFT_LOG(kInfo, "msg=\"withdrew subnets\" keys=" + keys);
    }
    for (int64_t lease : leases) (void)client_.LeaseRevoke(lease);
    if (int64_t lease = lease_.exchange(0); lease != 0) (void)client_.LeaseRevoke(lease);
    if (!opts_.state_file.empty()) (void)sys::RemoveFile(opts_.state_file);
    return Status::Ok();
  }

  ControlPlaneStats& stats() override { return stats_; }
  const AuthHealth* auth_health() const override { return &health_; }

 private:
  const std::string& self_name() const { return self_.name.empty() ? opts_.node_name : self_.name; }

  Result<NetworkConfig> EnsureConfig(EtcdClient& c) {
    std::string key = opts_.prefix + "/config";
    if (!opts_.cluster_cidrs.empty()) {
      NetworkConfig want;
      for (const auto& c : opts_.cluster_cidrs) (c.is_v4() ? want.network : want.network6) = c.Masked();
      want.subnet_len = opts_.subnet_len;
      want.subnet_len6 = opts_.subnet_len6;
      json txn{{"compare", json::array({{{"key", Base64Encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"},
                                         {"create_revision", "0"}}})},
               {"success", json::array({{{"request_put",
                                          {{"key", Base64Encode(key)},
                                           {"value", Base64Encode(EncodeNetworkConfig(want))}}}}})}};
      WEFT_ASSIGN_OR_RETURN(bool created, c.Txn(txn.dump()));
      if (created) WEFT_LOG(kInfo, "msg=\"wrote network config\" key=" + key);
    }
    WEFT_ASSIGN_OR_RETURN(auto r, c.Range(key, ""));
    if (r.kvs.empty())
      return Status::Error(Code::kInvalidConfig, "etcd has no " + key + " and no --cluster-cidr was given");
    WEFT_ASSIGN_OR_RETURN(auto cfg, ParseNetworkConfig(r.kvs[0].value));
    if (!opts_.cluster_cidrs.empty()) {
      std::vector<IpPrefix> given;
      for (bool v6 : {false, true})
        for (const auto& c : opts_.cluster_cidrs)
          if (c.is_v4() != v6) given.push_back(c.Masked());
      if (given != cfg.Networks())
        WEFT_LOG(kWarn, "msg=\"--cluster-cidr differs from etcd's network config; using etcd's\" etcd=" +
                            JoinPrefixes(cfg.Networks()) + " flag=" + JoinPrefixes(given));
    }
    return cfg;
  }

  std::string PutOp(const std::string& key, int64_t lease) const {
    return json{{"request_put",
                 {{"key", Base64Encode(key)}, {"value", Base64Encode(EncodeSubnetValue(self_))},
                  {"lease", std::to_string(lease)}}}}
        .dump();
  }

  // Claims a subnet per family of the config under a fresh lease, all in
  // one transaction. `must_keep`: the subnets this node already uses (after
  // a lost lease); anything else is an error then. Returns them IPv4 first.
  Result<std::vector<IpPrefix>> TryRegister(EtcdClient& c, const std::vector<IpPrefix>& must_keep) {
    WEFT_ASSIGN_OR_RETURN(auto cfg, EnsureConfig(c));
    {
      std::lock_guard lock(mu_);
      config_ = cfg;
    }
    WEFT_ASSIGN_OR_RETURN(int64_t lease, c.LeaseGrant(opts_.lease_ttl));
    std::vector<IpPrefix> remembered = must_keep;
    if (remembered.empty()) {
      for (auto line : Split(ReadStateFile(opts_.state_file), '\n'))
        if (auto p = IpPrefix::Parse(Trim(line), true)) remembered.push_back(*p);
    }
    struct Family {
      bool v6;
      IpPrefix network;
      int len;
    };
    std::vector<Family> families;
    if (cfg.network) families.push_back({false, *cfg.network, cfg.subnet_len});
    if (cfg.network6) families.push_back({true, *cfg.network6, cfg.subnet_len6});
    const std::string prefix = SubnetsKeyPrefix(opts_.prefix);
    for (int attempt = 0; attempt < 20; ++attempt) {
      WEFT_ASSIGN_OR_RETURN(auto range, c.Range(prefix, PrefixRangeEnd(prefix)));
      std::vector<IpPrefix> taken;
      const EtcdKv* mine[2] = {nullptr, nullptr};  // IPv4, IPv6
      for (const auto& kv : range.kvs) {
        auto n = DecodeSubnet(opts_.prefix, kv);
        if (!n.ok()) {
          if (auto sub = SubnetFromKey(opts_.prefix, kv.key)) taken.push_back(*sub);
          continue;
        }
        const IpPrefix& sub = n->pod_cidrs[0];
        const EtcdKv*& slot = mine[sub.is_v4() ? 0 : 1];
        bool keep_ok = must_keep.empty() || std::find(must_keep.begin(), must_keep.end(), sub) != must_keep.end();
        if (n->name == self_.name && !slot && keep_ok) {
          slot = &kv;
          continue;
        }
        taken.push_back(sub);
      }
      json compare = json::array(), success = json::array();
      std::vector<IpPrefix> subnets;
      bool reused = false;
      for (const Family& f : families) {
        const EtcdKv* own = mine[f.v6 ? 1 : 0];
        std::optional<IpPrefix> keep = OfFamily(must_keep, f.v6);
        if (own) {
          // Ours from before a restart: move it onto the new lease, provided
          // nobody touched it since we read it.
          subnets.push_back(*SubnetFromKey(opts_.prefix, own->key));
          compare.push_back({{"key", Base64Encode(own->key)}, {"target", "MOD"}, {"result", "EQUAL"},
                             {"mod_revision", std::to_string(own->mod_revision)}});
          success.push_back(json::parse(PutOp(own->key, lease)));
          reused = true;
          continue;
        }
        auto pick = PickSubnet(f.network, f.len, taken, keep ? keep : OfFamily(remembered, f.v6));
        if (!pick)
          return Status::Error(Code::kNoFreeAddress, "no free /" + std::to_string(f.len) + " left in " +
                                                         f.network.ToString());
        if (keep && !(*pick == *keep))
          return Status::Error(Code::kNoFreeAddress, "this node's subnet " + keep->ToString() +
                                                         " was taken by another node while its lease was lost");
        subnets.push_back(*pick);
        std::string key = SubnetKey(opts_.prefix, *pick);
        compare.push_back({{"key", Base64Encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"},
                           {"create_revision", "0"}});
        success.push_back(json::parse(PutOp(key, lease)));
      }
      json txn{{"compare", compare}, {"success", success}};
      WEFT_ASSIGN_OR_RETURN(bool ok, c.Txn(txn.dump()));
      if (!ok) continue;  // lost a race: read again
      for (const EtcdKv* own : mine)
        if (own && own->lease != 0 && own->lease != lease) (void)c.LeaseRevoke(own->lease);
      int64_t old = lease_.exchange(lease);
      if (old != 0 && old != lease) (void)c.LeaseRevoke(old);
      std::string joined = JoinPrefixes(subnets);
      if (!opts_.state_file.empty()) {
        std::string lines;
        for (const auto& sub : subnets) lines += sub.ToString() + "\n";
        (void)sys::MkdirAll(opts_.state_file.substr(0, opts_.state_file.rfind('/')), 0755);
        Status st = sys::WriteFileAtomic(opts_.state_file, lines, 0644);
        if (!st.ok()) WEFT_LOG(kWarn, "msg=\"cannot remember the subnets\" err=\"" + st.ToString() + "\"");
      }
      WEFT_LOG(kInfo, "msg=\"claimed subnet\" subnets=" + joined + " lease=" + std::to_string(lease) +
                          (reused ? " reused=true" : " reused=false"));
      return subnets;
    }
    (void)c.LeaseRevoke(lease);
    return Status::Error(Code::kTryAgainLater, "subnet claim kept losing races");
  }

  Status KeepAliveLoop(const std::atomic<bool>& stop, const std::atomic<bool>& local_stop) {
    EtcdClient c(opts_.endpoints, opts_.tls, &health_);
    auto interval = std::chrono::milliseconds(std::max<int64_t>(opts_.lease_ttl * 1000 / 3, 300));
    auto stopped = [&] { return stop.load() || local_stop.load(); };
    auto sleep = [&](std::chrono::milliseconds d) {
      auto end = std::chrono::steady_clock::now() + d;
      while (!stopped() && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return !stopped();
    };
    Backoff backoff(interval);
    while (sleep(interval)) {
      for (;;) {
        auto ttl = c.LeaseKeepAlive(lease_.load());
        if (ttl.ok() && *ttl > 0) {
          backoff.Reset();
          break;
        }
        if (ttl.ok()) {
          // The lease expired (we were away longer than its TTL): claim the
          // same subnet again under a new lease.
          WEFT_LOG(kWarn, "msg=\"etcd lease expired; re-registering\"");
          std::vector<IpPrefix> keep;
          {
            std::lock_guard lock(mu_);
            keep = subnets_;
          }
          auto r = TryRegister(c, keep);
          if (r.ok()) break;
          if (r.status().code() == Code::kNoFreeAddress) return r.status();  // our subnet is gone
          stats_.errors++;
        } else {
          stats_.errors++;
          WEFT_LOG(kWarn, "msg=\"etcd lease keepalive failed\" err=\"" + ttl.status().ToString() + "\"");
        }
        if (!sleep(backoff.Next())) return Status::Ok();
      }
    }
    return Status::Ok();
  }

  void WatchLoop(PeerStore& store, const std::atomic<bool>& stop, const std::atomic<bool>& fatal) {
    EtcdClient c(opts_.endpoints, opts_.tls, &health_);
    const std::string prefix = SubnetsKeyPrefix(opts_.prefix);
    const std::string end = PrefixRangeEnd(prefix);
    bool need_list = true;
    int64_t rev = 0;
    auto listed_at = std::chrono::steady_clock::now();
    PeerMap peers;          // by node name
    SubnetRecords records;  // what `peers` is made of
    Backoff backoff;
    auto stopped = [&] { return stop.load() || fatal.load(); };
    while (!stopped()) {
      if (need_list) {
        auto r = c.Range(prefix, end);
        stats_.relists++;
        if (!r.ok()) {
          stats_.errors++;
          WEFT_LOG(kWarn, "msg=\"etcd list failed\" err=\"" + r.status().ToString() + "\"");
          SleepUnlessStopped(backoff.Next(), stop);
          continue;
        }
        records.Clear();
        for (const auto& kv : r->kvs) Apply(kv, false, &records, nullptr);
        peers = records.Peers(self_.name);
        rev = r->revision;
        store.Replace(peers);
        need_list = false;
        listed_at = std::chrono::steady_clock::now();
        WEFT_LOG(kInfo, "msg=\"listed peers\" backend=etcd peers=" + std::to_string(peers.size()) +
                            " revision=" + std::to_string(rev));
      }
      bool got_created = false;
      WEFT_LOG(kDebug, "msg=\"etcd watch\" start_revision=" + std::to_string(rev + 1));
      Status st = c.Watch(
          prefix, end, rev + 1,
          [&](const EtcdWatchMessage& m) {
            WEFT_LOG(kDebug, "msg=\"etcd watch message\" created=" + std::to_string(m.created) +
                                 " canceled=" + std::to_string(m.canceled) + " events=" +
                                 std::to_string(m.events.size()) + " revision=" + std::to_string(m.revision));
            if (m.compact_revision > 0 || m.canceled) {
              WEFT_LOG(kInfo, "msg=\"etcd watch cannot resume; re-listing\" compact_revision=" +
                                  std::to_string(m.compact_revision) + " reason=\"" + m.cancel_reason + "\"");
              need_list = true;
              return false;
            }
            if (m.created) {
              got_created = true;
              backoff.Reset();
            }
            // A full list now and then, even when the watch looks healthy:
            // a compaction at exactly our resume revision drops its
            // tombstones without cancelling the watch.
            if (std::chrono::steady_clock::now() - listed_at > kRelistPeriod) {
              need_list = true;
              return false;
            }
            if (m.events.empty()) return !stopped();
            for (const auto& e : m.events) {
              Apply(e.kv, e.is_delete, &records, &peers);
              rev = std::max(rev, e.kv.mod_revision);
              stats_.events++;
            }
            // One message is one atomic batch: publish after all of it.
            store.Replace(peers);
            return !stopped();
          },
          stop);
      if (stopped()) break;
      if (need_list) continue;
      stats_.reconnects++;
      if (!st.ok()) {
        stats_.errors++;
        WEFT_LOG(kWarn, "msg=\"etcd watch failed; reconnecting\" err=\"" + st.ToString() + "\"");
      } else {
        WEFT_LOG(kInfo, "msg=\"etcd watch ended; reconnecting\"");
      }
      if (!got_created || !st.ok()) SleepUnlessStopped(backoff.Next(), stop);
    }
  }

  // One record put or deleted; with `peers`, the nodes it touches are
  // updated there too.
  void Apply(const EtcdKv& kv, bool is_delete, SubnetRecords* records, PeerMap* peers) {
    std::vector<std::string> touched;
    if (is_delete) {
      touched = records->Delete(kv.key);
    } else {
      auto n = DecodeSubnet(opts_.prefix, kv);
      if (!n.ok()) {
        WEFT_LOG(kWarn, "msg=\"ignoring subnet record\" err=\"" + n.status().ToString() + "\"");
        touched = records->Delete(kv.key);
      } else {
        touched = records->Put(kv.key, std::move(n).value(), kv.mod_revision);
      }
    }
    if (!peers) return;
    for (const auto& name : touched) {
      if (name == self_.name) continue;
      if (auto n = records->Node(name)) (*peers)[name] = std::move(*n);
      else peers->erase(name);
    }
  }

  EtcdOptions opts_;
  AuthHealth health_;  // before the clients that record into it
  EtcdClient client_;  // Register/Leave (main thread)
  LocalNode self_;
  std::atomic<int64_t> lease_{0};
  mutable std::mutex mu_;
  std::vector<IpPrefix> subnets_;         // guarded by mu_
  std::optional<NetworkConfig> config_;   // guarded by mu_
  ControlPlaneStats stats_;
};

}  // namespace

std::unique_ptr<ControlPlane> NewEtcdControlPlane(EtcdOptions opts) {
  return std::make_unique<EtcdControlPlane>(std::move(opts));
}

}  // namespace weft::agent
