#pragma once
// Client TCP connections for the agent's HTTP client: connect with a timeout,
// TCP keepalive, and reads/writes bounded by a wait so that callers can check
// a stop flag between them.
//
// Not thread-safe: one user at a time.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::sys {

class TcpConn {
 public:
  // Resolves `host` (a name or a literal; IPv6 without brackets) and connects
  // to the first address that accepts within `timeout` (per address).
  static Result<TcpConn> Connect(const std::string& host, int port, std::chrono::milliseconds timeout);

  // Probes a silent connection after `idle_s`, then every `interval_s`
  // (TCP_KEEPIDLE / TCP_KEEPINTVL; the probe count stays the system's).
  Status SetKeepAlive(int idle_s, int interval_s);

  // Writes all of `data` within `timeout`.
  Status SendAll(std::string_view data, std::chrono::milliseconds timeout);

  // Waits up to `wait` for data. Returns the bytes read (> 0), 0 when the
  // peer closed the connection, or nullopt when nothing arrived in time.
  Result<std::optional<size_t>> Recv(char* buf, size_t len, std::chrono::milliseconds wait);

 private:
  explicit TcpConn(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace weft::sys
