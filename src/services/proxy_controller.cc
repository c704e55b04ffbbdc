#include "services/proxy_controller.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "kube/informer.h"
#include "services/health_server.h"
#include "services/service_types.h"
#include "sys/conntrack.h"
#include "sys/nft_kernel.h"

namespace weft::services {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr char kTriggerAnnotation[] = "endpoints.kubernetes.io/last-change-trigger-time";
constexpr char kZoneLabel[] = "topology.kubernetes.io/zone";

// A flush as ctnetlink's filter (sys/conntrack.h): kube-proxy's
// ClearEntriesForIP / ForPort (no endpoint) and ForNAT / ForPortNAT.
sys::CtDeleteFilter FilterOf(const ConntrackFlush& f) {
  sys::CtDeleteFilter c;
  c.family = f.v6 ? AF_INET6 : AF_INET;
  c.l4proto = static_cast<uint8_t>(f.proto);
  if (f.dst) c.orig_dst = f.dst->ToString();
  c.orig_dport = f.dport;
  if (f.endpoint) {
    c.reply_src = f.endpoint->ToString();
    c.reply_sport = f.endpoint_port;
  }
  return c;
}

class SystemProxyKernel : public ProxyKernel {
 public:
  explicit SystemProxyKernel(std::atomic<uint64_t>* deleted) : deleted_(deleted) {}

  // In-process over nfnetlink, in weftd's netns (the node's). The socket
  // stays open until the next batch, as the NetworkPolicy controller's:
  // closing it right after a commit that deleted objects waits for an RCU
  // grace period.
  Status Apply(const nft::Transaction& tx) override {
    Status st = nft::Kernel().Apply(tx, &keep_, [this](uint32_t portid) {
      sent_[next_sent_.fetch_add(1) % sent_.size()].store(portid);
    });
    if (!st.ok()) return st.WithPrefix(std::string("apply table inet ") + kTable);
    return Status::Ok();
  }

  Result<nft::TableState> Dump() override { return nft::Kernel().Dump(nft::Family::kInet, kTable); }

  // Over ctnetlink in weftd's netns (the node's): one dump per family for
  // all of a change's flushes, one delete per matching entry, any zone.
  Status DeleteConntrack(const std::vector<ConntrackFlush>& flushes) override {
    std::vector<sys::CtDeleteFilter> filters;
    filters.reserve(flushes.size());
    for (const auto& f : flushes) filters.push_back(FilterOf(f));
    auto n = sys::ConntrackDelete(filters);
    if (!n.ok()) return n.status().WithPrefix("delete conntrack entries");
    if (deleted_) *deleted_ += *n;
    if (*n > 0) WEFT_LOG(kDebug, "services: conntrack entries deleted", {"entries", *n}, {"filters", flushes.size()});
    return Status::Ok();
  }

  bool SentBy(uint32_t portid) const override {
    if (portid == 0) return false;
    for (const auto& p : sent_)
      if (p.load() == portid) return true;
    return false;
  }

 private:
  std::atomic<uint64_t>* deleted_;
  UniqueFd keep_;
  std::array<std::atomic<uint32_t>, 8> sent_{};
  std::atomic<size_t> next_sent_{0};
};

// An EndpointSlice with its trigger time (for the programming latency).
struct SliceObject {
  EndpointSlice slice;
  std::optional<double> trigger;  // seconds since the epoch
  bool operator==(const SliceObject&) const = default;
};

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::unique_ptr<ProxyKernel> NewProxyKernel(std::atomic<uint64_t>* deleted) {
  return std::make_unique<SystemProxyKernel>(deleted);
}

bool ProxyHealthy(bool ready, std::optional<Clock::time_point> failing_since, Clock::time_point now,
                  std::chrono::milliseconds timeout) {
  return ready && (!failing_since || now - *failing_since < timeout);
}

std::optional<double> ParseTriggerTime(const std::string& s) {
  // 2026-12-03T12:30:00Z or 2026-12-03T12:30:00.123456789Z (RFC3339Nano,
  // as the EndpointSlice controller writes it), or a numeric offset.
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
      consumed != 19)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  double frac = 0;
  size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    double scale = 0.1;
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, scale /= 10) frac += (s[i] - '0') * scale;
  }
  long offset = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z') && i + 1 == s.size()) {
  } else if (i + 6 == s.size() && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
    int h = 0, m = 0;
    if (std::sscanf(s.c_str() + i + 1, "%2d:%2d", &h, &m) != 2) return std::nullopt;
    offset = (s[i] == '+' ? 1 : -1) * (h * 3600L + m * 60L);
  } else {
    return std::nullopt;
  }
  time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<double>(t - offset) + frac;
}

SecondsHistogram::SecondsHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

void SecondsHistogram::Observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // a trigger time ahead of this node's clock
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i]) ++i;
  buckets_[i]++;
  sum_ns_ += static_cast<uint64_t>(std::llround(seconds * 1e9));
  count_++;
}

std::string SecondsHistogram::Render(const char* name, const char* help) const {
  std::string out = std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  char buf[64];
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += buckets_[i].load();
    std::snprintf(buf, sizeof buf, "%g", bounds_[i]);
    out += std::string(name) + "_bucket{le=\"" + buf + "\"} " + std::to_string(cum) + "\n";
  }
  cum += buckets_[bounds_.size()].load();
  out += std::string(name) + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  std::snprintf(buf, sizeof buf, "%.6f", sum_ns_.load() / 1e9);
  out += std::string(name) + "_sum " + buf + "\n";
  out += std::string(name) + "_count " + std::to_string(count_.load()) + "\n";
  return out;
}

struct ProxyController::Impl {
  Impl(ProxyOptions o, ProxyController::ApiFactory a, std::unique_ptr<ProxyKernel> k, ProxyMetrics& m)
      : opts(std::move(o)),
        apis(std::move(a)),
        kernel(std::move(k)),
        metrics(m),
        services(
            [this](const json& j) -> std::optional<Service> {
              auto s = DecodeService(j);
              if (!s.ok()) return Skip(s.status());
              return std::move(s).value();
            },
            &notifier),
        slices(
            [this](const json& j) -> std::optional<SliceObject> {
              // A slice no Service owns (no kubernetes.io/service-name label:
              // one an operator or a controller manages by hand) is none of a
              // Service proxy's business: left out without a word, as
              // kube-proxy does, not counted as an object that failed to decode.
              if (!HasServiceNameLabel(j)) return std::nullopt;
              auto s = DecodeEndpointSlice(j);
              if (!s.ok()) return Skip(s.status());
              SliceObject o{std::move(s).value(), std::nullopt};
              const json& ann = j.value("metadata", json::object()).value("annotations", json::object());
              if (auto it = ann.find(kTriggerAnnotation); it != ann.end() && it->is_string())
                o.trigger = ParseTriggerTime(it->get<std::string>());
              return o;
            },
            &notifier) {}

  // A decoder's answer for an object it cannot read: logged, counted, and
  // the object left out (as if absent: an update that breaks a Service
  // takes it out of the table).
  std::nullopt_t Skip(const Status& st) {
    metrics.decode_errors++;
    WEFT_LOG(kWarn, "services: object skipped", {"err", st});
    return std::nullopt;
  }

  // The node's zone label, once (topology hints; docs/services.md).
  std::string ReadZone() {
    if (!opts.zone.empty()) return opts.zone;
    auto api = apis();
    auto r = api->Get("/api/v1/nodes/" + opts.node_name);
    if (!r.ok() || r->status != 200) {
      WEFT_LOG(kWarn, "services: cannot read this node's zone; topology hints by zone are not followed",
               {"node", opts.node_name},
               {"err", r.ok() ? Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                              "HTTP " + std::to_string(r->status))
                              : r.status()});
      return "";
    }
    json node = json::parse(r->body, nullptr, false);
    if (node.is_discarded()) return "";
    const json& labels = node.value("metadata", json::object()).value("labels", json::object());
    auto it = labels.find(kZoneLabel);
    return it != labels.end() && it->is_string() ? it->get<std::string>() : "";
  }

  std::thread StartInformer(const char* what, const char* path, kube::InformerHandler& h,
                            const std::atomic<bool>& stop) {
    return std::thread([this, &stop, what, path, &h] {
      kube::ResourceSpec spec;
      spec.what = what;
      spec.path = path;
      spec.watch_timeout_seconds = opts.watch_timeout_seconds;
      kube::Informer inf(apis(), spec, h, stats);
      inf.Run(stop);
    });
  }

  // Never program before both lists are complete: a Service seen without
  // its slices would reject what has endpoints.
  uint64_t WaitForLists(const std::atomic<bool>& stop) {
    uint64_t seen = 0;
    while (!stop.load() && !(services.synced() && slices.synced()))
      seen = notifier.Wait(seen, std::chrono::milliseconds(500), stop);
    if (!stop.load()) WEFT_LOG(kInfo, "services: lists complete");
    return seen;
  }

  // The queued changes into the model, as one Change (their transactions
  // in order, one batch); `triggers` gets the trigger times of the slices
  // among them.
  Change Drain(std::vector<double>* triggers, size_t* n) {
    Change all;
    auto add = [&](Change c) {
      all.tx.Append(std::move(c.tx));
      all.conntrack.insert(all.conntrack.end(), c.conntrack.begin(), c.conntrack.end());
      ++*n;
    };
    // Services first: a slice of a new Service then finds it.
    for (auto& d : services.Drain()) {
      // The Services that may want a health check port (HealthCheckOf's
      // first test), so a pass recomputes those only.
      if (d.object && d.object->ExternalLocal() && d.object->health_check_node_port != 0)
        health_services.insert(d.key);
      else
        health_services.erase(d.key);
      if (d.object) add(model->UpsertService(std::move(*d.object)));
      else add(model->DeleteService(d.key));
    }
    for (auto& d : slices.Drain()) {
      auto old = slice_endpoints.find(d.key);
      if (old != slice_endpoints.end()) {
        endpoints -= old->second;
        slice_endpoints.erase(old);
      }
      if (d.object) {
        endpoints += d.object->slice.endpoints.size();
        slice_endpoints[d.key] = d.object->slice.endpoints.size();
        if (d.object->trigger) triggers->push_back(*d.object->trigger);
        add(model->UpsertSlice(std::move(d.object->slice)));
      } else {
        add(model->DeleteSlice(d.key));
      }
    }
    std::sort(all.conntrack.begin(), all.conntrack.end());
    all.conntrack.erase(std::unique(all.conntrack.begin(), all.conntrack.end()), all.conntrack.end());
    return all;
  }

  // Conntrack deletions of changes whose transaction is in; a failure is
  // logged (the entries time out on their own).
  void DeleteConntrack(const std::vector<ConntrackFlush>& flushes) {
    if (flushes.empty()) return;
    Status st = kernel->DeleteConntrack(flushes);
    metrics.conntrack_flushes += flushes.size();  // once done (the e2e test reads it so)
    if (!st.ok()) {
      metrics.sync_errors++;
      WEFT_LOG(kWarn, "services: deleting conntrack entries failed", {"err", st});
    }
  }

  struct SyncLoop {
    Clock::time_point next_check;
    Clock::time_point retry_at = Clock::time_point::max();
    bool full_due = true;  // start-up, and after a failed transaction
    std::vector<ConntrackFlush> pending_conntrack;  // of changes whose transaction failed
  };

  // One pass: the queued changes into the model and their delta into the
  // kernel (the whole table when due), then the check when due.
  void SyncOnce(SyncLoop& loop) {
    std::lock_guard model_lock(model_mu);
    auto woke = Clock::now();
    std::vector<double> triggers;
    size_t n = 0;
    Change c = Drain(&triggers, &n);
    metrics.changes += n;
    bool applied = false;
    if (loop.full_due) {
      if (full_sync_hook) full_sync_hook(true);
      Status st = kernel->Apply(model->Full());
      if (full_sync_hook) full_sync_hook(false);
      if (st.ok()) {
        loop.full_due = false;
        metrics.syncs++;
        metrics.full_syncs++;
        applied = true;
        loop.pending_conntrack.insert(loop.pending_conntrack.end(), c.conntrack.begin(), c.conntrack.end());
        DeleteConntrack(loop.pending_conntrack);
        loop.pending_conntrack.clear();
      } else {
        Failed(loop, st, c.conntrack);
      }
    } else if (!c.tx.empty() || !c.conntrack.empty()) {
      Status st = c.tx.empty() ? Status::Ok() : kernel->Apply(c.tx);
      if (st.ok()) {
        if (!c.tx.empty()) metrics.syncs++;
        applied = true;
        DeleteConntrack(c.conntrack);
      } else {
        Failed(loop, st, c.conntrack);
      }
    }
    if (applied) {
      loop.retry_at = Clock::time_point::max();
      metrics.sync_duration.Observe(SecondsSince(woke));
      const double now = NowUnix();
      for (double t : triggers) metrics.programming_duration.Observe(now - t);
      const log::Level level = metrics.ready.load() ? log::Level::kDebug : log::Level::kInfo;
      if (level >= log::GetLevel())
        log::Write(level, "services synced",
                   {{"services", model->service_count()}, {"changes", n}, {"full_syncs", metrics.full_syncs.load()},
                    {"duration_us", static_cast<int64_t>(SecondsSince(woke) * 1e6)}});
      metrics.ready = true;
    }
    if (applied) failing_since.reset();
    if (!loop.full_due && (woke >= loop.next_check || check_soon.exchange(false))) {
      loop.next_check = woke + opts.resync;
      Check(loop);
    }
    if (n > 0) health_dirty = true;
    // After the transaction, and only while the kernel's table is the
    // model's (kube-proxy syncs its health servers after a successful sync
    // only): the counts then say what the table does.
    if (!loop.full_due) SyncHealth();
    UpdateHealthy();
    metrics.services = model->service_count();
    metrics.endpoints = endpoints;
  }

  void Failed(SyncLoop& loop, const Status& st, const std::vector<ConntrackFlush>& flushes) {
    metrics.sync_errors++;
    if (!failing_since) failing_since = Clock::now();
    loop.full_due = true;
    loop.pending_conntrack.insert(loop.pending_conntrack.end(), flushes.begin(), flushes.end());
    loop.retry_at = Clock::now() + std::chrono::seconds(1);
    WEFT_LOG(kWarn, "services: apply failed; retrying with the whole table", {"err", st});
  }

  // The periodic check: the kernel's table against the model's digest. A
  // check that fails (the dump, or the repair's transaction) is followed by
  // the whole table a second later.
  void Check(SyncLoop& loop) {
    metrics.checks++;
    auto r = CheckAndRepair(*kernel, *model);
    if (!r.ok()) {
      metrics.sync_errors++;
      if (!failing_since) failing_since = Clock::now();
      loop.full_due = true;
      loop.retry_at = Clock::now() + std::chrono::seconds(1);
      WEFT_LOG(kWarn, "services: checking table inet weft-services failed; replacing it", {"err", r.status()});
      return;
    }
    if (!r->repaired) return;
    metrics.repairs++;
    metrics.full_syncs++;
    metrics.syncs++;
    std::string diff = r->diff.size() > 2000 ? r->diff.substr(0, 2000) + "..." : r->diff;
    WEFT_LOG(kWarn, "services: table inet weft-services differed from the model; replaced it", {"diff", diff});
  }

  // The health check ports the model's Services want now: O(the Services
  // with eTP Local and a healthCheckNodePort). Two claiming one port (the
  // API server allocates them uniquely): the first by key.
  std::map<uint16_t, HealthCheck> DesiredHealthChecks() const {
    std::map<uint16_t, HealthCheck> out;
    const NodeTopology& node = model->config().node;
    for (const std::string& key : health_services) {
      const Service* svc = model->FindService(key);
      if (!svc) continue;
      if (auto hc = HealthCheckOf(*svc, model->SlicesOf(key), node)) out.emplace(hc->first, hc->second);
    }
    return out;
  }

  // Tells the health server the desired ports when they changed (or a
  // port failed to bind before: it is tried again, at most every pass).
  void SyncHealth() {
    if (!health || !(health_dirty || health_failed)) return;
    health_dirty = false;
    auto desired = DesiredHealthChecks();
    if (desired == health_served && !health_failed) return;
    HealthSyncResult r = health->Sync(desired);
    health_served = std::move(desired);
    // The server logs each port opened, closed, or failing anew.
    health_failed = !r.failed.empty();
    metrics.health_check_ports = health_served.size() - r.failed.size();
    metrics.health_check_port_errors = r.failed.size();
  }

  void UpdateHealthy() {
    metrics.healthy = ProxyHealthy(metrics.ready.load(), failing_since, Clock::now(), 2 * opts.resync);
  }

  uint64_t WaitForChange(const SyncLoop& loop, uint64_t seen, const std::atomic<bool>& stop) {
    // A burst (a rollout's endpoints) is coalesced into one transaction.
    return notifier.WaitCoalesced(seen, std::min(loop.next_check, loop.retry_at), opts.batch, stop);
  }

  ProxyOptions opts;
  ProxyController::ApiFactory apis;
  std::unique_ptr<ProxyKernel> kernel;
  ProxyMetrics& metrics;
  ControlPlaneStats stats;
  kube::ChangeNotifier notifier;
  kube::Cache<Service> services;
  kube::Cache<SliceObject> slices;
  std::atomic<bool> check_soon{false};
  std::function<void(bool)> full_sync_hook;  // SetFullSyncHook
  // The sync thread's; changed only under model_mu, which ReadModel takes to read it.
  mutable std::mutex model_mu;
  std::unique_ptr<Model> model;
  std::map<std::string, size_t> slice_endpoints;  // slice key -> its endpoints
  uint64_t endpoints = 0;
  std::optional<Clock::time_point> failing_since;  // the first failure not yet followed by a success
  std::set<std::string> health_services;           // keys of Services with eTP Local and a healthCheckNodePort
  std::unique_ptr<HealthServer> health;            // null without opts.health_check_ports
  std::map<uint16_t, HealthCheck> health_served;   // what health was last told
  bool health_dirty = true, health_failed = false;
};

ProxyController::ProxyController(ProxyOptions opts, kube::KubeEndpoint endpoint)
    : ProxyController(std::move(opts), [endpoint] { return kube::NewKubeApi(endpoint); }, nullptr) {}

ProxyController::ProxyController(ProxyOptions opts, ApiFactory apis, std::unique_ptr<ProxyKernel> kernel)
    : impl_(std::make_unique<Impl>(std::move(opts), std::move(apis),
                                   kernel ? std::move(kernel) : NewProxyKernel(&metrics_.conntrack_entries_deleted),
                                   metrics_)) {}

ProxyController::~ProxyController() = default;

ControlPlaneStats& ProxyController::stats() { return impl_->stats; }

void ProxyController::Run(const std::atomic<bool>& stop) {
  Impl& s = *impl_;
  Config cfg;
  cfg.node.node_name = s.opts.node_name;
  cfg.node.zone = s.ReadZone();
  cfg.cluster_cidrs = s.opts.cluster_cidrs;
  cfg.masquerade_all = s.opts.masquerade_all;
  {
    std::lock_guard lock(s.model_mu);
    s.model = std::make_unique<Model>(std::move(cfg));
  }
  if (s.opts.health_check_ports) {
    // Answered on the servers' threads: what the last pass found (a pass
    // runs at least every 5 s, so staleness shows within that).
    HealthServer::Options ho;
    ho.proxy_healthy = [&m = s.metrics] { return m.healthy.load(); };
    s.health = std::make_unique<HealthServer>(std::move(ho));
  }
  WEFT_LOG(kInfo, "services: starting", {"node", s.opts.node_name}, {"zone", s.model->config().node.zone});
  std::vector<std::thread> threads;
  threads.push_back(s.StartInformer("services", "/api/v1/services", s.services, stop));
  threads.push_back(s.StartInformer("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices", s.slices, stop));
  uint64_t seen = s.WaitForLists(stop);
  Impl::SyncLoop loop;
  loop.next_check = Clock::now() + s.opts.resync;
  while (!stop.load()) {
    s.SyncOnce(loop);
    seen = s.WaitForChange(loop, seen, stop);
  }
  s.notifier.Notify();
  for (auto& t : threads) t.join();
  // Its ports close with the controller (a load balancer then sees the
  // node as down, as when kube-proxy stops).
  s.health.reset();
  s.health_served.clear();
  s.metrics.health_check_ports = 0;
  s.metrics.healthy = false;
}

void ProxyController::CheckKernelSoon() {
  impl_->check_soon = true;
  impl_->notifier.Notify();
}

void ProxyController::SetFullSyncHook(std::function<void(bool)> hook) { impl_->full_sync_hook = std::move(hook); }

bool ProxyController::OwnCommit(uint32_t portid) const { return impl_->kernel->SentBy(portid); }

bool ProxyController::ReadModel(const std::function<void(const Model&)>& read) const {
  std::lock_guard lock(impl_->model_mu);
  if (!impl_->model) return false;
  read(*impl_->model);
  return true;
}

std::string RenderProxyMetrics(const ProxyMetrics& m) {
  std::string out;
  auto one = [&](const char* name, const char* help, uint64_t v, const char* type) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(v) + "\n";
  };
  one("weft_services_services", "Services weftd's proxy knows (skipped ones included).", m.services.load(), "gauge");
  one("weft_services_endpoints", "Endpoints of the EndpointSlices weftd's proxy knows.", m.endpoints.load(), "gauge");
  one("weft_services_changes_total", "Service and EndpointSlice changes fed to the proxy's model.", m.changes.load(),
      "counter");
  one("weft_services_syncs_total", "nft transactions applied to table inet weft-services.", m.syncs.load(),
      "counter");
  one("weft_services_full_syncs_total",
      "Transactions that replaced the whole table (start-up, after a failure, repairs).", m.full_syncs.load(),
      "counter");
  one("weft_services_sync_errors_total",
      "Failed transactions (each followed by the whole table), conntrack deletions and checks.",
      m.sync_errors.load(), "counter");
  one("weft_services_kernel_checks_total", "Comparisons of the kernel's table with the model's digest.",
      m.checks.load(), "counter");
  one("weft_services_repairs_total", "Checks that found the kernel's table different and replaced it.",
      m.repairs.load(), "counter");
  one("weft_services_decode_errors_total", "Services and EndpointSlices skipped because they did not decode.",
      m.decode_errors.load(), "counter");
  one("weft_services_conntrack_flushes_total",
      "UDP conntrack cleanups (a service address and port, or one endpoint of it) asked after a change.",
      m.conntrack_flushes.load(), "counter");
  one("weft_services_conntrack_entries_deleted_total",
      "UDP conntrack entries those cleanups deleted (entries to a service that got its first endpoint, or DNATed to "
      "an endpoint that left).",
      m.conntrack_entries_deleted.load(), "counter");
  one("weft_services_ready", "1 once the first complete lists are programmed.", m.ready.load() ? 1 : 0, "gauge");
  one("weft_services_proxy_healthy",
      "1 while the proxy's table is programmed and no change has waited on a failure for 2 x the resync period "
      "(serviceProxyHealthy of the health check ports).",
      m.healthy.load() ? 1 : 0, "gauge");
  one("weft_services_health_check_ports", "healthCheckNodePorts served (eTP Local Services' health check servers).",
      m.health_check_ports.load(), "gauge");
  one("weft_services_health_check_port_errors",
      "healthCheckNodePorts wanted but not listening (in use by another program; retried every pass).",
      m.health_check_port_errors.load(), "gauge");
  out += m.sync_duration.Render("weft_services_sync_proxy_rules_duration_seconds",
                                "One sync of table inet weft-services: changes drained, transaction applied "
                                "(kube-proxy's sync_proxy_rules_duration_seconds).");
  out += m.programming_duration.Render(
      "weft_services_network_programming_duration_seconds",
      "From an EndpointSlice's last-change-trigger-time annotation to its change in the kernel "
      "(kube-proxy's network_programming_duration_seconds).");
  return out;
}

}  // namespace weft::services
