// services_check.h: the kernel's table inet weft-services against weftd's,
// each difference put down to its Service (no root: the layer's fake).

#include "doctor/services_check.h"

#include <gtest/gtest.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include "services/test_objects.h"
#include "sys/nft_fake.h"
#include "sys/nft_json.h"

namespace weft::doctor {
namespace {

namespace nft = sys::nft;
using services::testing::Decoded;
using services::testing::DecodedSlice;
using services::testing::ServiceJson;
using services::testing::SliceJson;

class ServicesCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    services::Config cfg;
    cfg.node.node_name = "n1";
    model_ = std::make_unique<services::Model>(cfg);
    (void)model_->UpsertService(Decoded(ServiceJson("s", "web", {"10.96.0.10"})));
    (void)model_->UpsertSlice(
        DecodedSlice(SliceJson("s", "web", "web-1", {{.ip = "10.244.1.5", .node = "n1"}, {.ip = "10.244.2.5"}})));
    (void)model_->UpsertService(Decoded(ServiceJson("s", "idle", {"10.96.0.11"})));
    (void)model_->UpsertService(Decoded(ServiceJson("t", "api", {"10.96.0.12"})));
    (void)model_->UpsertSlice(DecodedSlice(SliceJson("t", "api", "api-1", {{.ip = "10.244.2.9"}})));
    ASSERT_TRUE(kernel_.Apply(model_->Full()).ok());
  }
  services::TableDigest Want() {
    auto d = ServicesRulesetDigest(nft::TransactionJson(model_->Full()));
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? *d : services::TableDigest{};
  }
  services::TableDigest Have() { return services::DigestOf(*kernel_.Dump(nft::Family::kInet, services::kTable)); }
  void Break(nft::Verb verb, nft::Object o) {
    nft::Transaction tx(nft::Family::kInet, services::kTable);
    tx.Push(verb, std::move(o));
    ASSERT_TRUE(kernel_.Apply(tx).ok());
  }

  std::unique_ptr<services::Model> model_;
  nft::Fake kernel_;
};

TEST_F(ServicesCheck, NamesTheServiceOfAChainOrSet) {
  EXPECT_EQ(ServiceOfObject(services::ChainName("svc", false, "s/web/tcp/http")), "s/web");
  EXPECT_EQ(ServiceOfObject(services::ChainName("ep", true, "s/web/tcp/http", "fd00..5/80")), "s/web");
  EXPECT_EQ(ServiceOfObject(services::ChainName("aff", false, "kube-system/dns/udp/dns", "10.0.0.1/53")),
            "kube-system/dns");
  EXPECT_EQ(ServiceOfObject("services"), "");
  EXPECT_EQ(ServiceOfObject("reject-chain"), "");
  EXPECT_EQ(ServiceOfObject("service-ips4"), "");
}

TEST_F(ServicesCheck, EqualTablesHaveNoDifference) { EXPECT_TRUE(DiffServicesTables(Want(), Have()).empty()); }

TEST_F(ServicesCheck, AFlushedServiceChainNamesItsServiceOnly) {
  Break(nft::Verb::kFlush, nft::Chain{services::ChainName("svc", false, "s/web/tcp/http")});
  auto d = DiffServicesTables(Want(), Have());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].service, "s/web");
  ASSERT_FALSE(d[0].lines.empty());
  EXPECT_NE(d[0].lines[0].find("rule missing: numgen random mod 2"), std::string::npos) << d[0].lines[0];
}

TEST_F(ServicesCheck, ADeletedMapElementAndAnExtraRuleNameTheirServices) {
  nft::Element el{.key = services::MapKeyBytes(*IpAddress::Parse("10.96.0.12"), services::Proto::kTcp, 80),
                  .verdict = nft::Verdict{NFT_GOTO, services::ChainName("svc", false, "t/api/tcp/http")}};
  Break(nft::Verb::kDelete, nft::Elements{services::ServiceIpsMap(false), {el}});
  const std::string ep = services::ChainName("ep", false, "s/web/tcp/http", "10.244.2.5/8080");
  Break(nft::Verb::kAdd, nft::Rule{.chain = ep, .exprs = {nft::Verdict{NF_DROP, ""}}});
  auto d = DiffServicesTables(Want(), Have());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].service, "s/web");
  EXPECT_EQ(d[0].lines, std::vector<std::string>{"chain " + ep + ": rule extra (stale): drop"});
  EXPECT_EQ(d[1].service, "t/api");
  ASSERT_EQ(d[1].lines.size(), 1u);
  EXPECT_NE(d[1].lines[0].find("map service-ips4: element missing: 10.96.0.12 . tcp . 80"), std::string::npos)
      << d[1].lines[0];
}

TEST_F(ServicesCheck, ANoEndpointEntryAndTheFixedPart) {
  Break(nft::Verb::kFlush, nft::Set{.name = services::NoEndpointServicesMap(false)});
  Break(nft::Verb::kFlush, nft::Chain{services::kServicesChain});
  auto d = DiffServicesTables(Want(), Have());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].service, "");  // the services chain
  EXPECT_EQ(d[0].lines.size(), 4u);
  EXPECT_EQ(d[1].service, "?");
  ASSERT_EQ(d[1].lines.size(), 1u);
  EXPECT_NE(d[1].lines[0].find("10.96.0.11 . tcp . 80"), std::string::npos) << d[1].lines[0];
}

TEST_F(ServicesCheck, TheRulesetMustBeTheServicesTable) {
  nft::Transaction other(nft::Family::kInet, "weft-netpol");
  EXPECT_FALSE(ServicesRulesetTransaction(nft::TransactionJson(other)).ok());
  EXPECT_FALSE(ServicesRulesetDigest("{").ok());
}

}  // namespace
}  // namespace weft::doctor
