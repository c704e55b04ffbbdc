#pragma once
// Who may read what weftd's status server serves (docs/security.md, "The
// status server"). /healthz and /readyz are public, and /metrics unless
// --metrics-auth; every other path (the node's compiled policy, its drop
// records, explain: whatever weftd adds later, too) is protected. A
// protected path answers:
//   * a caller on the node's loopback: both ends of the connection in
//     127.0.0.0/8 or ::1 (weftctl on the node, or a hostNetwork pod);
//   * a caller with a bearer token that the API server authenticates
//     (TokenReview) and authorizes (SubjectAccessReview) for `get` on this
//     node's `nodes/weft-status` (`nodes/metrics` for /metrics: kubelet's own
//     subresource, which Prometheus roles grant), as kubelet checks its callers;
// anyone else gets 401 (no or a refused token) or 403 (a token whose user
// may not). Answers of the API server are cached (allowed 2 min, refused
// 10 s, at most 1024 tokens), as kubelet caches its webhook's; at most two
// workers wait for the API server at once (a third caller gets 503 "busy").
//
// Thread-safety: StatusGate::Check may run on every server worker at once.

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/metrics.h"
#include "base/status.h"
#include "kube/kube_endpoint.h"

namespace weft::agent {

enum class PathAccess { kPublic, kProtected };
PathAccess ClassifyPath(const std::string& path, bool metrics_auth);

// Whether the connection is the node's own: the peer and the local address
// both loopback (a packet from a pod that forged a 127.0.0.1 source arrives
// at the node's address, not at 127.0.0.1).
bool IsLoopbackConnection(const std::string& remote_addr, const std::string& local_addr);

// What authentication.k8s.io/v1 TokenReview's status.user says.
struct UserInfo {
  std::string username;
  std::string uid;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::string>> extra;
};

struct TokenReviewResult {
  bool authenticated = false;
  UserInfo user;
  std::string error;  // status.error (why not), as the API server says it
};

// The resourceAttributes of a SubjectAccessReview (group "" and version v1).
struct AuthzAttributes {
  std::string verb = "get";
  std::string resource = "nodes";
  std::string subresource;
  std::string name;
};

struct AccessReviewResult {
  bool allowed = false;
  std::string reason;
  std::string error;  // status.evaluationError
};

// The subresource of nodes a path is authorized as: "metrics" for /metrics,
// "weft-status" for every other (a subresource of weftd's own: RBAC does not
// need it to exist, and a grant of it opens nothing else, unlike nodes/proxy,
// which reaches the kubelet's API).
std::string SubresourceFor(const std::string& path);

// --- Pure encoding and parsing (unit-tested) ---------------------------------
std::string TokenReviewBody(const std::string& token);
Result<TokenReviewResult> ParseTokenReview(std::string_view body);
std::string SubjectAccessReviewBody(const UserInfo& user, const AuthzAttributes& attrs);
Result<AccessReviewResult> ParseSubjectAccessReview(std::string_view body);

// The two questions StatusGate asks the API server. A transport failure or
// an answer other than 200/201 is an error (then the caller gets 503: weftd
// could not check, which is neither a yes nor a no).
class TokenReviewer {
 public:
  virtual ~TokenReviewer() = default;
  virtual Result<TokenReviewResult> Review(const std::string& token) = 0;
  virtual Result<AccessReviewResult> Authorize(const UserInfo& user, const AuthzAttributes& attrs) = 0;
};

// POSTs them to the API server with weftd's own credentials (which need
// `create` on tokenreviews and subjectaccessreviews: deploy/weftd.yaml).
std::unique_ptr<TokenReviewer> NewKubeTokenReviewer(const kube::KubeEndpoint& endpoint);

struct StatusAuthOptions {
  std::string node_name;     // the `name` of the SubjectAccessReview
  bool metrics_auth = false;  // --metrics-auth: /metrics protected too
  std::chrono::seconds allowed_ttl{120};
  std::chrono::seconds refused_ttl{10};
  size_t cache_max = 1024;
  // Workers that may wait for the API server at once; one more gets 503
  // "busy" (the status server has 8: the rest answer the probes).
  int max_reviewers = 2;
};

class StatusGate {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `reviewer` null (the etcd control plane: no API server): a protected
  // path answers only the node's loopback.
  StatusGate(StatusAuthOptions opts, std::unique_ptr<TokenReviewer> reviewer, Clock clock = {});
  // nullopt: serve the request; else the refusal to send instead.
  std::optional<HttpAnswer> Check(const StatusServer::Request& req);

 private:
  struct Entry {
    std::chrono::steady_clock::time_point expires;
    std::optional<HttpAnswer> refusal;
  };
  std::optional<HttpAnswer> Ask(const std::string& token, const std::string& path, bool* cacheable);
  // The cached answer for `key` (nullopt: none, or expired).
  std::optional<std::optional<HttpAnswer>> Cached(const std::string& key);

  const StatusAuthOptions opts_;
  std::unique_ptr<TokenReviewer> reviewer_;
  const Clock clock_;
  std::atomic<int> reviewers_{0};  // workers in the review path (waiting or asking)
  std::mutex review_mu_;           // one review at a time: reviewer_ owns one API connection
  std::mutex cache_mu_;            // guards cache_; never held while the API server is asked
  std::map<std::string, Entry> cache_;  // key: subresource + " " + token
};

}  // namespace weft::agent
