#pragma once
// ScopeGuard runs an undo action when it goes out of scope unless Dismiss()ed.
// ADD arms one per side effect and dismisses them all only after success, so
// rollback never depends on an error variable.

#include <functional>
#include <utility>

namespace weft {

class ScopeGuard {
 public:
  explicit ScopeGuard(std::function<void()> undo) : undo_(std::move(undo)) {}
  ~ScopeGuard() {
    if (undo_) undo_();
  }
  ScopeGuard(ScopeGuard&& o) noexcept : undo_(std::exchange(o.undo_, nullptr)) {}
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  void Dismiss() { undo_ = nullptr; }

 private:
  std::function<void()> undo_;
};

}  // namespace weft
