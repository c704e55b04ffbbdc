#include "agent/status_auth.h"

#include <arpa/inet.h>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/scope_guard.h"
#include "kube/kube_client.h"

namespace weft::agent {

PathAccess ClassifyPath(const std::string& path, bool metrics_auth) {
  if (path == "/healthz" || path == "/readyz") return PathAccess::kPublic;
  if (path == "/metrics") return metrics_auth ? PathAccess::kProtected : PathAccess::kPublic;
  return PathAccess::kProtected;
}

std::string SubresourceFor(const std::string& path) { return path == "/metrics" ? "metrics" : "weft-status"; }

namespace {

bool IsLoopback(std::string a) {
  // cpp-httplib gives an IPv4-mapped peer of a dual-stack socket as
  // "::ffff:127.0.0.1".
  if (a.rfind("::ffff:", 0) == 0) a = a.substr(7);
  in_addr v4;
  if (inet_pton(AF_INET, a.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, a.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

HttpAnswer Refusal(int code, const std::string& why) {
  HttpAnswer a{code, "text/plain; charset=utf-8", why + "\n", ""};
  if (code == 401) a.www_authenticate = "Bearer realm=\"weftd\"";
  return a;
}

}  // namespace

bool IsLoopbackConnection(const std::string& remote_addr, const std::string& local_addr) {
  return IsLoopback(remote_addr) && IsLoopback(local_addr);
}

std::string TokenReviewBody(const std::string& token) {
  return nlohmann::json({{"apiVersion", "authentication.k8s.io/v1"},
                         {"kind", "TokenReview"},
                         {"spec", {{"token", token}}}})
      .dump();
}

Result<TokenReviewResult> ParseTokenReview(std::string_view body) {
  try {
    auto j = nlohmann::json::parse(body);
    if (j.value("kind", "") != "TokenReview")
      return Status::Error(Reason::kInvalidArgument, Domain::kControlPlane, "not a TokenReview");
    TokenReviewResult r;
    const auto& st = j.value("status", nlohmann::json::object());
    r.authenticated = st.value("authenticated", false);
    r.error = st.value("error", "");
    const auto& u = st.value("user", nlohmann::json::object());
    r.user.username = u.value("username", "");
    r.user.uid = u.value("uid", "");
    r.user.groups = u.value("groups", std::vector<std::string>{});
    if (u.contains("extra") && u["extra"].is_object())
      for (const auto& [k, v] : u["extra"].items()) r.user.extra[k] = v.get<std::vector<std::string>>();
    if (r.authenticated && r.user.username.empty())
      return Status::Error(Reason::kInvalidArgument, Domain::kControlPlane, "TokenReview authenticated no user");
    return r;
  } catch (const std::exception& e) {
    return Status::Error(Reason::kInvalidArgument, Domain::kControlPlane, "bad TokenReview", e.what());
  }
}

std::string SubjectAccessReviewBody(const UserInfo& user, const AuthzAttributes& attrs) {
  nlohmann::json ra = {{"verb", attrs.verb}, {"version", "v1"}, {"resource", attrs.resource}};
  if (!attrs.subresource.empty()) ra["subresource"] = attrs.subresource;
  if (!attrs.name.empty()) ra["name"] = attrs.name;
  nlohmann::json spec = {{"user", user.username}, {"resourceAttributes", ra}};
  if (!user.uid.empty()) spec["uid"] = user.uid;
  if (!user.groups.empty()) spec["groups"] = user.groups;
  if (!user.extra.empty()) spec["extra"] = user.extra;
  return nlohmann::json({{"apiVersion", "authorization.k8s.io/v1"}, {"kind", "SubjectAccessReview"}, {"spec", spec}})
      .dump();
}

Result<AccessReviewResult> ParseSubjectAccessReview(std::string_view body) {
  try {
    auto j = nlohmann::json::parse(body);
    if (j.value("kind", "") != "SubjectAccessReview")
      return Status::Error(Reason::kInvalidArgument, Domain::kControlPlane, "not a SubjectAccessReview");
    const auto& st = j.value("status", nlohmann::json::object());
    AccessReviewResult r;
    r.allowed = st.value("allowed", false) && !st.value("denied", false);
    r.reason = st.value("reason", "");
    r.error = st.value("evaluationError", "");
    return r;
  } catch (const std::exception& e) {
    return Status::Error(Reason::kInvalidArgument, Domain::kControlPlane, "bad SubjectAccessReview", e.what());
  }
}

namespace {

class KubeTokenReviewer : public TokenReviewer {
 public:
  explicit KubeTokenReviewer(const kube::KubeEndpoint& endpoint) : http_(endpoint) {}

  Result<TokenReviewResult> Review(const std::string& token) override {
    WEFT_ASSIGN_OR_RETURN(auto body, Post("/apis/authentication.k8s.io/v1/tokenreviews", TokenReviewBody(token)));
    return ParseTokenReview(body);
  }

  Result<AccessReviewResult> Authorize(const UserInfo& user, const AuthzAttributes& attrs) override {
    WEFT_ASSIGN_OR_RETURN(auto body, Post("/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                          SubjectAccessReviewBody(user, attrs)));
    return ParseSubjectAccessReview(body);
  }

 private:
  Result<std::string> Post(const std::string& path, std::string body) {
    sys::HttpRequest req;
    req.method = "POST";
    req.url = path;
    req.headers.push_back("Content-Type: application/json");
    req.body = std::move(body);
    req.timeout = std::chrono::seconds(5);
    WEFT_ASSIGN_OR_RETURN(auto resp, http_.Do(std::move(req)));
    if (resp.status != 200 && resp.status != 201)
      return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                           "POST " + path + ": HTTP " + std::to_string(resp.status), resp.body.substr(0, 512));
    return resp.body;
  }

  kube::KubeClient http_;  // used under StatusGate's lock only
};

}  // namespace

std::unique_ptr<TokenReviewer> NewKubeTokenReviewer(const kube::KubeEndpoint& endpoint) {
  return std::make_unique<KubeTokenReviewer>(endpoint);
}

StatusGate::StatusGate(StatusAuthOptions opts, std::unique_ptr<TokenReviewer> reviewer, Clock clock)
    : opts_(std::move(opts)),
      reviewer_(std::move(reviewer)),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })) {}

std::optional<HttpAnswer> StatusGate::Check(const StatusServer::Request& req) {
  if (ClassifyPath(req.path, opts_.metrics_auth) == PathAccess::kPublic) return std::nullopt;
  if (IsLoopbackConnection(req.remote_addr, req.local_addr)) return std::nullopt;
  const std::string& h = req.authorization;
  const std::string what = "GET " + req.path;
  if (h.empty())
    return Refusal(401, "Unauthorized: " + what + " answers the node's loopback or a bearer token the API server "
                        "accepts (Authorization: Bearer TOKEN)");
  if (h.size() <= 7 || (h.compare(0, 7, "Bearer ") != 0 && h.compare(0, 7, "bearer ") != 0))
    return Refusal(401, "Unauthorized: the Authorization header is not \"Bearer TOKEN\"");
  std::string token = h.substr(7);
  while (!token.empty() && token.front() == ' ') token.erase(0, 1);
  if (!reviewer_)
    return Refusal(401, "Unauthorized: weftd has no API server to check tokens with (--control-plane=etcd): " +
                            what + " answers the node's loopback only");

  const std::string key = SubresourceFor(req.path) + " " + token;
  if (auto hit = Cached(key)) return *hit;
  // At most max_reviewers workers wait for the API server: the others stay
  // free for the probes, however slow it answers and however many callers
  // with new tokens come.
  if (reviewers_.fetch_add(1) >= opts_.max_reviewers) {
    reviewers_.fetch_sub(1);
    return Refusal(503, "busy: weftd is checking other callers' tokens; try again");
  }
  ScopeGuard leave([this] { reviewers_.fetch_sub(1); });
  std::lock_guard<std::mutex> one(review_mu_);
  if (auto hit = Cached(key)) return *hit;  // asked meanwhile by the worker ahead
  bool cacheable = false;
  auto refusal = Ask(token, req.path, &cacheable);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= opts_.cache_max) cache_.clear();  // a flood of tokens costs reviews, never memory
    cache_[key] = Entry{clock_() + (refusal ? opts_.refused_ttl : opts_.allowed_ttl), refusal};
  }
  return refusal;
}

std::optional<std::optional<HttpAnswer>> StatusGate::Cached(const std::string& key) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  if (it->second.expires > clock_()) return it->second.refusal;
  cache_.erase(it);
  return std::nullopt;
}

std::optional<HttpAnswer> StatusGate::Ask(const std::string& token, const std::string& path, bool* cacheable) {
  auto review = reviewer_->Review(token);
  if (!review.ok()) {
    WEFT_LOG(kWarn, "status server: TokenReview failed", {"path", path}, {"err", review.status()});
    return Refusal(503, "cannot check the token: the API server's TokenReview failed (" + review.status().msg() + ")");
  }
  if (!review->authenticated) {
    *cacheable = true;
    WEFT_LOG(kDebug, "status server: token refused", {"path", path}, {"error", review->error});
    return Refusal(401, "Unauthorized: the API server did not authenticate the token");
  }
  AuthzAttributes attrs;
  attrs.subresource = SubresourceFor(path);
  attrs.name = opts_.node_name;
  auto access = reviewer_->Authorize(review->user, attrs);
  if (!access.ok()) {
    WEFT_LOG(kWarn, "status server: SubjectAccessReview failed", {"path", path}, {"err", access.status()});
    return Refusal(503, "cannot check the token: the API server's SubjectAccessReview failed (" +
                            access.status().msg() + ")");
  }
  *cacheable = true;
  if (!access->allowed) {
    WEFT_LOG(kInfo, "status server: caller not authorized", {"path", path}, {"user", review->user.username},
             {"reason", access->reason});
    return Refusal(403, "Forbidden (user=" + review->user.username + ", verb=get, resource=nodes, subresource=" +
                            attrs.subresource + ", name=" + attrs.name + ")");
  }
  return std::nullopt;
}

}  // namespace weft::agent
