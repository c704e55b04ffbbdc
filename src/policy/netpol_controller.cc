#include "policy/netpol_controller.h"

#include <malloc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <ctime>
#include <map>
#include <set>
#include <string_view>
#include <thread>

#include "base/list_watch.h"
#include "base/log.h"
#include "fw/source_guard.h"
#include "kube/informer.h"
#include "sys/conntrack.h"
#include "sys/files.h"
#include "sys/nft_query.h"
#include "policy/cnp_status.h"
#include "sys/nft_kernel.h"
#include "sys/nft_fake.h"
#include "sys/nft_json.h"
#include "sys/nft_render.h"

// The input hook's link-local rule names the pods' host veths as the plugin
// creates them ("<prefix>*").
static_assert(
    [] {
      std::string_view pat = weft::policy::netpol::kPodPortPattern, pre = weft::fw::kPodPortPrefix;
      return pat.size() == pre.size() + 1 && pat.substr(0, pre.size()) == pre && pat.back() == '*';
    }(),
    "netpol::kPodPortPattern must be fw::kPodPortPrefix followed by *");

namespace weft::policy {
namespace {

using Clock = std::chrono::steady_clock;


class SystemNetpolKernel : public NetpolKernel {
 public:
  // In-process over nfnetlink (sys/nft_kernel.h): no fork of weftd, no
  // script to parse, no read-back of the table; one transaction, all or
  // nothing. The socket stays open until the next batch: closing an
  // nfnetlink socket right after a commit that deleted elements waits for
  // an RCU grace period (~10 ms), which an event would wait for.
  Status Apply(const sys::nft::Transaction& tx) override {
    Status st = sys::nft::Kernel().Apply(tx, &keep_, [this](uint32_t portid) {
      sent_[next_sent_.fetch_add(1) % sent_.size()].store(portid);
    });
    if (!st.ok()) return st.WithPrefix(std::string("apply table inet ") + netpol::kTable);
    return Status::Ok();
  }

  Result<std::map<std::string, size_t>> ChainRuleCounts() override {
    WEFT_ASSIGN_OR_RETURN(auto rules, sys::NftRules(sys::NftFamily::kInet, netpol::kTable));
    std::map<std::string, size_t> out;
    for (const auto& r : rules) out[r.chain]++;
    return out;
  }

  Result<std::pair<uint64_t, uint64_t>> DropCounters() override {
    // One netlink dump of the table's counters (sys/nft_kernel.h): up to
    // 0.4.0 libnftables' `list counters` and its JSON, before that an
    // `nft -j` child from weftd.
    WEFT_ASSIGN_OR_RETURN(auto counters, sys::nft::Kernel().Counters(sys::nft::Family::kInet, netpol::kTable));
    std::pair<uint64_t, uint64_t> out{0, 0};
    for (const auto& c : counters) {
      if (c.name == "drop-ingress") out.first = c.packets;
      if (c.name == "drop-egress") out.second = c.packets;
    }
    return out;
  }

  // One ctnetlink dump per family and an update per matching entry
  // (sys/conntrack.h), in weftd's own netns, the node's.
  Status MarkConntrack(const std::vector<std::string>& ips, uint32_t mark) override {
    return sys::ConntrackSetMark(ips, mark).status();
  }

  Status WriteNamespaces(const std::string& path, const std::string& content) override {
    auto slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) WEFT_RETURN_IF_ERROR(sys::MkdirAll(path.substr(0, slash), 0755));
    return sys::WriteFileAtomic(path, content, 0644);
  }

  bool SentBy(uint32_t portid) const override {
    if (portid == 0) return false;
    for (const auto& p : sent_)
      if (p.load() == portid) return true;
    return false;
  }

 private:
  UniqueFd keep_;  // Apply's last socket
  std::array<std::atomic<uint32_t>, 8> sent_{};  // the port ids of Apply's last sockets
  std::atomic<size_t> next_sent_{0};
};

// metav1.Time as the API writes it: "2026-11-27T06:00:00Z".
std::string NowRfc3339() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t UsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count();
}

}  // namespace

std::unique_ptr<NetpolKernel> NewNetpolKernel() { return std::make_unique<SystemNetpolKernel>(); }

struct NetpolController::Impl {
  Impl(NetpolOptions o, NetpolController::ApiFactory a, std::unique_ptr<NetpolKernel> k, NetpolMetrics& m)
      : opts(std::move(o)),
        apis(std::move(a)),
        kernel(std::move(k)),
        metrics(m),
        pods(netpol::DecodeSharedPod, &notifier),
        namespaces(netpol::DecodeNamespace, &notifier),
        policies(netpol::DecodePolicy, &notifier),
        cnps(netpol::DecodeClusterPolicy, &notifier),
        nodes(netpol::DecodeNodeInfo, &notifier),
        engine(netpol::EngineOptions{opts.node_name, opts.pending_group}),
        status_writer(
            [this](const std::string& name) {
              auto cur = cnps.Get(name);
              return cur ? netpol::ConditionPatch(*cur, NowRfc3339()) : std::string();
            },
            [this](const std::string& name, const std::string& patch) {
              if (!status_api) status_api = apis();  // the writer's thread only
              return status_api->Patch(std::string(netpol::kCnpPath) + "/" + name + "/status",
                                       "application/merge-patch+json", patch);
            },
            CnpStatusWriter::Counters{[this] { metrics.cnp_status_writes++; }, [this] { metrics.cnp_status_errors++; }},
            opts.cnp_status_grace) {}

  // Feeds what the caches drained into the engine. REQUIRES: engine_mu held.
  size_t Drain() {
    size_t n = 0;
    engine.BeginBatch();  // each local pod a ClusterNetworkPolicy change touches: rebuilt once
    struct EndBatch {
      netpol::Engine& e;
      ~EndBatch() { e.EndBatch(); }
    } end_batch{engine};
    for (auto& d : namespaces.Drain()) {
      ++n;
      if (d.object) engine.UpsertNamespace(*d.object);
      else engine.RemoveNamespace(d.key);
    }
    for (auto& d : nodes.Drain()) {
      ++n;
      if (d.object) engine.UpsertNode(*d.object);
      else engine.RemoveNode(d.key);
    }
    // Pods before policies: a new policy fills its sets from the pods of
    // the namespaces it can reach, where a new pod is checked against every
    // policy that can see it — at start (10,000 pods, 1,000 policies) the
    // first order is the cheap one.
    for (auto& d : pods.Drain()) {
      ++n;
      if (d.object) engine.UpsertPod(d.object->pod);
      else engine.RemovePod(d.key);
    }
    for (auto& d : policies.Drain()) {
      ++n;
      if (d.object) engine.UpsertPolicy(*d.object);
      else engine.RemovePolicy(d.key);
    }
    for (auto& d : cnps.Drain()) {
      ++n;
      if (d.object) {
        engine.UpsertClusterPolicy(*d.object);
        status_pending.try_emplace(d.key, Clock::now());
      } else {
        engine.RemoveClusterPolicy(d.key);
        status_pending.erase(d.key);
      }
    }
    return n;
  }

  // Hands the ClusterNetworkPolicies whose rules are now in the kernel to
  // the status writer (policy/cnp_status.h), which writes their condition
  // on its own thread. REQUIRES: engine_mu held; called after a successful
  // apply.
  void WriteStatuses() {
    if (status_pending.empty()) return;
    const bool writer = engine.FirstNodeName().empty() || engine.FirstNodeName() == opts.node_name;
    status_writer.Enforced(status_pending, writer);
    status_pending.clear();
  }

  // Writes the plugin's namespaces file when its content changed.
  void SyncNamespacesFile() {
    if (opts.namespaces_file.empty()) return;
    std::string content = "# Written by weftd: the namespaces that have NetworkPolicies.\n";
    for (const auto& ns : engine.NamespacesWithPolicies()) content += ns + "\n";
    if (content == namespaces_written) return;
    Status st = kernel->WriteNamespaces(opts.namespaces_file, content);
    if (!st.ok()) {
      WEFT_LOG(kWarn, "cannot write the plugin's namespaces file", {"path", opts.namespaces_file}, {"err", st});
      return;
    }
    namespaces_written = std::move(content);
  }

  // Whether the kernel's table has the chains and rule counts the model
  // says. A table that cannot be read is not replaced on a guess.
  bool KernelMatches() {
    metrics.kernel_checks++;
    auto counts = kernel->ChainRuleCounts();
    if (!counts.ok()) {
      WEFT_LOG(kWarn, "cannot read table inet weft-netpol; integrity check skipped", {"err", counts.status()});
      return true;
    }
    std::map<std::string, size_t> want;
    for (const auto& [name, rules] : engine.desired().chains) want[name] = rules.size();
    want["forward"] = netpol::kForwardChainRules;
    want["recheck-reply"] = netpol::kRecheckChainRules;
    want["input"] = netpol::kInputChainRules;
    want["output"] = netpol::kOutputChainRules;
    for (const auto& [chain, kind] : netpol::kDropChains) want[chain] = netpol::kDropChainRules;
    return *counts == want;
  }

  // What every apply does after the kernel answered `st`: on failure the
  // engine forgets what it thinks is applied (the next pass is a full one);
  // on success it marks it, counts it and queues the tightened addresses'
  // recheck. REQUIRES: engine_mu held.
  Status Applied(const Status& st, bool full, const std::vector<std::string>& tightened, bool* applied) {
    if (!st.ok()) {
      metrics.sync_errors++;
      engine.ForgetApplied();
      return st;
    }
    engine.MarkApplied(full);
    metrics.syncs++;
    if (full) metrics.full_syncs++;
    *applied = true;
    if (opts.recheck_established && !tightened.empty()) QueueRecheck(tightened);
    return Status::Ok();
  }

  // Applies what changed: the whole table the first time (and after a
  // failure), else only the delta. REQUIRES: engine_mu held.
  Status Apply(bool* applied) {
    *applied = false;
    bool full = !engine.has_applied();
    auto tx = full ? engine.Full() : engine.Delta();
    if (!tx.ok()) return Applied(tx.status(), full, {}, applied);
    if (tx->empty()) return Status::Ok();
    std::vector<std::string> tightened = full ? std::vector<std::string>{} : engine.Tightened();
    if (full) {
      // The full replace recreates the counters: keep what they counted.
      if (auto c = kernel->DropCounters(); c.ok()) {
        base_in += c->first;
        base_eg += c->second;
      }
    }
    auto t0 = Clock::now();
    if (full && full_sync_hook) full_sync_hook(true);
    Status st = kernel->Apply(*tx);
    if (full && full_sync_hook) full_sync_hook(false);
    metrics.last_sync_us = static_cast<uint64_t>(UsSince(t0));
    if (full) {
      // The full table's objects (~tens of MB at 100,000 pods, for a
      // moment): give the heap back, applied or not.
      *tx = sys::nft::Transaction(sys::nft::Family::kInet, netpol::kTable);
      malloc_trim(0);
    }
    return Applied(st, full, tightened, applied);
  }

  // Marking conntrack entries dumps the conntrack table: it
  // runs on its own thread so the next batch of events is never held up
  // behind it. Addresses queue up (deduplicated); past kMarkAllAbove of them
  // at once, every entry of the family is marked in one call instead.
  static constexpr size_t kMarkAllAbove = 32;
  void QueueRecheck(const std::vector<std::string>& ips) {
    {
      std::lock_guard lock(recheck_mu);
      recheck_queue.insert(ips.begin(), ips.end());
    }
    recheck_cv.notify_one();
  }
  void RecheckLoop(const std::atomic<bool>& stop) {
    std::unique_lock lock(recheck_mu);
    while (!stop.load()) {
      recheck_cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return !recheck_queue.empty() || stop.load(); });
      if (recheck_queue.empty()) continue;
      std::vector<std::string> ips(recheck_queue.begin(), recheck_queue.end());
      recheck_queue.clear();
      lock.unlock();
      Status st;
      if (ips.size() > kMarkAllAbove) {
        bool v4 = false, v6 = false;
        for (const auto& ip : ips) (ip.find(':') == std::string::npos ? v4 : v6) = true;
        std::vector<std::string> all;
        if (v4) all.push_back("0.0.0.0/0");
        if (v6) all.push_back("::/0");
        st = kernel->MarkConntrack(all, netpol::kRecheckMark);
      } else {
        st = kernel->MarkConntrack(ips, netpol::kRecheckMark);
      }
      metrics.conntrack_marks += ips.size();
      if (!st.ok())
        WEFT_LOG(kWarn, "marking conntrack entries for a recheck failed", {"err", st});
      lock.lock();
    }
  }

  void UpdateGauges() {
    metrics.policies = engine.policy_count();
    metrics.pods = engine.pod_count();
    metrics.local_pods = engine.desired().sets.at("local4").elements.size() +
                         engine.desired().sets.at("local6").elements.size();
    metrics.isolated_ingress = engine.local_isolated(true);
    metrics.isolated_egress = engine.local_isolated(false);
    metrics.cluster_policies = engine.cluster_policy_count();
    metrics.nodes = engine.node_count();
    if (kube::Informer* inf = cnp_informer.load()) metrics.cnp_crd_absent = inf->absent();
  }

  void ObserveLatency(int64_t us) {
    metrics.latency_sum_us += static_cast<uint64_t>(us);
    metrics.latency_count++;
    int i = 0;
    while (i < NetpolMetrics::kBuckets && us > int64_t(NetpolMetrics::kBucketMs[i]) * 1000) ++i;
    metrics.latency_bucket[i]++;
  }

  std::thread StartInformer(const char* what, const char* path, kube::InformerHandler& h, const std::atomic<bool>& stop,
                            bool may_be_absent = false) {
    return std::thread([this, &stop, what, path, &h, may_be_absent] {
      kube::ResourceSpec spec;
      spec.what = what;
      spec.path = path;
      spec.watch_timeout_seconds = opts.watch_timeout_seconds;
      spec.may_be_absent = may_be_absent;
      spec.absent_retry = opts.cnp_absent_retry;
      kube::Informer inf(apis(), spec, h, stats);
      if (may_be_absent) cnp_informer = &inf;
      inf.Run(stop);
      if (may_be_absent) cnp_informer = nullptr;
    });
  }

  // Never apply before all three lists are complete: a partial view would
  // open what a policy closes. Returns the notifier's last value seen.
  uint64_t WaitForLists(const std::atomic<bool>& stop) {
    uint64_t seen = 0;
    while (!stop.load() && !(pods.synced() && namespaces.synced() && policies.synced() &&
                             (!opts.cluster_network_policy || (cnps.synced() && nodes.synced()))))
      seen = notifier.Wait(seen, std::chrono::milliseconds(500), stop);
    if (!stop.load()) WEFT_LOG(kInfo, "network policy: lists complete");
    return seen;
  }

  // The apply loop's timers, and whether the first sync is still to come.
  struct SyncLoop {
    Clock::time_point next_check;  // the next comparison with the kernel
    Clock::time_point retry_at = Clock::time_point::max();
    // When the heap is given back after a burst of applies (kTrimAfter
    // without one): each delta's transaction and its encoding leave free
    // chunks (up to 0.4.0 libnftables' read-back of the table for each
    // delta left ~6 MB of them after 350 events at 10,000 pods).
    Clock::time_point trim_at = Clock::time_point::max();
    bool first = true;
  };
  static constexpr std::chrono::milliseconds kTrimAfter{300};

  // One pass: the queued events into the engine, the kernel checked for
  // drift when due, the namespaces file and the ruleset applied.
  void SyncOnce(SyncLoop& loop) {
    auto woke = Clock::now();
    std::lock_guard lock(engine_mu);
    size_t changes = Drain();
    if (woke >= loop.next_check || check_soon.exchange(false)) {
      loop.next_check = woke + opts.resync;
      if (engine.has_applied() && !KernelMatches()) {
        WEFT_LOG(kWarn, "table inet weft-netpol differs from the desired ruleset; replacing it");
        metrics.kernel_repairs++;
        engine.ForgetApplied();
      }
    }
    SyncNamespacesFile();
    bool applied = false;
    Status st = Apply(&applied);
    if (!st.ok()) {
      WEFT_LOG(kWarn, "network policy apply failed; retrying with a full replace", {"err", st});
      loop.retry_at = Clock::now() + std::chrono::seconds(1);
    } else {
      loop.retry_at = Clock::time_point::max();
      Synced(loop, applied, changes, woke);
      WriteStatuses();
      if (applied) loop.trim_at = Clock::now() + kTrimAfter;
    }
    UpdateGauges();
  }

  // Gives the heap's free pages back to the kernel once the applies have
  // paused (called without engine_mu: malloc_trim takes malloc's own locks).
  static void TrimWhenQuiet(SyncLoop& loop) {
    if (Clock::now() < loop.trim_at) return;
    loop.trim_at = Clock::time_point::max();
    malloc_trim(0);
  }

  // After a successful pass: latency, the log line, and readiness once the
  // first complete lists are enforced. REQUIRES: engine_mu held.
  void Synced(SyncLoop& loop, bool applied, size_t changes, Clock::time_point woke) {
    if (applied && changes > 0 && !loop.first) ObserveLatency(UsSince(woke));
    if (applied || loop.first) {
      const log::Level level = loop.first ? log::Level::kInfo : log::Level::kDebug;
      if (level >= log::GetLevel())
        log::Write(level, "network policy synced",
                   {{"policies", engine.policy_count()}, {"pods", engine.pod_count()},
                    {"changes", changes}, {"duration_us", UsSince(woke)}});
    }
    if (loop.first) {
      metrics.ready = true;
      loop.first = false;
      malloc_trim(0);  // the lists' JSON is gone
    }
  }

  // Sleeps until an event arrives, the drift check or a retry is due, or
  // 5 s pass. Returns the notifier's value seen.
  uint64_t WaitForChange(const SyncLoop& loop, uint64_t seen, const std::atomic<bool>& stop) {
    // A burst (a Deployment's pods, a namespace's relabel) is coalesced
    // into one transaction.
    return notifier.WaitCoalesced(seen, std::min({loop.next_check, loop.retry_at, loop.trim_at}), opts.batch, stop);
  }

  NetpolOptions opts;
  NetpolController::ApiFactory apis;
  std::unique_ptr<NetpolKernel> kernel;
  NetpolMetrics& metrics;
  ControlPlaneStats stats;
  kube::ChangeNotifier notifier;
  kube::Cache<netpol::SharedPod> pods;  // the engine holds the same Pod objects
  kube::Cache<netpol::Namespace> namespaces;
  kube::Cache<netpol::Policy> policies;
  kube::Cache<netpol::ClusterPolicy> cnps;
  kube::Cache<netpol::NodeInfo> nodes;
  std::atomic<kube::Informer*> cnp_informer{nullptr};
  std::atomic<bool> check_soon{false};  // CheckKernelSoon()
  std::map<std::string, Clock::time_point> status_pending;  // CNP name -> since when its condition may be due
  std::unique_ptr<kube::KubeApi> status_api;               // the status writer's thread's
  std::mutex engine_mu;
  netpol::Engine engine;
  CnpStatusWriter status_writer;
  std::string namespaces_written;
  uint64_t base_in = 0, base_eg = 0;
  std::function<void(bool)> full_sync_hook;  // SetFullSyncHook
  std::mutex recheck_mu;
  std::condition_variable recheck_cv;
  std::set<std::string> recheck_queue;
};

NetpolController::NetpolController(NetpolOptions opts, kube::KubeEndpoint endpoint, std::unique_ptr<NetpolKernel> kernel)
    : NetpolController(std::move(opts), [endpoint] { return kube::NewKubeApi(endpoint); }, std::move(kernel)) {}

NetpolController::NetpolController(NetpolOptions opts, ApiFactory apis, std::unique_ptr<NetpolKernel> kernel)
    : impl_(std::make_unique<Impl>(std::move(opts), std::move(apis), std::move(kernel), metrics_)) {}

NetpolController::~NetpolController() = default;

ControlPlaneStats& NetpolController::stats() { return impl_->stats; }

void NetpolController::Run(const std::atomic<bool>& stop) {
  Impl& s = *impl_;
  std::vector<std::thread> threads;
  threads.push_back(s.StartInformer("namespaces", "/api/v1/namespaces", s.namespaces, stop));
  threads.push_back(s.StartInformer("networkpolicies", "/apis/networking.k8s.io/v1/networkpolicies", s.policies, stop));
  threads.push_back(s.StartInformer("pods", "/api/v1/pods", s.pods, stop));
  if (s.opts.cluster_network_policy) {
    threads.push_back(s.StartInformer("nodes", "/api/v1/nodes", s.nodes, stop));
    threads.push_back(s.StartInformer("clusternetworkpolicies", netpol::kCnpPath, s.cnps, stop, true));
  }
  threads.emplace_back([&s, &stop] { s.RecheckLoop(stop); });
  s.status_writer.Start();

  uint64_t seen = s.WaitForLists(stop);
  Impl::SyncLoop loop;
  loop.next_check = Clock::now() + s.opts.resync;
  while (!stop.load()) {
    s.SyncOnce(loop);
    const uint64_t before = seen;
    seen = s.WaitForChange(loop, seen, stop);
    if (seen == before) Impl::TrimWhenQuiet(loop);  // never ahead of an event's apply
  }
  s.notifier.Notify();
  s.recheck_cv.notify_all();
  s.status_writer.Stop();
  for (auto& t : threads) t.join();
}

std::string NetpolController::DescribeJson() {
  std::lock_guard lock(impl_->engine_mu);
  return netpol::PodPolicyViewsJson(impl_->engine.LocalPods());
}

Result<std::string> NetpolController::ExplainJson(const netpol::ExplainQuery& q) {
  std::lock_guard lock(impl_->engine_mu);
  WEFT_ASSIGN_OR_RETURN(auto e, netpol::Explain(impl_->engine, q));
  return netpol::ExplanationJson(e);
}

DropContext NetpolController::DescribeDrop(const DropEvent& ev, const std::string& sender) {
  std::lock_guard lock(impl_->engine_mu);
  const netpol::Engine& engine = impl_->engine;
  DropContext c;
  auto pod_of = [&](const std::string& addr) -> const netpol::Pod* {
    auto ip = IpAddress::Parse(addr);
    return ip ? netpol::PodByAddress(engine, *ip) : nullptr;
  };
  const netpol::Pod* src = pod_of(ev.src);
  const netpol::Pod* dst = pod_of(ev.dst);
  if (ev.table == "guard") {
    // The sender is the pod behind the interface, not the address it forged.
    const netpol::Pod* from = sender.empty() ? nullptr : pod_of(sender);
    if (from) c.src_pod = from->key();
    if (dst) c.dst_pod = dst->key();
    c.ns = from ? from->ns : "";
    return c;
  }
  if (src) c.src_pod = src->key();
  if (dst) c.dst_pod = dst->key();
  // The connection as it was opened: a reply's addresses and ports swap.
  bool reply = ev.kind == "rin" || ev.kind == "reg";
  bool ingress = ev.kind == "in" || ev.kind == "rin" || ev.kind == "pending-in";
  const netpol::Pod* judged = ingress != reply ? dst : src;
  c.ns = judged ? judged->ns : "";
  if (ev.kind.rfind("pending-", 0) == 0 || ev.src.empty() || ev.dst.empty()) return c;
  netpol::ExplainQuery q;
  q.src = reply ? ev.dst : ev.src;
  q.dst = reply ? ev.src : ev.dst;
  if (auto p = netpol::ParseProto(ev.proto == "tcp" ? "TCP" : ev.proto == "udp" ? "UDP" : ev.proto == "sctp" ? "SCTP" : "");
      p && (reply ? ev.sport : ev.dport)) {
    q.proto = *p;
    q.port = reply ? ev.sport : ev.dport;
  }
  auto e = netpol::Explain(engine, q);
  if (!e.ok()) return c;
  const netpol::ExplainSide& side = ingress ? e->ingress : e->egress;
  c.policies = side.policies;
  if (!side.decided_by.empty()) c.policies.push_back(side.decided_by);
  return c;
}

Result<std::string> NetpolController::DesiredRuleset(bool json) {
  // The full table's objects, and for the listing the fake's copy of them,
  // are several times the answer's size (tens of MB at 10,000 pods): built
  // in a scope of their own and the heap's free pages given back after, so
  // a doctor run does not leave weftd that much larger.
  auto build = [&]() -> Result<std::string> {
    Result<sys::nft::Transaction> tx = sys::nft::OpError("not built", EINVAL);
    {
      std::lock_guard lock(impl_->engine_mu);
      tx = impl_->engine.Full();
    }
    if (!tx.ok()) return tx.status();
    if (json) return sys::nft::TransactionJson(*tx);
    // As the kernel would hold it: applied to the layer's fake, then listed.
    sys::nft::Fake fake;
    WEFT_RETURN_IF_ERROR(fake.Apply(*tx));
    WEFT_ASSIGN_OR_RETURN(auto t, fake.Dump(sys::nft::Family::kInet, netpol::kTable));
    return sys::nft::RenderTable(t);
  };
  Result<std::string> out = build();
  malloc_trim(0);
  return out;
}

void NetpolController::RefreshCounters() {
  auto c = impl_->kernel->DropCounters();
  if (!c.ok()) return;
  std::lock_guard lock(impl_->engine_mu);
  metrics_.dropped_ingress = impl_->base_in + c->first;
  metrics_.dropped_egress = impl_->base_eg + c->second;
}

void NetpolController::SetFullSyncHook(std::function<void(bool)> hook) { impl_->full_sync_hook = std::move(hook); }

bool NetpolController::OwnCommit(uint32_t portid) const { return impl_->kernel->SentBy(portid); }

void NetpolController::CheckKernelSoon() {
  impl_->check_soon = true;
  impl_->notifier.Notify();
}

std::string RenderNetpolMetrics(const NetpolMetrics& m) {
  std::string out;
  auto gauge = [&](const char* name, const char* help, uint64_t v, const char* type = "gauge") {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(v) + "\n";
  };
  gauge("weft_netpol_policies", "NetworkPolicies known cluster-wide.", m.policies.load());
  gauge("weft_netpol_pods", "Pods known cluster-wide (peers of policies).", m.pods.load());
  gauge("weft_netpol_local_pod_addresses", "Addresses of this node's pods that weftd knows.", m.local_pods.load());
  out += "# HELP weft_netpol_isolated_pods Local pods isolated by at least one policy, per direction.\n"
         "# TYPE weft_netpol_isolated_pods gauge\n";
  out += "weft_netpol_isolated_pods{direction=\"ingress\"} " + std::to_string(m.isolated_ingress.load()) + "\n";
  out += "weft_netpol_isolated_pods{direction=\"egress\"} " + std::to_string(m.isolated_egress.load()) + "\n";
  gauge("weft_netpol_syncs_total", "nft transactions applied to table inet weft-netpol.", m.syncs.load(), "counter");
  gauge("weft_netpol_full_syncs_total", "Transactions that replaced the whole table.", m.full_syncs.load(), "counter");
  gauge("weft_netpol_sync_errors_total", "Failed transactions (each is retried as a full replace).",
        m.sync_errors.load(), "counter");
  gauge("weft_netpol_conntrack_rechecked_addresses_total",
        "Addresses whose established connections were marked to be judged again after their allowed traffic shrank.",
        m.conntrack_marks.load(), "counter");
  gauge("weft_netpol_last_sync_microseconds", "Duration of the last nft transaction.", m.last_sync_us.load());
  out += "# HELP weft_netpol_sync_duration_seconds From a batch of API events to its rules being in the kernel.\n"
         "# TYPE weft_netpol_sync_duration_seconds histogram\n";
  uint64_t cum = 0;
  for (int i = 0; i < NetpolMetrics::kBuckets; ++i) {
    cum += m.latency_bucket[i].load();
    char le[32];
    std::snprintf(le, sizeof le, "%g", NetpolMetrics::kBucketMs[i] / 1000.0);
    out += std::string("weft_netpol_sync_duration_seconds_bucket{le=\"") + le + "\"} " + std::to_string(cum) + "\n";
  }
  cum += m.latency_bucket[NetpolMetrics::kBuckets].load();
  out += "weft_netpol_sync_duration_seconds_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  char sum[32];
  std::snprintf(sum, sizeof sum, "%.6f", m.latency_sum_us.load() / 1e6);
  out += std::string("weft_netpol_sync_duration_seconds_sum ") + sum + "\n";
  out += "weft_netpol_sync_duration_seconds_count " + std::to_string(m.latency_count.load()) + "\n";
  out += "# HELP weft_netpol_dropped_packets_total Packets dropped by policy (nft counters), per direction.\n"
         "# TYPE weft_netpol_dropped_packets_total counter\n";
  out += "weft_netpol_dropped_packets_total{direction=\"ingress\"} " + std::to_string(m.dropped_ingress.load()) + "\n";
  out += "weft_netpol_dropped_packets_total{direction=\"egress\"} " + std::to_string(m.dropped_egress.load()) + "\n";
  gauge("weft_netpol_ready", "1 once the first complete lists were enforced.", m.ready.load() ? 1 : 0);
  gauge("weft_cnp_policies", "ClusterNetworkPolicies known (both tiers).", m.cluster_policies.load());
  gauge("weft_cnp_nodes", "Nodes known (the addresses of nodes peers).", m.nodes.load());
  gauge("weft_cnp_crd_absent", "1 while the API server does not serve clusternetworkpolicies (CRD not installed).",
        m.cnp_crd_absent.load() ? 1 : 0);
  gauge("weft_cnp_status_writes_total", "status.conditions written to ClusterNetworkPolicies.",
        m.cnp_status_writes.load(), "counter");
  gauge("weft_cnp_status_errors_total", "Failed status writes (retried).", m.cnp_status_errors.load(), "counter");
  gauge("weft_netpol_kernel_checks_total",
        "Checks of table inet weft-netpol against the desired ruleset (each a dump of its rules): at the resync "
        "and after someone else deleted part of it.",
        m.kernel_checks.load(), "counter");
  return out;
}

}  // namespace weft::policy
