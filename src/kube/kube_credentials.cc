#include "kube/kube_credentials.h"

#include "base/log.h"
#include "base/strings.h"
#include "sys/files.h"

namespace weft::kube {
namespace {

constexpr size_t kMaxTokenBytes = 64 * 1024;
constexpr size_t kMaxPemBytes = 1024 * 1024;

// A TLS file's contents for change detection; "" when unset or unreadable
// (libcurl then reports the problem on the next connection).
std::string TlsFile(const std::string& path) {
  if (path.empty()) return "";
  auto r = sys::ReadFile(path, kMaxPemBytes);
  return r.ok() ? *r : std::string();
}

}  // namespace

KubeCredentials::KubeCredentials(KubeCredentialFiles files, Clock clock)
    : files_(std::move(files)), clock_(std::move(clock)), health_(clock_) {}

Result<std::shared_ptr<KubeCredentials>> KubeCredentials::Load(KubeCredentialFiles files, Clock clock) {
  auto c = std::make_shared<KubeCredentials>(std::move(files), std::move(clock));
  // Not shared yet: no lock needed.
  c->token_ = c->files_.token;
  if (!c->files_.token_file.empty()) {
    WEFT_ASSIGN_OR_RETURN(std::string t, sys::ReadFile(c->files_.token_file, kMaxTokenBytes));
    c->token_ = std::string(Trim(t));
    if (c->token_.empty())
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                           "the token file " + c->files_.token_file + " is empty");
  }
  c->ReadTlsLocked();
  c->tls_generation_ = 0;
  c->read_at_ = c->Now();
  return c;
}

std::chrono::steady_clock::time_point KubeCredentials::Now() const {
  return clock_ ? clock_() : std::chrono::steady_clock::now();
}

bool KubeCredentials::ReadTlsLocked() {
  std::string now = TlsFile(files_.tls.ca_file) + '\0' + TlsFile(files_.tls.cert_file) + '\0' +
                    TlsFile(files_.tls.key_file);
  if (now == tls_contents_) return false;
  tls_contents_ = std::move(now);
  tls_generation_++;
  return true;
}

void KubeCredentials::ReadFilesLocked() {
  read_at_ = Now();
  if (!files_.token_file.empty()) {
    auto t = sys::ReadFile(files_.token_file, kMaxTokenBytes);
    std::string token = t.ok() ? std::string(Trim(*t)) : std::string();
    if (!t.ok() || token.empty()) {
      WEFT_LOG(kWarn, "cannot re-read the API token; keeping the last one", {"file", files_.token_file},
               {"err", t.ok() ? std::string("empty file") : t.status().ToString()});
    } else if (token != token_) {
      token_ = std::move(token);
      WEFT_LOG(kInfo, "API token changed; using the new one", {"file", files_.token_file});
    }
  }
  if (ReadTlsLocked())
    WEFT_LOG(kInfo, "API TLS files changed; new connections use them", {"generation", tls_generation_});
}

std::string KubeCredentials::Token() {
  std::lock_guard lock(mu_);
  if (Now() - read_at_ >= kTokenRefresh) ReadFilesLocked();
  return token_;
}

uint64_t KubeCredentials::tls_generation() const {
  std::lock_guard lock(mu_);
  return tls_generation_;
}

bool KubeCredentials::Unauthorized(const std::string& sent_token, uint64_t sent_generation) {
  std::lock_guard lock(mu_);
  ReadFilesLocked();
  return token_ != sent_token || tls_generation_ != sent_generation;
}

bool KubeCredentials::TlsFailed(uint64_t sent_generation) {
  std::lock_guard lock(mu_);
  ReadTlsLocked();
  return tls_generation_ != sent_generation;
}

}  // namespace weft::kube
