#pragma once
// Credentials for the Kubernetes API server that rotate, handled as
// client-go does. kubelet rewrites a projected service-account token (bound
// tokens expire), and kubeconfig token files and client certificate files
// rotate too: weftd must follow the files, not the copy it read at start.
//
// One KubeCredentials is shared by every client of the API server (each
// informer's KubeApi, the Node control plane's requests) so that a re-read
// by one is seen by all; it is thread-safe.
//
//   - The token is re-read from its file when the copy is older than
//     kTokenRefresh (client-go's cachingTokenSource period), and at once
//     after a 401 (Unauthorized()).
//   - The CA, client certificate and key files are read at the same times
//     and after a TLS failure; a change of any of them bumps tls_generation(),
//     and a client that sees a new generation opens a new connection (libcurl
//     reads the files per connection).
//   - A file that cannot be read later keeps the last good copy (logged):
//     kubelet replaces projected files atomically, so this is a transient.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "base/auth_health.h"
#include "base/status.h"
#include "sys/http.h"

namespace weft::kube {

// Where the credentials come from.
struct KubeCredentialFiles {
  std::string token;        // inline bearer token (kubeconfig "token"); used when token_file is ""
  std::string token_file;   // in-cluster <sa-dir>/token, or kubeconfig "tokenFile"
  sys::TlsOptions tls;           // CA, client certificate and key files (paths never change)
};

class KubeCredentials {
 public:
  static constexpr std::chrono::seconds kTokenRefresh{60};
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // Reads the token file once: a missing or empty one is an error here (at
  // start), only later failures keep the last copy. `clock` is for tests.
  static Result<std::shared_ptr<KubeCredentials>> Load(KubeCredentialFiles files, Clock clock = {});

  // The bearer token to send ("" = none); re-reads the files first when the
  // last read is older than kTokenRefresh.
  std::string Token();
  // Paths of the TLS files, for a client's connection.
  const sys::TlsOptions& tls() const { return files_.tls; }
  // Bumps whenever the contents of the CA, certificate or key file changed.
  uint64_t tls_generation() const;

  // A request sent with `sent_token` was answered 401: re-reads the token
  // and TLS files now. Returns whether a retry can use other credentials:
  // the token differs from `sent_token` (re-read here, or already by another
  // client) or the TLS files changed since `sent_generation`.
  bool Unauthorized(const std::string& sent_token, uint64_t sent_generation);
  // A TLS failure with files of `sent_generation`: re-reads the TLS files.
  // Returns whether they changed since.
  bool TlsFailed(uint64_t sent_generation);

  // Outcomes of every request made with these credentials (/healthz).
  AuthHealth& health() { return health_; }

  const KubeCredentialFiles& files() const { return files_; }

  // Use Load().
  KubeCredentials(KubeCredentialFiles files, Clock clock);

 private:
  std::chrono::steady_clock::time_point Now() const;
  // Re-reads the token file (if any) and the TLS files. REQUIRES: mu_ held.
  void ReadFilesLocked();
  // Whether a TLS file's contents changed; re-reads them. REQUIRES: mu_ held.
  bool ReadTlsLocked();

  const KubeCredentialFiles files_;
  const Clock clock_;
  AuthHealth health_;
  mutable std::mutex mu_;
  std::string token_;
  std::chrono::steady_clock::time_point read_at_;
  std::string tls_contents_;  // CA + cert + key as last read
  uint64_t tls_generation_ = 0;
};

}  // namespace weft::kube
