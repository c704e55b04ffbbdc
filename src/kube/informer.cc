#include "kube/informer.h"

#include <algorithm>
#include <thread>

#include "base/backoff.h"
#include "base/json_util.h"
#include "base/log.h"
#include "base/strings.h"
#include "kube/kube_client.h"

namespace weft::kube {
namespace {

using nlohmann::json;

// A list or watch that could not be used: the Status's message when the body is one.
Status HttpError(const std::string& what, long status, const std::string& body) {
  std::string details = body.substr(0, 512);
  try {
    json j = json::parse(body);
    if (JsonStr(j, "kind") == "Status" && !JsonStr(j, "message").empty()) details = JsonStr(j, "message");
  } catch (const std::exception&) {
  }
  return Status::Error(Reason::kUnavailable, Domain::kControlPlane, what + ": HTTP " + std::to_string(status), details);
}

class HttpKubeApi : public KubeApi {
 public:
  explicit HttpKubeApi(const KubeEndpoint& ep) : client_(ep) {}

  Result<sys::HttpResponse> Get(const std::string& path) override {
    sys::HttpRequest req;
    req.url = path;
    req.timeout = std::chrono::seconds(30);
    return client_.Do(std::move(req));
  }

  Result<sys::HttpResponse> Watch(const std::string& path, const std::function<bool(std::string_view)>& on_line,
                             const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) override {
    sys::HttpRequest req;
    req.url = path;
    return client_.Stream(std::move(req), on_line, stop, idle_timeout);
  }

  Result<sys::HttpResponse> Patch(const std::string& path, const std::string& content_type,
                                  const std::string& body) override {
    sys::HttpRequest req;
    req.method = "PATCH";
    req.url = path;
    req.headers.push_back("Content-Type: " + content_type);
    req.body = body;
    req.timeout = std::chrono::seconds(30);
    return client_.Do(std::move(req));
  }

 private:
  KubeClient client_;
};

}  // namespace

std::unique_ptr<KubeApi> NewKubeApi(const KubeEndpoint& endpoint) { return std::make_unique<HttpKubeApi>(endpoint); }

Result<sys::HttpResponse> KubeApi::Patch(const std::string& path, const std::string&, const std::string&) {
  return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "PATCH " + path + ": not supported here");
}

const char* EventTypeName(EventType t) {
  switch (t) {
    case EventType::kAdded: return "ADDED";
    case EventType::kModified: return "MODIFIED";
    case EventType::kDeleted: return "DELETED";
  }
  return "?";
}

std::string ObjectKey(const json& object) {
  const json& meta = JsonMember(object, "metadata");
  std::string name = JsonStr(meta, "name");
  if (name.empty()) return "";
  std::string ns = JsonStr(meta, "namespace");
  return ns.empty() ? name : ns + "/" + name;
}

Result<KubeListPage> ParseKubeListPage(std::string_view body) {
  return ParseJsonObject<KubeListPage>(body, "list", [](json& j) -> Result<KubeListPage> {
    if (JsonStr(j, "kind") == "Status")
      return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "list: " + JsonStr(j, "message"));
    KubeListPage page;
    const json& meta = JsonMember(j, "metadata");
    page.resource_version = JsonStr(meta, "resourceVersion");
    page.continue_token = JsonStr(meta, "continue");
    auto it = j.find("items");
    if (it != j.end() && it->is_array()) {
      page.items.reserve(it->size());
      for (auto& item : *it)
        if (item.is_object()) page.items.push_back(std::move(item));
    } else if (it != j.end() && !it->is_null()) {
      return Status::Error(Reason::kMalformed, Domain::kNone, "list: items is not an array");
    }
    return page;
  });
}

Result<KubeWatchEvent> ParseKubeWatchLine(std::string_view line) {
  return ParseJsonObject<KubeWatchEvent>(line, "watch event", [](json& j) -> Result<KubeWatchEvent> {
    std::string type = JsonStr(j, "type");
    auto obj = j.find("object");
    if (obj == j.end() || !obj->is_object())
      return Status::Error(Reason::kMalformed, Domain::kNone, "watch event without an object");
    KubeWatchEvent e;
    if (type == "ERROR") {
      e.kind = KubeWatchEvent::Kind::kError;
      const json& code = JsonMember(*obj, "code");
      e.error_code = code.is_number_integer() ? code.get<int>() : 0;
      std::string reason = JsonStr(*obj, "reason");
      if (e.error_code == 0 && (reason == "Expired" || reason == "Gone")) e.error_code = 410;
      e.error_message = JsonStr(*obj, "message");
      return e;
    }
    if (type == "ADDED") e.kind = KubeWatchEvent::Kind::kAdded;
    else if (type == "MODIFIED") e.kind = KubeWatchEvent::Kind::kModified;
    else if (type == "DELETED") e.kind = KubeWatchEvent::Kind::kDeleted;
    else if (type == "BOOKMARK") e.kind = KubeWatchEvent::Kind::kBookmark;
    else return Status::Error(Reason::kMalformed, Domain::kNone, "watch event of unknown type \"" + type + "\"");
    e.resource_version = JsonStr(JsonMember(*obj, "metadata"), "resourceVersion");
    if (e.kind == KubeWatchEvent::Kind::kBookmark) return e;  // the object carries only the resourceVersion
    if (ObjectKey(*obj).empty())
      return Status::Error(Reason::kMalformed, Domain::kNone, "watch event: object without metadata.name");
    e.object = std::move(*obj);
    return e;
  });
}

void ChangeNotifier::Notify() {
  {
    std::lock_guard lock(mu_);
    ++counter_;
  }
  cv_.notify_all();
}

uint64_t ChangeNotifier::Wait(uint64_t seen, std::chrono::milliseconds timeout, const std::atomic<bool>& stop) {
  auto end = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mu_);
  while (counter_ == seen && !stop.load()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= end) break;
    auto slice = std::min<std::chrono::steady_clock::duration>(end - now, std::chrono::milliseconds(100));
    cv_.wait_for(lock, slice);
  }
  return counter_;
}

uint64_t ChangeNotifier::WaitCoalesced(uint64_t seen, std::chrono::steady_clock::time_point wake,
                                       std::chrono::milliseconds batch, const std::atomic<bool>& stop) {
  const auto now = std::chrono::steady_clock::now();
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake > now ? wake - now
                                                                               : std::chrono::steady_clock::duration(0));
  uint64_t v = Wait(seen, std::min<std::chrono::milliseconds>(wait, std::chrono::seconds(5)), stop);
  if (v == seen) return seen;
  std::this_thread::sleep_for(batch);
  return value();
}

uint64_t ChangeNotifier::value() const {
  std::lock_guard lock(mu_);
  return counter_;
}

namespace internal {
void LogDecodeException(const std::string& key, const std::exception& e) {
  WEFT_LOG(kWarn, "object ignored: decode failed", {"key", key}, {"err", e.what()});
}
}  // namespace internal

Informer::Informer(std::unique_ptr<KubeApi> api, ResourceSpec spec, InformerHandler& handler,
                   ControlPlaneStats& stats)
    : api_(std::move(api)),
      spec_(std::move(spec)),
      handler_(handler),
      stats_(stats),
      sleep_(SleepJitteredUnlessStopped) {}

bool Informer::synced() const { return synced_.load(); }

std::string Informer::Selectors() const {
  std::string q;
  if (!spec_.label_selector.empty()) q += "&labelSelector=" + QueryEscape(spec_.label_selector);
  if (!spec_.field_selector.empty()) q += "&fieldSelector=" + QueryEscape(spec_.field_selector);
  return q;
}

std::string Informer::ListPath(const std::string& continue_token) const {
  std::string p = spec_.path + "?limit=" + std::to_string(spec_.page_size) + Selectors();
  if (!continue_token.empty()) p += "&continue=" + QueryEscape(continue_token);
  return p;
}

std::string Informer::WatchPath(const std::string& resource_version) const {
  return spec_.path + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + QueryEscape(resource_version) +
         "&timeoutSeconds=" + std::to_string(spec_.watch_timeout_seconds) + Selectors();
}

void Informer::Run(const std::atomic<bool>& stop) { RunListWatch(*this, spec_.what, stats_, sleep_, stop); }

// Every page, one resourceVersion; the handler replaces its state only when all arrived.
Status Informer::List(const std::atomic<bool>& stop) {
  constexpr int kMaxPages = 100000;
  constexpr int kMaxRestarts = 3;
  std::string token;
  std::string list_rv;
  size_t items = 0;
  int pages = 0, restarts = 0;
  handler_.OnListStart();
  for (;;) {
    if (stop.load() || pages >= kMaxPages) {
      handler_.OnListEnd(false);
      return stop.load() ? Status::Ok()
                         : Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                         "list " + spec_.what + ": more than " +
                                                                  std::to_string(kMaxPages) + " pages");
    }
    auto resp = api_->Get(ListPath(token));
    if (!resp.ok()) {
      handler_.OnListEnd(false);
      return resp.status();
    }
    if (resp->status == 410 && !token.empty() && restarts < kMaxRestarts) {
      // The continue token expired (compaction between pages): the pages so far are from a snapshot that is
      // gone; start over.
      WEFT_LOG(kInfo, "list continue token expired (410 Gone); restarting the list", {"what", spec_.what},
               {"pages", pages});
      handler_.OnListEnd(false);
      stats_.relists++;
      restarts++;
      token.clear();
      items = 0;
      pages = 0;
      handler_.OnListStart();
      continue;
    }
    if (resp->status == 404 && spec_.may_be_absent && token.empty()) {
      // Not served (its CRD is not installed): nothing of it exists.
      handler_.OnListEnd(true);
      rv_.clear();
      synced_ = true;
      absent_ = true;
      absent_flag_ = true;
      if (!absent_logged_)
        WEFT_LOG(kInfo, "resource not served by the API server (404); treated as empty, listed again periodically",
                 {"what", spec_.what}, {"path", spec_.path},
                 {"retry_s", std::chrono::duration_cast<std::chrono::seconds>(spec_.absent_retry).count()});
      absent_logged_ = true;
      return Status::Ok();
    }
    if (resp->status != 200) {
      handler_.OnListEnd(false);
      return HttpError("list " + spec_.what, resp->status, resp->body);
    }
    auto page = ParseKubeListPage(resp->body);
    if (!page.ok()) {
      handler_.OnListEnd(false);
      return page.status().WithPrefix("list " + spec_.what);
    }
    resp->body.clear();
    resp->body.shrink_to_fit();
    ++pages;
    items += page->items.size();
    for (auto& item : page->items) handler_.OnListItem(std::move(item));
    list_rv = page->resource_version;
    token = page->continue_token;
    if (token.empty()) break;
  }
  handler_.OnListEnd(true);
  rv_ = list_rv;
  synced_ = true;
  if (absent_) WEFT_LOG(kInfo, "resource served again", {"what", spec_.what});
  absent_ = false;
  absent_flag_ = false;
  absent_logged_ = false;
  WEFT_LOG(kInfo, "listed", {"what", spec_.what}, {"items", items}, {"pages", pages}, {"resourceVersion", rv_});
  return Status::Ok();
}

ListWatchSource::WatchEnd Informer::Watch(const std::atomic<bool>& stop) {
  WatchEnd out;
  if (absent_) {
    // Nothing to watch: ask again every absent_retry, quietly, until the
    // resource is served (anything but a 404); then list it.
    for (;;) {
      if (!sleep_(spec_.absent_retry, stop)) {
        out.end = End::kStopped;
        return out;
      }
      auto probe = api_->Get(spec_.path + "?limit=1");
      if (probe.ok() && probe->status == 404) continue;
      out.end = End::kExpired;
      out.progressed = true;
      out.why = Status::Error(Reason::kNotFound, Domain::kControlPlane, spec_.what + " may be served now");
      return out;
    }
  }
  bool gone = false;
  Status line_error;
  auto started = std::chrono::steady_clock::now();
  auto r = api_->Watch(
      WatchPath(rv_),
      [&](std::string_view line) {
        auto e = ParseKubeWatchLine(line);
        if (!e.ok()) {
          line_error = e.status();
          return false;
        }
        if (e->kind == KubeWatchEvent::Kind::kError) {
          if (e->error_code == 410) {
            gone = true;
          } else {
            line_error = Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                       "watch error " + std::to_string(e->error_code) + ": " + e->error_message);
          }
          return false;
        }
        out.progressed = true;
        if (!e->resource_version.empty()) rv_ = e->resource_version;
        if (e->kind == KubeWatchEvent::Kind::kBookmark) return !stop.load();
        EventType type = e->kind == KubeWatchEvent::Kind::kAdded      ? EventType::kAdded
                         : e->kind == KubeWatchEvent::Kind::kModified ? EventType::kModified
                                                                  : EventType::kDeleted;
        stats_.events++;
        handler_.OnEvent(type, std::move(e->object));
        return !stop.load();
      },
      stop, std::chrono::seconds(spec_.watch_timeout_seconds + 60));
  if (stop.load()) {
    out.end = End::kStopped;
  } else if (gone || (r.ok() && r->status == 410)) {
    out.end = End::kExpired;
    out.why = Status::Error(Reason::kNotFound, Domain::kControlPlane, "410 Gone: resourceVersion " + rv_ + " expired");
  } else if (!r.ok()) {
    out.why = r.status();
  } else if (!line_error.ok()) {
    out.why = line_error;
  } else if (r->status < 200 || r->status >= 300) {
    out.why = HttpError("watch " + spec_.what, r->status, r->body);
  } else if (!out.progressed && std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) {
    out.why = Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                            "watch " + spec_.what + ": ended at once without an event");
  } else {
    out.end = End::kTimeout;  // the server's timeoutSeconds ended the watch: resume at once
  }
  return out;  // kFailed unless set above
}

}  // namespace weft::kube
