// sys/nft_json.h: every object and expression kind survives the round trip
// exactly; what is not a transaction document is refused with the op named.
#include "sys/nft_json.h"

#include <gtest/gtest.h>
#include <linux/netfilter/nf_tables.h>

namespace weft::sys::nft {
namespace {

Transaction Everything() {
  Transaction tx(Family::kInet, "t");
  tx.Add(Table{"t"}).Delete(Table{"t"}).Add(Table{"t"});
  tx.Add(Chain{"c"});
  tx.Add(Chain{"in", Hook{.num = 1, .priority = -150, .type = "filter", .device = "", .policy = 0}});
  tx.Add(NamedCounter{"n", 3, 4});
  tx.Add(NamedLimit{.name = "l", .rate = 10, .unit = 60, .burst = 7, .type = NFT_LIMIT_PKTS, .invert = true});
  tx.Add(Set{.name = "s", .flags = NFT_SET_MAP | NFT_SET_INTERVAL, .key_type = 7, .key_len = 4, .data_type = 1,
             .data_len = 0, .fields = {4, 1}, .timeout_ms = 5000, .userdata = std::string("\x00\x04\xff", 3)});
  tx.Add(Elements{"s", {Element{.key = std::string("\x0a\0\0\x01", 4), .key_end = "\x0b", .data = "\x01\x02",
                                .verdict = Verdict{NFT_JUMP, "c"}, .flags = NFT_SET_ELEM_INTERVAL_END,
                                .timeout_ms = 9},
                        Element{.key = std::string("\0", 1)}}});
  Rule r;
  r.chain = "in";
  r.comment = "every \"kind\"";
  r.handle = 42;
  r.exprs = {Meta{NFT_META_L4PROTO, NFT_REG32_01},
             Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG_1},
             Ct{.key = NFT_CT_SRC_IP, .dreg = 2, .dir = 1},
             Ct{.key = NFT_CT_STATE},
             Cmp{NFT_CMP_GTE, std::string("\0\x50", 2), 1},
             Bitwise{1, 2, 4, std::string("\xff\xff\0\0", 4), std::string(4, '\0')},
             Lookup{.set = "s", .sreg = 8, .dreg = 0, .invert = true},
             Lookup{.set = "s"},
             Immediate{3, "\x01"},
             Verdict{NFT_GOTO, "c"},
             Counter{1, 2},
             CounterRef{"n"},
             Log{.prefix = "p", .group = 5, .snaplen = 64, .qthreshold = 2},
             Log{.prefix = "no group"},
             Nat{.type = NFT_NAT_DNAT, .masq = false, .family = 2, .reg_addr = 1, .reg_proto = 2, .flags = 4},
             Numgen{NFT_NG_RANDOM, 3, 1, 1},
             Limit{.rate = 1, .unit = 1, .burst = 5, .type = NFT_LIMIT_PKT_BYTES, .invert = false},
             LimitRef{"l"},
             Fib{.flags = 1, .result = 3, .dreg = 1},
             MetaSet{NFT_META_MARK, 1},
             Reject{NFT_REJECT_ICMPX_UNREACH, 1},
             Dynset{.op = NFT_DYNSET_OP_UPDATE, .set = "s", .sreg_key = 1, .timeout_ms = 5000}};
  tx.Add(r);
  tx.Flush(Chain{"c"}).Destroy(Set{.name = "gone"}).Create(Chain{"new"});
  return tx;
}

TEST(NftJson, EveryObjectAndExpressionRoundTrips) {
  const Transaction tx = Everything();
  const std::string doc = TransactionJson(tx);
  auto back = ParseTransactionJson(doc);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << doc;
  EXPECT_EQ(back->family(), tx.family());
  EXPECT_EQ(back->table(), tx.table());
  ASSERT_EQ(back->ops().size(), tx.ops().size());
  for (size_t i = 0; i < tx.ops().size(); ++i) EXPECT_EQ(back->ops()[i], tx.ops()[i]) << "op " << i;
  EXPECT_EQ(TransactionJson(*back), doc);
}

TEST(NftJson, WhatIsNotATransactionIsRefusedByName) {
  auto refused = [](const std::string& doc) {
    auto r = ParseTransactionJson(doc);
    EXPECT_FALSE(r.ok()) << doc;
    return r.ok() ? std::string() : r.status().ToString();
  };
  EXPECT_NE(refused("{").find("not JSON"), std::string::npos);
  EXPECT_NE(refused("[]").find("family"), std::string::npos);
  EXPECT_NE(refused(R"({"family":99,"table":"t","ops":[]})").find("unknown family"), std::string::npos);
  const std::string head = R"({"family":1,"table":"t","ops":[)";
  EXPECT_NE(refused(head + R"({"verb":"replace","table":{"name":"t"}}]})").find("op 0: unknown verb"),
            std::string::npos);
  EXPECT_NE(refused(head + R"({"verb":"add","table":{"name":"t"}},{"verb":"add"}]})").find("op 1: no object"),
            std::string::npos);
  EXPECT_NE(refused(head + R"({"verb":"add","rule":{"chain":"c","exprs":[{"quota":{}}]}}]})")
                .find("unknown expression \"quota\""),
            std::string::npos);
  EXPECT_NE(refused(head + R"({"verb":"add","rule":{"chain":"c","exprs":[{"cmp":{"data":"zz"}}]}}]})")
                .find("\"data\" is not hex bytes"),
            std::string::npos);
  EXPECT_NE(refused(head + R"({"verb":"add","rule":{"chain":"c","exprs":[{"meta":{"key":-1}}]}}]})")
                .find("\"key\" is not unsigned"),
            std::string::npos);
  EXPECT_NE(refused(head + R"({"verb":"add","rule":{"chain":"c","exprs":[{"ct":{"dir":300}}]}}]})")
                .find("\"dir\" is not in range"),
            std::string::npos);
  EXPECT_NE(refused(head + R"({"verb":"add","set":{"name":"s","fields":[-4]}}]})").find("set:"), std::string::npos);
}

}  // namespace
}  // namespace weft::sys::nft
