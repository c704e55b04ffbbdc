#include "agent/etcd.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/backoff.h"
#include "base/json_util.h"
#include "base/log.h"
#include "base/strings.h"
#include "overlay/families.h"
#include "sys/files.h"

namespace weft::agent {

using nlohmann::json;

std::vector<IpPrefix> NetworkConfig::Networks() const {
  std::vector<IpPrefix> out;
  if (network) out.push_back(*network);
  if (network6) out.push_back(*network6);
  return out;
}

Result<NetworkConfig> ParseNetworkConfig(std::string_view value) {
  return ParseJsonObject<NetworkConfig>(value, "network config", [](const json& j) -> Result<NetworkConfig> {
    auto invalid = [](const std::string& msg) {
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "network config: " + msg);
    };
    NetworkConfig c;
    if (j.contains("network")) {
      auto net = IpPrefix::Parse(j.value("network", std::string()), /*strict=*/true);
      if (!net || !net->is_v4()) return invalid("\"network\" must be an IPv4 CIDR");
      c.network = *net;
      auto len = JsonIntIn(j, "subnetLen", 24, net->len(), 30);
      if (!len) return invalid("\"subnetLen\" must be an integer between " + std::to_string(net->len()) + " and 30");
      c.subnet_len = static_cast<int>(*len);
    }
    if (j.contains("ipv6Network")) {
      auto net = IpPrefix::Parse(j.value("ipv6Network", std::string()), /*strict=*/true);
      if (!net || net->is_v4()) return invalid("\"ipv6Network\" must be an IPv6 CIDR");
      c.network6 = *net;
      auto len = JsonIntIn(j, "ipv6SubnetLen", 64, net->len(), 126);
      if (!len)
        return invalid("\"ipv6SubnetLen\" must be an integer between " + std::to_string(net->len()) + " and 126");
      c.subnet_len6 = static_cast<int>(*len);
    }
    if (!c.network && !c.network6) return invalid("neither \"network\" (IPv4) nor \"ipv6Network\" (IPv6) is set");
    return c;
  });
}

std::string EncodeNetworkConfig(const NetworkConfig& c) {
  json j = json::object();
  if (c.network) {
    j["network"] = c.network->ToString();
    j["subnetLen"] = c.subnet_len;
  }
  if (c.network6) {
    j["ipv6Network"] = c.network6->ToString();
    j["ipv6SubnetLen"] = c.subnet_len6;
  }
  return j.dump();
}

namespace {

std::string SubnetDir(const std::string& prefix, bool v6) { return prefix + (v6 ? "/subnets6/" : "/subnets/"); }

}  // namespace

std::string SubnetKey(const std::string& prefix, const IpPrefix& subnet) {
  return SubnetDir(prefix, !subnet.is_v4()) + subnet.addr().ToString() + "-" + std::to_string(subnet.len());
}

std::optional<IpPrefix> SubnetFromKey(const std::string& prefix, std::string_view key) {
  for (bool v6 : {false, true}) {
    std::string head = SubnetDir(prefix, v6);
    if (!StartsWith(key, head)) continue;
    std::string s(key.substr(head.size()));
    size_t dash = s.rfind('-');
    if (dash == std::string::npos) return std::nullopt;
    s[dash] = '/';
    auto p = IpPrefix::Parse(s, /*strict=*/true);
    if (!p || p->is_v4() == v6) return std::nullopt;
    return p;
  }
  return std::nullopt;
}

std::string SubnetsKeyPrefix(const std::string& prefix) { return prefix + "/subnets"; }

std::string EncodeSubnetValue(const overlay::LocalNode& self) {
  json j{{"node", self.name},
         {"hostIP", self.host_ip.ToString()},
         {"vtepMAC", self.vtep_mac},
         {"backend", overlay::BackendName(self.backend)}};
  if (self.host_ip6) j["hostIP6"] = self.host_ip6->ToString();
  if (!self.host_mac.empty()) j["hostMAC"] = self.host_mac;
  return j.dump();
}

Result<overlay::NodeInfo> DecodeSubnet(const std::string& prefix, const etcd::EtcdKv& kv) {
  auto subnet = SubnetFromKey(prefix, kv.key);
  if (!subnet)
    return Status::Error(Reason::kMalformed, Domain::kNone,
                         "subnet key " + kv.key + " is not <prefix>/subnets/<ipv4>-<len> or <prefix>/subnets6/<ipv6>-<len>");
  return ParseJsonObject<overlay::NodeInfo>(kv.value, "subnet " + kv.key, [&](const json& j) -> Result<overlay::NodeInfo> {
    overlay::NodeInfo n;
    n.name = j.value("node", std::string());
    if (n.name.empty()) return Status::Error(Reason::kMalformed, Domain::kNone, "subnet " + kv.key + " names no node");
    n.pod_cidrs = {*subnet};
    n.host_ip = IpAddress::Parse(j.value("hostIP", std::string()));
    n.host_ip6 = IpAddress::Parse(j.value("hostIP6", std::string()));
    if (n.host_ip6 && !n.host_ip6->is_v6()) n.host_ip6.reset();
    n.vtep_mac = j.value("vtepMAC", std::string());
    n.host_mac = j.value("hostMAC", std::string());
    n.backend = j.value("backend", std::string());
    return n;
  });
}

namespace {

// The i-th subnet of length `len` in `network` (REQUIRES: i < 2^(len - network.len())).
IpPrefix NthSubnet(const IpPrefix& network, int len, uint64_t i) {
  const IpAddress base = network.Masked().addr();
  uint8_t raw[16];
  std::memcpy(raw, base.bytes(), base.size());
  for (int b = 0; b < 64 && (i >> b) != 0; ++b) {
    if (((i >> b) & 1) == 0) continue;
    int pos = len - 1 - b;  // bit index from the most significant
    raw[pos / 8] |= static_cast<uint8_t>(0x80 >> (pos % 8));
  }
  return IpPrefix(IpAddress::FromBytes(base.is_v6(), raw), len);
}

}  // namespace

std::optional<IpPrefix> PickSubnet(const IpPrefix& network, int subnet_len, const std::vector<IpPrefix>& taken,
                                   const std::optional<IpPrefix>& preferred) {
  if (subnet_len < network.len() || subnet_len > network.addr().family_bits()) return std::nullopt;
  auto free = [&](const IpPrefix& p) {
    if (p.is_v4() != network.is_v4() || !network.Contains(p.addr()) || p.len() != subnet_len) return false;
    for (const auto& t : taken)
      if (t.is_v4() == p.is_v4() && t.Overlaps(p)) return false;
    return true;
  };
  if (preferred && free(preferred->Masked())) return preferred->Masked();
  int bits = subnet_len - network.len();
  uint64_t count = bits >= 32 ? (1ull << 32) : (1ull << bits);
  for (uint64_t i = 0; i < count; ++i) {
    IpPrefix p = NthSubnet(network, subnet_len, i);
    if (free(p)) return p;
  }
  return std::nullopt;
}

std::vector<std::string> SubnetRecords::Put(const std::string& key, overlay::NodeInfo record, int64_t mod_revision) {
  std::vector<std::string> changed = Delete(key);
  std::string name = record.name;
  by_key_[key] = Record{std::move(record), mod_revision};
  keys_by_node_[name].insert(key);
  if (changed.empty() || changed[0] != name) changed.push_back(name);
  return changed;
}

std::vector<std::string> SubnetRecords::Delete(const std::string& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return {};
  std::string name = it->second.info.name;
  by_key_.erase(it);
  auto k = keys_by_node_.find(name);
  if (k != keys_by_node_.end()) {
    k->second.erase(key);
    if (k->second.empty()) keys_by_node_.erase(k);
  }
  return {name};
}

void SubnetRecords::Clear() {
  by_key_.clear();
  keys_by_node_.clear();
}

std::optional<overlay::NodeInfo> SubnetRecords::Node(const std::string& name) const {
  auto k = keys_by_node_.find(name);
  if (k == keys_by_node_.end()) return std::nullopt;
  const Record* latest = nullptr;
  const Record* per_family[2] = {nullptr, nullptr};  // IPv4, IPv6
  for (const auto& key : k->second) {
    const Record& r = by_key_.at(key);
    if (!latest || r.mod_revision > latest->mod_revision) latest = &r;
    const Record*& f = per_family[r.info.pod_cidrs.empty() || r.info.pod_cidrs[0].is_v4() ? 0 : 1];
    if (!f || r.mod_revision > f->mod_revision) f = &r;
  }
  overlay::NodeInfo n = latest->info;
  n.pod_cidrs.clear();
  for (const Record* f : per_family)
    if (f) n.pod_cidrs.insert(n.pod_cidrs.end(), f->info.pod_cidrs.begin(), f->info.pod_cidrs.end());
  return n;
}

overlay::PeerMap SubnetRecords::Peers(const std::string& except) const {
  overlay::PeerMap out;
  for (const auto& [name, keys] : keys_by_node_)
    if (name != except)
      if (auto n = Node(name)) out.emplace(name, std::move(*n));
  return out;
}

// --- The claim ------------------------------------------------------------------

namespace {

// The subnet records sorted for a claim: the node's own record per family
// (the first of each; with `must_keep`, only those subnets count as its own)
// and every other subnet, taken (undecodable records included).
struct SortedRecords {
  const etcd::EtcdKv* mine[2] = {nullptr, nullptr};  // IPv4, IPv6
  std::vector<IpPrefix> taken;
};

SortedRecords SortRecords(const std::string& prefix, const std::string& self_name, const std::vector<etcd::EtcdKv>& records,
                          const std::vector<IpPrefix>& must_keep) {
  SortedRecords out;
  for (const auto& kv : records) {
    auto n = DecodeSubnet(prefix, kv);
    if (!n.ok()) {
      if (auto sub = SubnetFromKey(prefix, kv.key)) out.taken.push_back(*sub);
      continue;
    }
    const IpPrefix& sub = n->pod_cidrs[0];
    const etcd::EtcdKv*& slot = out.mine[sub.is_v4() ? 0 : 1];
    bool keep_ok = must_keep.empty() || std::find(must_keep.begin(), must_keep.end(), sub) != must_keep.end();
    if (n->name == self_name && !slot && keep_ok) {
      slot = &kv;
      continue;
    }
    out.taken.push_back(sub);
  }
  return out;
}

}  // namespace

Attempt<SubnetClaim> PlanClaim(const std::string& prefix, const std::string& self_name, const std::string& value,
                               const NetworkConfig& cfg, const std::vector<etcd::EtcdKv>& records,
                               const std::vector<IpPrefix>& must_keep, const std::vector<IpPrefix>& remembered,
                               int64_t lease) {
  const SortedRecords sorted = SortRecords(prefix, self_name, records, must_keep);
  struct Family {
    bool v6;
    IpPrefix network;
    int len;
  };
  std::vector<Family> families;
  if (cfg.network) families.push_back({false, *cfg.network, cfg.subnet_len});
  if (cfg.network6) families.push_back({true, *cfg.network6, cfg.subnet_len6});
  SubnetClaim claim;
  auto put = [&](const std::string& key) { claim.txn.success.push_back({etcd::EtcdOp::Kind::kPut, key, value, lease}); };
  for (const Family& f : families) {
    if (const etcd::EtcdKv* own = sorted.mine[f.v6 ? 1 : 0]) {
      // Ours from before a restart: move it onto the new lease, provided
      // nobody touched it since we read it.
      claim.subnets.push_back(*SubnetFromKey(prefix, own->key));
      claim.txn.compare.push_back({own->key, etcd::EtcdCompare::Target::kMod, own->mod_revision});
      put(own->key);
      if (own->lease != 0 && own->lease != lease) claim.old_leases.push_back(own->lease);
      claim.reused = true;
      continue;
    }
    std::optional<IpPrefix> keep = overlay::OfFamily(must_keep, f.v6);
    auto pick = PickSubnet(f.network, f.len, sorted.taken, keep ? keep : overlay::OfFamily(remembered, f.v6));
    if (!pick)
      return Attempt<SubnetClaim>::Fail(
          Why::kNoSubnet, Status::Error(Reason::kExhausted, Domain::kControlPlane,
                                        "no free /" + std::to_string(f.len) + " left in " + f.network.ToString()));
    if (keep && !(*pick == *keep))
      return Attempt<SubnetClaim>::Fail(
          Why::kNoSubnet, Status::Error(Reason::kExhausted, Domain::kControlPlane,
                                        "this node's subnet " + keep->ToString() +
                                            " was taken by another node while its lease was lost"));
    claim.subnets.push_back(*pick);
    std::string key = SubnetKey(prefix, *pick);
    claim.txn.compare.push_back({key, etcd::EtcdCompare::Target::kCreate, 0});
    put(key);
  }
  return claim;
}

// --- The control plane ------------------------------------------------------------

namespace {

constexpr auto kRelistPeriod = std::chrono::minutes(10);
constexpr int kClaimAttempts = 20;

// One record put or deleted; with `peers`, the nodes it touches are updated
// there too (all but `self`).
void ApplyRecord(const std::string& prefix, const std::string& self, const etcd::EtcdKv& kv, bool is_delete,
                 SubnetRecords* records, overlay::PeerMap* peers) {
  std::vector<std::string> touched;
  if (is_delete) {
    touched = records->Delete(kv.key);
  } else {
    auto n = DecodeSubnet(prefix, kv);
    if (!n.ok()) {
      WEFT_LOG(kWarn, "ignoring subnet record", {"err", n.status()});
      touched = records->Delete(kv.key);
    } else {
      touched = records->Put(kv.key, std::move(n).value(), kv.mod_revision);
    }
  }
  if (!peers) return;
  for (const auto& name : touched) {
    if (name == self) continue;
    if (auto n = records->Node(name)) (*peers)[name] = std::move(*n);
    else peers->erase(name);
  }
}

}  // namespace

// The subnet records as a list-watch source: the revision is the resume
// point, a canceled or compacted watch (and, every kRelistPeriod, a healthy
// one: a compaction at exactly the resume revision drops its tombstones
// without cancelling the watch) means re-list. Each list and each watch
// message (one atomic batch) is published to the store whole.
class EtcdControlPlane::PeerSource : public ListWatchSource {
 public:
  PeerSource(EtcdControlPlane& cp, etcd::EtcdRegistry& registry, PeerStore& store)
      : cp_(cp),
        registry_(registry),
        store_(store),
        prefix_(SubnetsKeyPrefix(cp.opts_.prefix)),
        end_(etcd::PrefixRangeEnd(prefix_)) {}

  Status List(const std::atomic<bool>&) override {
    WEFT_ASSIGN_OR_RETURN(auto r, registry_.Range(prefix_, end_));
    records_.Clear();
    for (const auto& kv : r.kvs) ApplyRecord(cp_.opts_.prefix, cp_.self_.name, kv, false, &records_, nullptr);
    peers_ = records_.Peers(cp_.self_.name);
    rev_ = r.revision;
    store_.Replace(peers_);
    listed_at_ = cp_.now_();
    WEFT_LOG(kInfo, "listed peers", {"backend", "etcd"}, {"peers", peers_.size()}, {"revision", rev_});
    return Status::Ok();
  }

  WatchEnd Watch(const std::atomic<bool>& stop) override {
    WatchEnd out;
    bool expired = false;
    WEFT_LOG(kDebug, "etcd watch", {"start_revision", rev_ + 1});
    Status st = registry_.Watch(
        prefix_, end_, rev_ + 1,
        [&](const etcd::EtcdWatchMessage& m) {
          WEFT_LOG(kDebug, "etcd watch message", {"created", m.created}, {"canceled", m.canceled},
                   {"events", m.events.size()}, {"revision", m.revision});
          if (m.compact_revision > 0 || m.canceled) {
            expired = true;
            out.why = Status::Error(Reason::kNotFound, Domain::kControlPlane,
                                    "watch canceled: " + (m.cancel_reason.empty() ? "no reason" : m.cancel_reason),
                                    "compact_revision=" + std::to_string(m.compact_revision));
            return false;
          }
          if (m.created) out.progressed = true;
          if (cp_.now_() - listed_at_ > kRelistPeriod) {
            expired = true;
            out.why = Status::Error(Reason::kMismatch, Domain::kControlPlane, "periodic re-list");
            return false;
          }
          if (m.events.empty()) return !stop.load();
          out.progressed = true;
          for (const auto& e : m.events) {
            ApplyRecord(cp_.opts_.prefix, cp_.self_.name, e.kv, e.is_delete, &records_, &peers_);
            rev_ = std::max(rev_, e.kv.mod_revision);
            cp_.stats_.events++;
          }
          store_.Replace(peers_);
          return !stop.load();
        },
        stop);
    if (stop.load()) {
      out.end = End::kStopped;
    } else if (expired) {
      out.end = End::kExpired;
    } else if (!st.ok()) {
      out.end = End::kFailed;
      out.why = st;
    } else {
      out.end = End::kClosed;
    }
    return out;
  }

  std::string ResumePoint() const override { return std::to_string(rev_ + 1); }

 private:
  EtcdControlPlane& cp_;
  etcd::EtcdRegistry& registry_;
  PeerStore& store_;
  const std::string prefix_;
  const std::string end_;
  int64_t rev_ = 0;       // the revision the peers are complete at
  overlay::PeerMap peers_;         // by node name
  SubnetRecords records_; // what `peers_` is made of
  std::chrono::steady_clock::time_point listed_at_;
};

EtcdControlPlane::EtcdControlPlane(EtcdOptions opts, RegistryFactory registry)
    : opts_(std::move(opts)),
      make_registry_(std::move(registry)),
      registry_(make_registry_(&health_)),
      sleep_(SleepJitteredUnlessStopped),
      now_([] { return std::chrono::steady_clock::now(); }) {}

Result<std::vector<IpPrefix>> EtcdControlPlane::Register(const overlay::LocalNode& self, const std::atomic<bool>& stop) {
  self_ = self;
  Backoff backoff;
  for (;;) {
    auto r = TryRegister(*registry_, {});
    if (r.ok()) {
      std::lock_guard lock(mu_);
      subnets_ = *r;
      return *r;
    }
    if (!r.retryable()) return r.status();
    stats_.errors++;
    WEFT_LOG(kWarn, "etcd registration failed; retrying", {"err", r.status()});
    if (!sleep_(backoff.Next(), stop))
      return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "stopped before registering");
  }
}

std::vector<IpPrefix> EtcdControlPlane::ClusterCidrs() const {
  std::lock_guard lock(mu_);
  if (!config_) return {};
  return config_->Networks();
}

Status EtcdControlPlane::Run(PeerStore& store, const std::atomic<bool>& stop) {
  std::atomic<bool> halt{false};  // set once KeepAlive returns: stopped, or the node lost its subnets
  std::thread watch([&] { WatchPeers(store, halt); });
  Status st = KeepAlive(stop);
  halt = true;
  watch.join();
  return st;
}

Status EtcdControlPlane::Leave() {
  std::string prefix = SubnetsKeyPrefix(opts_.prefix);
  WEFT_ASSIGN_OR_RETURN(auto range, registry_->Range(prefix, etcd::PrefixRangeEnd(prefix)));
  // All of them in one transaction: peers see the node go at once, not
  // one family after the other.
  etcd::EtcdTxn txn;
  std::set<int64_t> leases;
  std::string keys;
  for (const auto& kv : range.kvs) {
    auto n = DecodeSubnet(opts_.prefix, kv);
    if (!n.ok() || n->name != self_name()) continue;
    txn.success.push_back({etcd::EtcdOp::Kind::kDelete, kv.key});
    if (kv.lease != 0) leases.insert(kv.lease);
    keys += (keys.empty() ? "" : ",") + kv.key;
  }
  if (!txn.success.empty()) {
    WEFT_ASSIGN_OR_RETURN(bool done, registry_->Txn(txn));
    if (!done)
      return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                           "etcd did not apply the transaction deleting " + keys);
    WEFT_LOG(kInfo, "withdrew subnets", {"keys", keys});
  }
  for (int64_t lease : leases) (void)registry_->LeaseRevoke(lease);
  if (int64_t lease = lease_.exchange(0); lease != 0) (void)registry_->LeaseRevoke(lease);
  if (!opts_.state_file.empty()) (void)sys::RemoveFile(opts_.state_file);
  return Status::Ok();
}

Attempt<NetworkConfig> EtcdControlPlane::EnsureConfig(etcd::EtcdRegistry& r) {
  std::string key = opts_.prefix + "/config";
  if (!opts_.cluster_cidrs.empty()) {
    NetworkConfig want;
    for (const auto& c : opts_.cluster_cidrs) (c.is_v4() ? want.network : want.network6) = c.Masked();
    want.subnet_len = opts_.subnet_len;
    want.subnet_len6 = opts_.subnet_len6;
    etcd::EtcdTxn txn{{{key, etcd::EtcdCompare::Target::kCreate, 0}}, {{etcd::EtcdOp::Kind::kPut, key, EncodeNetworkConfig(want)}}};
    WEFT_ASSIGN_OR_RETURN(bool created, r.Txn(txn));
    if (created) WEFT_LOG(kInfo, "wrote network config", {"key", key});
  }
  WEFT_ASSIGN_OR_RETURN(auto range, r.Range(key, ""));
  if (range.kvs.empty())
    return Attempt<NetworkConfig>::Fail(
        Why::kBadConfig, Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                                       "etcd has no " + key + " and no --cluster-cidr was given"));
  auto cfg = ParseNetworkConfig(range.kvs[0].value);
  if (!cfg.ok()) {
    // A config that says something wrong ends registration; one that cannot
    // be read (bad JSON) may be mid-rewrite: try again.
    if (cfg.status().IsInvalidArgument()) return Attempt<NetworkConfig>::Fail(Why::kBadConfig, cfg.status());
    return cfg.status();
  }
  if (!opts_.cluster_cidrs.empty()) {
    std::vector<IpPrefix> given;
    for (bool v6 : {false, true})
      for (const auto& c : opts_.cluster_cidrs)
        if (c.is_v4() != v6) given.push_back(c.Masked());
    if (given != cfg->Networks())
      WEFT_LOG(kWarn, "--cluster-cidr differs from etcd's network config; using etcd's",
               {"etcd", overlay::JoinPrefixes(cfg->Networks())}, {"flag", overlay::JoinPrefixes(given)});
  }
  return std::move(cfg).value();
}

std::vector<IpPrefix> EtcdControlPlane::Remembered() const {
  std::vector<IpPrefix> out;
  if (opts_.state_file.empty()) return out;
  auto text = sys::ReadFile(opts_.state_file, 256);
  if (!text.ok()) return out;
  for (auto line : Split(Trim(*text), '\n'))
    if (auto p = IpPrefix::Parse(Trim(line), true)) out.push_back(*p);
  return out;
}

void EtcdControlPlane::Remember(const std::vector<IpPrefix>& subnets) const {
  if (opts_.state_file.empty()) return;
  std::string lines;
  for (const auto& sub : subnets) lines += sub.ToString() + "\n";
  (void)sys::MkdirAll(opts_.state_file.substr(0, opts_.state_file.rfind('/')), 0755);
  Status st = sys::WriteFileAtomic(opts_.state_file, lines, 0644);
  if (!st.ok()) WEFT_LOG(kWarn, "cannot remember the subnets", {"err", st});
}

// Claims a subnet per family of the config under a fresh lease, all in one
// transaction (PlanClaim), reading again after a lost race. `must_keep`: the
// subnets this node already uses (after a lost lease).
Attempt<std::vector<IpPrefix>> EtcdControlPlane::TryRegister(etcd::EtcdRegistry& r, const std::vector<IpPrefix>& must_keep) {
  auto cfg = EnsureConfig(r);
  if (!cfg.ok()) return cfg.failure();
  {
    std::lock_guard lock(mu_);
    config_ = *cfg;
  }
  WEFT_ASSIGN_OR_RETURN(int64_t lease, r.LeaseGrant(opts_.lease_ttl));
  const std::vector<IpPrefix> remembered = must_keep.empty() ? Remembered() : must_keep;
  const std::string prefix = SubnetsKeyPrefix(opts_.prefix);
  const std::string value = EncodeSubnetValue(self_);
  for (int attempt = 0; attempt < kClaimAttempts; ++attempt) {
    WEFT_ASSIGN_OR_RETURN(auto range, r.Range(prefix, etcd::PrefixRangeEnd(prefix)));
    auto claim = PlanClaim(opts_.prefix, self_.name, value, *cfg, range.kvs, must_keep, remembered, lease);
    if (!claim.ok()) return claim.failure();
    WEFT_ASSIGN_OR_RETURN(bool won, r.Txn(claim->txn));
    if (!won) continue;  // lost a race: read again
    for (int64_t old : claim->old_leases) (void)r.LeaseRevoke(old);
    if (int64_t old = lease_.exchange(lease); old != 0 && old != lease) (void)r.LeaseRevoke(old);
    Remember(claim->subnets);
    WEFT_LOG(kInfo, "claimed subnet", {"subnets", overlay::JoinPrefixes(claim->subnets)}, {"lease", lease},
             {"reused", claim->reused});
    return std::move(claim->subnets);
  }
  (void)r.LeaseRevoke(lease);
  return Status::Error(Reason::kBusy, Domain::kControlPlane, "subnet claim kept losing races");
}

Attempt<bool> EtcdControlPlane::Renew(etcd::EtcdRegistry& r) {
  WEFT_ASSIGN_OR_RETURN(int64_t ttl, r.LeaseKeepAlive(lease_.load()));
  if (ttl > 0) return true;
  // The lease expired (we were away longer than its TTL): claim the same
  // subnets again under a new lease.
  WEFT_LOG(kWarn, "etcd lease expired; re-registering", {"lease", lease_.load()});
  std::vector<IpPrefix> keep;
  {
    std::lock_guard lock(mu_);
    keep = subnets_;
  }
  auto claimed = TryRegister(r, keep);
  if (!claimed.ok()) return claimed.failure();
  return true;
}

Status EtcdControlPlane::KeepAlive(const std::atomic<bool>& stop) {
  auto registry = make_registry_(&health_);
  const auto interval = std::chrono::milliseconds(std::max<int64_t>(opts_.lease_ttl * 1000 / 3, 300));
  Backoff backoff(std::min<std::chrono::milliseconds>(interval, kMaxBackoff));
  while (sleep_(interval, stop)) {
    for (;;) {
      auto renewed = Renew(*registry);
      if (renewed.ok()) {
        backoff.Reset();
        break;
      }
      // Only losing the subnets is final; a bad config read meanwhile is retried.
      if (renewed.failure().why == Why::kNoSubnet) return renewed.status();
      stats_.errors++;
      WEFT_LOG(kWarn, "etcd lease renewal failed", {"err", renewed.status()});
      if (!sleep_(backoff.Next(), stop)) return Status::Ok();
    }
  }
  return Status::Ok();
}

void EtcdControlPlane::WatchPeers(PeerStore& store, const std::atomic<bool>& stop) {
  auto registry = make_registry_(&health_);
  PeerSource source(*this, *registry, store);
  RunListWatch(source, "etcd subnets", stats_, sleep_, stop);
}

std::unique_ptr<ControlPlane> NewEtcdControlPlane(EtcdOptions opts) {
  std::vector<std::string> endpoints = opts.endpoints;
  sys::TlsOptions tls = opts.tls;
  return std::make_unique<EtcdControlPlane>(std::move(opts), [endpoints, tls](AuthHealth* health) {
    return std::make_unique<etcd::EtcdClient>(endpoints, tls, health);
  });
}

}  // namespace weft::agent
