// sys/nft_json.h's decoder (what `weftctl doctor` reads from weftd's
// /netpol/ruleset?format=json before it compares and applies it): any bytes
// are either refused with a Status or decoded into a transaction, never a
// crash, a leak or undefined behaviour; a decoded transaction encodes and
// decodes again to the same ops, and renders in nft's syntax.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sys/nft_json.h"
#include "sys/nft_render.h"

namespace nft = weft::sys::nft;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tx = nft::ParseTransactionJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!tx.ok()) return 0;
  auto again = nft::ParseTransactionJson(nft::TransactionJson(*tx));
  if (!again.ok() || again->ops() != tx->ops()) std::abort();
  (void)nft::RenderTransaction(*tx);
  return 0;
}
