#include "base/auth_health.h"

namespace weft {

AuthHealth::AuthHealth(Clock clock) : clock_(std::move(clock)) { last_success_ = Now(); }

std::chrono::steady_clock::time_point AuthHealth::Now() const {
  return clock_ ? clock_() : std::chrono::steady_clock::now();
}

void AuthHealth::RecordSuccess() {
  auto now = Now();
  std::lock_guard lock(mu_);
  last_success_ = now;
  refused_since_.reset();
}

void AuthHealth::RecordRefusal(std::string why) {
  refusals_++;
  auto now = Now();
  std::lock_guard lock(mu_);
  if (!refused_since_) refused_since_ = now;
  last_refusal_ = std::move(why);
}

double AuthHealth::SecondsSinceSuccess() const {
  auto now = Now();
  std::lock_guard lock(mu_);
  return std::chrono::duration<double>(now - last_success_).count();
}

std::optional<std::string> AuthHealth::Failing(std::chrono::milliseconds bound) const {
  auto now = Now();
  std::lock_guard lock(mu_);
  if (!refused_since_ || now - *refused_since_ < bound) return std::nullopt;
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(now - *refused_since_).count();
  return "control plane refused every request for " + std::to_string(secs) +
         " s (401/403 or a rejected certificate; last: " + last_refusal_ + ")";
}

}  // namespace weft
