#include "fw/masquerade.h"

#include <algorithm>
#include <chrono>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter_ipv4.h>

#include "base/strings.h"
#include "fw/tool.h"
#include "sys/files.h"
#include "sys/nft_build.h"
#include "sys/nft_kernel.h"
#include "sys/nft_query.h"
#include "sys/nft_udata.h"

namespace weft::fw {

namespace {

std::vector<IpPrefix> Family(const std::vector<IpPrefix>& in, bool v6) {
  std::vector<IpPrefix> out;
  for (const auto& p : in)
    if (p.is_v4() != v6) out.push_back(p);
  return out;
}

std::vector<IpPrefix> NoMasq(const MasqueradeSpec& spec) {
  std::vector<IpPrefix> all = spec.no_masq;
  all.insert(all.end(), spec.pod_ranges.begin(), spec.pod_ranges.end());
  return Normalize(all);
}

std::string Join(const std::vector<IpPrefix>& ps) {
  std::string s;
  for (const auto& p : ps) s += (s.empty() ? "" : ", ") + p.ToString();
  return s;
}

}  // namespace

std::vector<IpPrefix> Normalize(std::vector<IpPrefix> prefixes) {
  for (auto& p : prefixes) p = p.Masked();
  std::sort(prefixes.begin(), prefixes.end(), [](const IpPrefix& a, const IpPrefix& b) {
    if (a.is_v4() != b.is_v4()) return a.is_v4();
    if (a.len() != b.len()) return a.len() < b.len();
    return a.addr() < b.addr();
  });
  std::vector<IpPrefix> out;
  for (const auto& p : prefixes) {
    bool covered = false;
    for (const auto& q : out)
      if (q.is_v4() == p.is_v4() && q.len() <= p.len() && q.Contains(p.addr())) covered = true;
    if (!covered) out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const IpPrefix& a, const IpPrefix& b) {
    if (a.is_v4() != b.is_v4()) return a.is_v4();
    return a.addr() < b.addr();
  });
  return out;
}

std::string NftTableName(const std::string& network) { return "weft-" + network; }

std::string MasqMarker(const MasqueradeSpec& spec) {
  std::string key = spec.network + "|" + Join(Normalize(spec.pod_ranges)) + "|" + Join(NoMasq(spec));
  return "weft-masq:" + Hex(Fnv1a64(key), 16);
}


sys::nft::Transaction NftMasqueradeTransaction(const MasqueradeSpec& spec) {
  namespace nft = sys::nft;
  const std::string t = NftTableName(spec.network);
  nft::Transaction tx(nft::Family::kInet, t);
  // Created if missing, then deleted and made again: one replacement in one
  // kernel transaction, whatever was there.
  tx.Add(nft::Table{t}).Delete(nft::Table{t}).Add(nft::Table{t});
  std::vector<nft::Rule> rules;
  for (bool v6 : {false, true}) {
    auto src = Family(Normalize(spec.pod_ranges), v6);
    if (src.empty()) continue;
    auto dst = Family(NoMasq(spec), v6);
    const std::string f = v6 ? "6" : "4";
    const uint32_t type = v6 ? nft::kTypeIpv6 : nft::kTypeIpv4;
    const uint32_t len = v6 ? 16 : 4;
    for (const auto& [name, prefixes] : {std::pair{"pods" + f, src}, std::pair{"nomasq" + f, dst}}) {
      tx.Add(nft::Set{.name = name, .flags = NFT_SET_INTERVAL, .key_type = type, .key_len = len,
                      .userdata = nft::SetUserdata(nft::ByteOrder::kBig)});
      tx.Add(nft::Elements{name, nft::IntervalElements(prefixes)});
    }
    // ip saddr @pods4 ip daddr != @nomasq4 masquerade
    const uint32_t saddr = v6 ? 8 : 12, daddr = v6 ? 24 : 16;
    rules.push_back(nft::Rule{
        .chain = "postrouting",
        .exprs = nft::Then(nft::MatchNfproto(v6 ? NFPROTO_IPV6 : NFPROTO_IPV4),
                           {nft::Payload{NFT_PAYLOAD_NETWORK_HEADER, saddr, len, NFT_REG_1},
                            nft::Lookup{.set = "pods" + f, .sreg = NFT_REG_1},
                            nft::Payload{NFT_PAYLOAD_NETWORK_HEADER, daddr, len, NFT_REG_1},
                            nft::Lookup{.set = "nomasq" + f, .sreg = NFT_REG_1, .invert = true},
                            nft::Nat{.masq = true}}),
        .comment = MasqMarker(spec)});
  }
  tx.Add(nft::Chain{"postrouting", nft::Hook{.num = NF_INET_POST_ROUTING, .priority = NF_IP_PRI_NAT_SRC,
                                             .type = "nat", .policy = NF_ACCEPT}});
  for (auto& r : rules) tx.Add(std::move(r));
  return tx;
}

sys::nft::Transaction NftMasqueradeRemoval(const MasqueradeSpec& spec) {
  const std::string t = NftTableName(spec.network);
  sys::nft::Transaction tx(sys::nft::Family::kInet, t);
  tx.Add(sys::nft::Table{t}).Delete(sys::nft::Table{t});
  return tx;
}

std::string IptablesChain(const std::string& network) {
  return "WEFT-MASQ-" + Hex(Fnv1a64(network), 8);  // 18 chars
}

std::vector<std::string> ExpectedIptablesLines(const MasqueradeSpec& spec, bool v6) {
  std::string chain = IptablesChain(spec.network);
  std::string marker = MasqMarker(spec);
  std::vector<std::string> lines;
  for (const auto& d : Family(NoMasq(spec), v6))
    lines.push_back("-A " + chain + " -d " + d.ToString() + " -j RETURN");
  lines.push_back("-A " + chain + " -j MASQUERADE");
  for (const auto& src : Family(Normalize(spec.pod_ranges), v6))
    lines.push_back("-A POSTROUTING -s " + src.ToString() + " -m comment --comment \"" + marker +
                    "\" -j " + chain);
  return lines;
}

std::string RenderIptablesMasquerade(const MasqueradeSpec& spec, bool v6, bool with_jumps) {
  std::string chain = IptablesChain(spec.network);
  std::string s = "*nat\n:" + chain + " - [0:0]\n";
  for (const auto& l : ExpectedIptablesLines(spec, v6)) {
    bool jump = StartsWith(l, "-A POSTROUTING");
    if (!jump || with_jumps) s += l + "\n";
  }
  s += "COMMIT\n";
  return s;
}

namespace {

class NftFirewall : public Firewall {
 public:
  explicit NftFirewall(std::string lock_dir) : lock_dir_(std::move(lock_dir)) {}

  Status EnsureMasquerade(const MasqueradeSpec& spec) override {
    WEFT_ASSIGN_OR_RETURN(bool ok, InPlace(spec));
    if (ok) return Status::Ok();
    WEFT_ASSIGN_OR_RETURN(auto lock, sys::FileLock::Acquire(lock_dir_ + "/firewall.lock"));
    WEFT_ASSIGN_OR_RETURN(ok, InPlace(spec));  // another process may have won
    if (ok) return Status::Ok();
    return sys::nft::Kernel().Apply(NftMasqueradeTransaction(spec)).Prefix("install masquerade table " +
                                                                          NftTableName(spec.network));
  }

  Status RemoveMasquerade(const MasqueradeSpec& spec) override {
    return sys::nft::Kernel().Apply(NftMasqueradeRemoval(spec)).Prefix("delete table " + NftTableName(spec.network));
  }

 private:
  Result<bool> InPlace(const MasqueradeSpec& spec) {
    WEFT_ASSIGN_OR_RETURN(auto comments,
                          sys::NftRuleComments(sys::NftFamily::kInet, NftTableName(spec.network), "postrouting"));
    size_t want = 0;
    for (bool v6 : {false, true})
      if (!Family(spec.pod_ranges, v6).empty()) ++want;
    std::string marker = MasqMarker(spec);
    if (comments.size() != want) return false;
    for (const auto& c : comments)
      if (c != marker) return false;
    return true;
  }
  std::string lock_dir_;
};

class IptablesFirewall : public Firewall {
 public:
  explicit IptablesFirewall(std::string lock_dir) : lock_dir_(std::move(lock_dir)) {}

  Status EnsureMasquerade(const MasqueradeSpec& spec) override {
    for (bool v6 : {false, true}) {
      if (Family(spec.pod_ranges, v6).empty()) continue;
      WEFT_ASSIGN_OR_RETURN(auto missing, MissingJumps(spec, v6));
      if (missing.ok_all) continue;
      WEFT_ASSIGN_OR_RETURN(auto lock, sys::FileLock::Acquire(lock_dir_ + "/firewall.lock"));
      WEFT_ASSIGN_OR_RETURN(missing, MissingJumps(spec, v6));
      if (missing.ok_all) continue;
      // Declaring the chain flushes and refills it; jumps are added only when
      // absent so they are never duplicated.
      std::string input = RenderIptablesMasquerade(spec, v6, false);
      input.resize(input.size() - std::string("COMMIT\n").size());
      for (const auto& j : missing.jumps) input += j + "\n";
      input += "COMMIT\n";
      std::string tool = v6 ? "ip6tables-restore" : "iptables-restore";
      WEFT_ASSIGN_OR_RETURN(auto r, RunTool(tool, {"-w", "--noflush"}, input));
      if (r.exit_code != 0) return ToolError(tool + ": install masquerade chain", r);
    }
    return Status::Ok();
  }

  Status RemoveMasquerade(const MasqueradeSpec& spec) override {
    std::string chain = IptablesChain(spec.network);
    for (bool v6 : {false, true}) {
      if (Family(spec.pod_ranges, v6).empty()) continue;
      std::string tool = v6 ? "ip6tables" : "iptables";
      for (const auto& l : ExpectedIptablesLines(spec, v6)) {
        if (!StartsWith(l, "-A POSTROUTING")) continue;
        // "-A POSTROUTING ..." -> delete the same rule (ignore absence).
        std::vector<std::string> args = {"-w", "-t", "nat", "-D", "POSTROUTING"};
        auto parts = Split(l.substr(15), ' ');
        std::string joined;
        bool in_quote = false;
        for (auto p : parts) {
          std::string s(p);
          if (in_quote) {
            joined += " " + s;
            if (!s.empty() && s.back() == '"') {
              in_quote = false;
              args.push_back(joined.substr(1, joined.size() - 2));
            }
            continue;
          }
          if (!s.empty() && s.front() == '"') {
            if (s.size() > 1 && s.back() == '"') {
              args.push_back(s.substr(1, s.size() - 2));
            } else {
              in_quote = true;
              joined = s;
            }
            continue;
          }
          args.push_back(s);
        }
        (void)RunTool(tool, args, "");
      }
      (void)RunTool(tool, {"-w", "-t", "nat", "-F", chain}, "");
      (void)RunTool(tool, {"-w", "-t", "nat", "-X", chain}, "");
    }
    return Status::Ok();
  }

 private:
  struct Missing {
    bool ok_all = true;
    std::vector<std::string> jumps;
  };

  Result<Missing> MissingJumps(const MasqueradeSpec& spec, bool v6) {
    std::string tool = v6 ? "ip6tables-save" : "iptables-save";
    WEFT_ASSIGN_OR_RETURN(auto r, RunTool(tool, {"-t", "nat"}, ""));
    if (r.exit_code != 0) return ToolError(tool, r);
    std::vector<std::string> have;
    for (auto l : Split(r.out, '\n')) have.emplace_back(Trim(l));
    std::string chain_prefix = "-A " + IptablesChain(spec.network) + " ";
    std::vector<std::string> chain_have;
    for (const auto& l : have)
      if (StartsWith(l, chain_prefix)) chain_have.push_back(l);
    Missing m;
    std::vector<std::string> chain_want;
    for (const auto& l : ExpectedIptablesLines(spec, v6)) {
      if (StartsWith(l, "-A POSTROUTING")) {
        if (std::find(have.begin(), have.end(), l) == have.end()) {
          m.jumps.push_back(l);
          m.ok_all = false;
        }
      } else {
        chain_want.push_back(l);
      }
    }
    if (chain_have != chain_want) m.ok_all = false;
    return m;
  }

  std::string lock_dir_;
};

}  // namespace

std::unique_ptr<Firewall> NewNftFirewall(std::string lock_dir) {
  return std::make_unique<NftFirewall>(std::move(lock_dir));
}
std::unique_ptr<Firewall> NewIptablesFirewall(std::string lock_dir) {
  return std::make_unique<IptablesFirewall>(std::move(lock_dir));
}

}  // namespace weft::fw
