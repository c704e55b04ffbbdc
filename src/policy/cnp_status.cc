#include "policy/cnp_status.h"

#include <algorithm>

#include "base/log.h"

namespace weft::policy {

CnpStatusWriter::CnpStatusWriter(PatchOf patch_of, Send send, Counters counters, std::chrono::milliseconds grace,
                                 std::chrono::milliseconds retry)
    : patch_of_(std::move(patch_of)), send_(std::move(send)), counters_(std::move(counters)), grace_(grace),
      retry_(retry) {}

CnpStatusWriter::~CnpStatusWriter() { Stop(); }

void CnpStatusWriter::Enforced(const std::map<std::string, Clock::time_point>& due, bool writer) {
  if (due.empty()) return;
  {
    std::lock_guard lock(mu_);
    writer_ = writer;
    for (const auto& [name, since] : due) {
      const Clock::time_point at = writer ? since : since + grace_;
      auto [it, fresh] = due_.try_emplace(name, at);
      if (!fresh) it->second = std::min(it->second, at);
    }
  }
  cv_.notify_all();
}

size_t CnpStatusWriter::pending() const {
  std::lock_guard lock(mu_);
  return due_.size();
}

CnpStatusWriter::Clock::time_point CnpStatusWriter::WriteDue(Clock::time_point now) {
  std::map<std::string, Clock::time_point> ready;
  bool writer = false;
  {
    std::lock_guard lock(mu_);
    writer = writer_;
    for (auto it = due_.begin(); it != due_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      ready.insert(*it);
      it = due_.erase(it);
    }
  }
  // Written without the lock: Enforced never waits for the API server.
  std::map<std::string, Clock::time_point> again;
  for (const auto& [name, at] : ready) {
    const std::string patch = patch_of_(name);
    if (patch.empty()) continue;  // in place already, or the policy is gone
    auto r = send_(name, patch);
    if (r.ok() && (r->status == 200 || r->status == 404)) {
      if (r->status == 200 && counters_.written) counters_.written();
      continue;  // the watch brings the written status back
    }
    if (counters_.failed) counters_.failed();
    WEFT_LOG(kWarn, "cannot write a ClusterNetworkPolicy's status; retrying", {"policy", name},
             {"err", r.ok() ? Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                            "HTTP " + std::to_string(r->status), r->body.substr(0, 256))
                            : r.status()});
    again[name] = now + (writer ? std::chrono::duration_cast<Clock::duration>(retry_)
                                : std::chrono::duration_cast<Clock::duration>(grace_));
  }
  std::lock_guard lock(mu_);
  for (const auto& [name, at] : again) {
    auto [it, fresh] = due_.try_emplace(name, at);
    if (!fresh) it->second = std::min(it->second, at);  // offered again meanwhile
  }
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [name, at] : due_) next = std::min(next, at);
  return next;
}

void CnpStatusWriter::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void CnpStatusWriter::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CnpStatusWriter::Loop() {
  Clock::time_point next = Clock::now();
  std::unique_lock lock(mu_);
  while (!stop_) {
    // Woken by Enforced (something new may be due now) or at the next time.
    auto ready = [&] {
      if (stop_) return true;
      for (const auto& [name, at] : due_)
        if (at <= Clock::now()) return true;
      return false;
    };
    if (next == Clock::time_point::max()) cv_.wait(lock, ready);
    else cv_.wait_until(lock, next, ready);
    if (stop_) break;
    lock.unlock();
    next = WriteDue(Clock::now());
    lock.lock();
    // Something offered while writing that is due earlier than `next`:
    // the predicate sees it at once.
  }
}

}  // namespace weft::policy
