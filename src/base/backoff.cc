#include "base/backoff.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>

namespace weft {

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

std::chrono::milliseconds Backoff::Next() {
  cur_ = cur_.count() == 0 ? std::chrono::milliseconds(200) : std::min(cur_ * 2, max_);
  return cur_;
}

}  // namespace weft
