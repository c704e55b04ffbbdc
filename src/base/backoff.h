#pragma once
// How weftd waits between retries of the control plane: an exponential
// Backoff capped at kMaxBackoff, and sleeps that end early when the agent
// stops (jittered, so nodes cut off together do not return in lockstep).

#include <atomic>
#include <chrono>

namespace weft {

// Sleeps up to `d` in small steps, returning early when `stop` is set.
// Returns false when stopped.
bool SleepUnlessStopped(std::chrono::milliseconds d, const std::atomic<bool>& stop);

// SleepUnlessStopped for a random 75-100 % of `d`: the retry sleeps of the
// list-watch loops, the registrations and the lease renewals, so the nodes
// that lost the control plane at the same instant do not come back to it in
// lockstep. Never longer than `d`, which keeps kMaxBackoff a bound on how
// long a node waits once the control plane answers again. The random source
// is per thread, seeded from std::random_device.
bool SleepJitteredUnlessStopped(std::chrono::milliseconds d, const std::atomic<bool>& stop);

// The default cap of Backoff. weftd's guarantee (docs/weftd.md): within 5 s
// of the API server or etcd answering again, every node has reconnected,
// re-listed if its watch cannot resume, and reconciled; a retry waits at
// most this long, leaving the rest to the connect, the list and the
// reconcile. A refused connect costs the server nothing worth saving.
inline constexpr std::chrono::milliseconds kMaxBackoff{2000};

// Exponential backoff: 200 ms doubling to `max`, reset after success.
class Backoff {
 public:
  explicit Backoff(std::chrono::milliseconds max = kMaxBackoff) : max_(max) {}
  std::chrono::milliseconds Next();
  void Reset() { cur_ = std::chrono::milliseconds(0); }

 private:
  std::chrono::milliseconds max_;
  std::chrono::milliseconds cur_{0};
};

}  // namespace weft
