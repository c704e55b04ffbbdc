#pragma once
// The Service proxy's desired table and its deltas (issue 31): Services and
// EndpointSlices in, table inet weft-services out, one change at a time.
// The Model holds the objects and, per Service, what it puts in the table
// (proxy_table.h's ServiceObjects); a change recomputes the one Service it
// concerns and returns a transaction of only what differs (its chains, its
// affinity sets, its map elements; never another Service's objects, unless
// two Services claim one map key and the claim passes from one to the other)
// plus the conntrack cleanup the change implies, as data. Full() is the
// whole table, for start-up and repair; Digest() a comparable view of it
// for a periodic check against what the kernel holds.
//
// The kernel side (sending the transactions, ctnetlink, informers) is the
// caller's, behind its own seam, as policy/netpol_controller.h's NetpolKernel.
// Pure and single-threaded: the caller serialises calls.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/ip.h"
#include "services/proxy_table.h"
#include "services/service_types.h"
#include "sys/nft_types.h"

namespace weft::services {

// Conntrack entries a change leaves wrong, for the caller to delete over
// ctnetlink: UDP only (TCP and SCTP connections end on their own), as
// kube-proxy cleans them.
struct ConntrackFlush {
  bool v6 = false;
  Proto proto = Proto::kUdp;
  // The original destination: a service address and port; no address for
  // a NodePort (any of the node's addresses).
  std::optional<IpAddress> dst;
  uint16_t dport = 0;
  // Entries DNATed to this endpoint (the reply's source address and port);
  // none: every entry to dst:dport (a service that got its first endpoint,
  // whose entries may have been made while it had none).
  std::optional<IpAddress> endpoint;
  uint16_t endpoint_port = 0;
  auto operator<=>(const ConntrackFlush&) const = default;
};

// What one change asks of the kernel.
struct Change {
  // Empty when the table does not change. REQUIRES (of the caller): the
  // kernel holds what the previous transactions made (Full() first); after
  // a failed apply, apply Full() instead of later deltas.
  nft::Transaction tx{nft::Family::kInet, kTable};
  std::vector<ConntrackFlush> conntrack;  // sorted, none twice
};

// The table as a comparable value: chains with their hooks, each chain's
// rules (handles cleared, an anonymous set's name replaced by its elements
// in nft's words, so two tables compare whatever names the kernel gave),
// named sets, and elements sorted by key. The elements of dynamic sets
// (the affinity sets, filled by the packet path) are left out.
struct TableDigest {
  std::map<std::string, std::optional<nft::Hook>> chains;
  std::map<std::string, std::vector<nft::Rule>> rules;
  std::map<std::string, nft::Set> sets;
  std::map<std::string, std::vector<nft::Element>> elements;
  bool operator==(const TableDigest&) const = default;
  // The differences in nft's words, one a line ("" when equal): for logs and tests.
  std::string Diff(const TableDigest& other) const;
};
TableDigest DigestOf(const nft::TableState& table);

class Model {
 public:
  explicit Model(Config cfg) : cfg_(std::move(cfg)) {}

  Change UpsertService(Service svc);
  Change DeleteService(const std::string& key);  // "ns/name"; an unknown one is no change
  Change UpsertSlice(EndpointSlice slice);
  Change DeleteSlice(const std::string& key);

  // The whole table in one transaction that replaces whatever the kernel
  // holds (add, delete, add the table: no moment without rules).
  nft::Transaction Full() const;
  // Full() as a dump of it reads, digested.
  TableDigest Digest() const;

  const Config& config() const { return cfg_; }
  // What one Service puts in the table (null when nothing: unknown, skipped, or no ports).
  const ServiceObjects* Objects(const std::string& service_key) const;
  const Service* FindService(const std::string& key) const;
  size_t service_count() const { return services_.size(); }
  // The slices of Service `key` (MergeEndpoints's and HealthCheckOf's input).
  std::vector<const EndpointSlice*> SlicesOf(const std::string& key) const;

 private:
  // Recompute `key`'s objects and turn the difference into a Change.
  Change Resync(const std::string& key);
  // The verdict a map key has while `owners` claim it: the first's.
  using Claims = std::map<std::string, nft::Verdict>;  // service key -> verdict

  Config cfg_;
  std::map<std::string, Service> services_;
  std::map<std::string, std::map<std::string, EndpointSlice>> slices_;  // service key -> slice name -> slice
  std::map<std::string, std::string> slice_service_;                   // slice key -> service key
  std::map<std::string, ServiceObjects> objects_;                      // service key -> its objects (non-empty)
  std::map<MapKey, Claims> claims_;  // every map key some Service wants, and who
};

}  // namespace weft::services
