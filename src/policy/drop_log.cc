#include "policy/drop_log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <ctime>

#include "base/log.h"

namespace weft::policy {
namespace {

std::string Addr(int af, const char* p) {
  char buf[INET6_ADDRSTRLEN];
  return ::inet_ntop(af, p, buf, sizeof buf) ? std::string(buf) : std::string();
}

uint16_t Be16(const std::string& s, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(s[at]) << 8) | static_cast<uint8_t>(s[at + 1]));
}

std::string ProtoName(uint8_t proto, bool v6) {
  switch (proto) {
    case IPPROTO_TCP: return "tcp";
    case IPPROTO_UDP: return "udp";
    case IPPROTO_SCTP: return "sctp";
    case IPPROTO_ICMP: return "icmp";
    case IPPROTO_ICMPV6: return "icmpv6";
    default: return v6 ? "ipv6-" + std::to_string(proto) : "ip-" + std::to_string(proto);
  }
}

// Ports of a transport header at `l4` (TCP, UDP, SCTP share the layout of
// their first four bytes).
void Ports(const std::string& pl, size_t l4, uint8_t proto, DropEvent* ev) {
  if (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_SCTP) return;
  if (pl.size() < l4 + 4) return;
  ev->sport = Be16(pl, l4);
  ev->dport = Be16(pl, l4 + 2);
}

void DecodeIp4(const std::string& pl, DropEvent* ev) {
  if (pl.size() < 20 || (static_cast<uint8_t>(pl[0]) >> 4) != 4) return;
  size_t ihl = (static_cast<uint8_t>(pl[0]) & 0x0f) * 4u;
  uint8_t proto = static_cast<uint8_t>(pl[9]);
  ev->src = Addr(AF_INET, pl.data() + 12);
  ev->dst = Addr(AF_INET, pl.data() + 16);
  ev->proto = ProtoName(proto, false);
  // A fragment after the first carries no ports.
  if ((Be16(pl, 6) & 0x1fff) == 0) Ports(pl, ihl, proto, ev);
}

void DecodeIp6(const std::string& pl, DropEvent* ev) {
  if (pl.size() < 40 || (static_cast<uint8_t>(pl[0]) >> 4) != 6) return;
  ev->src = Addr(AF_INET6, pl.data() + 8);
  ev->dst = Addr(AF_INET6, pl.data() + 24);
  uint8_t next = static_cast<uint8_t>(pl[6]);
  size_t at = 40;
  // Hop-by-hop, routing and destination options, each a length in 8-octet units.
  for (int i = 0; i < 4 && (next == 0 || next == 43 || next == 60) && pl.size() >= at + 8; ++i) {
    uint8_t len = static_cast<uint8_t>(pl[at + 1]);
    next = static_cast<uint8_t>(pl[at]);
    at += (len + 1u) * 8u;
  }
  ev->proto = ProtoName(next, true);
  Ports(pl, at, next, ev);
}

void DecodeArp(const std::string& pl, DropEvent* ev) {
  ev->proto = "arp";
  // Ethernet/IPv4 ARP: sender protocol address at 14, target at 24.
  if (pl.size() < 28 || Be16(pl, 0) != 1 || Be16(pl, 2) != 0x0800) return;
  ev->src = Addr(AF_INET, pl.data() + 14);
  ev->dst = Addr(AF_INET, pl.data() + 24);
}

std::string Iso8601(int64_t ms) {
  time_t s = static_cast<time_t>(ms / 1000);
  tm t{};
  gmtime_r(&s, &t);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

std::optional<DropEvent> DecodeDrop(const sys::NflogPacket& p) {
  DropEvent ev;
  if (p.prefix.rfind("weft-np ", 0) == 0) {
    ev.table = "netpol";
    ev.kind = p.prefix.substr(8);
  } else if (p.prefix.rfind("weft-guard ", 0) == 0) {
    ev.table = "guard";
    ev.kind = p.prefix.substr(11);
  } else {
    return std::nullopt;
  }
  while (!ev.kind.empty() && ev.kind.back() == ' ') ev.kind.pop_back();
  ev.indev = p.indev;
  uint16_t ethertype = p.hw_protocol;
  if (p.family == AF_INET) ethertype = 0x0800;
  else if (p.family == AF_INET6) ethertype = 0x86dd;
  if (ethertype == 0x0800) DecodeIp4(p.payload, &ev);
  else if (ethertype == 0x86dd) DecodeIp6(p.payload, &ev);
  else if (ethertype == 0x0806) DecodeArp(p.payload, &ev);
  else ev.proto = "ethertype-0x" + [&] {
    char b[8];
    std::snprintf(b, sizeof b, "%04x", ethertype);
    return std::string(b);
  }();
  return ev;
}

std::string DropLogfmt(const DropRecord& r) {
  using log::Field;
  std::vector<Field> f;
  f.emplace_back("ts", Iso8601(r.first_ms));
  f.emplace_back("seq", r.seq);
  f.emplace_back("src", r.ctx.src_pod.empty() ? "-" : r.ctx.src_pod);
  f.emplace_back("src_ip", r.ev.src.empty() ? "-" : r.ev.src);
  f.emplace_back("dst", r.ctx.dst_pod.empty() ? "-" : r.ctx.dst_pod);
  f.emplace_back("dst_ip", r.ev.dst.empty() ? "-" : r.ev.dst);
  f.emplace_back("proto", r.ev.proto.empty() ? "-" : r.ev.proto);
  if (r.ev.dport) f.emplace_back("port", r.ev.dport);
  f.emplace_back("direction", r.direction);
  if (r.reply) f.emplace_back("reply", true);
  f.emplace_back("reason", r.reason);
  if (r.reason == "policy") {
    f.emplace_back("policies", r.ctx.policies.empty() ? "-" : Join(r.ctx.policies));
  } else if (r.reason == "pending-pod") {
    f.emplace_back("detail", "a pod of a namespace with policies that weftd does not know yet");
  } else if (r.reason == "spoofed-mac") {
    f.emplace_back("detail", "source MAC or frame type not the pod's");
  } else {
    f.emplace_back("detail", "source address not the pod's");
  }
  if (r.ev.table == "guard" && r.ev.indev) f.emplace_back("ifindex", r.ev.indev);
  f.emplace_back("packets", r.packets);
  f.emplace_back("last", Iso8601(r.last_ms));
  std::string out;
  log::AppendFields(&out, f);
  return out.empty() ? out : out.substr(1);  // AppendFields leads with a space
}

std::string DropLog::FlowKey(const DropEvent& ev, uint64_t epoch) {
  return std::to_string(epoch) + "|" + ev.table + "|" + ev.kind + "|" + ev.src + "|" + ev.dst + "|" + ev.proto + "|" + std::to_string(ev.dport) +
         "|" + (ev.table == "guard" ? std::to_string(ev.indev) : "");
}

void DropLog::Add(const DropEvent& ev, int64_t now_ms, const Resolver& resolve, uint64_t epoch) {
  std::string key = FlowKey(ev, epoch);
  std::lock_guard lock(mu_);
  if (auto it = flows_.find(key); it != flows_.end() && !ring_.empty() && it->second >= ring_.front().seq) {
    DropRecord& r = ring_[it->second - ring_.front().seq];
    if (now_ms - r.last_ms <= idle_ms_) {
      r.packets++;
      r.last_ms = now_ms;
      by_reason_ns_[{r.reason, r.ctx.ns}]++;
      return;
    }
  }
  DropRecord r;
  r.seq = next_seq_++;
  r.first_ms = r.last_ms = now_ms;
  r.packets = 1;
  r.ev = ev;
  r.epoch = epoch;
  if (resolve) r.ctx = resolve(ev);
  if (ev.table == "netpol") {
    bool pending = ev.kind.rfind("pending-", 0) == 0;
    r.reason = pending ? "pending-pod" : "policy";
    r.direction = ev.kind == "in" || ev.kind == "rin" || ev.kind == "pending-in" ? "ingress" : "egress";
    r.reply = ev.kind == "rin" || ev.kind == "reg";
  } else {
    r.reason = ev.kind == "spoofed-mac" ? "spoofed-mac" : "spoofed-source";
    r.direction = "egress";
  }
  by_reason_ns_[{r.reason, r.ctx.ns}]++;
  flows_[key] = r.seq;
  ring_.push_back(std::move(r));
  while (ring_.size() > capacity_) {
    const DropRecord& old = ring_.front();
    auto it = flows_.find(FlowKey(old.ev, old.epoch));
    if (it != flows_.end() && it->second == old.seq) flows_.erase(it);
    ring_.pop_front();
  }
}

std::vector<DropRecord> DropLog::Since(uint64_t after, size_t max) const {
  std::lock_guard lock(mu_);
  std::vector<DropRecord> out;
  for (const auto& r : ring_) {
    if (r.seq <= after) continue;
    if (out.size() >= max) break;
    out.push_back(r);
  }
  return out;
}

std::map<std::pair<std::string, std::string>, uint64_t> DropLog::PacketsByReasonAndNamespace() const {
  std::lock_guard lock(mu_);
  return by_reason_ns_;
}

uint64_t DropLog::records() const {
  std::lock_guard lock(mu_);
  return next_seq_ - 1;
}

std::string RenderDropMetrics(const DropLog& log, uint64_t overruns, bool up) {
  std::string out;
  out += "# HELP weft_drop_log_up 1 while weftd reads the drop records (NFLOG group bound)\n";
  out += "# TYPE weft_drop_log_up gauge\n";
  out += std::string("weft_drop_log_up ") + (up ? "1" : "0") + "\n";
  out += "# HELP weft_drop_records_total Drop records (flows) started\n";
  out += "# TYPE weft_drop_records_total counter\n";
  out += "weft_drop_records_total " + std::to_string(log.records()) + "\n";
  out += "# HELP weft_dropped_packets_recorded_total Dropped packets that reached weftd's drop records (rate-limited "
         "per node), by reason and namespace of the pod judged\n";
  out += "# TYPE weft_dropped_packets_recorded_total counter\n";
  for (const auto& [k, n] : log.PacketsByReasonAndNamespace()) {
    // Namespaces are DNS labels: nothing to escape ("" when no pod was judged).
    out += "weft_dropped_packets_recorded_total{reason=\"" + k.first + "\",namespace=\"" + k.second + "\"} " +
           std::to_string(n) + "\n";
  }
  out += "# HELP weft_drop_log_overruns_total Times the kernel dropped drop records because weftd's socket was full\n";
  out += "# TYPE weft_drop_log_overruns_total counter\n";
  out += "weft_drop_log_overruns_total " + std::to_string(overruns) + "\n";
  return out;
}

}  // namespace weft::policy
