#include "doctor/nft_table.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace weft::doctor {
namespace {

// What `nft list table inet weft-netpol` (nftables 1.0.6) printed for a
// ruleset weftd rendered: tabs, wrapped elements, "tcp dport" for weftd's
// "meta l4proto tcp th dport", intervals as prefixes.
const char kListing[] = R"(table inet weft-netpol {
	counter drop-ingress {
		packets 0 bytes 0
	}

	counter drop-egress {
		packets 7 bytes 420
	}

	set local4 {
		type ipv4_addr
		elements = { 10.0.1.1, 10.0.1.2 }
	}

	set p0b5187d3f26e-i0-b4 {
		type ipv4_addr
		flags interval
		elements = { 10.0.0.0/23, 10.0.3.0-10.0.255.255 }
	}

	set p6489cd055f6e-e0-n4 {
		type ipv4_addr . inet_proto . inet_service
		elements = { 10.0.1.1 . tcp . 80,
			     10.0.2.1 . tcp . 80,
			     10.0.1.2 . tcp . 81 }
	}

	set pb5bff39758a4-i0-p4 {
		type ipv4_addr
		elements = { 10.0.1.1 }
	}

	map ingress4 {
		type ipv4_addr : verdict
		elements = { 10.0.1.1 : jump in-fc5187d3d8f1, 10.0.1.2 : jump in-f95187d3d3d8 }
	}

	map egress4 {
		type ipv4_addr : verdict
	}

	chain in-f95187d3d3d8 {
		ct state invalid drop
		ip saddr 10.0.1.2 accept comment "itself"
		ip saddr @pb5bff39758a4-i0-p4 tcp dport 81 accept comment "x/allow-b ingress 0"
		counter name "drop-ingress" drop
	}

	chain in-fc5187d3d8f1 {
		ct state invalid drop
		ip saddr 10.0.1.1 accept comment "itself"
		ip saddr @p0b5187d3f26e-i0-b4 tcp dport 80-81 accept comment "x/p ingress 0"
		ip saddr @p0b5187d3f26e-i0-b4 meta l4proto udp accept comment "x/p ingress 0"
		counter name "drop-ingress" drop
	}

	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state established,related accept
		iifgroup 22342 ip saddr != @local4 counter name "drop-egress" drop comment "pending pod"
		ip saddr vmap @egress4
		ip daddr vmap @ingress4
		tcp dport { 443, 80 } counter packets 3 bytes 180 accept
	}
}
)";

NftTable Listing() {
  auto t = ParseNftTable(kListing);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : NftTable{};
}

// Replaces the first occurrence of `from` in `text`.
std::string Edit(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

NftTable Parse(const std::string& text) {
  auto t = ParseNftTable(text);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : NftTable{};
}

TEST(NftTable, ParsesNftsListing) {
  NftTable t = Listing();
  EXPECT_EQ(t.name, "inet weft-netpol");
  EXPECT_EQ(t.objects, (std::set<std::string>{"counter drop-egress", "counter drop-ingress"}));
  ASSERT_EQ(t.sets.size(), 6u);
  EXPECT_FALSE(t.sets["local4"].map);
  EXPECT_EQ(t.sets["local4"].decl, std::vector<std::string>{"type ipv4_addr"});
  EXPECT_EQ(t.sets["local4"].elements, (std::set<std::string>{"10.0.1.1", "10.0.1.2"}));
  EXPECT_EQ(t.sets["p0b5187d3f26e-i0-b4"].decl, (std::vector<std::string>{"type ipv4_addr", "flags interval"}));
  EXPECT_EQ(t.sets["p0b5187d3f26e-i0-b4"].elements, (std::set<std::string>{"10.0.0.0/23", "10.0.3.0-10.0.255.255"}));
  // Elements wrapped over three lines.
  EXPECT_EQ(t.sets["p6489cd055f6e-e0-n4"].elements,
            (std::set<std::string>{"10.0.1.1 . tcp . 80", "10.0.1.2 . tcp . 81", "10.0.2.1 . tcp . 80"}));
  EXPECT_TRUE(t.sets["ingress4"].map);
  EXPECT_EQ(t.sets["ingress4"].decl, std::vector<std::string>{"type ipv4_addr : verdict"});
  EXPECT_EQ(t.sets["ingress4"].elements,
            (std::set<std::string>{"10.0.1.1 : jump in-fc5187d3d8f1", "10.0.1.2 : jump in-f95187d3d3d8"}));
  EXPECT_TRUE(t.sets["egress4"].elements.empty());
  ASSERT_EQ(t.chains.size(), 3u);
  EXPECT_EQ(t.chains["forward"].hook, "type filter hook forward priority filter; policy accept;");
  EXPECT_EQ(t.chains["in-f95187d3d3d8"].hook, "");
  ASSERT_EQ(t.chains["in-f95187d3d3d8"].rules.size(), 4u);
  EXPECT_EQ(t.chains["in-f95187d3d3d8"].rules[2],
            "ip saddr @pb5bff39758a4-i0-p4 tcp dport 81 accept comment \"x/allow-b ingress 0\"");
  ASSERT_EQ(t.chains["forward"].rules.size(), 5u);
  // Counter values dropped, an anonymous set's elements sorted.
  EXPECT_EQ(t.chains["forward"].rules[4], "tcp dport { 443, 80 } counter accept");
}

TEST(NftTable, ParsesWeftdsScriptForm) {
  const char* script = R"(add table inet weft-netpol
delete table inet weft-netpol
table inet weft-netpol {
  counter drop-ingress {
  }
  set p1-i0-b4 {
    type ipv4_addr; flags interval;
    elements = { 10.0.0.0-10.0.1.255, 10.0.3.0-10.0.255.255 }
  }
  map ingress4 {
    type ipv4_addr : verdict;
    elements = { 10.0.1.1 : jump in-a }
  }
  chain in-a {
    ct state invalid drop
    counter name "drop-ingress" drop
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ip daddr vmap @ingress4
  }
}
)";
  NftTable t = Parse(script);
  EXPECT_EQ(t.name, "inet weft-netpol");
  EXPECT_EQ(t.objects, std::set<std::string>{"counter drop-ingress"});
  EXPECT_EQ(t.sets["p1-i0-b4"].decl, (std::vector<std::string>{"type ipv4_addr", "flags interval"}));
  EXPECT_EQ(t.sets["p1-i0-b4"].elements.size(), 2u);
  EXPECT_EQ(t.sets["ingress4"].elements, std::set<std::string>{"10.0.1.1 : jump in-a"});
  EXPECT_EQ(t.chains["in-a"].rules.size(), 2u);
  EXPECT_EQ(t.chains["forward"].rules, std::vector<std::string>{"ip daddr vmap @ingress4"});
}

TEST(NftTable, RejectsWhatIsNoTable) {
  EXPECT_FALSE(ParseNftTable("").ok());
  EXPECT_FALSE(ParseNftTable("Error: No such file or directory\n").ok());
  EXPECT_FALSE(ParseNftTable("table inet t {\n\tchain c {\n\t\taccept\n").ok());  // cut short
  EXPECT_FALSE(ParseNftTable("table inet t {\n\tset s {\n\t\telements = { 1.2.3.4,\n").ok());
  EXPECT_FALSE(ParseNftTable("table inet t {\n\tgarbage\n}\n").ok());
}

TEST(NftTable, SameTableIsEqualWhateverTheHashOrderAndCounters) {
  NftTable a = Listing();
  // Another element order (hash sets), other counter values.
  std::string other =
      Edit(kListing, "10.0.1.1 . tcp . 80,\n\t\t\t     10.0.2.1 . tcp . 80,\n\t\t\t     10.0.1.2 . tcp . 81",
           "10.0.1.2 . tcp . 81, 10.0.2.1 . tcp . 80, 10.0.1.1 . tcp . 80");
  other = Edit(other, "packets 7 bytes 420", "packets 99 bytes 9000");
  other = Edit(other, "{ 443, 80 } counter packets 3 bytes 180", "{ 80, 443 } counter packets 0 bytes 0");
  NftTableDiff d = DiffNftTables(a, Parse(other));
  EXPECT_TRUE(d.empty()) << d.Summary();
  EXPECT_EQ(d.Summary(), "");
  EXPECT_TRUE(d.Lines().empty());
}

TEST(NftTable, NamesEveryKindOfDifference) {
  NftTable want = Listing();
  std::string k = kListing;
  // A rule lost, another added, a chain gone, an extra chain.
  k = Edit(k, "\t\tip saddr @pb5bff39758a4-i0-p4 tcp dport 81 accept comment \"x/allow-b ingress 0\"\n", "");
  k = Edit(k, "\t\tct state invalid drop\n\t\tip saddr 10.0.1.1 accept",
           "\t\tct state invalid drop\n\t\tip saddr 10.9.9.9 accept\n\t\tip saddr 10.0.1.1 accept");
  k = Edit(k, "\tchain forward {", "\tchain stray {\n\t\taccept\n\t}\n\tchain forward {");
  // An element lost, an extra one; a map entry pointing elsewhere, an
  // extra entry; a set gone; the hook changed; a counter gone.
  k = Edit(k, "elements = { 10.0.1.1, 10.0.1.2 }", "elements = { 10.0.1.2, 10.0.1.7 }");
  k = Edit(k, "10.0.1.2 : jump in-f95187d3d3d8 }",
           "10.0.1.2 : jump in-fc5187d3d8f1, 10.0.1.9 : jump in-f95187d3d3d8 }");
  k = Edit(k, "\tset pb5bff39758a4-i0-p4 {\n\t\ttype ipv4_addr\n\t\telements = { 10.0.1.1 }\n\t}\n", "");
  k = Edit(k, "priority filter; policy accept;", "priority filter; policy drop;");
  k = Edit(k, "\tcounter drop-egress {\n\t\tpackets 7 bytes 420\n\t}\n", "");
  NftTable have = Parse(k);
  NftTableDiff d = DiffNftTables(want, have);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d.Summary(),
            "1 extra chain(s), 1 base chain(s) hooked differently, 1 rule(s) missing, 1 extra rule(s), "
            "1 set(s)/map(s) missing, 1 set element(s) missing, 1 extra set element(s), 1 extra map entry(ies), "
            "1 map entry(ies) with another verdict, 1 object(s) missing");
  auto lines = d.Lines();
  auto has = [&](const std::string& l) { return std::find(lines.begin(), lines.end(), l) != lines.end(); };
  EXPECT_TRUE(has("chain stray is in the kernel but not in weftd's ruleset (1 rule(s))"));
  EXPECT_TRUE(
      has("chain forward: the kernel has `type filter hook forward priority filter; policy drop;`, weftd "
          "wants `type filter hook forward priority filter; policy accept;`"));
  EXPECT_TRUE(
      has("chain in-f95187d3d3d8: missing rule: ip saddr @pb5bff39758a4-i0-p4 tcp dport 81 accept comment "
          "\"x/allow-b ingress 0\""));
  EXPECT_TRUE(has("chain in-fc5187d3d8f1: extra rule: ip saddr 10.9.9.9 accept"));
  EXPECT_TRUE(has("set pb5bff39758a4-i0-p4 is missing (1 element(s))"));
  EXPECT_TRUE(has("set local4: missing element 10.0.1.1"));
  EXPECT_TRUE(has("set local4: extra element 10.0.1.7"));
  EXPECT_TRUE(has("map ingress4: 10.0.1.2 : jump in-fc5187d3d8f1 in the kernel, weftd wants jump in-f95187d3d3d8"));
  EXPECT_TRUE(has("map ingress4: extra entry 10.0.1.9 : jump in-f95187d3d3d8"));
  EXPECT_TRUE(has("counter drop-egress is missing"));
  EXPECT_EQ(lines.size(), 10u);

  // The other way round: what was extra is missing.
  NftTableDiff back = DiffNftTables(have, want);
  auto bl = back.Lines();
  EXPECT_NE(std::find(bl.begin(), bl.end(), "chain stray is missing (1 rule(s))"), bl.end());
  EXPECT_NE(std::find(bl.begin(), bl.end(),
                      "set pb5bff39758a4-i0-p4 is in the kernel but not in weftd's ruleset (1 element(s))"),
            bl.end());
}

TEST(NftTable, OrderOfRulesAndDeclarationsCount) {
  NftTable want = Listing();
  std::string k = Edit(kListing, "\t\tip saddr vmap @egress4\n\t\tip daddr vmap @ingress4\n",
                       "\t\tip daddr vmap @ingress4\n\t\tip saddr vmap @egress4\n");
  k = Edit(k, "\t\tflags interval\n", "");
  NftTableDiff d = DiffNftTables(want, Parse(k));
  EXPECT_EQ(d.reordered_chains, std::vector<std::string>{"forward"});
  EXPECT_TRUE(d.missing_rules.empty());
  ASSERT_EQ(d.changed_sets.size(), 1u);
  EXPECT_EQ(d.changed_sets[0],
            "set p0b5187d3f26e-i0-b4: the kernel declares `set type ipv4_addr`, weftd wants "
            "`set type ipv4_addr; flags interval`");
  // A duplicated rule is one extra rule.
  k = Edit(kListing, "\t\tct state established,related accept\n",
           "\t\tct state established,related accept\n\t\tct state established,related accept\n");
  d = DiffNftTables(want, Parse(k));
  ASSERT_EQ(d.extra_rules.size(), 1u);
  EXPECT_EQ(d.extra_rules[0].where, "forward");
  EXPECT_TRUE(d.reordered_chains.empty());
}

TEST(NftTable, AWholeMissingChainOrMapIsOneLine) {
  NftTable have;
  have.name = "inet weft-netpol";
  NftTableDiff d = DiffNftTables(Listing(), have);
  EXPECT_EQ(d.missing_chains.size(), 3u);
  EXPECT_EQ(d.missing_sets.size(), 6u);
  EXPECT_TRUE(d.missing_rules.empty());
  EXPECT_TRUE(d.missing_elements.empty());
  auto lines = d.Lines();
  EXPECT_NE(std::find(lines.begin(), lines.end(), "map ingress4 is missing (2 entry(ies))"), lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "chain forward is missing (5 rule(s))"), lines.end());
}

}  // namespace
}  // namespace weft::doctor
