#pragma once
// Drop records (docs/networkpolicy.md, "Drop records"): the packets that
// NetworkPolicy (table inet weft-netpol) and the source guard (netdev tables
// weft-guard, weft-guard-bridge) drop are sent by their rules to NFLOG
// group kDropLogGroup, rate-limited per table; weftd reads them (sys/nflog.h) and this file turns
// them into one record per flow: source and destination (pod and address),
// protocol, port, direction and the reason. Pure apart from its mutex: the
// decoding, the flow aggregation, the ring and the logfmt rendering are
// unit-tested without root.
//
// Bounded by construction: the ring keeps the last `capacity` flows; a flow
// is one record however many packets it has (its count and last time go
// up); the resolver (pod names, isolating policies) runs once per new flow.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sys/nflog.h"

namespace weft::policy {

// One dropped packet, decoded.
struct DropEvent {
  std::string table;   // "netpol" or "guard"
  std::string kind;    // netpol: in, eg, rin, reg; guard: the word after "weft-guard " (spoofed4, spoofed6, spoofed-mac)
  std::string src, dst;  // addresses ("" when the frame carries none)
  std::string proto;     // tcp, udp, sctp, icmp, icmpv6, arp, or the protocol number
  uint16_t sport = 0, dport = 0;  // 0 when the protocol has none
  uint32_t indev = 0;
};

// Decodes an NFLOG packet whose prefix is one of ours ("weft-np ...",
// "weft-guard ..."); nullopt for anything else.
std::optional<DropEvent> DecodeDrop(const sys::NflogPacket& p);

// What weftd knows about a new flow's endpoints.
struct DropContext {
  std::string src_pod, dst_pod;  // ns/name, "" when no pod has the address
  std::string ns;                // the namespace the drop is counted in: the judged pod's (or "")
  std::vector<std::string> policies;  // netpol: the policies isolating the judged pod in that direction
};

struct DropRecord {
  uint64_t seq = 0;
  int64_t first_ms = 0, last_ms = 0;  // unix ms
  uint64_t packets = 0;
  DropEvent ev;
  DropContext ctx;
  uint64_t epoch = 0;
  std::string direction;  // ingress, egress (a guard drop: egress, the packet left the pod)
  std::string reason;     // "policy", "spoofed-source", "spoofed-mac"
  bool reply = false;     // a reply of a connection the policies no longer allow
};

// One logfmt line (no newline): ts seq src src_ip dst dst_ip proto port
// direction reason policies|detail packets last.
std::string DropLogfmt(const DropRecord& r);

class DropLog {
 public:
  using Resolver = std::function<DropContext(const DropEvent&)>;
  // `capacity` flows are kept; a flow quiet for `idle_ms` starts a new
  // record at its next packet.
  explicit DropLog(size_t capacity = 1024, int64_t idle_ms = 60000) : capacity_(capacity), idle_ms_(idle_ms) {}
  // Counts `ev` into its flow's record, or starts one (calling `resolve`).
  // `epoch` changes when what resolve says may have changed (weftd: the
  // policy transactions applied): a flow's next packet then starts a new
  // record, so a record's reason is never older than its packets' verdict.
  // Thread-safe.
  void Add(const DropEvent& ev, int64_t now_ms, const Resolver& resolve, uint64_t epoch = 0);
  // Records with seq > `after`, oldest first, at most `max`.
  std::vector<DropRecord> Since(uint64_t after, size_t max = 100000) const;
  // Packets recorded per (reason, namespace), for the metrics.
  std::map<std::pair<std::string, std::string>, uint64_t> PacketsByReasonAndNamespace() const;
  uint64_t records() const;

 private:
  static std::string FlowKey(const DropEvent& ev, uint64_t epoch);
  size_t capacity_;
  int64_t idle_ms_;
  mutable std::mutex mu_;
  std::deque<DropRecord> ring_;                      // GUARDED_BY(mu_)
  std::unordered_map<std::string, uint64_t> flows_;  // flow key -> seq of its record; GUARDED_BY(mu_)
  std::map<std::pair<std::string, std::string>, uint64_t> by_reason_ns_;  // GUARDED_BY(mu_)
  uint64_t next_seq_ = 1;                            // GUARDED_BY(mu_)
};

// Prometheus text for the drop records: weft_drop_records_total,
// weft_dropped_packets_recorded_total{reason,namespace},
// weft_drop_log_overruns_total, weft_drop_log_up.
std::string RenderDropMetrics(const DropLog& log, uint64_t overruns, bool up);

}  // namespace weft::policy
