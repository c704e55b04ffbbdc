// The etcd control plane against FakeEtcd: registration, lease renewal and
// the watch/re-list state machine, without etcd. Single-threaded except the
// Run test: the fake's idle hook and the recorded sleeps drive each step.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "agent/etcd.h"
#include "etcd/etcd_fake.h"

namespace weft::agent {
namespace {

using Op = etcd::FakeEtcd::Op;

IpPrefix P(const char* s) { return *IpPrefix::Parse(s); }

overlay::LocalNode Node(const std::string& name, int i) {
  return overlay::LocalNode{name, *IpAddress::Parse("192.0.2." + std::to_string(10 + i)), "0a:00:00:00:00:0" + std::to_string(i),
                   overlay::Backend::kVxlan};
}

class EtcdControlPlaneTest : public ::testing::Test {
 protected:
  static EtcdOptions Opts() {
    EtcdOptions o;
    o.prefix = "/w";
    o.lease_ttl = 60;
    o.cluster_cidrs = {P("10.244.0.0/16")};
    return o;
  }

  std::unique_ptr<EtcdControlPlane> Make(EtcdOptions o = Opts()) {
    auto cp = std::make_unique<EtcdControlPlane>(std::move(o), [this](AuthHealth*) { return etcd_.NewClient(); });
    cp->SetSleepForTesting([this](std::chrono::milliseconds d, const std::atomic<bool>& stop) {
      sleeps_.push_back(d.count());
      if (on_sleep_) on_sleep_();
      return !stop.load();
    });
    cp->SetClockForTesting([this] { return now_; });
    return cp;
  }

  // Another node's record, written behind our back.
  void Rival(const char* name, int i, const char* subnet, int64_t lease = 0) {
    etcd_.Put(SubnetKey("/w", P(subnet)), EncodeSubnetValue(Node(name, i)), lease);
  }

  static std::vector<std::string> Names(const PeerStore::Snapshot& s) {
    std::vector<std::string> out;
    for (const auto& [name, info] : s.peers) out.push_back(name);
    return out;
  }

  etcd::FakeEtcd etcd_;
  std::atomic<bool> stop_{false};
  std::vector<int64_t> sleeps_;
  std::function<void()> on_sleep_;
  std::chrono::steady_clock::time_point now_{};
};

using Subnets = std::vector<IpPrefix>;
using Strings = std::vector<std::string>;
using Sleeps = std::vector<int64_t>;

TEST_F(EtcdControlPlaneTest, RegisterWritesTheConfigAndClaimsTheFirstFreeSubnetUnderALease) {
  auto cp = Make();
  auto r = cp->Register(Node("n1", 1), stop_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, Subnets{P("10.244.0.0/24")});
  auto cfg = etcd_.Get("/w/config");
  ASSERT_TRUE(cfg.has_value());
  EXPECT_EQ(cfg->value, R"({"network":"10.244.0.0/16","subnetLen":24})");
  auto rec = etcd_.Get("/w/subnets/10.244.0.0-24");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->lease, cp->lease());
  EXPECT_TRUE(etcd_.LeaseAlive(cp->lease()));
  EXPECT_EQ(DecodeSubnet("/w", *rec)->name, "n1");
  EXPECT_EQ(cp->ClusterCidrs(), Subnets{P("10.244.0.0/16")});

  auto cp2 = Make();
  EXPECT_EQ(*cp2->Register(Node("n2", 2), stop_), Subnets{P("10.244.1.0/24")});
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(EtcdControlPlaneTest, RegisterGivesUpAtOnceWithoutAConfig) {
  EtcdOptions o = Opts();
  o.cluster_cidrs.clear();
  auto r = Make(o)->Register(Node("n1", 1), stop_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().msg().find("no --cluster-cidr"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(sleeps_.empty());
  EXPECT_EQ(etcd_.Requests(Op::kLeaseGrant), 0);
}

TEST_F(EtcdControlPlaneTest, RegisterGivesUpAtOnceOnAnInvalidConfigButRetriesAnUnreadableOne) {
  EtcdOptions o = Opts();
  o.cluster_cidrs.clear();
  etcd_.Put("/w/config", R"({"network":"10.244.0.0/16","subnetLen":8})");
  auto r = Make(o)->Register(Node("n1", 1), stop_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  EXPECT_TRUE(sleeps_.empty());

  // Bad JSON may be a config being rewritten: retried until it reads.
  etcd_.Put("/w/config", "{");
  on_sleep_ = [&] { etcd_.Put("/w/config", R"({"network":"10.245.0.0/16"})"); };
  auto ok = Make(o)->Register(Node("n1", 1), stop_);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, Subnets{P("10.245.0.0/24")});
  EXPECT_EQ(sleeps_, Sleeps{200});
}

TEST_F(EtcdControlPlaneTest, RegisterGivesUpWhenTheNetworkIsFull) {
  EtcdOptions o = Opts();
  o.cluster_cidrs = {P("10.244.0.0/23")};
  auto cp = Make(o);
  Rival("n2", 2, "10.244.0.0/24");
  Rival("n3", 3, "10.244.1.0/24");
  auto r = cp->Register(Node("n1", 1), stop_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsExhausted()) << r.status().ToString();
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(EtcdControlPlaneTest, RegisterRetriesTransientFailuresWithBackoff) {
  etcd_.FailNext(Op::kLeaseGrant);
  etcd_.FailNext(Op::kRange);
  auto cp = Make();
  auto r = cp->Register(Node("n1", 1), stop_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(sleeps_, (Sleeps{200, 400}));
  EXPECT_EQ(cp->stats().errors.load(), 2u);
}

TEST_F(EtcdControlPlaneTest, RegisterStopsRetryingWhenStopped) {
  etcd_.FailNext(Op::kLeaseGrant, 100);
  on_sleep_ = [&] { stop_ = true; };
  auto r = Make()->Register(Node("n1", 1), stop_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(sleeps_.size(), 1u);
}

TEST_F(EtcdControlPlaneTest, ARestartedNodeKeepsItsSubnetOnItsNewLease) {
  auto first = Make();
  ASSERT_TRUE(first->Register(Node("n1", 1), stop_).ok());
  Rival("n2", 2, "10.244.1.0/24");
  const int64_t old_lease = first->lease();
  const int64_t created = etcd_.Get("/w/subnets/10.244.0.0-24")->create_revision;

  auto again = Make();
  auto r = again->Register(Node("n1", 1), stop_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, Subnets{P("10.244.0.0/24")});
  EXPECT_NE(again->lease(), old_lease);
  EXPECT_FALSE(etcd_.LeaseAlive(old_lease));  // revoked: it held nothing any more
  auto rec = etcd_.Get("/w/subnets/10.244.0.0-24");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->lease, again->lease());
  EXPECT_EQ(rec->create_revision, created);  // moved, not re-created
}

TEST_F(EtcdControlPlaneTest, AClaimThatLosesARaceReadsAgain) {
  int txns = 0;
  // The config's transaction is the first; a rival takes the first subnet
  // between our read and our claim.
  etcd_.SetBeforeTxn([&] {
    if (++txns == 2) Rival("n2", 2, "10.244.0.0/24");
  });
  auto r = Make()->Register(Node("n1", 1), stop_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, Subnets{P("10.244.1.0/24")});
  EXPECT_EQ(txns, 3);
  EXPECT_EQ(DecodeSubnet("/w", *etcd_.Get("/w/subnets/10.244.0.0-24"))->name, "n2");
}

TEST_F(EtcdControlPlaneTest, AnExpiredLeaseIsReclaimedWithTheSameSubnet) {
  auto cp = Make();
  ASSERT_TRUE(cp->Register(Node("n1", 1), stop_).ok());
  const int64_t old_lease = cp->lease();
  etcd_.ExpireLease(old_lease);
  ASSERT_FALSE(etcd_.Get("/w/subnets/10.244.0.0-24").has_value());
  Rival("n2", 2, "10.244.1.0/24");
  // Renew once, then stop at the next interval.
  on_sleep_ = [&] {
    if (sleeps_.size() == 2) stop_ = true;
  };
  EXPECT_TRUE(cp->KeepAlive(stop_).ok());
  EXPECT_EQ(sleeps_, (Sleeps{20000, 20000}));  // lease_ttl / 3
  EXPECT_NE(cp->lease(), old_lease);
  auto rec = etcd_.Get("/w/subnets/10.244.0.0-24");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->lease, cp->lease());
  EXPECT_EQ(cp->stats().errors.load(), 0u);
}

TEST_F(EtcdControlPlaneTest, FailedRenewalsAreRetriedWithBackoff) {
  auto cp = Make();
  ASSERT_TRUE(cp->Register(Node("n1", 1), stop_).ok());
  const int64_t lease = cp->lease();
  etcd_.FailNext(Op::kLeaseKeepAlive, 2);
  on_sleep_ = [&] {
    if (sleeps_.size() == 4) stop_ = true;
  };
  EXPECT_TRUE(cp->KeepAlive(stop_).ok());
  EXPECT_EQ(sleeps_, (Sleeps{20000, 200, 400, 20000}));
  EXPECT_EQ(cp->lease(), lease);
  EXPECT_EQ(etcd_.Requests(Op::kLeaseKeepAlive), 3);
  EXPECT_EQ(cp->stats().errors.load(), 2u);
}

TEST_F(EtcdControlPlaneTest, RunEndsWhenTheLostSubnetWasTakenMeanwhile) {
  auto cp = Make();
  ASSERT_TRUE(cp->Register(Node("n1", 1), stop_).ok());
  etcd_.ExpireLease(cp->lease());
  Rival("n2", 2, "10.244.0.0/24");
  PeerStore store;
  Status st = cp->Run(store, stop_);  // the watch runs on its own thread meanwhile
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(st.IsExhausted()) << st.ToString();
  EXPECT_NE(st.msg().find("taken by another node"), std::string::npos) << st.ToString();
  EXPECT_FALSE(stop_.load());
}

TEST_F(EtcdControlPlaneTest, WatchListsAppliesEventsAndRelistsAfterCompaction) {
  auto cp = Make();
  ASSERT_TRUE(cp->Register(Node("n1", 1), stop_).ok());
  Rival("n2", 2, "10.244.2.0/24");
  PeerStore store;
  int step = 0;
  etcd_.SetWatchIdle([&] {
    switch (++step) {
      case 1:  // listed; the watch is open
        EXPECT_EQ(Names(store.Get()), Strings{"n2"});
        Rival("n3", 3, "10.244.3.0/24");
        return true;
      case 2:  // n3's event arrived. The stream closes; while it is down n2 goes, n4 comes, and the
               // history is compacted, so the reconnected watch cannot resume.
        EXPECT_EQ(Names(store.Get()), (Strings{"n2", "n3"}));
        etcd_.Delete("/w/subnets/10.244.2.0-24");
        Rival("n4", 4, "10.244.4.0/24");
        etcd_.Compact(etcd_.revision());
        return false;
      default:  // re-listed
        EXPECT_EQ(Names(store.Get()), (Strings{"n3", "n4"}));
        stop_ = true;
        return false;
    }
  });
  cp->WatchPeers(store, stop_);
  EXPECT_EQ(step, 3);
  EXPECT_EQ(Names(store.Get()), (Strings{"n3", "n4"}));
  EXPECT_EQ(cp->stats().relists.load(), 2u);
  EXPECT_EQ(cp->stats().reconnects.load(), 1u);  // the closed stream; the compacted one re-lists instead
  EXPECT_EQ(cp->stats().errors.load(), 0u);
  EXPECT_TRUE(sleeps_.empty());  // every watch had progressed
}

TEST_F(EtcdControlPlaneTest, ABrokenWatchReconnectsFromItsRevisionWithoutRelisting) {
  auto cp = Make();
  ASSERT_TRUE(cp->Register(Node("n1", 1), stop_).ok());
  PeerStore store;
  etcd_.FailNext(Op::kWatch);
  // While the first stream is broken, n2 joins: the reconnected watch replays it.
  on_sleep_ = [&] { Rival("n2", 2, "10.244.2.0/24"); };
  etcd_.SetWatchIdle([&] {
    stop_ = true;
    return false;
  });
  cp->WatchPeers(store, stop_);
  EXPECT_EQ(Names(store.Get()), Strings{"n2"});
  EXPECT_EQ(cp->stats().relists.load(), 1u);
  EXPECT_EQ(cp->stats().reconnects.load(), 1u);
  EXPECT_EQ(cp->stats().errors.load(), 1u);
  EXPECT_EQ(cp->stats().events.load(), 1u);
  EXPECT_EQ(sleeps_, Sleeps{200});  // progressed (created), so the backoff starts over
  EXPECT_EQ(etcd_.Requests(Op::kWatch), 2);
}

TEST_F(EtcdControlPlaneTest, AHealthyWatchIsRelistedEveryTenMinutes) {
  auto cp = Make();
  ASSERT_TRUE(cp->Register(Node("n1", 1), stop_).ok());
  PeerStore store;
  int step = 0;
  etcd_.SetWatchIdle([&] {
    if (++step == 1) {
      now_ += std::chrono::minutes(11);
      Rival("n2", 2, "10.244.2.0/24");  // the next message triggers the re-list
      return true;
    }
    stop_ = true;
    return false;
  });
  cp->WatchPeers(store, stop_);
  EXPECT_EQ(cp->stats().relists.load(), 2u);
  EXPECT_EQ(cp->stats().events.load(), 0u);  // n2 came with the list, not the event
  EXPECT_EQ(Names(store.Get()), Strings{"n2"});
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(EtcdControlPlaneTest, LeaveWithdrawsBothFamiliesAtOnceAndRevokesTheLease) {
  EtcdOptions o = Opts();
  o.cluster_cidrs = {P("10.244.0.0/16"), P("fd00:10:244::/56")};
  auto cp = Make(o);
  auto r = cp->Register(Node("n1", 1), stop_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (Subnets{P("10.244.0.0/24"), P("fd00:10:244::/64")}));
  Rival("n2", 2, "10.244.1.0/24");
  const int64_t lease = cp->lease();
  const int64_t before = etcd_.revision();
  ASSERT_TRUE(cp->Leave().ok());
  EXPECT_EQ(etcd_.revision(), before + 1);  // one transaction
  EXPECT_FALSE(etcd_.Get("/w/subnets/10.244.0.0-24").has_value());
  EXPECT_FALSE(etcd_.Get("/w/subnets6/fd00:10:244::-64").has_value());
  EXPECT_TRUE(etcd_.Get("/w/subnets/10.244.1.0-24").has_value());
  EXPECT_FALSE(etcd_.LeaseAlive(lease));

  // weftd --leave: a fresh process that never registered.
  auto again = Make(o);
  ASSERT_TRUE(again->Register(Node("n3", 3), stop_).ok());
  EtcdOptions leaving = o;
  leaving.node_name = "n3";
  ASSERT_TRUE(Make(leaving)->Leave().ok());
  EXPECT_TRUE(etcd_.List("/w/subnets6/").empty());
  EXPECT_EQ(etcd_.List("/w/subnets/").size(), 1u);  // n2's
}

TEST(PlanClaim, ReusesTheNodesOwnRecordAndPicksTheOtherFamily) {
  NetworkConfig cfg;
  cfg.network = P("10.244.0.0/16");
  cfg.network6 = P("fd00::/56");
  etcd::EtcdKv own{SubnetKey("/w", P("10.244.7.0/24")), EncodeSubnetValue(Node("n1", 1)), 3, 5, 77};
  etcd::EtcdKv other{SubnetKey("/w", P("fd00::/64")), EncodeSubnetValue(Node("n2", 2)), 4, 4, 88};
  auto c = PlanClaim("/w", "n1", "V", cfg, {own, other}, {}, {}, 99);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->subnets, (Subnets{P("10.244.7.0/24"), P("fd00:0:0:1::/64")}));
  EXPECT_TRUE(c->reused);
  EXPECT_EQ(c->old_leases, std::vector<int64_t>{77});
  ASSERT_EQ(c->txn.compare.size(), 2u);
  EXPECT_EQ(c->txn.compare[0].target, etcd::EtcdCompare::Target::kMod);
  EXPECT_EQ(c->txn.compare[0].revision, 5);
  EXPECT_EQ(c->txn.compare[1].target, etcd::EtcdCompare::Target::kCreate);
  EXPECT_EQ(c->txn.compare[1].key, "/w/subnets6/fd00:0:0:1::-64");
  for (const auto& op : c->txn.success) EXPECT_EQ(op.lease, 99);

  // A lost lease must get the same subnet back; another node's is no use.
  auto lost = PlanClaim("/w", "n1", "V", cfg, {other}, {P("fd00::/64")}, {P("fd00::/64")}, 99);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.failure().why, Why::kNoSubnet);
  EXPECT_FALSE(lost.retryable());
}

TEST(EtcdGateway, TransactionBody) {
  etcd::EtcdTxn txn{{{"/w/config", etcd::EtcdCompare::Target::kCreate, 0}, {"/k", etcd::EtcdCompare::Target::kMod, 12}},
              {{etcd::EtcdOp::Kind::kPut, "/w/config", "v"}, {etcd::EtcdOp::Kind::kPut, "/k", "x", 7}, {etcd::EtcdOp::Kind::kDelete, "/d"}}};
  auto j = nlohmann::json::parse(etcd::EncodeTxn(txn));
  EXPECT_EQ(j["compare"][0], nlohmann::json::parse(
                                 R"({"key":"L3cvY29uZmln","target":"CREATE","result":"EQUAL","create_revision":"0"})"));
  EXPECT_EQ(j["compare"][1],
            nlohmann::json::parse(R"({"key":"L2s=","target":"MOD","result":"EQUAL","mod_revision":"12"})"));
  EXPECT_EQ(j["success"][0], nlohmann::json::parse(R"({"request_put":{"key":"L3cvY29uZmln","value":"dg=="}})"));
  EXPECT_EQ(j["success"][1], nlohmann::json::parse(R"({"request_put":{"key":"L2s=","value":"eA==","lease":"7"}})"));
  EXPECT_EQ(j["success"][2], nlohmann::json::parse(R"({"request_delete_range":{"key":"L2Q="}})"));
  // Leave's transaction has no compares, as before.
  EXPECT_FALSE(nlohmann::json::parse(etcd::EncodeTxn(etcd::EtcdTxn{{}, {{etcd::EtcdOp::Kind::kDelete, "/d"}}})).contains("compare"));
}

}  // namespace
}  // namespace weft::agent
