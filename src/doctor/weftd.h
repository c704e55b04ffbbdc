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

class Weftd {
 public:
  // `addr`: "host:port" ("[::1]:9641" for IPv6) or a URL ("http://...").
  explicit Weftd(std::string addr, std::chrono::milliseconds timeout = std::chrono::seconds(10));

  const std::string& addr() const { return addr_; }

  // GET `path`. Any HTTP status is an answer; a transport failure (nothing
  // listening, timeout) is unavailable (control plane) "cannot reach weftd at <addr>".
  Result<sys::HttpResponse> Get(const std::string& path);

 private:
  std::string addr_;
  std::string base_;
  std::chrono::milliseconds timeout_;
  sys::HttpClient http_;
};

}  // namespace weft::doctor
