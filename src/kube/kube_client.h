#pragma once
// One client of the Kubernetes API server: a connection (HttpTransport) of
// its own and the credentials every client shares (kube_credentials.h).
// Each request carries the current bearer token; a 401 re-reads the
// credentials and, when they changed, the request is sent once more (a
// rotated token costs one refused request, not a frozen node); a TLS failure
// re-reads the TLS files likewise. A new TLS generation opens a new
// connection. Every outcome goes to the credentials' AuthHealth.
//
// Thread-safety: one KubeClient per thread (it owns a connection).

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kube/kube_credentials.h"
#include "kube/kube_endpoint.h"
#include "sys/http.h"

namespace weft::kube {

class KubeClient {
 public:
  // `transport` null: a real HttpClient over the credentials' TLS files.
  KubeClient(const KubeEndpoint& endpoint, std::unique_ptr<sys::HttpTransport> transport = nullptr);

  // `req.url` is a path with its query ("/api/v1/nodes?limit=500"); Accept,
  // User-Agent and Authorization are added. Any HTTP status is a response
  // (the 401 of the retry, too); transport failures are errors.
  Result<sys::HttpResponse> Do(sys::HttpRequest req);
  // A streaming request (watch), as HttpClient::Stream. A watch line counts
  // as a success for AuthHealth.
  Result<sys::HttpResponse> Stream(sys::HttpRequest req, const std::function<bool(std::string_view)>& on_line,
                              const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout);

 private:
  using SendFn = std::function<Result<sys::HttpResponse>(const sys::HttpRequest&)>;
  Result<sys::HttpResponse> WithCredentials(const sys::HttpRequest& req, const SendFn& send);

  std::string server_;
  std::shared_ptr<KubeCredentials> creds_;
  std::unique_ptr<sys::HttpTransport> transport_;
  uint64_t generation_;  // the TLS generation transport_'s connection was opened with
};

}  // namespace weft::kube
