#include "runtime/conf_watcher.h"

#include <algorithm>
#include <filesystem>

namespace weft::runtime {

Result<ConfWatcher> ConfWatcher::Start(LoadOptions options) {
  WEFT_ASSIGN_OR_RETURN(sys::DirWatch watch, sys::DirWatch::Create());
  WEFT_ASSIGN_OR_RETURN(int wd, watch.Add(options.conf_dir, /*self=*/true));
  ConfWatcher w(std::move(options), std::move(watch));
  w.dir_wd_ = wd;
  w.report_ = LoadConfDir(w.options_);
  w.WatchSubdirs();
  return w;
}

void ConfWatcher::WatchSubdirs() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(options_.conf_dir, ec)) {
    std::error_code e2;
    if (!e.is_directory(e2)) continue;
    // Re-adding an existing watch is harmless: the kernel returns its wd.
    (void)watch_.Add(e.path().string(), /*self=*/false);
  }
}

void ConfWatcher::Reload() {
  report_ = LoadConfDir(options_);
  ++reloads_;
  WatchSubdirs();
}

Result<bool> ConfWatcher::WaitAndReload(std::chrono::milliseconds timeout) {
  WEFT_ASSIGN_OR_RETURN(sys::DirWatch::Events ev, watch_.Wait(timeout));
  bool dir_gone = std::find(ev.gone.begin(), ev.gone.end(), dir_wd_) != ev.gone.end();
  bool changed = ev.changed;
  if (dir_gone) {
    report_.status = Status::Error(Reason::kFailed, Domain::kFile,
                                   "cni conf dir " + options_.conf_dir + " was removed, stopped watching");
    return report_.status;
  }
  if (!changed) return false;
  Reload();
  return true;
}

}  // namespace weft::runtime
