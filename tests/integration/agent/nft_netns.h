#pragma once
// The nftables layer and the nft tool in a test network namespace, for the
// tests that compare a table the layer builds with one the text path built
// (fw_nft_equivalence_test, overlay_filter_nft_test,
// netpol_nft_equivalence_test). Header-only test fixture.

#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "sys/netns.h"
#include "sys/nft_kernel.h"
#include "sys/nft_render.h"
#include "testutil/netns_fixture.h"

namespace weft::testing {

// `tx` sent by the layer from inside `ns`.
inline Status NftApplyIn(const TestNetns& ns, const sys::nft::Transaction& tx) {
  auto h = sys::Netns::Open(ns.path());
  if (!h.ok()) return h.status();
  return sys::RunInNetns(*h, [&] { return sys::nft::Kernel().Apply(tx); });
}

// The table as the layer dumps it inside `ns`.
inline Result<sys::nft::TableState> NftDumpIn(const TestNetns& ns, sys::nft::Family f, const std::string& table) {
  auto h = sys::Netns::Open(ns.path());
  if (!h.ok()) return h.status();
  Result<sys::nft::TableState> r = sys::nft::OpError("not run", EINVAL);
  Status st = sys::RunInNetns(*h, [&] {
    r = sys::nft::Kernel().Dump(f, table);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return r;
}

// `nft -f` of `script` inside `ns` (the script written to `dir`).
inline void NftFileIn(const TestNetns& ns, const std::string& dir, const std::string& script) {
  const std::string path = dir + "/script.nft";
  std::ofstream(path) << script;
  std::string out;
  ASSERT_EQ(ns.Exec({"nft", "-f", path}, &out), 0) << out << "\n" << script;
}

// `nft list table <family> <table>` inside `ns`.
inline std::string NftListIn(const TestNetns& ns, const std::string& family, const std::string& table) {
  std::string out;
  EXPECT_EQ(ns.Exec({"nft", "list", "table", family, table}, &out), 0) << out;
  return out;
}

// Two dumps hold the same objects: sets (nft's metadata and all), elements,
// chains, counters, limits, rules expression for expression (handles and
// element order normalized by the caller).
inline void ExpectSameObjects(sys::nft::Family f, const sys::nft::TableState& a, const sys::nft::TableState& b) {
  EXPECT_EQ(a.sets, b.sets);
  EXPECT_EQ(a.elements, b.elements);
  EXPECT_EQ(a.chains, b.chains);
  EXPECT_EQ(a.counters, b.counters);
  EXPECT_EQ(a.limits, b.limits);
  ASSERT_EQ(a.rules.size(), b.rules.size());
  for (size_t i = 0; i < a.rules.size(); ++i)
    EXPECT_EQ(a.rules[i], b.rules[i]) << "rule " << i << " of " << a.rules[i].chain << ": "
                                      << sys::nft::RenderRule(f, a.rules[i]) << " vs "
                                      << sys::nft::RenderRule(f, b.rules[i]);
}

}  // namespace weft::testing
