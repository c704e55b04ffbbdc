#include "agent/control_plane.h"

#include <algorithm>
#include <random>
#include <thread>

#include "agent/errors.h"

namespace weft::agent {

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kVxlan: return "vxlan";
    case Backend::kHostGw: return "host-gw";
    case Backend::kAuto: return "auto";
  }
  return "?";
}

bool ParseBackend(const std::string& s, Backend* out) {
  for (Backend b : {Backend::kVxlan, Backend::kHostGw, Backend::kAuto}) {
    if (s == BackendName(b)) {
      *out = b;
      return true;
    }
  }
  return false;
}

std::optional<IpAddress> UnderlayAddress(const NodeInfo& n, bool v6) {
  if (n.host_ip && n.host_ip->is_v6() == v6) return n.host_ip;
  if (v6 && n.host_ip6 && n.host_ip6->is_v6()) return n.host_ip6;
  return std::nullopt;
}

void PeerStore::Replace(PeerMap peers) {
  {
    std::lock_guard lock(mu_);
    peers_ = std::move(peers);
    synced_ = true;
    ++version_;
  }
  cv_.notify_all();
}

void PeerStore::Upsert(NodeInfo node) {
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
  cv_.wait_for(lock, timeout, [&] { return version_ != seen || stop.load(); });
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

bool SleepUnlessStopped(std::chrono::milliseconds d, const std::atomic<bool>& stop) {
  auto end = std::chrono::steady_clock::now() + d;
  while (!stop.load()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= end) return true;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(end - now, std::chrono::milliseconds(50)));
  }
  return false;
}

bool SleepJitteredUnlessStopped(std::chrono::milliseconds d, const std::atomic<bool>& stop) {
  thread_local std::minstd_rand rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> pick(d.count() * 3 / 4, d.count());
  return SleepUnlessStopped(std::chrono::milliseconds(d.count() > 0 ? pick(rng) : 0), stop);
}

const char* WhyName(Why why) {
  switch (why) {
    case Why::kTryAgain: return "try-again";
    case Why::kBadConfig: return "bad-config";
    case Why::kNoSubnet: return "no-subnet";
  }
  return "?";
}

std::chrono::milliseconds Backoff::Next() {
  cur_ = cur_.count() == 0 ? std::chrono::milliseconds(200) : std::min(cur_ * 2, max_);
  return cur_;
}

}  // namespace weft::agent
