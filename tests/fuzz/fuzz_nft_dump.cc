// The nftables layer's decoding of dumps (sys/nft_codec.h) and its
// rendering (sys/nft_render.h), over every value a dump can carry: the
// input chooses typed objects with arbitrary fields (names, registers,
// offsets, keys and data of any length, verdict codes, set types, hook
// numbers and priorities), libnftnl encodes them, each message is put in
// the kernel's dump layout (AsDumped), and DecodeMessages reads them back
// through libnftnl's parsers into the typed objects, which are rendered.
// A decoded rule must have as many expressions as were sent.
//
// Why not raw bytes: libnftnl ends the process (its abi_breakage(), exit)
// on an attribute shorter than its type, which no kernel sends and which
// would stop every run; the raw decoder's one memory bug found that way
// (an unterminated string read past the message) is a unit test
// (nft_layer_test, NftCodec.AStringAttributeWithoutItsNulStaysInsideTheMessage).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "sys/nft_codec.h"
#include "sys/nft_render.h"

namespace nft = weft::sys::nft;

namespace {

// A name as nft writes them: printable, no NUL (a dump's strings are NUL-ended).
std::string Name(FuzzedDataProvider& p) {
  std::string s = p.ConsumeRandomLengthString(24);
  for (char& c : s) c = static_cast<char>(0x21 + static_cast<unsigned char>(c) % 94);
  return s.empty() ? "x" : s;
}
std::string Bytes(FuzzedDataProvider& p, size_t max = 20) { return p.ConsumeBytesAsString(p.ConsumeIntegralInRange<size_t>(1, max)); }
uint32_t Reg(FuzzedDataProvider& p) { return p.ConsumeIntegralInRange<uint32_t>(1, 23); }

nft::Expr AnyExpr(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange(0, 13)) {
    case 0: return nft::Meta{p.ConsumeIntegralInRange<uint32_t>(0, 40), Reg(p)};
    case 1: return nft::Payload{p.ConsumeIntegralInRange<uint32_t>(0, 2), p.ConsumeIntegral<uint8_t>(), p.ConsumeIntegralInRange<uint32_t>(1, 16), Reg(p)};
    case 2: return nft::Ct{p.ConsumeIntegralInRange<uint32_t>(0, 20), Reg(p), std::nullopt};
    case 3: return nft::Cmp{p.ConsumeIntegralInRange<uint32_t>(0, 5), Bytes(p, 16), Reg(p)};
    case 4: {
      const std::string m = Bytes(p, 16);
      return nft::Bitwise{Reg(p), Reg(p), static_cast<uint32_t>(m.size()), m, std::string(m.size(), '\0')};
    }
    case 5: {
      nft::Lookup l{Name(p), Reg(p), std::nullopt, p.ConsumeBool()};
      if (p.ConsumeBool()) l.dreg = p.ConsumeBool() ? 0 : Reg(p);
      return l;
    }
    case 6: return nft::Immediate{Reg(p), Bytes(p, 16)};
    case 7: {
      const int32_t codes[] = {0, 1, -1, -2, -3, -4, -5};
      const int32_t c = codes[p.ConsumeIntegralInRange(0, 6)];
      return nft::Verdict{c, c == -3 || c == -4 ? Name(p) : ""};
    }
    case 8: return nft::Counter{p.ConsumeIntegral<uint64_t>(), p.ConsumeIntegral<uint64_t>()};
    case 9: return nft::CounterRef{Name(p)};
    case 10: {
      nft::Log g{p.ConsumeBool() ? Name(p) : "", std::nullopt, 0, 0};
      if (p.ConsumeBool()) g.group = p.ConsumeIntegral<uint16_t>(), g.snaplen = p.ConsumeIntegral<uint16_t>();
      return g;
    }
    case 11: {
      nft::Nat n;
      n.masq = p.ConsumeBool();
      n.type = p.ConsumeIntegralInRange<uint32_t>(0, 1);
      n.family = p.ConsumeBool() ? 2 : 10;
      n.reg_addr = p.ConsumeBool() ? Reg(p) : 0;
      n.reg_proto = p.ConsumeBool() ? Reg(p) : 0;
      n.flags = p.ConsumeIntegral<uint8_t>() & 0x1c;
      if (n.masq) n.reg_addr = 0, n.type = 0, n.family = 0;
      return n;
    }
    case 12: return nft::Numgen{p.ConsumeIntegralInRange<uint32_t>(0, 1), p.ConsumeIntegral<uint32_t>(), p.ConsumeIntegral<uint32_t>(), Reg(p)};
    default: return nft::Limit{p.ConsumeIntegral<uint64_t>(), p.ConsumeIntegralInRange<uint64_t>(1, 604800), p.ConsumeIntegral<uint32_t>(), p.ConsumeIntegralInRange<uint32_t>(0, 1), p.ConsumeBool()};
  }
}

nft::Set AnySet(FuzzedDataProvider& p) {
  nft::Set s;
  s.name = Name(p);
  s.flags = p.ConsumeIntegral<uint8_t>();
  s.key_type = p.ConsumeIntegral<uint32_t>();
  s.key_len = p.ConsumeIntegralInRange<uint32_t>(1, 64);
  if (s.flags & 8 /* NFT_SET_MAP */) s.data_type = p.ConsumeIntegral<uint32_t>(), s.data_len = p.ConsumeIntegralInRange<uint32_t>(1, 64);
  for (int i = p.ConsumeIntegralInRange(0, 3); i > 0; --i) s.fields.push_back(p.ConsumeIntegralInRange<uint32_t>(1, 16));
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  const nft::Family families[] = {nft::Family::kIp, nft::Family::kIp6, nft::Family::kInet, nft::Family::kBridge,
                                  nft::Family::kNetdev};
  nft::Transaction tx(families[p.ConsumeIntegralInRange(0, 4)], "wfuzz");
  std::vector<nft::Set> sets;
  for (int n = 0; n < 12 && p.remaining_bytes() > 0; ++n) {
    switch (p.ConsumeIntegralInRange(0, 4)) {
      case 0: {
        nft::Chain c{Name(p), std::nullopt};
        if (p.ConsumeBool())
          c.hook = nft::Hook{p.ConsumeIntegralInRange<uint32_t>(0, 5), p.ConsumeIntegral<int32_t>(),
                             p.ConsumeBool() ? "filter" : "nat", p.ConsumeBool() ? Name(p) : "",
                             p.ConsumeIntegralInRange<uint32_t>(0, 1)};
        tx.Add(c);
        break;
      }
      case 1: {
        nft::Rule r{Name(p), {}, p.ConsumeBool() ? Name(p) : ""};
        for (int i = p.ConsumeIntegralInRange(0, 10); i > 0; --i) r.exprs.push_back(AnyExpr(p));
        tx.Add(r);
        break;
      }
      case 2:
        sets.push_back(AnySet(p));
        tx.Add(sets.back());
        break;
      case 3: {
        nft::Elements es{sets.empty() ? Name(p) : sets.back().name, {}};
        for (int i = p.ConsumeIntegralInRange(1, 4); i > 0; --i) {
          nft::Element e{Bytes(p, 64)};
          if (p.ConsumeBool()) e.key_end = Bytes(p, 64);
          if (p.ConsumeBool()) e.data = Bytes(p, 64);
          else if (p.ConsumeBool()) e.verdict = nft::Verdict{p.ConsumeBool() ? -3 : 1, p.ConsumeBool() ? Name(p) : ""};
          e.flags = p.ConsumeIntegralInRange<uint32_t>(0, 1);
          es.elems.push_back(e);
        }
        tx.Add(es);
        break;
      }
      default:
        tx.Add(nft::NamedCounter{Name(p), p.ConsumeIntegral<uint64_t>(), p.ConsumeIntegral<uint64_t>()});
    }
  }
  auto msgs = nft::EncodeOps(tx, 1);
  if (!msgs.ok()) return 0;
  nft::TableState t;
  for (const auto& m : *msgs) {
    const std::string dumped = nft::AsDumped(m.bytes);
    const size_t rules = t.rules.size();
    if (!nft::DecodeMessages(dumped.data(), dumped.size(), &t).ok()) std::abort();  // what libnftnl wrote must read back
    if (t.rules.size() != rules) {
      const auto* sent = std::get_if<nft::Rule>(&tx.ops()[m.op].object);
      if (!sent || t.rules.back().exprs.size() != sent->exprs.size()) std::abort();
    }
  }
  (void)nft::RenderTable(t);
  (void)nft::RenderTransaction(tx);
  return 0;
}
