#include "agent/drops.h"

#include <chrono>
#include <optional>

#include "base/log.h"
#include "policy/netpol_model.h"
#include "sys/netlink.h"
#include "sys/nflog.h"

namespace weft::agent {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

DropRecorder::DropRecorder(policy::NetpolController* netpol, size_t capacity) : netpol_(netpol), log_(capacity) {}

DropRecorder::~DropRecorder() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void DropRecorder::Start() {
  thread_ = std::thread([this] { Loop(); });
}

// The pod address routed out of the interface a guard drop came in on (the
// node routes each pod address to its host veth).
std::string DropRecorder::SenderOf(uint32_t ifindex) {
  if (ifindex == 0) return "";
  auto nl = sys::Netlink::Open();
  if (!nl.ok()) return "";
  for (int family : {2 /* AF_INET */, 10 /* AF_INET6 */}) {
    auto routes = nl->ListRoutes(family);
    if (!routes.ok()) continue;
    for (const auto& r : *routes)
      if (r.oif == static_cast<int>(ifindex) && r.dst.len() == r.dst.addr().family_bits())
        return r.dst.addr().ToString();
  }
  return "";
}

void DropRecorder::Loop() {
  auto sock = sys::NflogSocket::Open(policy::netpol::kDropLogGroup);
  if (!sock.ok()) {
    WEFT_LOG(kWarn, "drop records off: cannot bind the NFLOG group", {"group", policy::netpol::kDropLogGroup},
             {"err", sock.status()});
    return;
  }
  up_ = true;
  WEFT_LOG(kInfo, "drop records on", {"group", policy::netpol::kDropLogGroup});
  auto resolve = [this](const policy::DropEvent& ev) {
    std::string sender = ev.table == "guard" ? SenderOf(ev.indev) : "";
    if (netpol_) return netpol_->DescribeDrop(ev, sender);
    policy::DropContext c;
    return c;
  };
  while (!stop_.load()) {
    uint64_t over = 0;
    auto pkts = sock->Read(200, &over);
    overruns_ += over;
    if (!pkts.ok()) {
      WEFT_LOG(kWarn, "drop records: read failed", {"err", pkts.status()});
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    int64_t now = NowMs();
    // A new policy transaction may change a flow's reason: new records.
    uint64_t epoch = netpol_ ? netpol_->metrics().syncs.load() : 0;
    for (const auto& p : *pkts)
      if (auto ev = policy::DecodeDrop(p)) log_.Add(*ev, now, resolve, epoch);
  }
  up_ = false;
}

std::string DropRecorder::Records(uint64_t since) const {
  std::string out;
  for (const auto& r : log_.Since(since)) out += policy::DropLogfmt(r) + "\n";
  return out;
}

std::string DropRecorder::Metrics() const { return policy::RenderDropMetrics(log_, overruns_.load(), up_.load()); }

}  // namespace weft::agent
