#pragma once
// A small HTTP client for the control planes: plain requests and
// line-delimited streams (Kubernetes watches, etcd's gateway watch). One
// HttpClient per thread; it keeps its connection alive between requests.
//
// http:// URLs are spoken by a built-in HTTP/1.1 client over sys::TcpConn
// (Content-Length, chunked and until-close bodies; no proxies, no redirects).
// https:// URLs go through libcurl, loaded with dlopen on first use: linked
// in, libcurl and the libraries it pulls in (OpenSSL, GnuTLS, LDAP, SSH,
// Kerberos...) cost ~8 MB of RSS, which a node talking plain HTTP to etcd
// never needs.
//
// REQUIRES: InitHttp() was called by main() before any thread uses an
// HttpClient.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace weft::agent {

// Process-wide initialisation; call once from main(). Loads nothing: libcurl
// is loaded and initialised by the first https:// request.
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

// Pure pieces of the built-in client, exposed for unit tests.
namespace http_internal {

struct Url {
  bool https = false;
  std::string host;         // without brackets
  int port = 0;
  std::string host_header;  // "host:port" as the URL had it
  std::string target;       // path and query ("/" when empty)
};
std::optional<Url> ParseUrl(std::string_view url);

// An HTTP/1.1 response, fed as it arrives: status line, headers, then the
// body (Content-Length, chunked or until close), de-chunked into `on_body`.
class ResponseParser {
 public:
  // `on_body` returns false to stop; Feed then returns OK with aborted() set.
  Status Feed(std::string_view data, const std::function<bool(std::string_view)>& on_body);
  // The connection was closed: completes an until-close body, else an error
  // unless done().
  Status Eof();
  bool headers_done() const { return state_ > kHeaders; }
  bool done() const { return state_ == kDone; }
  bool aborted() const { return aborted_; }
  long status() const { return status_; }
  // The connection can carry the next request.
  bool keep_alive() const { return done() && keep_alive_; }

 private:
  enum State { kStatusLine, kHeaders, kBodyLength, kChunkSize, kChunkData, kChunkEnd, kTrailers, kUntilClose, kDone };
  Status Header(std::string_view line);
  Status EndOfHeaders();
  State state_ = kStatusLine;
  std::string line_;  // a partial line
  long status_ = 0;
  bool keep_alive_ = true;
  bool chunked_ = false;
  bool has_length_ = false;
  uint64_t left_ = 0;  // body or chunk bytes still to come
  bool aborted_ = false;
};

}  // namespace http_internal

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
