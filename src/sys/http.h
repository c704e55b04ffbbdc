#pragma once
// A small HTTP client over libcurl for the control planes: plain requests and
// line-delimited streams (Kubernetes watches, etcd's gateway watch). One
// HttpClient per thread; it keeps its connection alive between requests.
//
// libcurl reads the CA, client certificate and key files when it opens a
// connection (and caches the CA store per handle): after a TLS failure the
// client drops its handle, so the next request opens a new connection that
// reads the files again; Reset() does the same on demand (rotated files).
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

namespace weft::sys {

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

// Whether a transport error from HttpClient::Do/Stream was a TLS failure: the
// handshake failed, a certificate was rejected (by either side), or the CA,
// certificate or key file could not be used. Rotated credential files are a
// likely cause; a refused TCP connection or a timeout is not one.
bool IsTlsFailure(const Status& st);
// Such an error (HttpClient makes them; tests script them).
Status TlsFailure(const std::string& what, const std::string& why);

// What a client of an HTTP server needs; HttpClient is the real one (the
// seam lets tests script answers).
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual Result<HttpResponse> Do(const HttpRequest& req) = 0;
  virtual Result<HttpResponse> Stream(const HttpRequest& req, const std::function<bool(std::string_view)>& on_line,
                                      const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) = 0;
  // Closes the connection: the next request opens a new one.
  virtual void Reset() = 0;
};

class HttpClient : public HttpTransport {
 public:
  explicit HttpClient(TlsOptions tls = {});
  ~HttpClient() override;
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // A complete request. Transport failures are unavailable (control plane); any
  // HTTP status is a response.
  Result<HttpResponse> Do(const HttpRequest& req) override;

  // A streaming request without an overall timeout: `on_line` gets each
  // complete '\n'-terminated line of a 2xx body as it arrives (a trailing
  // partial line is never delivered). Returns when the server ends the body,
  // the connection fails, `on_line` returns false, or `stop` is set. The
  // response carries the status and, for non-2xx answers, the body.
  // `idle_timeout`: a stream silent that long is treated as dead.
  Result<HttpResponse> Stream(const HttpRequest& req, const std::function<bool(std::string_view)>& on_line,
                              const std::atomic<bool>& stop,
                              std::chrono::milliseconds idle_timeout = std::chrono::seconds(0)) override;

  // Drops the handle and its connection (and libcurl's cached CA store and
  // TLS sessions): the next request reads the TLS files again.
  void Reset() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::sys
