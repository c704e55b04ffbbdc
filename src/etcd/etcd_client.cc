#include "etcd/etcd_client.h"

#include <nlohmann/json.hpp>
#include <type_traits>

#include "base/json_util.h"
#include "base/strings.h"

namespace weft::etcd {
namespace {

using nlohmann::json;

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

// A gateway body: a JSON object that is not an error object.
template <typename F>
auto Parsed(std::string_view body, const char* what, F&& fn) -> decltype(fn(json())) {
  using R = decltype(fn(json()));
  using T = std::remove_reference_t<decltype(std::declval<R&>().value())>;
  return ParseJsonObject<T>(body, what, [&](const json& j) -> R {
    if (auto e = GatewayError(j))
      return Status::Error(Reason::kUnavailable, Domain::kControlPlane, std::string(what) + ": " + *e);
    return fn(j);
  });
}

json CompareJson(const EtcdCompare& c) {
  bool create = c.target == EtcdCompare::Target::kCreate;
  return {{"key", Base64Encode(c.key)},
          {"target", create ? "CREATE" : "MOD"},
          {"result", "EQUAL"},
          {create ? "create_revision" : "mod_revision", std::to_string(c.revision)}};
}

json OpJson(const EtcdOp& op) {
  if (op.kind == EtcdOp::Kind::kDelete) return {{"request_delete_range", {{"key", Base64Encode(op.key)}}}};
  json put{{"key", Base64Encode(op.key)}, {"value", Base64Encode(op.value)}};
  if (op.lease != 0) put["lease"] = std::to_string(op.lease);
  return {{"request_put", put}};
}

}  // namespace

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
      return Status::Error(Reason::kMalformed, Domain::kNone, "watch: message without result");
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
    if (id == 0) return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                      "lease grant: no lease ID in the answer");
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

std::string EncodeTxn(const EtcdTxn& txn) {
  json j = json::object();
  if (!txn.compare.empty()) {
    j["compare"] = json::array();
    for (const auto& c : txn.compare) j["compare"].push_back(CompareJson(c));
  }
  j["success"] = json::array();
  for (const auto& op : txn.success) j["success"].push_back(OpJson(op));
  return j.dump();
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, sys::TlsOptions tls, AuthHealth* health)
    : endpoints_(std::move(endpoints)), http_(std::move(tls)), health_(health) {
  for (auto& e : endpoints_)
    while (!e.empty() && e.back() == '/') e.pop_back();
}

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  if (endpoints_.empty()) return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "no etcd endpoints");
  Status last;
  bool tls_retried = false;
  size_t attempts = endpoints_.size();  // one per endpoint, and one more after a TLS failure
  for (size_t attempt = 0; attempt < attempts; ++attempt) {
    sys::HttpRequest req;
    req.method = "POST";
    req.url = endpoints_[current_] + path;
    req.headers = {"Content-Type: application/json"};
    req.body = body;
    auto r = http_.Do(req);
    if (!r.ok()) {
      last = r.status();
      if (sys::IsTlsFailure(r.status())) {
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
      last = Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                           "POST " + req.url + ": HTTP " + std::to_string(r->status));
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

Result<bool> EtcdClient::Txn(const EtcdTxn& txn) { return Txn(EncodeTxn(txn), nullptr); }

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
  if (endpoints_.empty()) return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "no etcd endpoints");
  json create{{"key", Base64Encode(key)}, {"range_end", Base64Encode(range_end)}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  create["progress_notify"] = true;  // periodic empty messages keep the stream observably alive
  sys::HttpRequest req;
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
    if (health_ && sys::IsTlsFailure(r.status()))
      health_->RecordRefusal("POST " + req.url + ": " + r.status().details());
    current_ = (current_ + 1) % endpoints_.size();
    return r.status();
  }
  if (!parse_error.ok()) return parse_error;
  if (r->status != 0 && (r->status < 200 || r->status >= 300))
    return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                         "watch: HTTP " + std::to_string(r->status), r->body);
  return Status::Ok();
}

}  // namespace weft::etcd
