#include "fw/guard_counters.h"

#include "sys/nft_kernel.h"

namespace weft::fw {

void AddGuardCounters(GuardMode mode, const std::vector<sys::nft::NamedCounter>& counters, GuardCounters* out) {
  const bool routed = mode == GuardMode::kRouted;
  (routed ? out->routed_installed : out->bridge_installed) = true;
  for (const auto& c : counters) {
    if (c.name == "spoofed4") (routed ? out->routed4 : out->bridge4) = c.packets;
    if (c.name == "spoofed6") (routed ? out->routed6 : out->bridge6) = c.packets;
    if (!routed && c.name == "spoofed-mac") out->bridge_mac = c.packets;
  }
}

Result<GuardCounters> ReadGuardCounters() {
  GuardCounters out;
  for (GuardMode mode : {GuardMode::kRouted, GuardMode::kBridge}) {
    auto counters = sys::nft::Kernel().Counters(GuardFamily(mode), GuardTable(mode));
    if (!counters.ok() && counters.status().reason() == Reason::kNotFound) continue;  // not installed
    if (!counters.ok()) return counters.status();
    AddGuardCounters(mode, *counters, &out);
  }
  return out;
}

std::string RenderGuardMetrics(const GuardCounters& c) {
  std::string out;
  out += "# HELP weft_source_guard_installed 1 when the source guard's table of the mode is in the kernel.\n"
         "# TYPE weft_source_guard_installed gauge\n";
  out += "weft_source_guard_installed{mode=\"routed\"} " + std::string(c.routed_installed ? "1" : "0") + "\n";
  out += "weft_source_guard_installed{mode=\"bridge\"} " + std::string(c.bridge_installed ? "1" : "0") + "\n";
  out += "# HELP weft_source_guard_dropped_packets_total Packets from pod interfaces the source guard dropped: "
         "their source address (or MAC) was not the pod's.\n"
         "# TYPE weft_source_guard_dropped_packets_total counter\n";
  auto line = [&](const char* mode, const char* kind, uint64_t v) {
    out += std::string("weft_source_guard_dropped_packets_total{mode=\"") + mode + "\",kind=\"" + kind + "\"} " +
           std::to_string(v) + "\n";
  };
  line("routed", "ipv4", c.routed4);
  line("routed", "ipv6", c.routed6);
  line("bridge", "ipv4", c.bridge4);
  line("bridge", "ipv6", c.bridge6);
  line("bridge", "mac", c.bridge_mac);
  return out;
}

}  // namespace weft::fw
