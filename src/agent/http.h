#pragma once
// A small HTTP client over libcurl for the control planes: plain requests and
// line-delimited streams (Kubernetes watches, etcd's gateway watch). One
// HttpClient per thread; it keeps its connection alive between requests.
//
// REQUIRES: curl_global_init() was called by main() before any thread uses
// an HttpClient (InitHttp()).

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace weft::agent {

// Process-wide libcurl initialisation; call once from main().
Status InitHttp();

struct TlsOptions {
  std::string ca_file;      // verify the server against this CA bundle
  std::string cert_file;    // client certificate (PEM)
  std::string key_file;     // client key (PEM)
  bool insecure = false;    // skip server verification (tests only)
};

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};
};

struct HttpResponse {
  long status = 0;
  std::string body;
};

class HttpClient {
 public:
  explicit HttpClient(TlsOptions tls = {});
  ~HttpClient();
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // A complete request. Transport failures are kControlPlane errors; any
  // HTTP status is a response.
  Result<HttpResponse> Do(const HttpRequest& req);

  // A streaming request without an overall timeout: `on_line` gets each
  // complete '\n'-terminated line of a 2xx body as it arrives (a trailing
  // partial line is never delivered). Returns when the server ends the body,
  // the connection fails, `on_line` returns false, or `stop` is set. The
  // response carries the status and, for non-2xx answers, the body.
  // `idle_timeout`: a stream silent that long is treated as dead.
  Result<HttpResponse> Stream(const HttpRequest& req, const std::function<bool(std::string_view)>& on_line,
                              const std::atomic<bool>& stop,
                              std::chrono::milliseconds idle_timeout = std::chrono::seconds(0));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::agent
