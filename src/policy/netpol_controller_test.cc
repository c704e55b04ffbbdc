// The NetworkPolicy controller's loop against a fake API server and a fake
// kernel: first a full replace from complete lists, then deltas; the
// namespaces file; conntrack flushes when traffic shrinks; a failed apply and
// a tampered table both end in a full replace. No root, no network.

#include "policy/netpol_controller.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "kube/informer.h"
#include "sys/nft_fake.h"
#include "sys/nft_render.h"

namespace weft::policy {
namespace {

using nlohmann::json;

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
  void FailLists(const std::string& path) {
    std::lock_guard lock(mu_);
    failing_ = path;
  }
  // The collection is not served (a CRD not installed) until Serve().
  void Absent(const std::string& path) {
    std::lock_guard lock(mu_);
    absent_.insert(path);
  }
  void Serve(const std::string& path) {
    std::lock_guard lock(mu_);
    absent_.erase(path);
  }
  Result<sys::HttpResponse> Patch(const std::string& path, const std::string& type, const std::string& body) {
    std::lock_guard lock(mu_);
    patches.push_back(path + " " + type + " " + body);
    return sys::HttpResponse{200, "{}"};
  }
  std::vector<std::string> Patches() {
    std::lock_guard lock(mu_);
    return patches;
  }
  size_t gets_absent = 0;
  Result<sys::HttpResponse> Get(const std::string& path) {
    std::lock_guard lock(mu_);
    std::string p = path.substr(0, path.find('?'));
    if (p == failing_) return sys::HttpResponse{500, R"({"kind":"Status","code":500})"};
    if (absent_.count(p)) {
      gets_absent++;
      return sys::HttpResponse{404, R"({"kind":"Status","code":404,"reason":"NotFound"})"};
    }
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
        std::string line = q.front() + "\n";
        q.pop_front();
        lock.unlock();
        bool more = on_line(line.substr(0, line.size() - 1));
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
  std::string failing_;
  std::set<std::string> absent_;
  std::vector<std::string> patches;
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
  Result<sys::HttpResponse> Patch(const std::string& path, const std::string& type, const std::string& body) override {
    return c_->Patch(path, type, body);
  }

 private:
  FakeCluster* c_;
};

struct KernelLog {
  std::mutex mu;
  std::vector<std::string> scripts;
  std::vector<std::string> flushed;
  std::string namespaces;
  bool fail_next = false;
  bool tampered = false;  // ChainRuleCounts says the table is gone
  int applies = 0;
};

class FakeKernel : public NetpolKernel {
 public:
  explicit FakeKernel(KernelLog* log) : log_(log) {}
  // Each transaction is applied to the layer's fake (a delta that does not
  // fit the table it follows fails there) and logged as nft commands,
  // elements in their sets' types.
  Status Apply(const sys::nft::Transaction& tx) override {
    std::lock_guard lock(log_->mu);
    log_->applies++;
    if (log_->fail_next) {
      log_->fail_next = false;
      return Status::Error(Reason::kFailed, Domain::kFirewall, "nft: injected failure");
    }
    std::vector<sys::nft::Set> known;
    if (auto t = nft_.Dump(tx.family(), tx.table()); t.ok()) known = t->sets;
    for (const auto& op : tx.ops())
      if (const auto* set = std::get_if<sys::nft::Set>(&op.object)) known.push_back(*set);
    std::string script;
    for (const auto& op : tx.ops()) script += sys::nft::RenderOp(tx.family(), tx.table(), op, known) + "\n";
    WEFT_RETURN_IF_ERROR(nft_.Apply(tx));
    log_->scripts.push_back(script);
    return Status::Ok();
  }
  Result<std::map<std::string, size_t>> ChainRuleCounts() override {
    std::lock_guard lock(log_->mu);
    if (log_->tampered) return std::map<std::string, size_t>{};
    // Unreadable is not "different": the controller leaves the table alone.
    return Status::Error(Reason::kFailed, Domain::kFirewall, "not modelled");
  }
  Result<std::pair<uint64_t, uint64_t>> DropCounters() override { return std::pair<uint64_t, uint64_t>{3, 4}; }
  Status MarkConntrack(const std::vector<std::string>& ips, uint32_t) override {
    std::lock_guard lock(log_->mu);
    log_->flushed.insert(log_->flushed.end(), ips.begin(), ips.end());
    return Status::Ok();
  }
  Status WriteNamespaces(const std::string&, const std::string& content) override {
    std::lock_guard lock(log_->mu);
    log_->namespaces = content;
    return Status::Ok();
  }

 private:
  KernelLog* log_;
  sys::nft::Fake nft_;
};

constexpr char kPods[] = "/api/v1/pods";
constexpr char kNamespaces[] = "/api/v1/namespaces";
constexpr char kPolicies[] = "/apis/networking.k8s.io/v1/networkpolicies";
constexpr char kCnps[] = "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies";

json PodJson(const std::string& ns, const std::string& name, const std::string& node, const std::string& ip,
             const std::string& label) {
  return {{"metadata", {{"namespace", ns}, {"name", name}, {"labels", {{"pod", label}}}}},
          {"spec", {{"nodeName", node}}},
          {"status", {{"phase", "Running"}, {"podIP", ip}}}};
}

json PolicyJson(const std::string& ns, const std::string& name, json spec) {
  return {{"metadata", {{"namespace", ns}, {"name", name}}}, {"spec", std::move(spec)}};
}

class NetpolControllerTest : public ::testing::Test {
 protected:
  void Start(std::chrono::milliseconds resync = std::chrono::seconds(30)) {
    NetpolOptions o;
    o.cnp_absent_retry = std::chrono::milliseconds(50);
    o.node_name = "n1";
    o.namespaces_file = "/nonexistent/netpol-namespaces";
    o.resync = resync;
    o.batch = std::chrono::milliseconds(1);
    ctl_ = std::make_unique<NetpolController>(
        o, [this] { return std::make_unique<FakeApi>(&cluster_); }, std::make_unique<FakeKernel>(&log_));
    thread_ = std::thread([this] { ctl_->Run(stop_); });
  }
  void TearDown() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Whether `cond` holds within 3 s: what the controller does after the
  // kernel took a transaction (mark it applied, count it, become ready)
  // comes after the fake kernel logged it.
  static bool Eventually(const std::function<bool()>& cond) {
    for (int i = 0; i < 300; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return cond();
  }
  // Waits until the kernel got `n` scripts; returns the last one.
  std::string WaitScripts(size_t n) {
    for (int i = 0; i < 300; ++i) {
      {
        std::lock_guard lock(log_.mu);
        if (log_.scripts.size() >= n) return log_.scripts[n - 1];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "the kernel got fewer than " << n << " scripts";
    return "";
  }

  FakeCluster cluster_;
  KernelLog log_;
  std::unique_ptr<NetpolController> ctl_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

TEST_F(NetpolControllerTest, FullReplaceFromCompleteListsThenDeltas) {
  cluster_.Put(kNamespaces, {{"metadata", {{"name", "x"}}}});
  cluster_.Put(kPods, PodJson("x", "a", "n1", "10.0.1.1", "a"));
  cluster_.Put(kPods, PodJson("x", "b", "n2", "10.0.2.1", "b"));
  cluster_.Put(kPolicies, PolicyJson("x", "deny", {{"podSelector", json::object()}}));
  Start();
  std::string first = WaitScripts(1);
  EXPECT_EQ(first.find("add table inet weft-netpol\ndelete table inet weft-netpol\n"), 0u) << first;
  EXPECT_NE(first.find("10.0.1.1 : jump in-"), std::string::npos) << first;
  EXPECT_EQ(first.find("10.0.2.1 : jump"), std::string::npos) << first;  // another node's pod
  EXPECT_TRUE(Eventually([&] { return ctl_->metrics().ready.load(); }));
  {
    std::lock_guard lock(log_.mu);
    EXPECT_NE(log_.namespaces.find("\nx\n"), std::string::npos) << log_.namespaces;
    EXPECT_TRUE(log_.flushed.empty());  // nothing is flushed at start
  }
  EXPECT_NE(ctl_->DescribeJson().find("\"x/deny\""), std::string::npos);

  // Allow ingress from pod=b: a delta with a new set, the chain rewritten,
  // and the pod's conntrack entries flushed (its chain changed).
  cluster_.Event(kPolicies, "ADDED",
                 PolicyJson("x", "allow-b", {{"podSelector", json::object()},
                                             {"ingress", {{{"from", {{{"podSelector", {{"matchLabels", {{"pod", "b"}}}}}}}}}}}}));
  std::string delta = WaitScripts(2);
  EXPECT_EQ(delta.find("delete table"), std::string::npos) << delta;
  EXPECT_NE(delta.find("add set inet weft-netpol s"), std::string::npos) << delta;
  EXPECT_NE(delta.find("{ 10.0.2.1 }"), std::string::npos) << delta;
  EXPECT_NE(delta.find("flush chain inet weft-netpol in-"), std::string::npos) << delta;

  // Relabel the remote pod: only its element leaves the set, and its address
  // is flushed from conntrack.
  cluster_.Event(kPods, "MODIFIED", PodJson("x", "b", "n2", "10.0.2.1", "c"));
  delta = WaitScripts(3);
  EXPECT_EQ(delta.find("chain"), std::string::npos) << delta;
  EXPECT_NE(delta.find("delete element inet weft-netpol s"), std::string::npos) << delta;
  // Marked for a recheck on the controller's own thread, soon after.
  bool marked = false;
  for (int i = 0; i < 300 && !marked; ++i) {
    {
      std::lock_guard lock(log_.mu);
      marked = std::find(log_.flushed.begin(), log_.flushed.end(), "10.0.2.1") != log_.flushed.end();
    }
    if (!marked) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(marked);

  // Deleting every policy empties the namespaces file.
  cluster_.Event(kPolicies, "DELETED", PolicyJson("x", "deny", json::object()));
  cluster_.Event(kPolicies, "DELETED", PolicyJson("x", "allow-b", json::object()));
  for (int i = 0; i < 300; ++i) {
    {
      std::lock_guard lock(log_.mu);
      if (log_.namespaces.find("\nx\n") == std::string::npos) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard lock(log_.mu);
  EXPECT_EQ(log_.namespaces.find("\nx\n"), std::string::npos);
}

// ClusterNetworkPolicy: without the CRD weftd enforces NetworkPolicy as
// before; once the CRD is served its policies are listed, enforced, and
// their status written (this weftd is on the first Node by name).
TEST_F(NetpolControllerTest, ClusterNetworkPoliciesFromAMissingCrdToEnforcedWithStatus) {
  cluster_.Absent(kCnps);
  cluster_.Put(kNamespaces, {{"metadata", {{"name", "x"}, {"labels", {{"t", "1"}}}}}});
  cluster_.Put("/api/v1/nodes", {{"metadata", {{"name", "n1"}}}, {"status", {{"addresses", {{{"type", "InternalIP"}, {"address", "192.168.0.1"}}}}}}});
  cluster_.Put(kPods, PodJson("x", "a", "n1", "10.0.1.1", "a"));
  Start();
  std::string first = WaitScripts(1);
  EXPECT_EQ(first.find("jump in-"), std::string::npos) << first;  // nothing isolates yet
  EXPECT_TRUE(Eventually([&] { return ctl_->metrics().ready.load(); }));
  json cnp = {{"metadata", {{"name", "deny-meta"}, {"generation", 1}}},
              {"spec", {{"tier", "Admin"}, {"priority", 0}, {"subject", {{"namespaces", json::object()}}},
                        {"egress", {{{"action", "Deny"}, {"to", {{{"networks", {"169.254.169.254/32"}}}}}}}}}}};
  cluster_.Put(kCnps, cnp);
  cluster_.Serve(kCnps);
  std::string delta = WaitScripts(2);
  EXPECT_NE(delta.find("Admin:deny-meta egress 0 Deny"), std::string::npos) << delta;
  EXPECT_NE(delta.find("169.254.169.254"), std::string::npos) << delta;
  std::vector<std::string> patches;
  for (int i = 0; i < 300 && patches.empty(); ++i) {
    patches = cluster_.Patches();
    if (patches.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].find(std::string(kCnps) + "/deny-meta/status application/merge-patch+json "), 0u) << patches[0];
  EXPECT_NE(patches[0].find(R"("reason":"Accepted")"), std::string::npos) << patches[0];
  EXPECT_NE(patches[0].find(R"("observedGeneration":1)"), std::string::npos) << patches[0];
  EXPECT_EQ(ctl_->metrics().cluster_policies.load(), 1u);
  EXPECT_FALSE(ctl_->metrics().cnp_crd_absent.load());
  {
    std::lock_guard lock(log_.mu);
    EXPECT_NE(log_.namespaces.find("\nx\n"), std::string::npos) << log_.namespaces;  // pods start pending
  }
  EXPECT_NE(ctl_->DescribeJson().find("Admin:deny-meta"), std::string::npos);
  EXPECT_NE(RenderNetpolMetrics(ctl_->metrics()).find("weft_cnp_status_writes_total 1"), std::string::npos);
}

TEST_F(NetpolControllerTest, AFailedApplyIsRetriedAsAFullReplace) {
  cluster_.Put(kPods, PodJson("x", "a", "n1", "10.0.1.1", "a"));
  Start();
  WaitScripts(1);
  ASSERT_TRUE(Eventually([&] { return ctl_->metrics().full_syncs.load() == 1u; }));
  {
    std::lock_guard lock(log_.mu);
    log_.fail_next = true;
  }
  cluster_.Event(kPolicies, "ADDED", PolicyJson("x", "deny", {{"podSelector", json::object()}}));
  std::string retry = WaitScripts(2);
  EXPECT_EQ(retry.find("add table inet weft-netpol\ndelete table"), 0u) << retry;
  EXPECT_NE(retry.find("10.0.1.1 : jump in-"), std::string::npos);
  EXPECT_TRUE(Eventually([&] { return ctl_->metrics().full_syncs.load() == 2u; }))
      << ctl_->metrics().full_syncs.load();
  EXPECT_EQ(ctl_->metrics().sync_errors.load(), 1u);
}

TEST_F(NetpolControllerTest, ATamperedTableIsReplacedAtTheNextCheck) {
  cluster_.Put(kPods, PodJson("x", "a", "n1", "10.0.1.1", "a"));
  cluster_.Put(kPolicies, PolicyJson("x", "deny", {{"podSelector", json::object()}}));
  Start(std::chrono::milliseconds(100));
  WaitScripts(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    std::lock_guard lock(log_.mu);
    EXPECT_EQ(log_.scripts.size(), 1u);  // checks that find nothing replace nothing
  }
  {
    std::lock_guard lock(log_.mu);
    log_.tampered = true;
  }
  std::string again = WaitScripts(2);
  EXPECT_EQ(again.find("add table inet weft-netpol\ndelete table"), 0u) << again;
  EXPECT_NE(again.find("10.0.1.1 : jump in-"), std::string::npos);
}

TEST_F(NetpolControllerTest, NothingIsAppliedBeforeEveryListIsComplete) {
  cluster_.Put(kPods, PodJson("x", "a", "n1", "10.0.1.1", "a"));
  cluster_.Put(kPolicies, PolicyJson("x", "deny", {{"podSelector", json::object()}}));
  cluster_.FailLists(kNamespaces);
  Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  {
    std::lock_guard lock(log_.mu);
    EXPECT_EQ(log_.applies, 0);
    EXPECT_TRUE(log_.namespaces.empty());
  }
  EXPECT_FALSE(ctl_->metrics().ready.load());
  cluster_.FailLists("");
  std::string first = WaitScripts(1);
  EXPECT_NE(first.find("10.0.1.1 : jump in-"), std::string::npos);
}

TEST(NetpolMetrics, EveryFamilyRenders) {
  // Metrics render with every family, ready 0 before the first sync.
  std::string m = RenderNetpolMetrics(NetpolMetrics{});
  EXPECT_NE(m.find("weft_netpol_ready 0"), std::string::npos);
  EXPECT_NE(m.find("weft_netpol_sync_duration_seconds_bucket{le=\"+Inf\"} 0"), std::string::npos);
  EXPECT_NE(m.find("weft_netpol_dropped_packets_total{direction=\"egress\"} 0"), std::string::npos);
}

}  // namespace
}  // namespace weft::policy
