#pragma once
// Asking weftd over its metrics address (docs/weftd.md: --metrics-addr,
// default 0.0.0.0:9641, so 127.0.0.1:9641 from the node) through libcurl,
// for `weftctl policy` and doctor's network policy check.
//
// REQUIRES: sys::InitHttp() was called once (weftctl's commands do it).

#include <chrono>
#include <string>

#include "base/status.h"
#include "sys/http.h"

namespace weft::doctor {

inline constexpr char kDefaultWeftdAddr[] = "127.0.0.1:9641";

// weftd answers its protected paths (/netpol*, /drops) to the node's
// loopback, or to a bearer token the API server authorizes for `get` on the
// node's nodes/weft-status (docs/security.md). --token-file gives that token.
inline constexpr char kTokenFileHelp[] =
    "Send the bearer token in this file (re-read each time): for a weftd reached off the node's loopback";

class Weftd {
 public:
  // `addr`: "host:port" ("[::1]:9641" for IPv6) or a URL ("http://...").
  // `token_file` ("" = none): its content (trimmed) goes as
  // "Authorization: Bearer ..." with every request.
  explicit Weftd(std::string addr, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                 std::string token_file = "");

  const std::string& addr() const { return addr_; }

  // GET `path`. Any HTTP status is an answer; a transport failure (nothing
  // listening, timeout) is unavailable (control plane) "cannot reach weftd at <addr>".
  // A 401 or 403 is failed (control plane) "weftd at <addr>
  // refused GET <path>: HTTP 401", with weftd's reason as details.
  Result<sys::HttpResponse> Get(const std::string& path);

  // What a command prints for a failed Get: its message, and for an
  // unreachable weftd the question whether --weftd-addr is right.
  static std::string Explain(const Status& st);

 private:
  std::string addr_;
  std::string base_;
  std::chrono::milliseconds timeout_;
  std::string token_file_;
  sys::HttpClient http_;
};

}  // namespace weft::doctor
