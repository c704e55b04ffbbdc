#pragma once
// An in-memory etcd for unit tests of the etcd control plane (flannel's mock
// registry is the model): keys with create/mod revisions, one revision per
// write or transaction, leases that tests expire, a history that tests
// compact, and watches that replay it. Thread-safe; NewClient() hands out
// registries (one per thread, as the real ones) over the same store.
//
// A watch replays the history from its start revision (one message per
// revision, as etcd), then waits: for new writes, for `stop`, or — when a
// test set an idle hook — for the hook, which may write (the writes are
// delivered next) and returns whether the stream stays open.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "etcd/etcd_registry.h"

namespace weft::etcd {

class FakeEtcd {
 public:
  enum class Op { kRange, kTxn, kLeaseGrant, kLeaseKeepAlive, kLeaseRevoke, kWatch };

  std::unique_ptr<EtcdRegistry> NewClient();

  // --- What another node (or etcd itself) does ---
  void Put(const std::string& key, const std::string& value, int64_t lease = 0);
  void Delete(const std::string& key);
  // The lease's TTL ran out: it is gone and its keys are deleted (one revision).
  void ExpireLease(int64_t id);
  // Drops the history up to `revision`: a watch starting below it is canceled
  // with compact_revision = `revision`.
  void Compact(int64_t revision);
  // The next `n` requests of `op` fail with an unavailable error; for kWatch
  // the stream breaks after the created message.
  void FailNext(Op op, int n = 1);
  // Runs before each transaction's compares are evaluated (outside the lock):
  // a rival's write that makes the transaction lose a race.
  void SetBeforeTxn(std::function<void()> fn);
  // See the header comment; null = wait for writes or `stop`.
  void SetWatchIdle(std::function<bool()> fn);

  // --- What tests look at ---
  int64_t revision() const;
  std::optional<EtcdKv> Get(const std::string& key) const;
  std::vector<EtcdKv> List(const std::string& prefix) const;
  bool LeaseAlive(int64_t id) const;
  int Requests(Op op) const;  // requests made of `op` so far

 private:
  class Client;
  struct Lease {
    int64_t ttl = 0;
  };
  struct Change {
    int64_t revision = 0;
    EtcdEvent event;
  };
  // REQUIRES: mu_ held. Apply one write at `rev` and record it.
  void PutLocked(const std::string& key, const std::string& value, int64_t lease, int64_t rev);
  void DeleteLocked(const std::string& key, int64_t rev);
  void RevokeLocked(int64_t id);
  bool Fail(Op op);  // REQUIRES: mu_ held. Counts the request; whether it fails.
  Result<EtcdRange> DoRange(const std::string& key, const std::string& range_end, int64_t revision);
  Result<bool> DoTxn(const EtcdTxn& txn);
  Result<int64_t> DoLeaseGrant(int64_t ttl);
  Result<int64_t> DoLeaseKeepAlive(int64_t id);
  Status DoLeaseRevoke(int64_t id);
  Status DoWatch(const std::string& key, const std::string& range_end, int64_t start_revision,
                 const std::function<bool(const EtcdWatchMessage&)>& on_msg, const std::atomic<bool>& stop);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t revision_ = 1;  // etcd starts at 1
  int64_t compacted_ = 0;
  int64_t next_lease_ = 0x1000;
  std::map<std::string, EtcdKv> kvs_;
  std::map<int64_t, Lease> leases_;
  std::vector<Change> history_;  // revision > compacted_
  std::map<Op, int> fail_next_;
  std::map<Op, int> requests_;
  std::function<void()> before_txn_;
  std::function<bool()> watch_idle_;
};

}  // namespace weft::etcd
