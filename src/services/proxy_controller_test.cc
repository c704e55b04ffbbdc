// The Service proxy controller's loop against a fake API server and the
// fake kernel: the whole table once from complete lists, then only deltas;
// an object that does not decode is skipped and counted; a failed
// transaction is followed by the whole table; a tampered table is repaired
// by the check; the trigger-time annotation feeds the programming latency.
// No root, no network.

#include "services/proxy_controller.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "kube/informer.h"
#include "services/test_objects.h"

namespace weft::services {
namespace {

using nlohmann::json;
using testing::Ep;
using testing::ServiceJson;
using testing::SliceJson;

constexpr char kSvcPath[] = "/api/v1/services";
constexpr char kSlicePath[] = "/apis/discovery.k8s.io/v1/endpointslices";

// Collections and their watch streams, shared by every informer's FakeApi.
class FakeCluster {
 public:
  void Put(const std::string& path, json obj) {
    std::lock_guard lock(mu_);
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    items_[path].push_back(std::move(obj));
  }
  void Event(const std::string& path, const std::string& type, json obj) {
    std::lock_guard lock(mu_);
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    lines_[path].push_back(json{{"type", type}, {"object", obj}}.dump());
    cv_.notify_all();
  }
  Result<sys::HttpResponse> Get(const std::string& path) {
    std::lock_guard lock(mu_);
    std::string p = path.substr(0, path.find('?'));
    if (p == "/api/v1/nodes/n1")
      return sys::HttpResponse{200, R"({"metadata":{"name":"n1","labels":{"topology.kubernetes.io/zone":"z1"}}})"};
    json list = {{"kind", "List"}, {"metadata", {{"resourceVersion", std::to_string(rv_)}}}, {"items", items_[p]}};
    return sys::HttpResponse{200, list.dump()};
  }
  Result<sys::HttpResponse> Watch(const std::string& path, const std::function<bool(std::string_view)>& on_line,
                                  const std::atomic<bool>& stop) {
    std::string p = path.substr(0, path.find('?'));
    std::unique_lock lock(mu_);
    while (!stop.load()) {
      auto& q = lines_[p];
      if (!q.empty()) {
        std::string line = q.front();
        q.pop_front();
        lock.unlock();
        bool more = on_line(line);
        lock.lock();
        if (!more) break;
        continue;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
    return sys::HttpResponse{200, ""};
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t rv_ = 100;
  std::map<std::string, std::vector<json>> items_;
  std::map<std::string, std::deque<std::string>> lines_;
};

class FakeApi : public kube::KubeApi {
 public:
  explicit FakeApi(FakeCluster* c) : c_(c) {}
  Result<sys::HttpResponse> Get(const std::string& path) override { return c_->Get(path); }
  Result<sys::HttpResponse> Watch(const std::string& path, const std::function<bool(std::string_view)>& on_line,
                                  const std::atomic<bool>& stop, std::chrono::milliseconds) override {
    return c_->Watch(path, on_line, stop);
  }

 private:
  FakeCluster* c_;
};

// FakeProxyKernel behind a lock (the controller's thread applies, the test
// reads), with what it was asked.
class LockedKernel : public ProxyKernel {
 public:
  Status Apply(const nft::Transaction& tx) override {
    std::lock_guard lock(mu_);
    applies_.push_back(tx.ops().size());
    return fake_.Apply(tx);
  }
  Result<nft::TableState> Dump() override {
    std::lock_guard lock(mu_);
    return fake_.Dump();
  }
  Status DeleteConntrack(const std::vector<ConntrackFlush>& f) override {
    std::lock_guard lock(mu_);
    return fake_.DeleteConntrack(f);
  }
  template <typename F>
  auto With(F f) {
    std::lock_guard lock(mu_);
    return f(fake_, applies_);
  }

 private:
  std::mutex mu_;
  FakeProxyKernel fake_;
  std::vector<size_t> applies_;  // ops per applied transaction
};

class ProxyControllerTest : public ::testing::Test {
 protected:
  void Start() {
    auto k = std::make_unique<LockedKernel>();
    kernel_ = k.get();
    ProxyOptions o;
    o.node_name = "n1";
    o.cluster_cidrs = {*IpPrefix::Parse("10.244.0.0/16")};
    o.resync = std::chrono::milliseconds(200);
    o.batch = std::chrono::milliseconds(1);
    o.health_check_ports = false;  // no sockets in unit tests (e2e_services_test serves them)
    ctl_ = std::make_unique<ProxyController>(o, [this] { return std::make_unique<FakeApi>(&cluster_); },
                                             std::move(k));
    thread_ = std::thread([this] { ctl_->Run(stop_); });
  }
  void TearDown() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  bool Eventually(const std::function<bool()>& pred, int ms = 3000) {
    for (int i = 0; i < ms / 5; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred();
  }
  // Whether the fake kernel holds what a model fed `svcs` and `slices` writes with Full().
  bool KernelHolds(const std::vector<json>& svcs, const std::vector<json>& slices) {
    Config cfg;
    cfg.node = {"n1", "z1"};
    cfg.cluster_cidrs = {*IpPrefix::Parse("10.244.0.0/16")};
    Model m(cfg);
    for (const auto& s : svcs) (void)m.UpsertService(testing::Decoded(s));
    for (const auto& s : slices) (void)m.UpsertSlice(testing::DecodedSlice(s));
    return kernel_->With([&](FakeProxyKernel& f, auto&) {
      auto d = f.Dump();
      return d.ok() && DigestOf(*d) == m.Digest();
    });
  }
  size_t Applies() {
    return kernel_->With([](FakeProxyKernel&, std::vector<size_t>& a) { return a.size(); });
  }

  FakeCluster cluster_;
  LockedKernel* kernel_ = nullptr;
  std::unique_ptr<ProxyController> ctl_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_F(ProxyControllerTest, FullFromCompleteListsThenOnlyDeltasAndABrokenObjectIsSkipped) {
  json web = ServiceJson("default", "web", {"10.96.0.10"});
  json slice = SliceJson("default", "web", "web-1", {Ep{"10.244.1.5"}, Ep{"10.244.2.5"}});
  json broken = ServiceJson("default", "broken", {"10.96.0.11"},
                            json::array({{{"name", "x"}, {"protocol", "TCP"}, {"port", 70000}}}));
  cluster_.Put(kSvcPath, web);
  cluster_.Put(kSvcPath, broken);
  cluster_.Put(kSlicePath, slice);
  // A slice no Service owns (as the upstream EndpointSlice e2e makes): left
  // out, and not a decode error.
  json unowned = SliceJson("default", "web", "by-hand", {Ep{"10.244.3.5"}});
  unowned["metadata"]["labels"].erase("kubernetes.io/service-name");
  cluster_.Put(kSlicePath, unowned);
  Start();
  ProxyMetrics& m = ctl_->metrics();
  ASSERT_TRUE(Eventually([&] { return m.ready.load(); }));
  EXPECT_EQ(m.full_syncs.load(), 1u);
  EXPECT_EQ(m.decode_errors.load(), 1u);
  EXPECT_EQ(m.services.load(), 1u);
  EXPECT_EQ(m.endpoints.load(), 2u);
  EXPECT_TRUE(KernelHolds({web}, {slice}));

  // One endpoint goes, with a trigger time: one small transaction, no full one.
  const size_t before = Applies();
  json fewer = SliceJson("default", "web", "web-1", {Ep{"10.244.2.5"}});
  fewer["metadata"]["annotations"] = {{"endpoints.kubernetes.io/last-change-trigger-time", "2026-01-01T00:00:00Z"}};
  cluster_.Event(kSlicePath, "MODIFIED", fewer);
  ASSERT_TRUE(Eventually([&] { return m.programming_duration.count() == 1; }));
  EXPECT_TRUE(KernelHolds({web}, {fewer}));
  EXPECT_EQ(m.full_syncs.load(), 1u);
  EXPECT_EQ(Applies(), before + 1);
  EXPECT_LE(kernel_->With([](FakeProxyKernel&, std::vector<size_t>& a) { return a.back(); }), 9u);
  EXPECT_EQ(m.endpoints.load(), 1u);
  EXPECT_GE(m.sync_duration.count(), 2u);

  // The Service goes: its objects leave the table.
  cluster_.Event(kSvcPath, "DELETED", web);
  ASSERT_TRUE(Eventually([&] { return m.services.load() == 0; }));
  EXPECT_TRUE(Eventually([&] { return KernelHolds({}, {fewer}); }));
  EXPECT_EQ(m.full_syncs.load(), 1u);
  std::string text = RenderProxyMetrics(m);
  EXPECT_NE(text.find("weft_services_network_programming_duration_seconds_count 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_services_decode_errors_total 1\n"), std::string::npos) << text;
}

TEST_F(ProxyControllerTest, AFailedTransactionIsFollowedByTheWholeTableAndATamperedOneIsRepaired) {
  json web = ServiceJson("default", "web", {"10.96.0.10"});
  cluster_.Put(kSvcPath, web);
  Start();
  ProxyMetrics& m = ctl_->metrics();
  ASSERT_TRUE(Eventually([&] { return m.ready.load(); }));
  kernel_->With([](FakeProxyKernel& f, auto&) {
    f.FailApplies(1);
    return 0;
  });
  json slice = SliceJson("default", "web", "web-1", {Ep{"10.244.1.5"}});
  cluster_.Event(kSlicePath, "ADDED", slice);
  ASSERT_TRUE(Eventually([&] { return m.full_syncs.load() == 2; }));
  EXPECT_EQ(m.sync_errors.load(), 1u);
  EXPECT_TRUE(KernelHolds({web}, {slice}));

  // Someone deletes the table: the next check (resync 200 ms) puts it back.
  const uint64_t repairs = m.repairs.load();
  kernel_->With([](FakeProxyKernel& f, auto&) {
    nft::Transaction tx(nft::Family::kInet, kTable);
    tx.Delete(nft::Table{kTable});
    return f.nft().Apply(tx).ok();
  });
  ctl_->CheckKernelSoon();
  ASSERT_TRUE(Eventually([&] { return m.repairs.load() == repairs + 1; }));
  EXPECT_TRUE(KernelHolds({web}, {slice}));
  EXPECT_GE(m.checks.load(), 1u);
}

TEST_F(ProxyControllerTest, AUdpEndpointsRemovalAsksItsConntrackCleanupAfterTheTransaction) {
  json udp = json::array({{{"name", "dns"}, {"protocol", "UDP"}, {"port", 53}, {"targetPort", 5353}}});
  json slice_ports = json::array({{{"name", "dns"}, {"protocol", "UDP"}, {"port", 5353}}});
  json svc = ServiceJson("kube-system", "dns", {"10.96.0.10"}, udp);
  cluster_.Put(kSvcPath, svc);
  cluster_.Put(kSlicePath, SliceJson("kube-system", "dns", "dns-1", {Ep{"10.244.1.5"}, Ep{"10.244.2.5"}}, slice_ports));
  Start();
  ProxyMetrics& m = ctl_->metrics();
  ASSERT_TRUE(Eventually([&] { return m.ready.load(); }));
  const uint64_t asked = m.conntrack_flushes.load();
  json fewer = SliceJson("kube-system", "dns", "dns-1", {Ep{"10.244.2.5"}}, slice_ports);
  cluster_.Event(kSlicePath, "MODIFIED", fewer);
  ASSERT_TRUE(Eventually([&] { return m.conntrack_flushes.load() > asked; }));
  EXPECT_TRUE(KernelHolds({svc}, {fewer}));
  auto gone = kernel_->With([](FakeProxyKernel& f, auto&) { return f.deleted(); });
  ASSERT_FALSE(gone.empty());
  const ConntrackFlush& last = gone.back();
  EXPECT_EQ(last.proto, Proto::kUdp);
  ASSERT_TRUE(last.endpoint.has_value());
  EXPECT_EQ(last.endpoint->ToString(), "10.244.1.5");
  EXPECT_EQ(m.conntrack_entries_deleted.load(), 0u);  // counted by the node's kernel only
}

// serviceProxyHealthy: not before the first sync; through a failure for
// less than the timeout; not after it.
TEST(ProxyHealthy, ReadyAndNoFailureOutstandingForTheTimeout) {
  using namespace std::chrono_literals;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ProxyHealthy(false, std::nullopt, t0, 60s));
  EXPECT_TRUE(ProxyHealthy(true, std::nullopt, t0, 60s));
  EXPECT_TRUE(ProxyHealthy(true, t0, t0 + 59s, 60s));
  EXPECT_FALSE(ProxyHealthy(true, t0, t0 + 60s, 60s));
}

TEST(ParseTriggerTime, Rfc3339WithAndWithoutFractionsAndOffsets) {
  EXPECT_EQ(ParseTriggerTime("1970-01-01T00:01:40Z"), 100.0);
  EXPECT_NEAR(*ParseTriggerTime("2026-12-03T12:30:00.25Z") - *ParseTriggerTime("2026-12-03T12:30:00Z"), 0.25, 1e-6);
  EXPECT_EQ(ParseTriggerTime("1970-01-01T01:01:40+01:00"), 100.0);
  EXPECT_EQ(ParseTriggerTime("yesterday"), std::nullopt);
  EXPECT_EQ(ParseTriggerTime("1970-01-01T00:01:40"), std::nullopt);
}

}  // namespace
}  // namespace weft::services
