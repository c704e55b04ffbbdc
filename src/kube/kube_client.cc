#include "kube/kube_client.h"

#include <nlohmann/json.hpp>

#include "base/log.h"

namespace weft::kube {
namespace {

// "GET /api/v1/nodes" (the query left out: it carries continue tokens).
std::string What(const sys::HttpRequest& req) {
  return req.method + " " + req.url.substr(0, req.url.find('?'));
}

// "HTTP 401 Unauthorized: <the Status's message>".
std::string Refusal(const sys::HttpResponse& resp) {
  std::string out = "HTTP " + std::to_string(resp.status) + (resp.status == 401 ? " Unauthorized" : " Forbidden");
  try {
    auto j = nlohmann::json::parse(resp.body);
    if (j.is_object() && j.contains("message") && j["message"].is_string())
      out += ": " + j["message"].get<std::string>().substr(0, 200);
  } catch (const std::exception&) {
  }
  return out;
}

}  // namespace

KubeClient::KubeClient(const KubeEndpoint& endpoint, std::unique_ptr<sys::HttpTransport> transport)
    : server_(endpoint.server), creds_(endpoint.credentials), transport_(std::move(transport)) {
  if (!creds_) {
    // An endpoint built by hand (tests): credentials of its own, unshared.
    auto c = KubeCredentials::Load(endpoint.files);
    if (!c.ok()) WEFT_LOG(kWarn, "API credentials unreadable; requests go without a token", {"err", c.status()});
    creds_ = c.ok() ? *c : std::make_shared<KubeCredentials>(endpoint.files, KubeCredentials::Clock());
  }
  if (!transport_) transport_ = std::make_unique<sys::HttpClient>(creds_->tls());
  generation_ = creds_->tls_generation();
}

Result<sys::HttpResponse> KubeClient::WithCredentials(const sys::HttpRequest& req, const SendFn& send) {
  const std::string what = What(req);
  for (int attempt = 0;; ++attempt) {
    std::string token = creds_->Token();  // may re-read the files, so before the generation
    uint64_t gen = creds_->tls_generation();
    if (gen != generation_) {
      transport_->Reset();  // libcurl reads the TLS files per connection
      generation_ = gen;
    }
    sys::HttpRequest r = req;
    r.url = server_ + req.url;
    r.headers.push_back("Accept: application/json");
    r.headers.push_back("User-Agent: weftd");
    if (!token.empty()) r.headers.push_back("Authorization: Bearer " + token);
    auto resp = send(r);
    if (!resp.ok()) {
      if (!sys::IsTlsFailure(resp.status())) return resp;
      creds_->health().RecordRefusal(what + ": " + resp.status().details());
      if (attempt == 0 && creds_->TlsFailed(gen)) {
        WEFT_LOG(kInfo, "TLS failure with old credential files; retrying with the new ones", {"request", what});
        continue;
      }
      return resp;
    }
    if (resp->status != 401 && resp->status != 403) {
      creds_->health().RecordSuccess();
      return resp;
    }
    creds_->health().RecordRefusal(what + ": " + Refusal(*resp));
    // 403 is authorization (RBAC): other credentials files would not change it.
    if (resp->status == 401 && attempt == 0 && creds_->Unauthorized(token, gen)) {
      WEFT_LOG(kInfo, "401 with old credentials; retrying with the re-read ones", {"request", what});
      continue;
    }
    return resp;
  }
}

Result<sys::HttpResponse> KubeClient::Do(sys::HttpRequest req) {
  return WithCredentials(req, [this](const sys::HttpRequest& r) { return transport_->Do(r); });
}

Result<sys::HttpResponse> KubeClient::Stream(sys::HttpRequest req, const std::function<bool(std::string_view)>& on_line,
                                        const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) {
  bool first = true;
  std::function<bool(std::string_view)> counted = [&](std::string_view line) {
    if (first) {
      creds_->health().RecordSuccess();
      first = false;
    }
    return on_line(line);
  };
  return WithCredentials(
      req, [&](const sys::HttpRequest& r) { return transport_->Stream(r, counted, stop, idle_timeout); });
}

}  // namespace weft::kube
