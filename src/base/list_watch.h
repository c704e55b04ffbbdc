#pragma once
// The list-then-watch state machine every source of truth shares: the
// Kubernetes informer (informer.h: resourceVersion, 410 Gone, bookmarks) and
// the etcd peer watch (etcd.h: revision, compact_revision). A source knows
// how to list and how to watch; RunListWatch decides which to do next, how
// long to back off and what to count, so a re-list, a reconnect and their
// backoff mean the same on both control planes.
//
//   List ──ok──> Watch ──kTimeout────────────> Watch (at once)
//    ^  \         │ └───kClosed / kFailed────> Watch (after backoff, unless it progressed)
//    │   └─error──┤
//    │  (backoff) └─────kExpired─────────────> List  (at once after progress, else after backoff)
//    └────────────────────────────────────────────┘

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace weft {

// What RunListWatch counts (a control plane's counters, read by the metrics
// endpoint).
struct ControlPlaneStats {
  std::atomic<uint64_t> reconnects{0};   // watch streams re-opened after an error
  std::atomic<uint64_t> relists{0};      // full lists (first one included)
  std::atomic<uint64_t> events{0};       // watch events applied
  std::atomic<uint64_t> errors{0};       // failed requests
};

class ListWatchSource {
 public:
  virtual ~ListWatchSource() = default;

  // A complete, consistent list handed to the source's consumer; on success
  // the source remembers where the next watch resumes. May return Ok early
  // when `stop` is set.
  virtual Status List(const std::atomic<bool>& stop) = 0;

  enum class End {
    kStopped,  // `stop` was set
    kTimeout,  // ended where the protocol ends watches (Kubernetes' timeoutSeconds): resume at once
    kClosed,   // the server closed the stream early, without an error: reconnect from the resume point
    kExpired,  // the resume point is gone (410 Gone, a compacted revision) or a re-list is due
    kFailed,   // an error (transport, HTTP status, an unusable line): reconnect after backoff
  };
  struct WatchEnd {
    End end = End::kFailed;
    // The server accepted the watch (etcd's created message, an event, a
    // bookmark): the connection works, so the backoff starts over.
    bool progressed = false;
    Status why;  // kFailed: the error; kExpired: why the watch cannot resume
  };
  // Watches from the resume point, handing events to the consumer, and
  // advances the resume point past what it delivered.
  virtual WatchEnd Watch(const std::atomic<bool>& stop) = 0;

  // The resume point for logs: a resourceVersion or a revision.
  virtual std::string ResumePoint() const = 0;
};

// Sleeps up to the duration unless `stop` is set; returns false when stopped.
// SleepJitteredUnlessStopped (backoff.h) is the real one; tests record
// instead.
using SleepFn = std::function<bool(std::chrono::milliseconds, const std::atomic<bool>&)>;

// Runs `source` until `stop` is set: lists, then watches; re-lists when the
// watch cannot resume; reconnects otherwise. Backoff (Backoff in
// backoff.h: 200 ms doubling to 2 s) follows every failed list, every
// failed watch, and every watch that ended or expired without progress, so a
// server that refuses each watch at once is not hammered; progress resets it.
// Counts into `stats`: relists (each List call), reconnects (kClosed,
// kFailed), errors (failed lists, kFailed). `what` names the source in logs
// ("nodes", "etcd subnets"). Thread: the caller's, for the whole run.
void RunListWatch(ListWatchSource& source, std::string_view what, ControlPlaneStats& stats, const SleepFn& sleep,
                  const std::atomic<bool>& stop);

}  // namespace weft
