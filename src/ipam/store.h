#pragma once
// The node's IPAM state in SQLite, kindnet's design: three tables (ranges,
// pods, portmap entries with ON DELETE CASCADE). UNIQUE constraints, not
// application locks, guard concurrency between plugin processes; every
// change is one short BEGIN IMMEDIATE transaction.
//
// Thread-safety: a Store is one connection; use one per thread/process.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "ipam/sqlite.h"

namespace weft::ipam {

// Lifecycle of an attachment row. ADD writes kAdding before it touches the
// kernel and kReady after, so a crash mid-ADD is always discoverable.
inline constexpr const char* kStateAdding = "adding";
inline constexpr const char* kStateReady = "ready";
// Teardown has started: the row's port mappings are gone from the database
// but the hostPort ruleset may still hold them, so whoever finishes the
// teardown (DEL, GC, reclaim) must re-sync the ruleset before the row goes.
inline constexpr const char* kStateDeleting = "deleting";

struct PodRecord {
  std::string container_id;
  std::string ifname;
  std::string network;
  std::string netns;
  std::string host_ifname;
  std::string pod_name, pod_namespace, pod_uid;
  std::optional<IpPrefix> ip_v4;  // address with its range's prefix length
  std::optional<IpPrefix> ip_v6;
  std::optional<IpAddress> gateway_v4, gateway_v6;
  int mtu = 0;
  std::string state = kStateAdding;
  std::string created;  // SQLite CURRENT_TIMESTAMP, UTC
};

struct PortMapping {
  std::string host_ip;  // "" = all addresses
  int host_port = 0;
  std::string protocol;  // "tcp" | "udp" | "sctp"
  std::string container_ip;
  int container_port = 0;
  // Owner, filled when listing.
  std::string container_id, ifname;
};

struct RangeUsage {
  IpPrefix subnet;
  uint64_t usable = 0;
  uint64_t used = 0;
};

// What an allocation request asks for: the ranges to draw from (at most one
// address per family) and addresses never to hand out (e.g. a gateway).
struct AllocationRequest {
  std::vector<IpPrefix> ranges;
  std::vector<IpAddress> exclude;
};

class Store {
 public:
  // Opens <data_dir>/ipam.db, creating the directory (0700), the file (0600)
  // and the schema when missing.
  static Result<Store> Open(const std::string& data_dir, int busy_timeout_ms = 10000);

  // Allocates one address per family present in `req.ranges` and inserts the
  // pod row (state kAdding) in one transaction. already-exists if the
  // container+ifname has a row; exhausted if a family is exhausted.
  Result<PodRecord> Reserve(PodRecord pod, const AllocationRequest& req);
  // Inserts a row with addresses chosen elsewhere (delegated IPAM).
  Status Insert(const PodRecord& pod);
  Status SetState(const std::string& cid, const std::string& ifname, const std::string& state);
  Result<std::optional<PodRecord>> Find(const std::string& cid, const std::string& ifname);
  // All rows of `network` (all networks when empty).
  Result<std::vector<PodRecord>> ListPods(const std::string& network);
  // Deletes the row and, by cascade, its port mappings. OK if absent;
  // `*existed` tells whether a row was removed.
  Status Release(const std::string& cid, const std::string& ifname, bool* existed = nullptr);
  // First step of a teardown: sets the attachment's state to
  // kStateDeleting. The row, its address and its port mappings (which no
  // other attachment can claim meanwhile) stay until Release. OK if the row
  // is absent.
  Status BeginDelete(const std::string& cid, const std::string& ifname);

  // Port mappings of one attachment, inserted in one transaction. A clash on
  // (host IP, port, protocol) is a conflict naming the owner.
  Status AddPortMappings(const std::string& cid, const std::string& ifname,
                         const std::vector<PortMapping>& maps);
  Result<std::vector<PortMapping>> ListPortMappings();
  // One attachment's port mappings (an index lookup).
  Result<std::vector<PortMapping>> PortMappingsOf(const std::string& cid, const std::string& ifname);
  // Whether any attachment not being deleted has a port mapping.
  Result<bool> HasLivePortMappings();

  // Takes and releases the write lock (an empty BEGIN IMMEDIATE): fails the
  // way an ADD would when the database is read-only or unwritable.
  Status CheckWritable();

  Result<std::vector<RangeUsage>> Usage(const std::vector<IpPrefix>& ranges);

  Db& db() { return db_; }

 private:
  explicit Store(Db db) : db_(std::move(db)) {}
  Result<bool> Initialized();
  Status EnsureSchema();
  Db db_;
};

// Usable offsets of a range: IPv4 skips the network and broadcast addresses
// (except /31 and /32), IPv6 skips the subnet-router anycast address.
struct OffsetSpan {
  int64_t lo, hi;  // inclusive; lo > hi when empty
};
OffsetSpan UsableOffsets(const IpPrefix& range);

}  // namespace weft::ipam
