#pragma once
// The generic Kubernetes list-then-watch engine ("informer") and a typed cache
// over it. Every resource weftd follows (Nodes, Pods, Namespaces,
// NetworkPolicies, ClusterNetworkPolicies) goes through one Informer, so pagination, resourceVersion,
// bookmarks, 410 re-lists, backoff and the half-line rule live here once.
//
//   KubeApi ──GET/watch──> Informer ──OnListStart/Item/End, OnEvent──> InformerHandler
//                                                                      (e.g. Cache<T>: typed objects
//                                                                       + coalesced deltas + ChangeNotifier)

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/list_watch.h"
#include "base/status.h"
#include "kube/kube_endpoint.h"
#include "sys/http.h"

namespace weft::kube {

// How an informer reaches the API server. One instance per thread (it owns a connection).
class KubeApi {
 public:
  virtual ~KubeApi() = default;
  // GET `path` (path + query, e.g. "/api/v1/pods?limit=500"): any HTTP status is a response; transport failure is
  // an error.
  virtual Result<sys::HttpResponse> Get(const std::string& path) = 0;
  // PATCH `path` with `body` of `content_type` (e.g. application/merge-patch+json); as Get. The default refuses
  // (sources that only read).
  virtual Result<sys::HttpResponse> Patch(const std::string& path, const std::string& content_type,
                                          const std::string& body);
  // A streaming GET (watch): `on_line` gets each complete line; see HttpClient::Stream.
  virtual Result<sys::HttpResponse> Watch(const std::string& path, const std::function<bool(std::string_view)>& on_line,
                                     const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) = 0;
};
// The real one: a KubeClient of `endpoint` (its shared, re-read credentials; a 401 retried once with new ones).
// A Get times out after 30 s.
std::unique_ptr<KubeApi> NewKubeApi(const KubeEndpoint& endpoint);

struct ResourceSpec {
  std::string what;              // for logs and metrics: "nodes", "pods", ...
  std::string path;              // collection path: "/api/v1/pods", "/apis/networking.k8s.io/v1/networkpolicies"
  std::string label_selector;    // "" = none (URL-escaped by the informer)
  std::string field_selector;    // "" = none, e.g. "spec.nodeName=n1"
  int64_t page_size = 500;
  int64_t watch_timeout_seconds = 300;
  // A resource that may not be served (a CRD not installed): a 404 on the
  // list is an empty, complete list (logged once, not an error), and the list
  // is tried again every `absent_retry` instead of watching.
  bool may_be_absent = false;
  std::chrono::milliseconds absent_retry{std::chrono::seconds(30)};
};

enum class EventType { kAdded, kModified, kDeleted };
const char* EventTypeName(EventType t);  // "ADDED", "MODIFIED", "DELETED"

// Receives what the informer sees, on the informer's thread.
class InformerHandler {
 public:
  virtual ~InformerHandler() = default;
  // A complete, consistent list (all pages, one resourceVersion): replaces all earlier state.
  virtual void OnReplace(std::vector<nlohmann::json> items) = 0;
  virtual void OnEvent(EventType type, nlohmann::json object) = 0;

  // The same list as it arrives, for handlers that decode each object at once instead of holding every object's
  // JSON until the last page: OnListStart(), OnListItem() per object (in the server's order), then OnListEnd(true)
  // when all pages arrived — the moment to replace the state — or OnListEnd(false) when the list failed or restarts
  // (an expired continue token): drop what was staged. The defaults collect the items and call OnReplace().
  virtual void OnListStart() { staged_.clear(); }
  virtual void OnListItem(nlohmann::json item) { staged_.push_back(std::move(item)); }
  virtual void OnListEnd(bool complete) {
    std::vector<nlohmann::json> items = std::move(staged_);
    staged_.clear();
    if (complete) OnReplace(std::move(items));
  }

 private:
  std::vector<nlohmann::json> staged_;
};

// The Kubernetes list-watch source: pages and resourceVersions; RunListWatch
// (list_watch.h) is its state machine.
class Informer : public ListWatchSource {
 public:
  Informer(std::unique_ptr<KubeApi> api, ResourceSpec spec, InformerHandler& handler, ControlPlaneStats& stats);
  // RunListWatch over this source: lists (paginated; a 410 on a continue token restarts the list), then watches
  // from the list's RV with allowWatchBookmarks=true&timeoutSeconds=N; BOOKMARKs advance the RV; a 410 (status or
  // ERROR event) is kExpired (re-list); a clean server timeout is kTimeout (re-watch from the last RV at once); a
  // watch that ends at once without a line (shorter than 1 s: client-go's "very short watch") is kFailed, so a
  // server that ends every watch at once is not hammered. Returns when `stop` is set. Thread: one dedicated thread.
  void Run(const std::atomic<bool>& stop);
  bool synced() const;  // the first complete list was delivered
  bool absent() const { return absent_flag_.load(); }  // may_be_absent and the server does not serve it now

  // The requests, as sent (unit tests). Query order: list "limit, selectors, continue"; watch "watch=1,
  // allowWatchBookmarks, resourceVersion, timeoutSeconds, selectors".
  std::string ListPath(const std::string& continue_token) const;
  std::string WatchPath(const std::string& resource_version) const;

  // Tests: replaces the backoff sleep (SleepUnlessStopped). Returns false when stopped. Before Run().
  void SetSleepForTesting(SleepFn sleep) { sleep_ = std::move(sleep); }

 private:
  // ListWatchSource.
  Status List(const std::atomic<bool>& stop) override;
  WatchEnd Watch(const std::atomic<bool>& stop) override;
  std::string ResumePoint() const override { return rv_; }
  std::string Selectors() const;

  std::unique_ptr<KubeApi> api_;
  ResourceSpec spec_;
  InformerHandler& handler_;
  ControlPlaneStats& stats_;
  SleepFn sleep_;
  std::string rv_;  // where the next watch resumes
  std::atomic<bool> synced_{false};
  bool absent_ = false;         // the last list was a 404 of a resource that may be absent
  bool absent_logged_ = false;
  std::atomic<bool> absent_flag_{false};
};

// --- Pure parsing (unit-tested, fuzzed in tests/fuzz/fuzz_kube.cc) --------

// One page of a list response. Items that are not JSON objects are dropped.
struct KubeListPage {
  std::vector<nlohmann::json> items;
  std::string resource_version;
  std::string continue_token;
};
// A 2xx list body; a Status object (kind "Status") is an unavailable (control plane) error with its message.
Result<KubeListPage> ParseKubeListPage(std::string_view body);

// One line of a watch stream.
struct KubeWatchEvent {
  enum class Kind { kAdded, kModified, kDeleted, kBookmark, kError };
  Kind kind = Kind::kError;
  nlohmann::json object;           // kAdded/kModified/kDeleted: the object (with a metadata.name)
  std::string resource_version;    // the object's metadata.resourceVersion (every kind but kError)
  int error_code = 0;              // kError: the Status's code (410 = Expired / Gone)
  std::string error_message;
};
Result<KubeWatchEvent> ParseKubeWatchLine(std::string_view line);

// "namespace/name", or "name" for cluster-scoped objects; "" without metadata.name. Never throws.
std::string ObjectKey(const nlohmann::json& object);

// Wakes a consumer when any of several caches changed. Thread-safe.
class ChangeNotifier {
 public:
  void Notify();
  // Waits until the counter differs from `seen` (returns the new value), `stop` is set, or `timeout` passes.
  // `stop` is polled every 100 ms; Notify() after setting it wakes the waiter at once.
  uint64_t Wait(uint64_t seen, std::chrono::milliseconds timeout, const std::atomic<bool>& stop);
  // A controller's wait: until a change (then `batch` more, so a burst is
  // one transaction), `wake` (capped at 5 s) or `stop`. Returns the value seen.
  uint64_t WaitCoalesced(uint64_t seen, std::chrono::steady_clock::time_point wake, std::chrono::milliseconds batch,
                         const std::atomic<bool>& stop);
  uint64_t value() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t counter_ = 0;
};

namespace internal {
// Logs a decode function's exception (the object is then ignored).
void LogDecodeException(const std::string& key, const std::exception& e);
}  // namespace internal

// A typed cache over an informer: objects decoded by `decode` (nullopt = ignore the object, as if absent),
// keyed "namespace/name" (or "name" for cluster-scoped objects). Thread-safe. A `decode` that throws counts as
// nullopt. Only the decoded T is kept, never the JSON; a list is decoded page by page as it arrives.
template <typename T>
class Cache : public InformerHandler {
 public:
  using Decode = std::function<std::optional<T>(const nlohmann::json&)>;
  Cache(Decode decode, ChangeNotifier* notifier)  // notifier may be null
      : decode_(std::move(decode)), notifier_(notifier) {}

  struct Delta {
    std::string key;
    std::optional<T> object;  // nullopt = deleted
  };
  // What changed since the last Drain, coalesced per key (last state wins), ordered by key. After a re-list the
  // deltas are the DIFFERENCE between old and new contents (vanished keys as deletions, unchanged objects not
  // reported), so consumers stay level-triggered. A key that came and went between two Drains is not reported;
  // neither is an event that left the decoded object equal (T::operator==). Until the next Drain the cache keeps
  // the drained state of every changed key, so a cache is meant to be drained by its consumer.
  std::vector<Delta> Drain() {
    std::lock_guard lock(mu_);
    std::vector<Delta> out;
    for (auto& [key, before] : dirty_) {
      auto it = objects_.find(key);
      if (it == objects_.end()) {
        if (before) out.push_back(Delta{key, std::nullopt});
      } else if (!before || !(*before == it->second)) {
        out.push_back(Delta{key, it->second});
      }
    }
    dirty_.clear();
    return out;
  }
  bool synced() const {
    std::lock_guard lock(mu_);
    return synced_;
  }
  std::map<std::string, T> Snapshot() const {
    std::lock_guard lock(mu_);
    return objects_;
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return objects_.size();
  }
  std::optional<T> Get(const std::string& key) const {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return std::nullopt;
    return it->second;
  }

  void OnReplace(std::vector<nlohmann::json> items) override {
    std::map<std::string, T> fresh;
    for (auto& item : items) {
      Stage(&fresh, item);
      item = nullptr;  // free the JSON as soon as it is decoded
    }
    Commit(std::move(fresh));
  }
  void OnEvent(EventType type, nlohmann::json object) override {
    std::string key = ObjectKey(object);
    if (key.empty()) return;
    std::optional<T> value;
    if (type != EventType::kDeleted) value = SafeDecode(key, object);
    object = nullptr;
    bool changed;
    {
      std::lock_guard lock(mu_);
      changed = Set(key, std::move(value));
    }
    if (changed && notifier_) notifier_->Notify();
  }
  // Informer thread only: staging_ needs no lock.
  void OnListStart() override { staging_.clear(); }
  void OnListItem(nlohmann::json item) override { Stage(&staging_, item); }
  void OnListEnd(bool complete) override {
    std::map<std::string, T> fresh = std::move(staging_);
    staging_.clear();
    if (complete) Commit(std::move(fresh));
  }

 private:
  std::optional<T> SafeDecode(const std::string& key, const nlohmann::json& j) {
    try {
      return decode_(j);
    } catch (const std::exception& e) {
      internal::LogDecodeException(key, e);
      return std::nullopt;
    }
  }
  void Stage(std::map<std::string, T>* into, const nlohmann::json& item) {
    std::string key = ObjectKey(item);
    if (key.empty()) return;
    if (std::optional<T> v = SafeDecode(key, item)) into->insert_or_assign(std::move(key), std::move(*v));
  }
  // Remembers `key`'s state as of the last Drain (the first change since wins). REQUIRES: mu_ held.
  void MarkDirty(const std::string& key, const T* before) {
    if (dirty_.find(key) != dirty_.end()) return;
    dirty_.emplace(key, before ? std::optional<T>(*before) : std::nullopt);
  }
  // `key` becomes `value` (nullopt = absent). Returns whether anything changed. REQUIRES: mu_ held.
  bool Set(const std::string& key, std::optional<T> value) {
    auto it = objects_.find(key);
    if (it == objects_.end()) {
      if (!value) return false;
      MarkDirty(key, nullptr);
      objects_.emplace(key, std::move(*value));
      return true;
    }
    if (value && it->second == *value) return false;
    MarkDirty(key, &it->second);
    if (value) {
      it->second = std::move(*value);
    } else {
      objects_.erase(it);
    }
    return true;
  }
  // A complete list replaces the contents; the difference is marked dirty (one merge walk over both maps).
  void Commit(std::map<std::string, T> fresh) {
    bool notify;
    {
      std::lock_guard lock(mu_);
      bool changed = false;
      auto o = objects_.begin();
      auto f = fresh.begin();
      while (o != objects_.end() || f != fresh.end()) {
        if (f == fresh.end() || (o != objects_.end() && o->first < f->first)) {
          MarkDirty(o->first, &o->second);  // vanished
          changed = true;
          ++o;
        } else if (o == objects_.end() || f->first < o->first) {
          MarkDirty(f->first, nullptr);  // new
          changed = true;
          ++f;
        } else {
          if (!(o->second == f->second)) {
            MarkDirty(o->first, &o->second);
            changed = true;
          }
          ++o;
          ++f;
        }
      }
      objects_ = std::move(fresh);
      notify = changed || !synced_;
      synced_ = true;
    }
    if (notify && notifier_) notifier_->Notify();
  }

  const Decode decode_;
  ChangeNotifier* const notifier_;
  mutable std::mutex mu_;
  bool synced_ = false;
  std::map<std::string, T> objects_;
  std::map<std::string, std::optional<T>> dirty_;  // key -> its state at the last Drain
  std::map<std::string, T> staging_;                // a list being received (informer thread)
};

}  // namespace weft::kube
