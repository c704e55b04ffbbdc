// The etcd client's pure parts: the gateway's bodies decoded (etcd_client.h)
// and the end of a prefix range (etcd_registry.h). The etcd control plane's
// own tests, and a captured range decoded into a subnet record, are in
// src/agent/etcd_test.cc.
#include "etcd/etcd_client.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weft::etcd {
namespace {

// The Base64 assertions that were here live in base/strings_test.cc.
TEST(EtcdKeys, PrefixRangeEnd) {
  EXPECT_EQ(PrefixRangeEnd("/w/"), "/w0");
  EXPECT_EQ(PrefixRangeEnd("a\xff"), "b");
}

TEST(EtcdParse, EmptyRangeAndErrors) {
  auto r = ParseRangeResponse(R"({"header":{"revision":"3"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->kvs.empty());
  EXPECT_EQ(r->revision, 3);
  auto bad = ParseRangeResponse(R"({"header":{"revision":"3"},"kvs":[{"key":"L3c)");
  EXPECT_EQ(bad.status().reason(), Reason::kMalformed);
  auto err = ParseRangeResponse(R"({"error":"etcdserver: mvcc: required revision has been compacted","code":11,"message":"etcdserver: mvcc: required revision has been compacted"})");
  EXPECT_EQ(err.status().reason(), Reason::kUnavailable);
  EXPECT_NE(err.status().msg().find("compacted"), std::string::npos);
}

TEST(EtcdParse, WatchCreatedEventsDeleteAndCompaction) {
  auto c = ParseWatchLine(R"({"result":{"header":{"revision":"2"},"created":true}})");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->created);
  EXPECT_TRUE(c->events.empty());
  auto e = ParseWatchLine(
      R"({"result":{"header":{"revision":"9"},"events":[{"kv":{"key":"YQ==","mod_revision":"8","value":"Yg=="}},)"
      R"({"type":"DELETE","kv":{"key":"Yw==","mod_revision":"9"}}]}})");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->events.size(), 2u);
  EXPECT_FALSE(e->events[0].is_delete);  // PUT is omitted by the gateway
  EXPECT_EQ(e->events[0].kv.key, "a");
  EXPECT_EQ(e->events[0].kv.value, "b");
  EXPECT_TRUE(e->events[1].is_delete);
  EXPECT_EQ(e->events[1].kv.mod_revision, 9);
  auto k = ParseWatchLine(R"({"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"2"}})");
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->canceled);
  EXPECT_EQ(k->compact_revision, 2);
  auto err = ParseWatchLine(R"({"error":{"grpc_code":14,"http_code":503,"message":"transport is closing"}})");
  EXPECT_EQ(err.status().reason(), Reason::kUnavailable);
  EXPECT_FALSE(ParseWatchLine(R"({"result":{"header":{},"events":[{"kv":{"key":"***"}}]}})").ok());
}

TEST(EtcdParse, TxnLeaseAndKeepAlive) {
  int64_t rev = 0;
  auto t = ParseTxnResponse(R"({"header":{"revision":"4"},"succeeded":true,"responses":[{"response_put":{}}]})", &rev);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(*t);
  EXPECT_EQ(rev, 4);
  auto f = ParseTxnResponse(R"({"header":{"revision":"4"}})", nullptr);  // failed: "succeeded" omitted
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(*f);
  auto g = ParseLeaseGrant(R"({"header":{"revision":"1"},"ID":"2324035537149665541","TTL":"2"})");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, 2324035537149665541);
  EXPECT_FALSE(ParseLeaseGrant(R"({"header":{}})").ok());
  auto alive = ParseLeaseKeepAlive(R"({"result":{"header":{},"ID":"5","TTL":"10"}})");
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(*alive, 10);
  auto gone = ParseLeaseKeepAlive("{\"result\":{\"header\":{},\"ID\":\"12345\"}}\n");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, 0);
}

}  // namespace
}  // namespace weft::etcd
