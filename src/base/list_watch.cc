#include "base/list_watch.h"

#include "base/backoff.h"
#include "base/log.h"

namespace weft {

void RunListWatch(ListWatchSource& source, std::string_view what, ControlPlaneStats& stats, const SleepFn& sleep,
                  const std::atomic<bool>& stop) {
  using End = ListWatchSource::End;
  bool need_list = true;
  Backoff backoff;
  // After a watch that ended: at once when it progressed, else after backoff.
  auto again = [&](bool progressed) {
    if (progressed) backoff.Reset();
    else sleep(backoff.Next(), stop);
  };
  while (!stop.load()) {
    if (need_list) {
      stats.relists++;
      Status st = source.List(stop);
      if (stop.load()) break;
      if (!st.ok()) {
        stats.errors++;
        WEFT_LOG(kWarn, "list failed", {"what", what}, {"err", st});
        sleep(backoff.Next(), stop);
        continue;
      }
      need_list = false;
    }
    ListWatchSource::WatchEnd w = source.Watch(stop);
    switch (w.end) {
      case End::kStopped:
        return;
      case End::kTimeout:
        backoff.Reset();
        break;
      case End::kClosed:
        stats.reconnects++;
        WEFT_LOG(kInfo, "watch ended; reconnecting", {"what", what}, {"resume", source.ResumePoint()});
        again(w.progressed);
        break;
      case End::kExpired:
        WEFT_LOG(kInfo, "watch cannot resume; re-listing", {"what", what}, {"resume", source.ResumePoint()},
                 {"why", w.why.msg()});
        need_list = true;
        again(w.progressed);
        break;
      case End::kFailed:
        stats.reconnects++;
        stats.errors++;
        WEFT_LOG(kWarn, "watch failed; reconnecting", {"what", what}, {"resume", source.ResumePoint()},
                 {"err", w.why});
        if (w.progressed) backoff.Reset();
        sleep(backoff.Next(), stop);
        break;
    }
  }
}

}  // namespace weft
