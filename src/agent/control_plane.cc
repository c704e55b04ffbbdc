#include "agent/control_plane.h"

#include <algorithm>

#include "agent/errors.h"

namespace weft::agent {

void PeerStore::Replace(overlay::PeerMap peers) {
  {
    std::lock_guard lock(mu_);
    peers_ = std::move(peers);
    synced_ = true;
    ++version_;
  }
  cv_.notify_all();
}

void PeerStore::Upsert(overlay::NodeInfo node) {
  {
    std::lock_guard lock(mu_);
    if (!synced_) return;
    auto it = peers_.find(node.name);
    if (it != peers_.end() && it->second == node) return;
    std::string name = node.name;
    peers_[name] = std::move(node);
    ++version_;
  }
  cv_.notify_all();
}

void PeerStore::Remove(const std::string& name) {
  {
    std::lock_guard lock(mu_);
    if (!synced_ || peers_.erase(name) == 0) return;
    ++version_;
  }
  cv_.notify_all();
}

PeerStore::Snapshot PeerStore::WaitChange(uint64_t seen, std::chrono::milliseconds timeout,
                                          const std::atomic<bool>& stop) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return version_ != seen || woken_ || stop.load(); });
  woken_ = false;
  return Snapshot{synced_, version_, peers_};
}

PeerStore::Snapshot PeerStore::Get() {
  std::lock_guard lock(mu_);
  return Snapshot{synced_, version_, peers_};
}

void PeerStore::Notify() {
  { std::lock_guard lock(mu_); }
  cv_.notify_all();
}

void PeerStore::Wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

const char* WhyName(Why why) {
  switch (why) {
    case Why::kTryAgain: return "try-again";
    case Why::kBadConfig: return "bad-config";
    case Why::kNoSubnet: return "no-subnet";
  }
  return "?";
}

}  // namespace weft::agent
