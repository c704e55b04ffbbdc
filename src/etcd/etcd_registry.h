#pragma once
// The narrow key-value interface the etcd control plane (etcd.h) is written
// against, as flannel's subnet.Registry: ranges, compare-and-swap
// transactions, leases and a watch over a key range. Two implementations:
// EtcdClient (etcd_client.h: etcd v3's JSON gateway over libcurl) and
// FakeEtcd (etcd_fake.h: in memory, with revisions, leases and compaction,
// for unit tests of registration, lease renewal and the watch).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace weft::etcd {

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  int64_t revision = 0;  // the store revision the range was read at
  std::vector<EtcdKv> kvs;
};

struct EtcdEvent {
  bool is_delete = false;
  EtcdKv kv;
};

struct EtcdWatchMessage {
  bool created = false;
  bool canceled = false;
  int64_t compact_revision = 0;  // > 0: the start revision was compacted
  int64_t revision = 0;          // header revision
  std::string cancel_reason;
  std::vector<EtcdEvent> events;
};

// A compare-and-swap transaction: when every compare holds, every op of
// `success` is applied atomically (one revision); otherwise nothing is.
struct EtcdCompare {
  enum class Target { kCreate, kMod };
  std::string key;
  Target target = Target::kCreate;
  int64_t revision = 0;  // the key's create (or mod) revision must equal it; create 0 = the key is absent
};
struct EtcdOp {
  enum class Kind { kPut, kDelete };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;  // kPut
  int64_t lease = 0;  // kPut: attach to this lease (0 = none)
};
struct EtcdTxn {
  std::vector<EtcdCompare> compare;
  std::vector<EtcdOp> success;
};

// The range_end that selects every key starting with `prefix`.
std::string PrefixRangeEnd(std::string prefix);

// One connection's worth of etcd: not thread-safe; one per thread.
class EtcdRegistry {
 public:
  virtual ~EtcdRegistry() = default;
  // [key, range_end), or `key` alone when range_end is empty; at `revision`
  // (0 = the current one).
  virtual Result<EtcdRange> Range(const std::string& key, const std::string& range_end, int64_t revision = 0) = 0;
  // Whether the compares held (and the ops were applied).
  virtual Result<bool> Txn(const EtcdTxn& txn) = 0;
  // A new lease's ID.
  virtual Result<int64_t> LeaseGrant(int64_t ttl_seconds) = 0;
  // The lease's remaining TTL; 0 when the lease is gone (expired or revoked).
  virtual Result<int64_t> LeaseKeepAlive(int64_t id) = 0;
  // Ends the lease and deletes the keys attached to it.
  virtual Status LeaseRevoke(int64_t id) = 0;
  // Watches [key, range_end) from `start_revision` (0 = from now): `on_msg`
  // gets each message (the first says created; a start revision below the
  // compaction point gets a canceled one with compact_revision) and returns
  // false to end the watch. Returns Ok when the stream ended cleanly (the
  // server closed it, `on_msg` returned false, or `stop` was set).
  virtual Status Watch(const std::string& key, const std::string& range_end, int64_t start_revision,
                       const std::function<bool(const EtcdWatchMessage&)>& on_msg, const std::atomic<bool>& stop) = 0;
};

}  // namespace weft::etcd
