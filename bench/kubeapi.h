#pragma once
// The stand-in Kubernetes API server (tests/integration/agent/fake_apiserver.py)
// for the benchmark: HTTPS with a CA made for the run and a bearer token,
// listening inside a netns, with a kubeconfig for weftd and a client for the
// benchmark's own writes. The e2e suites have their own fixture with gtest
// (tests/e2e); this one has none and is named with the run's prefix.

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "bench/cluster.h"
#include "sys/http.h"
#include "sys/netns.h"

namespace weft::bench {

struct ApiReply {
  long status = 0;
  std::string body;
  // When the request was about to be sent and when the answer was in.
  std::chrono::steady_clock::time_point sent{}, answered{};
  int retries = 0;  // connections the server dropped before this answer
};

class KubeApi {
 public:
  // Makes a CA and a server certificate for `ip` with openssl under `dir`,
  // starts `script` listening on https://<ip>:6443 inside the netns (list
  // pages capped only by the client's limit, as kube-apiserver does), waits
  // until it answers, and writes `dir`/kubeconfig.
  static Result<std::unique_ptr<KubeApi>> Start(const std::string& netns_path, const std::string& ip,
                                                const std::string& dir, const std::string& script);
  ~KubeApi();

  const std::string& kubeconfig() const { return kubeconfig_; }
  pid_t pid() const { return proc_.pid(); }

  // One request with the token (`path` absolute, e.g. "/api/v1/pods");
  // `content_type` for bodies ("" = application/json). Sent from inside the
  // server's netns on one kept-alive connection.
  Result<ApiReply> Request(const std::string& method, const std::string& path, const std::string& body = "",
                           const std::string& content_type = "");
  // POST to the collection; a 2xx is Ok, anything else an error with the body.
  Status Create(const nlohmann::json& obj);
  // Stores `obj` exactly as sent, without the server's strategies (POST
  // /_test/objects): for Pods with a status, which a create would reset.
  Status Store(const nlohmann::json& obj);
  // JSON merge patch of one object; returns the reply (timing included).
  Result<ApiReply> MergePatch(const std::string& path, const nlohmann::json& patch);

  // Paths of objects.
  static std::string CollectionPath(const std::string& kind, const std::string& ns);
  static std::string ObjectPath(const std::string& kind, const std::string& ns, const std::string& name);

 private:
  KubeApi(sys::Netns ns, Daemon proc, std::string url, std::string token, std::string kubeconfig,
          sys::TlsOptions tls);
  sys::Netns ns_;
  Daemon proc_;
  std::string url_, token_, kubeconfig_;
  sys::HttpClient client_;
};

}  // namespace weft::bench
