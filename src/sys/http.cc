#include "sys/http.h"

#include <curl/curl.h>
#include <strings.h>

#include <cstring>

#include "base/strings.h"

namespace weft::sys {

namespace {
// Marks a transport error's details as a TLS failure (IsTlsFailure).
constexpr char kTlsMark[] = "TLS: ";
}  // namespace

bool IsTlsFailure(const Status& st) { return !st.ok() && StartsWith(st.details(), kTlsMark); }

Status TlsFailure(const std::string& what, const std::string& why) {
  return Status::Error(Reason::kUnavailable, Domain::kControlPlane, what, kTlsMark + why);
}

Status InitHttp() {
  CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) return Status::Error(Reason::kInternal, Domain::kNone,
                                           "curl_global_init", curl_easy_strerror(rc));
  return Status::Ok();
}

namespace {

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

struct StreamState {
  CURL* curl = nullptr;
  const std::function<bool(std::string_view)>* on_line = nullptr;
  const std::atomic<bool>* stop = nullptr;
  std::string pending;   // bytes after the last newline
  std::string error_body;
  long status = 0;
  bool aborted = false;  // on_line asked to stop
};

size_t StreamWrite(char* data, size_t size, size_t n, void* user) {
  auto* st = static_cast<StreamState*>(user);
  size_t len = size * n;
  if (st->status == 0) curl_easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &st->status);
  if (st->status < 200 || st->status >= 300) {
    if (st->error_body.size() < 65536) st->error_body.append(data, len);
    return len;
  }
  st->pending.append(data, len);
  size_t start = 0;
  for (;;) {
    size_t nl = st->pending.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(st->pending.data() + start, nl - start);
    start = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (!(*st->on_line)(line)) {
      st->aborted = true;
      return 0;  // makes curl abort the transfer
    }
  }
  st->pending.erase(0, start);
  return len;
}

// The handshake or the certificates failed. With TLS 1.3 a server that
// rejects the client certificate says so in an alert the client reads only
// after its side of the handshake finished: a receive (or send) error naming
// the alert, or, when the server closed at once, one on a connection made for
// this request that never got an HTTP status (libcurl's error buffer then
// keeps its first complaint, e.g. "getpeername() failed ... errno 107").
bool TlsCode(CURLcode rc, const char* errbuf, bool fresh_tls_connection_without_status) {
  switch (rc) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
      return true;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      return std::strstr(errbuf, "alert") != nullptr || fresh_tls_connection_without_status;
    default:
      return false;
  }
}

int StreamProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* st = static_cast<StreamState*>(user);
  return st->stop->load() ? 1 : 0;
}

}  // namespace

struct HttpClient::Impl {
  TlsOptions tls;
  CurlPtr curl;
  char errbuf[CURL_ERROR_SIZE];

  // A transport failure as a Status; a TLS failure also drops the handle, so
  // the next request reads the CA, certificate and key files again.
  Status Failure(const std::string& what, CURLcode rc) {
    std::string why = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
    long connects = 0, status = 0;
    const char* scheme = nullptr;
    curl_easy_getinfo(curl.get(), CURLINFO_NUM_CONNECTS, &connects);
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(curl.get(), CURLINFO_SCHEME, &scheme);
    bool fresh_tls = connects > 0 && status == 0 && scheme && strcasecmp(scheme, "https") == 0;
    if (TlsCode(rc, errbuf, fresh_tls)) {
      if (!std::strstr(errbuf, "SSL"))
        why = "the server closed a new TLS connection before answering (a rejected client certificate?): " + why;
      curl.reset();
      return TlsFailure(what, why);
    }
    return Status::Error(Reason::kUnavailable, Domain::kControlPlane, what, why);
  }

  Result<CURL*> Prepare(const HttpRequest& req, SlistPtr* headers) {
    if (!curl) curl.reset(curl_easy_init());
    if (!curl) return Status::Error(Reason::kInternal, Domain::kNone, "curl_easy_init failed");
    CURL* c = curl.get();
    curl_easy_reset(c);
    errbuf[0] = '\0';
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 10L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 5L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!tls.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, tls.ca_file.c_str());
    if (!tls.cert_file.empty()) curl_easy_setopt(c, CURLOPT_SSLCERT, tls.cert_file.c_str());
    if (!tls.key_file.empty()) curl_easy_setopt(c, CURLOPT_SSLKEY, tls.key_file.c_str());
    if (tls.insecure) {
      curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_slist* list = nullptr;
    for (const auto& h : req.headers) list = curl_slist_append(list, h.c_str());
    headers->reset(list);
    if (list) curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
    if (req.method == "GET") {
      curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, req.body.c_str());
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    }
    return c;
  }
};

HttpClient::HttpClient(TlsOptions tls) : impl_(std::make_unique<Impl>()) { impl_->tls = std::move(tls); }
HttpClient::~HttpClient() = default;
HttpClient::HttpClient(HttpClient&&) noexcept = default;
HttpClient& HttpClient::operator=(HttpClient&&) noexcept = default;

void HttpClient::Reset() { impl_->curl.reset(); }

Result<HttpResponse> HttpClient::Do(const HttpRequest& req) {
  SlistPtr headers;
  WEFT_ASSIGN_OR_RETURN(CURL * c, impl_->Prepare(req, &headers));
  HttpResponse resp;
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp.body);
  CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) return impl_->Failure(req.method + " " + req.url, rc);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

Result<HttpResponse> HttpClient::Stream(const HttpRequest& req, const std::function<bool(std::string_view)>& on_line,
                                        const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) {
  SlistPtr headers;
  WEFT_ASSIGN_OR_RETURN(CURL * c, impl_->Prepare(req, &headers));
  StreamState st;
  st.curl = c;
  st.on_line = &on_line;
  st.stop = &stop;
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, StreamWrite);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, StreamProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &st);
  if (idle_timeout.count() > 0) {
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>((idle_timeout.count() + 999) / 1000));
  }
  CURLcode rc = curl_easy_perform(c);
  HttpResponse resp;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  if (st.aborted || stop.load()) return resp;  // deliberate end
  if (rc != CURLE_OK) return impl_->Failure("stream " + req.url, rc);
  resp.body = std::move(st.error_body);
  return resp;
}

}  // namespace weft::sys
