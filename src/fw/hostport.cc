#include "fw/hostport.h"

#include <algorithm>
#include <tuple>

#include "base/strings.h"
#include "fw/tool.h"
#include "sys/files.h"
#include "sys/nft_query.h"

namespace weft::fw {

namespace {

constexpr const char* kMarkHex = "0x2000";
constexpr const char* kLoopback4 = "127.0.0.0/8";

std::string Suffix(const std::string& data_dir) { return Hex(Fnv1a64(data_dir), 8); }

// "10.0.0.5:80" or "[fd00::5]:80".
std::string HostPort(const IpAddress& a, int port) {
  // Appended piecewise: `"[" + std::string&&` trips GCC 12's -Wrestrict
  // false positive at -O3 (GCC bug 105329).
  std::string s;
  if (a.is_v6()) s += '[';
  s += a.ToString();
  if (a.is_v6()) s += ']';
  s += ':';
  s += std::to_string(port);
  return s;
}

std::string Key(const HostPortRule& r) {
  return r.protocol + "/" + std::to_string(r.host_port) + "/" + r.host_ip + "/" + r.container.ToString() + "/" +
         std::to_string(r.container_port);
}

}  // namespace

std::vector<HostPortRule> Canonical(std::vector<HostPortRule> rules) {
  auto key = [](const HostPortRule& r) {
    return std::make_tuple(r.protocol, r.host_port, !r.is_v4(), r.host_ip, r.container, r.container_port);
  };
  std::sort(rules.begin(), rules.end(), [&](const HostPortRule& a, const HostPortRule& b) { return key(a) < key(b); });
  rules.erase(std::unique(rules.begin(), rules.end()), rules.end());
  return rules;
}

std::string HostPortTable(const std::string& data_dir) { return "weft-hp-" + Suffix(data_dir); }

std::string HostPortMarker(const std::vector<HostPortRule>& rules) {
  std::string k;
  for (const auto& r : Canonical(rules)) k += Key(r) + ";";
  return "weft-hp:" + Hex(Fnv1a64(k), 16);
}

size_t NftHostPortChainRules(const std::vector<HostPortRule>& rules) { return 2 * Canonical(rules).size(); }

std::string NftHostPortRuleComment(const HostPortRule& r) { return "weft-hp:" + Hex(Fnv1a64(Key(r)), 12); }

std::vector<NftChainRule> NftHostPortChain(const std::vector<HostPortRule>& in) {
  std::vector<NftChainRule> out;
  const std::string mark = " meta mark set meta mark | " + std::string(kMarkHex);
  for (const auto& r : Canonical(in)) {
    const std::string ip = r.is_v4() ? "ip" : "ip6";
    std::string match = r.host_ip.empty() ? std::string("meta nfproto ") + (r.is_v4() ? "ipv4" : "ipv6")
                                          : ip + " daddr " + r.host_ip;
    match += " " + r.protocol + " dport " + std::to_string(r.host_port);
    std::string sources = r.container.Masked().ToString();
    if (r.is_v4()) sources = "{ " + sources + ", " + kLoopback4 + " }";
    const std::string c = NftHostPortRuleComment(r);
    // The mark must come first: the DNAT rule ends the chain for the packet.
    out.push_back({c + ":m", match + " " + ip + " saddr " + sources + mark});
    out.push_back({c + ":d", match + " dnat " + ip + " to " + HostPort(r.container.addr(), r.container_port)});
  }
  return out;
}

std::string RenderNftHostPorts(const std::string& table, const std::vector<HostPortRule>& rules) {
  std::string s = "table inet " + table + "\ndelete table inet " + table + "\n";
  if (Canonical(rules).empty()) return s;
  const std::string base = std::string(" comment \"") + kNftHostPortBase + "\"";
  s += "table inet " + table + " {\n";
  s += "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n";
  s += "    fib daddr type local jump hostports" + base + "\n  }\n";
  s += "  chain output {\n    type nat hook output priority -100; policy accept;\n";
  s += "    fib daddr type local jump hostports" + base + "\n  }\n";
  s += "  chain hostports {\n";
  for (const auto& r : NftHostPortChain(rules)) s += "    " + r.text + " comment \"" + r.comment + "\"\n";
  s += "  }\n";
  s += "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  s += "    meta mark & " + std::string(kMarkHex) + " == " + kMarkHex + " masquerade" + base + "\n  }\n";
  s += "  chain localhost-guard {\n    type filter hook input priority filter; policy accept;\n";
  s += "    iifname != \"lo\" ip daddr " + std::string(kLoopback4) + " ct state != { established, related } drop" +
       base + "\n  }\n";
  s += "}\n";
  return s;
}

bool NftHostPortBaseInPlace(const std::vector<sys::NftRuleInfo>& have) {
  int base = 0;
  for (const auto& r : have)
    if (r.chain != "hostports") {
      if (r.comment != kNftHostPortBase) return false;
      ++base;
    }
  return base == 4;  // prerouting, output, postrouting, localhost-guard
}

std::string RenderNftHostPortDiff(const std::string& table, const std::vector<HostPortRule>& want,
                                  const std::vector<sys::NftRuleInfo>& have) {
  const std::vector<NftChainRule> desired = NftHostPortChain(want);
  // A mapping is intact when its ":m" and ":d" rules are each there exactly
  // once, in that order. Anything else of it is deleted and re-added whole.
  std::vector<const sys::NftRuleInfo*> chain;
  for (const auto& r : have)
    if (r.chain == "hostports") chain.push_back(&r);
  auto positions = [&](const std::string& comment) {
    std::vector<size_t> at;
    for (size_t i = 0; i < chain.size(); ++i)
      if (chain[i]->comment == comment) at.push_back(i);
    return at;
  };
  std::vector<std::string> keep, add;
  for (size_t i = 0; i + 1 < desired.size(); i += 2) {
    auto m = positions(desired[i].comment), d = positions(desired[i + 1].comment);
    if (m.size() == 1 && d.size() == 1 && m[0] < d[0]) {
      keep.push_back(desired[i].comment);
      keep.push_back(desired[i + 1].comment);
    } else {
      add.push_back("add rule inet " + table + " hostports " + desired[i].text + " comment \"" +
                    desired[i].comment + "\"");
      add.push_back("add rule inet " + table + " hostports " + desired[i + 1].text + " comment \"" +
                    desired[i + 1].comment + "\"");
    }
  }
  std::string s;
  for (const auto* r : chain)
    if (std::find(keep.begin(), keep.end(), r->comment) == keep.end())
      s += "delete rule inet " + table + " hostports handle " + std::to_string(r->handle) + "\n";
  for (const auto& a : add) s += a + "\n";
  return s;
}

IptablesHostPortChains IptablesHostPortChainNames(const std::string& data_dir) {
  std::string x = Suffix(data_dir);
  return {"WEFT-HP-" + x, "WEFT-HP-MASQ-" + x, "WEFT-HP-LO-" + x};  // <= 21 chars
}

std::vector<IptablesLine> IptablesHostPortRules(const std::string& data_dir, const std::vector<HostPortRule>& in,
                                                bool v6) {
  auto all = Canonical(in);
  std::vector<HostPortRule> rules;
  for (const auto& r : all)
    if (r.is_v4() != v6) rules.push_back(r);
  std::vector<IptablesLine> out;
  if (rules.empty()) return out;
  auto ch = IptablesHostPortChainNames(data_dir);
  // The marker covers both families so one hash describes the whole state.
  const std::string c = " -m comment --comment " + HostPortMarker(all);
  const std::string mark = " -j MARK --set-xmark " + std::string(kMarkHex) + "/" + kMarkHex;
  for (const auto& r : rules) {
    std::string match = "-A " + ch.dnat;
    if (!r.host_ip.empty()) match += " -d " + r.host_ip + (v6 ? "/128" : "/32");
    match += " -p " + r.protocol + " -m " + r.protocol + " --dport " + std::to_string(r.host_port);
    out.push_back({"nat", match + " -s " + r.container.Masked().ToString() + c + mark});
    if (!v6) out.push_back({"nat", match + " -s " + kLoopback4 + c + mark});
    out.push_back({"nat", match + c + " -j DNAT --to-destination " + HostPort(r.container.addr(), r.container_port)});
  }
  out.push_back({"nat", "-A " + ch.masq + " -m mark --mark " + kMarkHex + "/" + kMarkHex + c + " -j MASQUERADE"});
  if (!v6)
    out.push_back({"filter", "-A " + ch.guard + " -d " + kLoopback4 + " ! -i lo -m conntrack ! --ctstate " +
                                 "RELATED,ESTABLISHED" + c + " -j DROP"});
  return out;
}

std::vector<IptablesLine> IptablesHostPortJumps(const std::string& data_dir, bool v6) {
  auto ch = IptablesHostPortChainNames(data_dir);
  const std::string c = " -m comment --comment weft-hostports";
  std::vector<IptablesLine> out = {
      {"nat", "-A PREROUTING -m addrtype --dst-type LOCAL" + c + " -j " + ch.dnat},
      {"nat", "-A OUTPUT -m addrtype --dst-type LOCAL" + c + " -j " + ch.dnat},
      {"nat", "-A POSTROUTING" + c + " -j " + ch.masq},
  };
  if (!v6) out.push_back({"filter", "-A INPUT" + c + " -j " + ch.guard});
  return out;
}

std::string RenderIptablesHostPorts(const std::string& data_dir, const std::vector<HostPortRule>& rules, bool v6,
                                    const std::vector<IptablesLine>& jumps, bool remove) {
  auto ch = IptablesHostPortChainNames(data_dir);
  auto lines = remove ? std::vector<IptablesLine>{} : IptablesHostPortRules(data_dir, rules, v6);
  std::string s;
  for (const char* table : {"nat", "filter"}) {
    std::vector<std::string> chains;
    if (std::string(table) == "nat") {
      chains = {ch.dnat, ch.masq};
    } else if (!v6) {
      chains = {ch.guard};
    } else {
      continue;
    }
    s += std::string("*") + table + "\n";
    for (const auto& c : chains) s += ":" + c + " - [0:0]\n";  // declaring flushes it
    for (const auto& l : lines)
      if (l.table == table) s += l.line + "\n";
    for (const auto& j : jumps) {
      if (j.table != table) continue;
      s += (remove ? "-D" + j.line.substr(2) : j.line) + "\n";
    }
    if (remove)
      for (const auto& c : chains) s += "-X " + c + "\n";
    s += "COMMIT\n";
  }
  return s;
}

namespace {

class NftHostPorts : public HostPortFirewall {
 public:
  explicit NftHostPorts(std::string data_dir) : data_dir_(std::move(data_dir)), table_(HostPortTable(data_dir_)) {}

  // Level-triggered, but incremental: the common ADD appends two rules and
  // deletes nothing (deleting nf_tables objects stalls the deleting process
  // for milliseconds when it exits). The table is built whole only the first
  // time, when its base chains were tampered with, or removed when no
  // mapping is left.
  Status Sync(const HostPortSource& source) override {
    WEFT_ASSIGN_OR_RETURN(auto want, source());
    WEFT_ASSIGN_OR_RETURN(std::string script, Plan(want));
    if (script.empty()) return Status::Ok();
    WEFT_ASSIGN_OR_RETURN(auto lock, sys::FileLock::Acquire(data_dir_ + "/firewall.lock"));
    WEFT_ASSIGN_OR_RETURN(want, source());  // under the lock: includes every committed row
    WEFT_ASSIGN_OR_RETURN(script, Plan(want));
    if (script.empty()) return Status::Ok();
    WEFT_ASSIGN_OR_RETURN(auto r, RunTool("nft", {"-f", "-"}, script));
    if (r.exit_code != 0) return ToolError("nft: update hostPort table " + table_, r);
    return Status::Ok();
  }

 private:
  // The nft script that makes the kernel match `want` ("" when it does).
  Result<std::string> Plan(const std::vector<HostPortRule>& want) {
    WEFT_ASSIGN_OR_RETURN(auto have, sys::NftRules(sys::NftFamily::kInet, table_));
    if (Canonical(want).empty()) return have.empty() ? std::string() : RenderNftHostPorts(table_, want);
    if (!NftHostPortBaseInPlace(have)) return RenderNftHostPorts(table_, want);
    return RenderNftHostPortDiff(table_, want, have);
  }
  std::string data_dir_, table_;
};

class IptablesHostPorts : public HostPortFirewall {
 public:
  explicit IptablesHostPorts(std::string data_dir) : data_dir_(std::move(data_dir)) {}

  Status Sync(const HostPortSource& source) override {
    // The iptables backend already pays for iptables-save per family, so it
    // takes the lock first: one consistent read of the database for both.
    WEFT_ASSIGN_OR_RETURN(auto lock, sys::FileLock::Acquire(data_dir_ + "/firewall.lock"));
    WEFT_ASSIGN_OR_RETURN(auto want, source());
    for (bool v6 : {false, true}) {
      WEFT_ASSIGN_OR_RETURN(auto state, Read(want, v6));
      if (state.in_place) continue;
      bool remove = IptablesHostPortRules(data_dir_, want, v6).empty();
      const auto& jumps = remove ? state.present_jumps : state.missing_jumps;
      std::string tool = v6 ? "ip6tables-restore" : "iptables-restore";
      WEFT_ASSIGN_OR_RETURN(auto r, RunTool(tool, {"-w", "--noflush"},
                                            RenderIptablesHostPorts(data_dir_, want, v6, jumps, remove)));
      if (r.exit_code != 0) return ToolError(tool + ": install hostPort chains", r);
    }
    return Status::Ok();
  }

 private:
  struct State {
    bool in_place = true;
    std::vector<IptablesLine> missing_jumps, present_jumps;
  };

  Result<State> Read(const std::vector<HostPortRule>& want, bool v6) {
    std::string tool = v6 ? "ip6tables-save" : "iptables-save";
    WEFT_ASSIGN_OR_RETURN(auto r, RunTool(tool, {}, ""));
    if (r.exit_code != 0) return ToolError(tool, r);
    auto ch = IptablesHostPortChainNames(data_dir_);
    std::vector<std::string> have;
    for (auto l : Split(r.out, '\n')) have.emplace_back(Trim(l));
    auto ours = [&](const std::string& l) {
      for (const auto& c : {ch.dnat, ch.masq, ch.guard})
        if (StartsWith(l, "-A " + c + " ")) return true;
      return false;
    };
    auto want_lines = IptablesHostPortRules(data_dir_, want, v6);
    std::string marker = HostPortMarker(want);
    State st;
    size_t count = 0;
    bool chains_exist = false;
    for (const auto& l : have) {
      if (StartsWith(l, ":" + ch.dnat + " ")) chains_exist = true;
      if (!ours(l)) continue;
      ++count;
      if (l.find(marker) == std::string::npos) st.in_place = false;
    }
    if (count != want_lines.size()) st.in_place = false;
    for (const auto& j : IptablesHostPortJumps(data_dir_, v6)) {
      // iptables-save prints the same spec we add, modulo spacing.
      bool present = std::find(have.begin(), have.end(), j.line) != have.end();
      (present ? st.present_jumps : st.missing_jumps).push_back(j);
    }
    if (want_lines.empty()) {
      if (!st.present_jumps.empty() || chains_exist) st.in_place = false;
    } else if (!st.missing_jumps.empty()) {
      st.in_place = false;
    }
    return st;
  }

  std::string data_dir_;
};

}  // namespace

std::unique_ptr<HostPortFirewall> NewNftHostPorts(std::string data_dir) {
  return std::make_unique<NftHostPorts>(std::move(data_dir));
}
std::unique_ptr<HostPortFirewall> NewIptablesHostPorts(std::string data_dir) {
  return std::make_unique<IptablesHostPorts>(std::move(data_dir));
}

Status FlushUdpConntrack(const std::vector<HostPortRule>& rules) {
  std::vector<std::pair<int, bool>> done;
  for (const auto& r : Canonical(rules)) {
    if (r.protocol != "udp") continue;
    std::pair<int, bool> k{r.host_port, r.is_v4()};
    if (std::find(done.begin(), done.end(), k) != done.end()) continue;
    done.push_back(k);
    auto res = RunTool("conntrack", {"-D", "-f", r.is_v4() ? "ipv4" : "ipv6", "-p", "udp", "--orig-port-dst",
                                     std::to_string(r.host_port)},
                       "");
    // Exit 1 with "0 flow entries" is the common case; a missing tool means
    // there is nothing we can flush. Neither should fail the pod.
    if (!res.ok()) return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace weft::fw
