#pragma once
// Whether the control plane still accepts this node's credentials. Every
// request's outcome is recorded; /healthz fails once nothing but refusals
// (HTTP 401/403, a rejected certificate) came back for a bounded time, so
// kubelet restarts the pod and the operator reads why, instead of a node
// whose view of the cluster froze behind a green /healthz.
//
// Thread-safe: the informers, the Node control plane and the status server
// share one instance.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace weft {

class AuthHealth {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  explicit AuthHealth(Clock clock = {});

  // A request got an answer that was not a refusal (any status but 401/403,
  // or a watch line). Ends a run of refusals.
  void RecordSuccess();
  // A request was refused; `why` says by whom and how, e.g.
  // "GET /api/v1/nodes: HTTP 401 Unauthorized". Transport failures that are
  // not about credentials (refused connections, timeouts) are not recorded
  // at all: they neither start nor end a run.
  void RecordRefusal(std::string why);

  uint64_t refusals() const { return refusals_.load(); }
  // Seconds since the last success, or since construction before the first.
  double SecondsSinceSuccess() const;
  // The reason /healthz fails: requests have been refused for at least
  // `bound` without a success since the first refusal of the run; nullopt
  // while healthy. E.g. "control plane refused every request for 125 s
  // (last: GET /api/v1/nodes: HTTP 401 Unauthorized: ...)".
  std::optional<std::string> Failing(std::chrono::milliseconds bound) const;

 private:
  std::chrono::steady_clock::time_point Now() const;

  const Clock clock_;
  std::atomic<uint64_t> refusals_{0};
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point last_success_;
  std::optional<std::chrono::steady_clock::time_point> refused_since_;  // first refusal after the last success
  std::string last_refusal_;
};

}  // namespace weft
