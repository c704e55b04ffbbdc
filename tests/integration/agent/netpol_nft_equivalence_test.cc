// Table inet weft-netpol through the nftables layer (policy/netpol_nft.h)
// against the text path it replaced: the scripts the engine wrote for each
// step of netpol_scenario.h at the commit before the switch
// (testdata/netpol/step<N>.nft, a fixture) applied with `nft -f` in one
// network namespace, the engine's transactions for the same steps sent by
// the layer in another. After the full table and after every delta the
// kernel holds the same table, object for object (sets with nft's
// metadata, elements, chains, rules expression for expression, counters,
// the limit) and as `nft list table` prints it; and a batch with an
// element the kernel lacks is refused whole.
//
// One difference is by design: the shared node chains are named by a hash
// of their rules, which the text path took over its text and the layer
// over the rules' nft rendering. The comparison names them by the pods
// that use them (Canon below) and orders chains by name.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>

#include "netpol_scenario.h"
#include "nft_netns.h"
#include "policy/netpol_controller.h"
#include "policy/netpol_nft.h"
#include "sys/nft_render.h"
#include "testutil/netns_fixture.h"

namespace weft {
namespace {

using namespace policy::netpol;
using sys::nft::Family;
using sys::nft::TableState;
using testing::TestNetns;
namespace scenario = testing::netpol_scenario;

std::string Golden(int step) {
  std::ifstream in(std::string(WEFT_NETPOL_GOLDEN_DIR) + "/step" + std::to_string(step) + ".nft");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Node chains named by the pods that jump to them (their addresses' bytes
// in the node maps); chains and sets ordered by name, rules by chain (a
// table built incrementally lists them in the order they came).
TableState Canon(TableState t) {
  static const std::regex node("^(r?t?)node-[0-9a-f]{12}$");
  std::map<std::string, std::string> first_ip;  // node chain -> its smallest pod address
  for (const char* map : {"node4", "node6"})
    for (const auto& e : t.elements[map])
      if (e.verdict) {
        auto& ip = first_ip[e.verdict->chain];
        if (ip.empty() || std::string(map) + e.key < ip) ip = std::string(map) + e.key;
      }
  std::vector<std::pair<std::string, std::string>> order;
  for (const auto& [chain, ip] : first_ip) order.emplace_back(ip, chain);
  std::sort(order.begin(), order.end());
  std::map<std::string, std::string> rename;  // "node-<hash>" -> "node-<n>"
  for (size_t i = 0; i < order.size(); ++i) rename[order[i].second] = "node-" + std::to_string(i);
  auto canon = [&](std::string& name) {
    std::smatch m;
    if (!std::regex_match(name, m, node)) return;
    const std::string base = name.substr(m[1].length());
    auto it = rename.find(base);
    name = m[1].str() + (it == rename.end() ? "node-unused-" + base : it->second);
  };
  for (auto& c : t.chains) canon(c.name);
  for (auto& r : t.rules) {
    canon(r.chain);
    r.handle = 0;
    for (auto& e : r.exprs)
      if (auto* v = std::get_if<sys::nft::Verdict>(&e)) canon(v->chain);
  }
  for (auto& [set, elems] : t.elements) {
    for (auto& e : elems)
      if (e.verdict) canon(e.verdict->chain);
    std::sort(elems.begin(), elems.end(), [](const auto& a, const auto& b) {
      return std::tie(a.key, a.flags) < std::tie(b.key, b.flags);
    });
  }
  std::stable_sort(t.chains.begin(), t.chains.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::stable_sort(t.sets.begin(), t.sets.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<std::string, size_t> pos;
  for (size_t i = 0; i < t.chains.size(); ++i) pos[t.chains[i].name] = i;
  std::stable_sort(t.rules.begin(), t.rules.end(),
                   [&](const auto& a, const auto& b) { return pos[a.chain] < pos[b.chain]; });
  return t;
}

class NetpolNftEquivalenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("npequiv");
    text_ = std::make_unique<TestNetns>("npeq-text");
    layer_ = std::make_unique<TestNetns>("npeq-layer");
  }
  void TearDown() override { testing::RemoveTree(dir_); }

  Status Apply(const TestNetns& ns, const sys::nft::Transaction& tx) { return testing::NftApplyIn(ns, tx); }
  void ApplyText(const TestNetns& ns, const std::string& script) { testing::NftFileIn(ns, dir_, script); }
  Result<TableState> Dump(const TestNetns& ns) { return testing::NftDumpIn(ns, Family::kInet, kTable); }
  std::string List(const TestNetns& ns) { return testing::NftListIn(ns, "inet", kTable); }

  void ExpectSame(const std::string& what) {
    SCOPED_TRACE(what);
    auto a = Dump(*text_), b = Dump(*layer_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    // The layer's rendering of what it read is nft's listing.
    EXPECT_EQ(sys::nft::RenderTable(*b), List(*layer_));
    const TableState na = Canon(*a), nb = Canon(*b);
    testing::ExpectSameObjects(Family::kInet, na, nb);
    EXPECT_EQ(sys::nft::RenderTable(na), sys::nft::RenderTable(nb));
  }

  std::string dir_;
  std::unique_ptr<TestNetns> text_, layer_;
};

TEST_F(NetpolNftEquivalenceTest, EveryStepLeavesTheTableTheTextPathLeft) {
  Engine e(EngineOptions{scenario::kNode, kDefaultPendingGroup});
  for (int step = 0; step < scenario::kSteps; ++step) {
    scenario::Step(e, step);
    auto tx = step == 0 ? e.Full() : e.Delta();
    ASSERT_TRUE(tx.ok()) << tx.status().ToString();
    ASSERT_FALSE(tx->empty()) << "step " << step;
    ASSERT_NO_FATAL_FAILURE(ApplyText(*text_, Golden(step)));
    Status st = Apply(*layer_, *tx);
    ASSERT_TRUE(st.ok()) << "step " << step << ": " << st.ToString() << "\n" << sys::nft::RenderTransaction(*tx);
    e.MarkApplied(step == 0);
    ExpectSame("after step " + std::to_string(step));
  }
  // Nothing changed: nothing to send.
  auto none = e.Delta();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << sys::nft::RenderTransaction(*none);
}

TEST_F(NetpolNftEquivalenceTest, TheFullTableReplacesAnyTableAndIsIdempotent) {
  Engine e(EngineOptions{scenario::kNode, kDefaultPendingGroup});
  for (int step = 0; step < scenario::kSteps - 1; ++step) scenario::Step(e, step);
  // The text path's table of step 0 (a node upgraded from it), replaced by
  // the full table of the model after step 7, twice.
  ASSERT_NO_FATAL_FAILURE(ApplyText(*layer_, Golden(0)));
  auto tx = e.Full();
  ASSERT_TRUE(tx.ok()) << tx.status().ToString();
  ASSERT_TRUE(Apply(*layer_, *tx).ok());
  ASSERT_TRUE(Apply(*layer_, *tx).ok());
  for (int step = 0; step < scenario::kSteps - 1; ++step) ASSERT_NO_FATAL_FAILURE(ApplyText(*text_, Golden(step)));
  ExpectSame("full table over an older one");
}

TEST_F(NetpolNftEquivalenceTest, ABatchWithAnElementTheKernelLacksIsRefusedWhole) {
  Engine e(EngineOptions{scenario::kNode, kDefaultPendingGroup});
  scenario::Step(e, 0);
  auto tx = e.Full();
  ASSERT_TRUE(tx.ok());
  ASSERT_TRUE(Apply(*layer_, *tx).ok());
  const std::string before = List(*layer_);
  sys::nft::Transaction bad(Family::kInet, kTable);
  bad.Add(sys::nft::Elements{"local4", {{.key = *ElementKey("ipv4_addr", "10.0.1.99")}}});
  bad.Delete(sys::nft::Elements{"local4", {{.key = *ElementKey("ipv4_addr", "10.0.1.98")}}});
  Status st = Apply(*layer_, bad);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();
  EXPECT_NE(st.ToString().find("local4"), std::string::npos) << st.ToString();
  EXPECT_EQ(List(*layer_), before);
}

}  // namespace
}  // namespace weft
