#pragma once
// The writer of ClusterNetworkPolicies' status.conditions (issue 30: out of
// the controller's kernel loop). The controller hands it the policies whose
// rules have just gone into the kernel; a thread of its own writes their
// condition with one merge PATCH each, so a slow or unreachable API server
// never holds the engine's lock or delays the next apply.
//
// One weftd writes at once (the first Node by name: `writer`); the others
// write too when a policy's condition is still missing `grace` after it
// became due (that weftd may be down). Every weftd computes the same
// condition, so a second writer changes nothing. A condition already in
// place (ConditionPatch() empty) or a policy gone is dropped; a failed write
// is retried after `retry` (the writer) or `grace` (the others).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "sys/http.h"

namespace weft::policy {

class CnpStatusWriter {
 public:
  using Clock = std::chrono::steady_clock;
  // The merge patch of a policy's status now ("" when it is in place or the
  // policy is gone). Called on the writer's thread.
  using PatchOf = std::function<std::string(const std::string& name)>;
  // Sends one PATCH of `path` (the policy's /status) with `patch`.
  using Send = std::function<Result<sys::HttpResponse>(const std::string& path, const std::string& patch)>;
  struct Counters {
    std::function<void()> written, failed;
  };

  CnpStatusWriter(PatchOf patch_of, Send send, Counters counters, std::chrono::milliseconds grace,
                  std::chrono::milliseconds retry = std::chrono::seconds(1));
  ~CnpStatusWriter();  // stops the thread

  // The policies whose rules are in the kernel now, each with the time its
  // condition became due; `writer`: this weftd is the first to write. Merged
  // into what is pending (an earlier due time is kept).
  void Enforced(const std::map<std::string, Clock::time_point>& due, bool writer);

  // How many policies wait for their write (tests, metrics).
  size_t pending() const;

  // One pass over what is due at `now`, on the calling thread; returns the
  // time of the next one (Clock::time_point::max() when none). The thread
  // runs it; tests call it directly (no thread started: Start is separate).
  Clock::time_point WriteDue(Clock::time_point now);

  void Start();
  void Stop();

 private:
  void Loop();

  PatchOf patch_of_;
  Send send_;
  Counters counters_;
  std::chrono::milliseconds grace_, retry_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Clock::time_point> due_;  // name -> when it may be written
  bool writer_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace weft::policy
