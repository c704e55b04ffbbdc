#pragma once
// The seam between the agent and its source of truth. Two implementations:
// the Kubernetes API (kube.h) and etcd v3 (etcd.h). The reconciler never
// knows which one it talks to: it only reads complete peer snapshots from a
// PeerStore.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "base/auth_health.h"
#include "base/ip.h"
#include "base/list_watch.h"
#include "base/status.h"
#include "overlay/types.h"

namespace weft::agent {

// The latest complete view of the peers. Writers (one watch thread) replace
// or patch it; the reconciler waits for a change and takes a copy.
// Thread-safe.
class PeerStore {
 public:
  // A complete list: replaces everything and marks the store synced.
  void Replace(overlay::PeerMap peers);
  // Applies one watch event. Ignored until the first Replace().
  void Upsert(overlay::NodeInfo node);
  void Remove(const std::string& name);

  struct Snapshot {
    bool synced = false;
    uint64_t version = 0;
    overlay::PeerMap peers;
  };
  // Waits until the version differs from `seen`, `stop` is set, or `timeout`
  // passes, and returns the current state either way.
  Snapshot WaitChange(uint64_t seen, std::chrono::milliseconds timeout, const std::atomic<bool>& stop);
  Snapshot Get();
  // Wakes waiters (used when stopping).
  void Notify();
  // Makes the current (or the next) WaitChange return at once although the
  // version did not change: another reason to look (the kernel changed).
  void Wake();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool synced_ = false;
  bool woken_ = false;
  uint64_t version_ = 0;
  overlay::PeerMap peers_;
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;

  // Publishes `self` and returns this node's pod CIDRs: read from the Node's
  // spec (Kubernetes) or claimed under a lease (etcd). Retries transient
  // failures until `stop` is set.
  virtual Result<std::vector<IpPrefix>> Register(const overlay::LocalNode& self, const std::atomic<bool>& stop) = 0;

  // The cluster CIDRs (one per family) if the control plane knows them
  // (etcd's config key); empty otherwise.
  virtual std::vector<IpPrefix> ClusterCidrs() const = 0;

  // Lists then watches peers into `store` until `stop` is set: re-lists when
  // the watch cannot resume, reconnects with backoff. Never returns early
  // except on a fatal error (e.g. the node's own lease cannot be restored).
  virtual Status Run(PeerStore& store, const std::atomic<bool>& stop) = 0;

  // Withdraws this node (etcd: revokes the lease, deleting its subnet).
  virtual Status Leave() = 0;

  virtual ControlPlaneStats& stats() = 0;

  // Whether the control plane still accepts this node's credentials
  // (auth_health.h); null when it does not say.
  virtual const AuthHealth* auth_health() const { return nullptr; }
};

}  // namespace weft::agent
