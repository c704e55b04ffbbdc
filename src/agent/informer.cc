#include "agent/informer.h"

#include <cctype>
#include <cstdio>

#include "agent/kube_client.h"
#include "base/log.h"

namespace weft::agent {
namespace {

using nlohmann::json;

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

const json& Member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A list or watch that could not be used: the Status's message when the body is one.
Status HttpError(const std::string& what, long status, const std::string& body) {
  std::string details = body.substr(0, 512);
  try {
    json j = json::parse(body);
    if (Str(j, "kind") == "Status" && !Str(j, "message").empty()) details = Str(j, "message");
  } catch (const std::exception&) {
  }
  return Status::Error(Code::kControlPlane, what + ": HTTP " + std::to_string(status), details);
}

class HttpKubeApi : public KubeApi {
 public:
  explicit HttpKubeApi(const KubeEndpoint& ep) : client_(ep) {}

  Result<HttpResponse> Get(const std::string& path) override {
    HttpRequest req;
    req.url = path;
    req.timeout = std::chrono::seconds(30);
    return client_.Do(std::move(req));
  }

  Result<HttpResponse> Watch(const std::string& path, const std::function<bool(std::string_view)>& on_line,
                             const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) override {
    HttpRequest req;
    req.url = path;
    return client_.Stream(std::move(req), on_line, stop, idle_timeout);
  }

 private:
  KubeClient client_;
};

}  // namespace

std::unique_ptr<KubeApi> NewKubeApi(const KubeEndpoint& endpoint) { return std::make_unique<HttpKubeApi>(endpoint); }

const char* EventTypeName(EventType t) {
  switch (t) {
    case EventType::kAdded: return "ADDED";
    case EventType::kModified: return "MODIFIED";
    case EventType::kDeleted: return "DELETED";
  }
  return "?";
}

std::string QueryEscape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string ObjectKey(const json& object) {
  const json& meta = Member(object, "metadata");
  std::string name = Str(meta, "name");
  if (name.empty()) return "";
  std::string ns = Str(meta, "namespace");
  return ns.empty() ? name : ns + "/" + name;
}

Result<KubeListPage> ParseKubeListPage(std::string_view body) {
  try {
    json j = json::parse(body);
    if (!j.is_object()) return Status::Error(Code::kDecode, "list: not a JSON object");
    if (Str(j, "kind") == "Status") return Status::Error(Code::kControlPlane, "list: " + Str(j, "message"));
    KubeListPage page;
    const json& meta = Member(j, "metadata");
    page.resource_version = Str(meta, "resourceVersion");
    page.continue_token = Str(meta, "continue");
    auto it = j.find("items");
    if (it != j.end() && it->is_array()) {
      page.items.reserve(it->size());
      for (auto& item : *it)
        if (item.is_object()) page.items.push_back(std::move(item));
    } else if (it != j.end() && !it->is_null()) {
      return Status::Error(Code::kDecode, "list: items is not an array");
    }
    return page;
  } catch (const std::exception& e) {
    return Status::Error(Code::kDecode, "list: bad JSON", e.what());
  }
}

Result<KubeWatchEvent> ParseKubeWatchLine(std::string_view line) {
  try {
    json j = json::parse(line);
    if (!j.is_object()) return Status::Error(Code::kDecode, "watch event: not a JSON object");
    std::string type = Str(j, "type");
    auto obj = j.find("object");
    if (obj == j.end() || !obj->is_object()) return Status::Error(Code::kDecode, "watch event without an object");
    KubeWatchEvent e;
    if (type == "ERROR") {
      e.kind = KubeWatchEvent::Kind::kError;
      const json& code = Member(*obj, "code");
      e.error_code = code.is_number_integer() ? code.get<int>() : 0;
      std::string reason = Str(*obj, "reason");
      if (e.error_code == 0 && (reason == "Expired" || reason == "Gone")) e.error_code = 410;
      e.error_message = Str(*obj, "message");
      return e;
    }
    if (type == "ADDED") e.kind = KubeWatchEvent::Kind::kAdded;
    else if (type == "MODIFIED") e.kind = KubeWatchEvent::Kind::kModified;
    else if (type == "DELETED") e.kind = KubeWatchEvent::Kind::kDeleted;
    else if (type == "BOOKMARK") e.kind = KubeWatchEvent::Kind::kBookmark;
    else return Status::Error(Code::kDecode, "watch event of unknown type \"" + type + "\"");
    e.resource_version = Str(Member(*obj, "metadata"), "resourceVersion");
    if (e.kind == KubeWatchEvent::Kind::kBookmark) return e;  // the object carries only the resourceVersion
    if (ObjectKey(*obj).empty()) return Status::Error(Code::kDecode, "watch event: object without metadata.name");
    e.object = std::move(*obj);
    return e;
  } catch (const std::exception& e) {
    return Status::Error(Code::kDecode, "watch event: bad JSON", e.what());
  }
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
    : api_(std::move(api)), spec_(std::move(spec)), handler_(handler), stats_(stats), sleep_(SleepUnlessStopped) {}

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

void Informer::Run(const std::atomic<bool>& stop) {
  bool need_list = true;
  Backoff backoff;
  while (!stop.load()) {
    if (need_list) {
      Status st = List(stop);
      if (stop.load()) break;
      if (!st.ok()) {
        stats_.errors++;
        WEFT_LOG(kWarn, "list failed", {"what", spec_.what}, {"err", st});
        sleep_(backoff.Next(), stop);
        continue;
      }
      need_list = false;
    }
    bool progressed = false;
    Status why;
    switch (Watch(stop, &progressed, &why)) {
      case WatchEnd::kStopped:
        return;
      case WatchEnd::kTimeout:
        backoff.Reset();  // the server's timeoutSeconds ended the watch: resume at once
        break;
      case WatchEnd::kGone:
        WEFT_LOG(kInfo, "watch expired (410 Gone); re-listing", {"what", spec_.what}, {"resourceVersion", rv_});
        need_list = true;
        // Straight back to a list after progress; a watch refused at once waits (no list storm).
        if (progressed) backoff.Reset();
        else sleep_(backoff.Next(), stop);
        break;
      case WatchEnd::kFailed:
        stats_.reconnects++;
        stats_.errors++;
        WEFT_LOG(kWarn, "watch failed; reconnecting", {"what", spec_.what}, {"resourceVersion", rv_}, {"err", why});
        if (progressed) backoff.Reset();
        sleep_(backoff.Next(), stop);
        break;
    }
  }
}

// Every page, one resourceVersion; the handler replaces its state only when all arrived.
Status Informer::List(const std::atomic<bool>& stop) {
  constexpr int kMaxPages = 100000;
  constexpr int kMaxRestarts = 3;
  std::string token;
  std::string list_rv;
  size_t items = 0;
  int pages = 0, restarts = 0;
  stats_.relists++;
  handler_.OnListStart();
  for (;;) {
    if (stop.load() || pages >= kMaxPages) {
      handler_.OnListEnd(false);
      return stop.load() ? Status::Ok()
                         : Status::Error(Code::kControlPlane, "list " + spec_.what + ": more than " +
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
  WEFT_LOG(kInfo, "listed", {"what", spec_.what}, {"items", items}, {"pages", pages}, {"resourceVersion", rv_});
  return Status::Ok();
}

Informer::WatchEnd Informer::Watch(const std::atomic<bool>& stop, bool* progressed, Status* why) {
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
            line_error = Status::Error(Code::kControlPlane,
                                       "watch error " + std::to_string(e->error_code) + ": " + e->error_message);
          }
          return false;
        }
        *progressed = true;
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
  if (stop.load()) return WatchEnd::kStopped;
  if (gone || (r.ok() && r->status == 410)) return WatchEnd::kGone;
  if (!r.ok()) {
    *why = r.status();
  } else if (!line_error.ok()) {
    *why = line_error;
  } else if (r->status < 200 || r->status >= 300) {
    *why = HttpError("watch " + spec_.what, r->status, r->body);
  } else if (!*progressed && std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) {
    *why = Status::Error(Code::kControlPlane, "watch " + spec_.what + ": ended at once without an event");
  } else {
    return WatchEnd::kTimeout;
  }
  return WatchEnd::kFailed;
}

}  // namespace weft::agent
