#pragma once
// etcd v3 spoken through its HTTP/JSON gateway (/v3/kv/range, /v3/kv/txn,
// /v3/lease/*, /v3/watch) with libcurl: the real EtcdRegistry, and the
// gateway's bodies parsed (pure, unit-tested, fuzzed in tests/fuzz/fuzz_etcd.cc).

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/auth_health.h"
#include "base/status.h"
#include "etcd/etcd_registry.h"
#include "sys/http.h"

namespace weft::etcd {

// --- Gateway bodies (pure) ----------------------------------------------------

// Errors are kMalformed for malformed JSON and kUnavailable (domain
// kControlPlane) for an error object returned by etcd.
Result<EtcdRange> ParseRangeResponse(std::string_view body);
Result<EtcdWatchMessage> ParseWatchLine(std::string_view line);
// `*revision` gets the header revision.
Result<bool> ParseTxnResponse(std::string_view body, int64_t* revision);
Result<int64_t> ParseLeaseGrant(std::string_view body);      // lease ID
Result<int64_t> ParseLeaseKeepAlive(std::string_view body);  // remaining TTL; 0 = lease gone
// The /v3/kv/txn request body (keys and values base64, revisions as strings).
std::string EncodeTxn(const EtcdTxn& txn);

// --- The client ---------------------------------------------------------------

// Requests against a list of gateway endpoints, moving to the next endpoint
// after a transport failure. One per thread. A TLS failure (a rotated client
// certificate or CA) is retried once on a new connection, which reads the
// TLS files again. Outcomes go to `health` when it is not null (it must
// outlive the client).
class EtcdClient : public EtcdRegistry {
 public:
  EtcdClient(std::vector<std::string> endpoints, sys::TlsOptions tls, AuthHealth* health = nullptr);

  Result<EtcdRange> Range(const std::string& key, const std::string& range_end, int64_t revision = 0) override;
  Result<bool> Txn(const EtcdTxn& txn) override;
  // A transaction as gateway JSON (tests and tools write their own).
  Result<bool> Txn(const std::string& body_json, int64_t* revision = nullptr);
  Result<int64_t> LeaseGrant(int64_t ttl_seconds) override;
  Result<int64_t> LeaseKeepAlive(int64_t id) override;
  Status LeaseRevoke(int64_t id) override;
  Status Watch(const std::string& key, const std::string& range_end, int64_t start_revision,
               const std::function<bool(const EtcdWatchMessage&)>& on_msg, const std::atomic<bool>& stop) override;
  // Not used by the control plane: tests and tools.
  Status Compact(int64_t revision);
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  Status Delete(const std::string& key);

 private:
  Result<std::string> Post(const std::string& path, const std::string& body);
  std::vector<std::string> endpoints_;
  size_t current_ = 0;
  sys::HttpClient http_;
  AuthHealth* health_;
};

}  // namespace weft::etcd
