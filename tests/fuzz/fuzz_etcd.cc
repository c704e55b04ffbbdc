// What weftd reads from etcd's JSON gateway: range, txn, lease and watch
// responses, and the values stored under its key prefix.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/etcd.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  int64_t rev = 0;
  auto range = weft::etcd::ParseRangeResponse(in);
  if (range.ok())
    for (const auto& kv : range->kvs) (void)weft::agent::DecodeSubnet("/weft/", kv);
  (void)weft::etcd::ParseWatchLine(in);
  (void)weft::etcd::ParseTxnResponse(in, &rev);
  (void)weft::etcd::ParseLeaseGrant(in);
  (void)weft::etcd::ParseLeaseKeepAlive(in);
  (void)weft::agent::ParseNetworkConfig(in);
  return 0;
}
