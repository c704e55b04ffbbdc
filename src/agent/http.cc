#include "agent/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "base/strings.h"
#include "sys/dl.h"
#include "sys/tcp.h"

namespace weft::agent {

Status InitHttp() { return Status::Ok(); }

// --- The built-in HTTP/1.1 client's pure parts ----------------------------------

namespace http_internal {
namespace {

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool IContains(std::string_view hay, std::string_view needle) {
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i)
    if (IEquals(hay.substr(i, needle.size()), needle)) return true;
  return false;
}

Status Malformed(const std::string& what) { return Status::Error(Code::kControlPlane, "bad HTTP response", what); }

}  // namespace

std::optional<Url> ParseUrl(std::string_view url) {
  Url u;
  if (url.rfind("http://", 0) == 0) {
    url.remove_prefix(7);
  } else if (url.rfind("https://", 0) == 0) {
    u.https = true;
    url.remove_prefix(8);
  } else {
    return std::nullopt;
  }
  size_t slash = url.find_first_of("/?");
  std::string_view authority = url.substr(0, slash);
  u.target = slash == std::string_view::npos ? "/" : std::string(url.substr(slash));
  if (u.target[0] == '?') u.target = "/" + u.target;
  if (authority.empty() || authority.find('@') != std::string_view::npos) return std::nullopt;
  u.host_header = std::string(authority);
  std::string_view port;
  if (authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return std::nullopt;
      port = rest.substr(1);
    }
  } else {
    size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (u.host.empty()) return std::nullopt;
  u.port = u.https ? 443 : 80;
  if (!port.empty()) {
    int p = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return std::nullopt;
      p = p * 10 + (c - '0');
      if (p > 65535) return std::nullopt;
    }
    if (p == 0) return std::nullopt;
    u.port = p;
  }
  return u;
}

Status ResponseParser::Header(std::string_view line) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Malformed("header without ':'");
  std::string_view name = Trim(line.substr(0, colon));
  std::string_view value = Trim(line.substr(colon + 1));
  if (IEquals(name, "content-length")) {
    uint64_t n = 0;
    if (value.empty()) return Malformed("empty Content-Length");
    for (char c : value) {
      if (c < '0' || c > '9' || n > (uint64_t{1} << 40)) return Malformed("bad Content-Length");
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    has_length_ = true;
    left_ = n;
  } else if (IEquals(name, "transfer-encoding")) {
    chunked_ = IContains(value, "chunked");
  } else if (IEquals(name, "connection")) {
    if (IContains(value, "close")) keep_alive_ = false;
  }
  return Status::Ok();
}

Status ResponseParser::EndOfHeaders() {
  if (status_ >= 100 && status_ < 200) {  // interim (100 Continue): the real response follows
    state_ = kStatusLine;
    has_length_ = chunked_ = false;
    keep_alive_ = true;
    return Status::Ok();
  }
  if (status_ == 204 || status_ == 304) state_ = kDone;
  else if (chunked_) state_ = kChunkSize;
  else if (has_length_) state_ = left_ == 0 ? kDone : kBodyLength;
  else {
    state_ = kUntilClose;
    keep_alive_ = false;
  }
  return Status::Ok();
}

Status ResponseParser::Feed(std::string_view data, const std::function<bool(std::string_view)>& on_body) {
  auto body = [&](std::string_view b) {
    if (b.empty() || aborted_) return;
    if (!on_body(b)) aborted_ = true;
  };
  while (!data.empty() && state_ != kDone && !aborted_) {
    switch (state_) {
      case kBodyLength:
      case kChunkData: {
        size_t n = static_cast<size_t>(std::min<uint64_t>(left_, data.size()));
        body(data.substr(0, n));
        data.remove_prefix(n);
        left_ -= n;
        if (left_ == 0) state_ = state_ == kBodyLength ? kDone : kChunkEnd;
        break;
      }
      case kUntilClose:
        body(data);
        data = {};
        break;
      default: {
        // Line-based states: collect up to '\n'.
        size_t nl = data.find('\n');
        if (nl == std::string_view::npos) {
          if (line_.size() + data.size() > 65536) return Malformed("line too long");
          line_.append(data);
          return Status::Ok();
        }
        line_.append(data.substr(0, nl));
        data.remove_prefix(nl + 1);
        std::string line = std::move(line_);
        line_.clear();
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (state_ == kStatusLine) {
          // "HTTP/1.1 200 OK"
          if (line.rfind("HTTP/1.", 0) != 0 || line.size() < 12 || line[8] != ' ')
            return Malformed("status line \"" + line.substr(0, 40) + "\"");
          long code = 0;
          for (size_t i = 9; i < 12; ++i) {
            if (line[i] < '0' || line[i] > '9') return Malformed("status code");
            code = code * 10 + (line[i] - '0');
          }
          status_ = code;
          if (line.rfind("HTTP/1.0", 0) == 0) keep_alive_ = false;
          state_ = kHeaders;
        } else if (state_ == kHeaders) {
          WEFT_RETURN_IF_ERROR(line.empty() ? EndOfHeaders() : Header(line));
        } else if (state_ == kChunkSize) {
          uint64_t n = 0;
          size_t i = 0;
          for (; i < line.size() && std::isxdigit(static_cast<unsigned char>(line[i])); ++i) {
            if (n > (uint64_t{1} << 40)) return Malformed("chunk too large");
            n = n * 16 + static_cast<uint64_t>(std::isdigit(static_cast<unsigned char>(line[i]))
                                                   ? line[i] - '0'
                                                   : std::tolower(static_cast<unsigned char>(line[i])) - 'a' + 10);
          }
          if (i == 0 || (i < line.size() && line[i] != ';' && line[i] != ' ')) return Malformed("chunk size");
          left_ = n;
          state_ = n == 0 ? kTrailers : kChunkData;
        } else if (state_ == kChunkEnd) {
          if (!line.empty()) return Malformed("chunk not followed by CRLF");
          state_ = kChunkSize;
        } else if (state_ == kTrailers) {
          if (line.empty()) state_ = kDone;
        }
      }
    }
  }
  return Status::Ok();
}

Status ResponseParser::Eof() {
  if (state_ == kUntilClose) state_ = kDone;
  if (state_ == kDone) return Status::Ok();
  keep_alive_ = false;
  return Status::Error(Code::kControlPlane, "connection closed before the response was complete");
}

}  // namespace http_internal

// --- libcurl, loaded on the first https:// request ------------------------------

namespace {

struct CurlApi {
  CURLcode (*global_init)(long);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
};

// Loads and initialises libcurl once per process. Thread-safe.
Result<const CurlApi*> Curl() {
  static std::once_flag once;
  static Result<const CurlApi*> api = Status::Error(Code::kInternal, "libcurl not loaded");
  static CurlApi table;
  std::call_once(once, [] {
    const std::string so = "libcurl.so.4";
    auto lib = sys::LoadLibrary(so);
    if (!lib.ok()) {
      api = lib.status().WithPrefix("https:// needs libcurl");
      return;
    }
    Status st;
    auto sym = [&](auto* fn, const char* name) {
      auto p = sys::LibrarySymbol(*lib, so, name);
      if (!p.ok()) {
        if (st.ok()) st = p.status();
        return;
      }
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(*p);
    };
    sym(&table.global_init, "curl_global_init");
    sym(&table.easy_init, "curl_easy_init");
    sym(&table.easy_cleanup, "curl_easy_cleanup");
    sym(&table.easy_reset, "curl_easy_reset");
    sym(&table.easy_setopt, "curl_easy_setopt");
    sym(&table.easy_perform, "curl_easy_perform");
    sym(&table.easy_getinfo, "curl_easy_getinfo");
    sym(&table.easy_strerror, "curl_easy_strerror");
    sym(&table.slist_append, "curl_slist_append");
    sym(&table.slist_free_all, "curl_slist_free_all");
    if (!st.ok()) {
      api = st;
      return;
    }
    CURLcode rc = table.global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) {
      api = Status::Error(Code::kInternal, "curl_global_init", table.easy_strerror(rc));
      return;
    }
    api = &table;
  });
  return api;
}

struct StreamState {
  const CurlApi* api = nullptr;
  CURL* curl = nullptr;
  const std::function<bool(std::string_view)>* on_line = nullptr;
  const std::atomic<bool>* stop = nullptr;
  std::string pending;   // bytes after the last newline
  std::string error_body;
  long status = 0;
  bool aborted = false;  // on_line asked to stop
};

// Splits 2xx stream bytes into lines for `on_line`; keeps a non-2xx body.
// Returns false when on_line asked to stop.
bool StreamBytes(StreamState* st, std::string_view data) {
  if (st->status < 200 || st->status >= 300) {
    if (st->error_body.size() < 65536) st->error_body.append(data);
    return true;
  }
  st->pending.append(data);
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
      return false;
    }
  }
  st->pending.erase(0, start);
  return true;
}

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

size_t CurlStreamWrite(char* data, size_t size, size_t n, void* user) {
  auto* st = static_cast<StreamState*>(user);
  size_t len = size * n;
  if (st->status == 0) st->api->easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &st->status);
  return StreamBytes(st, std::string_view(data, len)) ? len : 0;  // 0 makes curl abort
}

int CurlProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* st = static_cast<StreamState*>(user);
  return st->stop->load() ? 1 : 0;
}

constexpr auto kConnectTimeout = std::chrono::milliseconds(3000);
constexpr int kKeepIdleS = 10, kKeepIntervalS = 5;
constexpr auto kPollSlice = std::chrono::milliseconds(100);  // how often a stream checks `stop`

}  // namespace

struct HttpClient::Impl {
  TlsOptions tls;

  // Built-in client: one kept-alive connection.
  std::optional<sys::TcpConn> conn;
  std::string conn_key;  // "host port"

  // libcurl (https).
  const CurlApi* api = nullptr;
  CURL* curl = nullptr;

  ~Impl() {
    if (curl) api->easy_cleanup(curl);
  }

  // --- built-in ---

  // Sends `req` and feeds the response to `parser`/`on_body` until it is
  // complete, `stop` is set (streams), the deadline passes (requests) or the
  // stream is idle for `idle` (> 0).
  Status Exchange(const HttpRequest& req, const http_internal::Url& url, http_internal::ResponseParser* parser,
                  const std::function<bool(std::string_view)>& on_body, const std::atomic<bool>* stop,
                  std::optional<std::chrono::steady_clock::time_point> deadline, std::chrono::milliseconds idle) {
    std::string msg = req.method + " " + url.target + " HTTP/1.1\r\nHost: " + url.host_header +
                      "\r\nUser-Agent: weftd\r\nAccept: */*\r\n";
    for (const auto& h : req.headers) msg += h + "\r\n";
    if (req.method != "GET" || !req.body.empty()) msg += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
    msg += "\r\n";
    msg += req.body;
    std::string key = url.host + " " + std::to_string(url.port);
    if (conn && conn_key != key) conn.reset();
    for (int attempt = 0;; ++attempt) {
      bool reused = conn.has_value();
      if (!conn) {
        WEFT_ASSIGN_OR_RETURN(auto c, sys::TcpConn::Connect(url.host, url.port, kConnectTimeout));
        (void)c.SetKeepAlive(kKeepIdleS, kKeepIntervalS);
        conn.emplace(std::move(c));
        conn_key = key;
      }
      auto send_timeout = deadline ? std::chrono::duration_cast<std::chrono::milliseconds>(
                                         *deadline - std::chrono::steady_clock::now())
                                   : std::chrono::milliseconds(30000);
      Status st = conn->SendAll(msg, send_timeout);
      bool got_any = false;
      if (st.ok()) st = Receive(parser, on_body, stop, deadline, idle, &got_any);
      // A kept-alive connection the server closed meanwhile: once more on a new one.
      if (!st.ok() && reused && !got_any && attempt == 0) {
        conn.reset();
        continue;
      }
      if (!st.ok() || !parser->keep_alive() || parser->aborted()) conn.reset();
      return st;
    }
  }

  Status Receive(http_internal::ResponseParser* parser, const std::function<bool(std::string_view)>& on_body,
                 const std::atomic<bool>* stop, std::optional<std::chrono::steady_clock::time_point> deadline,
                 std::chrono::milliseconds idle, bool* got_any) {
    char buf[16384];
    auto last_data = std::chrono::steady_clock::now();
    while (!parser->done() && !parser->aborted()) {
      if (stop && stop->load()) return Status::Ok();
      auto now = std::chrono::steady_clock::now();
      auto wait = kPollSlice;
      if (deadline) {
        if (now >= *deadline) return Status::Error(Code::kControlPlane, "HTTP request", "timed out", ETIMEDOUT);
        wait = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now) +
                            std::chrono::milliseconds(1),
                        stop ? kPollSlice : std::chrono::milliseconds(60000));
      }
      if (idle.count() > 0 && now - last_data > idle)
        return Status::Error(Code::kControlPlane, "HTTP stream", "idle too long", ETIMEDOUT);
      WEFT_ASSIGN_OR_RETURN(auto n, conn->Recv(buf, sizeof buf, wait));
      if (!n) continue;
      if (*n == 0) return parser->Eof();
      *got_any = true;
      last_data = std::chrono::steady_clock::now();
      WEFT_RETURN_IF_ERROR(parser->Feed(std::string_view(buf, *n), on_body));
    }
    return Status::Ok();
  }

  // --- libcurl ---

  Result<CURL*> Prepare(const HttpRequest& req, curl_slist** headers) {
    if (!api) {
      WEFT_ASSIGN_OR_RETURN(api, Curl());
    }
    if (!curl) curl = api->easy_init();
    if (!curl) return Status::Error(Code::kInternal, "curl_easy_init failed");
    CURL* c = curl;
    api->easy_reset(c);
    api->easy_setopt(c, CURLOPT_URL, req.url.c_str());
    api->easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    api->easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(kConnectTimeout.count()));
    api->easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    api->easy_setopt(c, CURLOPT_TCP_KEEPIDLE, static_cast<long>(kKeepIdleS));
    api->easy_setopt(c, CURLOPT_TCP_KEEPINTVL, static_cast<long>(kKeepIntervalS));
    api->easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!tls.ca_file.empty()) api->easy_setopt(c, CURLOPT_CAINFO, tls.ca_file.c_str());
    if (!tls.cert_file.empty()) api->easy_setopt(c, CURLOPT_SSLCERT, tls.cert_file.c_str());
    if (!tls.key_file.empty()) api->easy_setopt(c, CURLOPT_SSLKEY, tls.key_file.c_str());
    if (tls.insecure) {
      api->easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
      api->easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_slist* list = nullptr;
    for (const auto& h : req.headers) list = api->slist_append(list, h.c_str());
    *headers = list;
    if (list) api->easy_setopt(c, CURLOPT_HTTPHEADER, list);
    if (req.method == "GET") {
      api->easy_setopt(c, CURLOPT_HTTPGET, 1L);
    } else {
      api->easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
      api->easy_setopt(c, CURLOPT_POSTFIELDS, req.body.c_str());
      api->easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    }
    return c;
  }

  struct Slist {
    const CurlApi* api;
    curl_slist* list = nullptr;
    ~Slist() {
      if (list) api->slist_free_all(list);
    }
  };
};

HttpClient::HttpClient(TlsOptions tls) : impl_(std::make_unique<Impl>()) { impl_->tls = std::move(tls); }
HttpClient::~HttpClient() = default;
HttpClient::HttpClient(HttpClient&&) noexcept = default;
HttpClient& HttpClient::operator=(HttpClient&&) noexcept = default;

Result<HttpResponse> HttpClient::Do(const HttpRequest& req) {
  auto url = http_internal::ParseUrl(req.url);
  if (!url) return Status::Error(Code::kInvalidConfig, "bad URL " + req.url);
  HttpResponse resp;
  if (!url->https) {
    http_internal::ResponseParser parser;
    auto deadline = std::chrono::steady_clock::now() + req.timeout;
    Status st = impl_->Exchange(
        req, *url, &parser,
        [&](std::string_view b) {
          resp.body.append(b);
          return true;
        },
        nullptr, deadline, std::chrono::milliseconds(0));
    if (!st.ok()) return st.WithPrefix(req.method + " " + req.url);
    resp.status = parser.status();
    return resp;
  }
  Impl::Slist headers{nullptr};
  WEFT_ASSIGN_OR_RETURN(CURL * c, impl_->Prepare(req, &headers.list));
  headers.api = impl_->api;
  const CurlApi* api = impl_->api;
  api->easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
  api->easy_setopt(c, CURLOPT_WRITEFUNCTION, AppendBody);
  api->easy_setopt(c, CURLOPT_WRITEDATA, &resp.body);
  CURLcode rc = api->easy_perform(c);
  if (rc != CURLE_OK)
    return Status::Error(Code::kControlPlane, req.method + " " + req.url, api->easy_strerror(rc));
  api->easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

Result<HttpResponse> HttpClient::Stream(const HttpRequest& req, const std::function<bool(std::string_view)>& on_line,
                                        const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) {
  auto url = http_internal::ParseUrl(req.url);
  if (!url) return Status::Error(Code::kInvalidConfig, "bad URL " + req.url);
  StreamState st;
  st.on_line = &on_line;
  st.stop = &stop;
  HttpResponse resp;
  if (!url->https) {
    http_internal::ResponseParser parser;
    Status s = impl_->Exchange(
        req, *url, &parser,
        [&](std::string_view b) {
          st.status = parser.status();
          return StreamBytes(&st, b);
        },
        &stop, std::nullopt, idle_timeout);
    resp.status = parser.status();
    if (st.aborted || stop.load()) return resp;  // deliberate end
    if (!s.ok()) return Status::Error(Code::kControlPlane, "stream " + req.url, s.ToString());
    resp.body = std::move(st.error_body);
    return resp;
  }
  Impl::Slist headers{nullptr};
  WEFT_ASSIGN_OR_RETURN(CURL * c, impl_->Prepare(req, &headers.list));
  headers.api = impl_->api;
  const CurlApi* api = impl_->api;
  st.api = api;
  st.curl = c;
  api->easy_setopt(c, CURLOPT_WRITEFUNCTION, CurlStreamWrite);
  api->easy_setopt(c, CURLOPT_WRITEDATA, &st);
  api->easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  api->easy_setopt(c, CURLOPT_XFERINFOFUNCTION, CurlProgress);
  api->easy_setopt(c, CURLOPT_XFERINFODATA, &st);
  if (idle_timeout.count() > 0) {
    api->easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    api->easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>((idle_timeout.count() + 999) / 1000));
  }
  CURLcode rc = api->easy_perform(c);
  api->easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  if (st.aborted || stop.load()) return resp;  // deliberate end
  if (rc != CURLE_OK) return Status::Error(Code::kControlPlane, "stream " + req.url, api->easy_strerror(rc));
  resp.body = std::move(st.error_body);
  return resp;
}

}  // namespace weft::agent
