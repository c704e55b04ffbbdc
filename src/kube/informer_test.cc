#include "kube/informer.h"

#include <gtest/gtest.h>

#include <deque>
#include <thread>

#include "base/strings.h"

namespace weft::kube {
namespace {

using nlohmann::json;

// --- A scripted API server --------------------------------------------------

struct Step {
  enum Kind { kGet, kWatch } kind = kGet;
  long status = 200;
  std::string body;                // Get: the body; Watch: the body of a non-2xx answer
  std::vector<std::string> lines;  // Watch: the stream's complete lines
  bool transport_error = false;    // Get: no response; Watch: the connection breaks after the lines
};

struct Script {
  std::deque<Step> steps;
  std::vector<std::string> requests;  // "GET path" / "WATCH path"
  std::atomic<bool> stop{false};
};

// Plays `script` in order; when it runs out it sets `stop` (ending Informer::Run).
class FakeApi : public KubeApi {
 public:
  explicit FakeApi(Script* script) : s_(script) {}

  Result<sys::HttpResponse> Get(const std::string& path) override {
    s_->requests.push_back("GET " + path);
    auto step = Next(Step::kGet);
    if (!step) return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "script ended");
    if (step->transport_error) return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "connection refused");
    return sys::HttpResponse{step->status, step->body};
  }

  Result<sys::HttpResponse> Watch(const std::string& path, const std::function<bool(std::string_view)>& on_line,
                             const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) override {
    s_->requests.push_back("WATCH " + path);
    EXPECT_EQ(&stop, &s_->stop);
    EXPECT_GT(idle_timeout.count(), 0);
    auto step = Next(Step::kWatch);
    if (!step) return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "script ended");
    if (step->status < 200 || step->status >= 300) return sys::HttpResponse{step->status, step->body};
    for (const auto& l : step->lines)
      if (!on_line(l)) return sys::HttpResponse{step->status, ""};  // the caller hung up
    if (step->transport_error) return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                                                    "stream: connection reset");
    return sys::HttpResponse{step->status, ""};
  }

 private:
  std::optional<Step> Next(Step::Kind kind) {
    if (s_->steps.empty()) {
      s_->stop = true;
      return std::nullopt;
    }
    Step st = s_->steps.front();
    s_->steps.pop_front();
    EXPECT_EQ(st.kind, kind) << "request " << s_->requests.back() << " does not match the script";
    if (st.kind != kind) {
      s_->stop = true;
      return std::nullopt;
    }
    return st;
  }

  Script* s_;
};

json Obj(const std::string& name, const std::string& rv, const std::string& ns = "ns",
         json labels = json::object()) {
  json meta = {{"name", name}, {"resourceVersion", rv}, {"labels", std::move(labels)}};
  if (!ns.empty()) meta["namespace"] = ns;
  return {{"kind", "Pod"}, {"apiVersion", "v1"}, {"metadata", meta}, {"status", {{"podIP", "10.0.0." + rv}}}};
}

Step Page(std::vector<json> items, const std::string& rv, const std::string& cont = "") {
  json meta = {{"resourceVersion", rv}};
  if (!cont.empty()) meta["continue"] = cont;
  return Step{Step::kGet, 200, json{{"kind", "PodList"}, {"apiVersion", "v1"}, {"metadata", meta}, {"items", items}}.dump()};
}

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return json{{"kind", "Status"}, {"apiVersion", "v1"}, {"metadata", json::object()}, {"status", "Failure"},
              {"message", message}, {"reason", reason}, {"code", code}}
      .dump();
}

Step GetStatus(int code) { return Step{Step::kGet, code, StatusBody(code, "X", "status " + std::to_string(code))}; }

std::string Ev(const std::string& type, const json& obj) { return json{{"type", type}, {"object", obj}}.dump(); }
std::string Bookmark(const std::string& rv) {
  return Ev("BOOKMARK", {{"kind", "Pod"}, {"apiVersion", "v1"}, {"metadata", {{"resourceVersion", rv}}}});
}
std::string ErrorEv(int code) {
  return Ev("ERROR", json::parse(StatusBody(code, code == 410 ? "Expired" : "InternalError", "too old resource version")));
}

Step WatchLines(std::vector<std::string> lines, bool cut = false) {
  Step s{Step::kWatch};
  s.lines = std::move(lines);
  s.transport_error = cut;
  return s;
}

// Records what the informer delivers, through the default (collecting) list staging.
class Recorder : public InformerHandler {
 public:
  void OnReplace(std::vector<json> items) override {
    std::string s = "REPLACE";
    for (const auto& i : items) s += " " + ObjectKey(i);
    calls.push_back(s);
  }
  void OnEvent(EventType type, json object) override {
    calls.push_back(std::string(EventTypeName(type)) + " " + ObjectKey(object) + " " +
                    object["metadata"]["resourceVersion"].get<std::string>());
  }
  std::vector<std::string> calls;
};

class InformerTest : public ::testing::Test {
 protected:
  InformerTest() {
    spec_.what = "pods";
    spec_.path = "/api/v1/pods";
    spec_.page_size = 2;
    spec_.watch_timeout_seconds = 5;
  }

  // Runs an informer over the script until it is used up.
  void Run(InformerHandler& handler) {
    Informer inf(std::make_unique<FakeApi>(&script_), spec_, handler, stats_);
    inf.SetSleepForTesting([&](std::chrono::milliseconds d, const std::atomic<bool>& stop) {
      sleeps_.push_back(d.count());
      return !stop.load();
    });
    inf.Run(script_.stop);
    synced_ = inf.synced();
  }
  void Run() { Run(rec_); }

  std::string List(const std::string& cont = "") const {
    return "GET /api/v1/pods?limit=2" + (cont.empty() ? "" : "&continue=" + cont);
  }
  std::string Watch(const std::string& rv) const {
    return "WATCH /api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=" + rv + "&timeoutSeconds=5";
  }

  ResourceSpec spec_;
  Script script_;
  Recorder rec_;
  ControlPlaneStats stats_;
  std::vector<int64_t> sleeps_;
  bool synced_ = false;
};

using Strings = std::vector<std::string>;
using Sleeps = std::vector<int64_t>;

TEST_F(InformerTest, PaginatesThroughShortAndEmptyPagesIntoOneReplace) {
  script_.steps = {Page({Obj("a", "1"), Obj("b", "2")}, "10", "t/1 +="),
                   Page({Obj("c", "3")}, "10", "t2"),  // fewer items than the limit, yet more pages
                   Page({}, "10", "t3"),               // an empty page with a continue token
                   Page({Obj("d", "4"), json("not an object")}, "10")};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), List("t%2F1%20%2B%3D"), List("t2"), List("t3"), Watch("10")}));
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a ns/b ns/c ns/d"}));
  EXPECT_TRUE(synced_);
  EXPECT_EQ(stats_.relists.load(), 1u);
  EXPECT_EQ(stats_.errors.load(), 0u);
}

TEST_F(InformerTest, ExpiredContinueTokenRestartsTheList) {
  Step gone = GetStatus(410);
  script_.steps = {Page({Obj("a", "1"), Obj("b", "2")}, "10", "x"), gone,
                   Page({Obj("a", "5"), Obj("c", "6")}, "20", "y"), Page({Obj("d", "7")}, "20")};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), List("x"), List(), List("y"), Watch("20")}));
  // Only the second snapshot, once: nothing staged from the first survives.
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a ns/c ns/d"}));
  EXPECT_EQ(stats_.relists.load(), 2u);
  EXPECT_TRUE(sleeps_.empty());
}

// A CRD that is not installed: the 404 is an empty, complete list; the
// informer probes quietly every absent_retry and lists once it is served.
TEST_F(InformerTest, AResourceThatMayBeAbsentIsEmptyUntilServed) {
  spec_.may_be_absent = true;
  spec_.absent_retry = std::chrono::milliseconds(30000);
  script_.steps = {GetStatus(404), GetStatus(404), GetStatus(404), Page({}, "7"),  // probes, then served
                   Page({Obj("a", "8")}, "9"), WatchLines({Ev("ADDED", Obj("b", "10"))})};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), "GET /api/v1/pods?limit=1", "GET /api/v1/pods?limit=1",
                                       "GET /api/v1/pods?limit=1", List(), Watch("9"), Watch("10")}));
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE", "REPLACE ns/a", "ADDED ns/b 10"}));
  EXPECT_TRUE(synced_);
  EXPECT_EQ(stats_.errors.load(), 0u);
  EXPECT_EQ(sleeps_, (Sleeps{30000, 30000, 30000}));
  // Without may_be_absent a 404 stays an error.
  script_.requests.clear();
  script_.stop = false;
  spec_.may_be_absent = false;
  script_.steps = {GetStatus(404)};
  Recorder other;
  Run(other);
  EXPECT_FALSE(synced_);
  EXPECT_EQ(stats_.errors.load(), 1u);
}

TEST_F(InformerTest, NotSyncedWithoutACompleteList) {
  script_.steps = {Page({Obj("a", "1")}, "10", "x")};  // the second page never comes
  Run();
  EXPECT_FALSE(synced_);
  EXPECT_TRUE(rec_.calls.empty());
}

TEST_F(InformerTest, WatchDeliversEventsAndACleanTimeoutResumesAtOnce) {
  script_.steps = {Page({Obj("a", "1")}, "10"),
                   WatchLines({Ev("ADDED", Obj("b", "11")), Ev("MODIFIED", Obj("a", "12")),
                               Ev("DELETED", Obj("b", "13"))})};
  Run();
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a", "ADDED ns/b 11", "MODIFIED ns/a 12", "DELETED ns/b 13"}));
  EXPECT_EQ(script_.requests, (Strings{List(), Watch("10"), Watch("13")}));
  EXPECT_TRUE(sleeps_.empty()) << "a clean server timeout must not back off";
  EXPECT_EQ(stats_.events.load(), 3u);
  EXPECT_EQ(stats_.reconnects.load(), 0u);
}

TEST_F(InformerTest, BookmarkAdvancesTheResourceVersion) {
  script_.steps = {Page({Obj("a", "1")}, "10"), WatchLines({Ev("ADDED", Obj("b", "11")), Bookmark("50")}),
                   WatchLines({Bookmark("60")})};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), Watch("10"), Watch("50"), Watch("60")}));
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a", "ADDED ns/b 11"}));  // bookmarks are not events
  EXPECT_EQ(stats_.events.load(), 1u);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(InformerTest, ErrorEvent410Relists) {
  script_.steps = {Page({Obj("a", "1")}, "10"),
                   WatchLines({Ev("ADDED", Obj("b", "11")), ErrorEv(410), Ev("ADDED", Obj("z", "99"))}),
                   Page({Obj("a", "1"), Obj("c", "25")}, "30")};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), Watch("10"), List(), Watch("30")}));
  // Nothing after the ERROR line is acted on.
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a", "ADDED ns/b 11", "REPLACE ns/a ns/c"}));
  EXPECT_EQ(stats_.relists.load(), 2u);
  EXPECT_TRUE(sleeps_.empty()) << "the watch had made progress: re-list at once";
}

TEST_F(InformerTest, Http410Relists) {
  Step gone{Step::kWatch, 410, StatusBody(410, "Gone", "too old")};
  script_.steps = {Page({Obj("a", "1")}, "10"), gone, Page({Obj("b", "2")}, "40")};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), Watch("10"), List(), Watch("40")}));
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a", "REPLACE ns/b"}));
  // A watch refused with 410 before any event waits before the list: a server answering every watch with 410
  // must not get a list storm.
  EXPECT_EQ(sleeps_, (Sleeps{200}));
  EXPECT_EQ(stats_.reconnects.load(), 0u);
}

TEST_F(InformerTest, RepeatedImmediate410BacksOffMore) {
  script_.steps = {Page({}, "10"), WatchLines({ErrorEv(410)}), Page({}, "11"), WatchLines({ErrorEv(410)}),
                   Page({}, "12"), WatchLines({Bookmark("13"), ErrorEv(410)}), Page({}, "14")};
  Run();
  EXPECT_EQ(sleeps_, (Sleeps{200, 400}));  // the third watch made progress: its 410 re-lists at once
  EXPECT_EQ(stats_.relists.load(), 4u);
}

TEST_F(InformerTest, CutStreamReconnectsFromTheLastResourceVersion) {
  script_.steps = {Page({Obj("a", "1")}, "10"), WatchLines({Ev("ADDED", Obj("b", "11"))}, /*cut=*/true)};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), Watch("10"), Watch("11")}));
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a", "ADDED ns/b 11"}));
  EXPECT_EQ(stats_.reconnects.load(), 1u);
  EXPECT_EQ(stats_.errors.load(), 1u);
  EXPECT_EQ(stats_.relists.load(), 1u);
  EXPECT_EQ(sleeps_, (Sleeps{200}));
}

TEST_F(InformerTest, UnparsableLineIsNotActedOnAndReconnects) {
  // What a half-written line would look like if it ever reached the informer.
  script_.steps = {Page({Obj("a", "1")}, "10"),
                   WatchLines({Ev("ADDED", Obj("b", "11")), R"({"type":"DELETED","object":{"metadata":{"name":"a")",
                               Ev("DELETED", Obj("a", "12"))})};
  Run();
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a", "ADDED ns/b 11"}));
  EXPECT_EQ(script_.requests, (Strings{List(), Watch("10"), Watch("11")}));
  EXPECT_EQ(stats_.reconnects.load(), 1u);
}

TEST_F(InformerTest, OtherErrorEventBacksOffAndResumes) {
  script_.steps = {Page({Obj("a", "1")}, "10"), WatchLines({ErrorEv(500)}), WatchLines({ErrorEv(500)})};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), Watch("10"), Watch("10"), Watch("10")}));
  EXPECT_EQ(sleeps_, (Sleeps{200, 400}));
  EXPECT_EQ(stats_.relists.load(), 1u);
}

TEST_F(InformerTest, VeryShortEmptyWatchBacksOff) {
  script_.steps = {Page({}, "10"), WatchLines({}), WatchLines({})};
  Run();
  EXPECT_EQ(script_.requests, (Strings{List(), Watch("10"), Watch("10"), Watch("10")}));
  EXPECT_EQ(sleeps_, (Sleeps{200, 400}));
}

TEST_F(InformerTest, UnauthorizedBacksOffAndRetries) {
  Step w401{Step::kWatch, 401, StatusBody(401, "Unauthorized", "Unauthorized")};
  Step down{Step::kGet};
  down.transport_error = true;
  script_.steps = {GetStatus(401), down, Page({Obj("a", "1")}, "10"), w401, w401,
                   WatchLines({Ev("ADDED", Obj("b", "11"))}, /*cut=*/true)};
  Run();
  EXPECT_EQ(script_.requests,
            (Strings{List(), List(), List(), Watch("10"), Watch("10"), Watch("10"), Watch("11")}));
  // 401, refused, 401, 401 back off further each time; the watch that delivered an event starts over.
  EXPECT_EQ(sleeps_, (Sleeps{200, 400, 800, 1600, 200}));
  EXPECT_EQ(stats_.errors.load(), 5u);
  EXPECT_EQ(stats_.relists.load(), 3u);
  EXPECT_EQ(stats_.reconnects.load(), 3u);
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a", "ADDED ns/b 11"}));
}

// Issue 25: however long the API server is away, a retry is at most 2 s
// off, so a node is back within seconds of the server answering again.
TEST_F(InformerTest, AnOutageOfAnyLengthIsRetriedAtLeastEvery2s) {
  Step down{Step::kGet};
  down.transport_error = true;
  script_.steps = {down, down, down, down, down, down, down, Page({Obj("a", "1")}, "10")};
  Run();
  EXPECT_EQ(sleeps_, (Sleeps{200, 400, 800, 1600, 2000, 2000, 2000}));
  EXPECT_EQ(rec_.calls, (Strings{"REPLACE ns/a"}));
}

TEST_F(InformerTest, SelectorsAreEscapedInListAndWatch) {
  spec_.label_selector = "app in (a,b),tier!=db";
  spec_.field_selector = "spec.nodeName=n1";
  script_.steps = {Page({Obj("a", "1")}, "10", "c1"), Page({}, "10")};
  Run();
  const std::string sel = "&labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Ddb&fieldSelector=spec.nodeName%3Dn1";
  EXPECT_EQ(script_.requests,
            (Strings{"GET /api/v1/pods?limit=2" + sel, "GET /api/v1/pods?limit=2" + sel + "&continue=c1",
                     Watch("10") + sel}));
}

TEST_F(InformerTest, StopEndsRunDuringBackoff) {
  script_.steps = {GetStatus(500)};
  Informer inf(std::make_unique<FakeApi>(&script_), spec_, rec_, stats_);
  std::thread t([&] { inf.Run(script_.stop); });  // real SleepUnlessStopped
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  script_.stop = true;
  t.join();
  EXPECT_EQ(stats_.errors.load(), 1u);
}

// --- Parsing ------------------------------------------------------------------

TEST(InformerParse, KubeListPage) {
  auto p = ParseKubeListPage(R"({"kind":"NodeList","metadata":{"resourceVersion":"99","continue":"abc"},
                             "items":[{"metadata":{"name":"n1"}},3]})");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->resource_version, "99");
  EXPECT_EQ(p->continue_token, "abc");
  ASSERT_EQ(p->items.size(), 1u);
  EXPECT_EQ(ObjectKey(p->items[0]), "n1");
  EXPECT_TRUE(ParseKubeListPage(R"({"kind":"PodList","metadata":{},"items":null})").ok());
  EXPECT_EQ(ParseKubeListPage(R"({"kind":"Status","status":"Failure","message":"forbidden","code":403})").status().reason(),
            Reason::kUnavailable);
  EXPECT_EQ(ParseKubeListPage("[]").status().reason(), Reason::kMalformed);
  EXPECT_EQ(ParseKubeListPage(R"({"items":{}})").status().reason(), Reason::kMalformed);
  EXPECT_EQ(ParseKubeListPage("{").status().reason(), Reason::kMalformed);
}

TEST(InformerParse, WatchLines) {
  auto a = ParseKubeWatchLine(Ev("ADDED", Obj("p", "1234")));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->kind, KubeWatchEvent::Kind::kAdded);
  EXPECT_EQ(a->resource_version, "1234");
  EXPECT_EQ(ObjectKey(a->object), "ns/p");
  // A real BOOKMARK (kube-apiserver 1.27): an object of the kind with only a resourceVersion.
  auto b = ParseKubeWatchLine(R"({"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"2000","creationTimestamp":null},"spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{}}}})");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->kind, KubeWatchEvent::Kind::kBookmark);
  EXPECT_EQ(b->resource_version, "2000");
  auto e = ParseKubeWatchLine(R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2000)","reason":"Expired","code":410}})j");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, KubeWatchEvent::Kind::kError);
  EXPECT_EQ(e->error_code, 410);
  EXPECT_EQ(e->error_message, "too old resource version: 1 (2000)");
  EXPECT_EQ(ParseKubeWatchLine(R"({"type":"ERROR","object":{"reason":"Expired"}})")->error_code, 410);
  EXPECT_EQ(ParseKubeWatchLine(R"({"type":"ERROR","object":{"code":"x"}})")->error_code, 0);
  EXPECT_FALSE(ParseKubeWatchLine(R"({"type":"WHAT","object":{}})").ok());
  EXPECT_FALSE(ParseKubeWatchLine(R"({"type":"ADDED"})").ok());
  EXPECT_FALSE(ParseKubeWatchLine(R"({"type":"ADDED","object":{"metadata":{}}})").ok());
  EXPECT_FALSE(ParseKubeWatchLine(R"({"type":"ADDED","object":{"metadata":{"name":"p")").ok());
  EXPECT_FALSE(ParseKubeWatchLine("42").ok());
}

TEST(InformerParse, KeysAndEscaping) {
  EXPECT_EQ(ObjectKey(Obj("p", "1", "kube-system")), "kube-system/p");
  EXPECT_EQ(ObjectKey(Obj("n1", "1", "")), "n1");
  EXPECT_EQ(ObjectKey(json::parse(R"({"metadata":{"name":7}})")), "");
  EXPECT_EQ(ObjectKey(json("x")), "");
  EXPECT_EQ(QueryEscape("a-b_c.d~e"), "a-b_c.d~e");
  EXPECT_EQ(QueryEscape("k=v,w in (x)"), "k%3Dv%2Cw%20in%20%28x%29");
}

// --- Cache<T> -----------------------------------------------------------------

struct PodView {
  std::string ip;
  std::string app;
  bool operator==(const PodView&) const = default;
};

// No IP yet: ignored. A label "boom": throws (a decoder bug must not take the informer down).
std::optional<PodView> DecodePod(const json& j) {
  const json& labels = j.at("metadata").at("labels");
  if (labels.contains("boom")) return PodView{labels.at("missing").get<std::string>(), ""};
  if (!j.contains("status") || !j["status"].contains("podIP")) return std::nullopt;
  return PodView{j["status"]["podIP"].get<std::string>(), labels.value("app", "")};
}

json PodObj(const std::string& name, const std::string& ip, const std::string& app = "") {
  json labels = json::object();
  if (!app.empty()) labels["app"] = app;
  json o = {{"metadata", {{"name", name}, {"namespace", "ns"}, {"labels", labels}}}, {"status", json::object()}};
  if (!ip.empty()) o["status"]["podIP"] = ip;
  return o;
}

std::string Show(const std::vector<Cache<PodView>::Delta>& ds) {
  std::string s;
  for (const auto& d : ds) s += d.key + "=" + (d.object ? d.object->ip + "/" + d.object->app : "deleted") + " ";
  return s;
}

TEST(Cache, CoalescesPerKeyLastStateWins) {
  ChangeNotifier n;
  Cache<PodView> c(DecodePod, &n);
  c.OnReplace({});
  EXPECT_TRUE(c.synced());
  EXPECT_EQ(n.value(), 1u) << "the first (empty) list wakes the consumer";
  EXPECT_EQ(Show(c.Drain()), "");
  c.OnEvent(EventType::kAdded, PodObj("a", "10.0.0.1", "x"));
  c.OnEvent(EventType::kModified, PodObj("a", "10.0.0.1", "y"));
  c.OnEvent(EventType::kAdded, PodObj("b", "10.0.0.2"));
  c.OnEvent(EventType::kDeleted, PodObj("b", "10.0.0.2"));  // came and went: nothing to report
  EXPECT_EQ(Show(c.Drain()), "ns/a=10.0.0.1/y ");
  EXPECT_EQ(Show(c.Drain()), "");
  uint64_t before = n.value();
  c.OnEvent(EventType::kModified, PodObj("a", "10.0.0.1", "y"));  // decodes equal (e.g. only status changed)
  EXPECT_EQ(n.value(), before) << "an event that changes nothing we keep must not wake the consumer";
  c.OnEvent(EventType::kModified, PodObj("a", "10.0.0.9", "y"));
  c.OnEvent(EventType::kModified, PodObj("a", "10.0.0.1", "y"));  // and back
  EXPECT_EQ(Show(c.Drain()), "") << "back to the drained state";
  c.OnEvent(EventType::kDeleted, PodObj("a", ""));
  c.OnEvent(EventType::kDeleted, PodObj("zz", ""));  // never seen
  EXPECT_EQ(Show(c.Drain()), "ns/a=deleted ");
  EXPECT_EQ(c.size(), 0u);
}

TEST(Cache, RelistReportsTheDifferenceOnly) {
  ChangeNotifier n;
  Cache<PodView> c(DecodePod, &n);
  c.OnReplace({PodObj("a", "10.0.0.1"), PodObj("b", "10.0.0.2"), PodObj("c", "10.0.0.3")});
  EXPECT_EQ(Show(c.Drain()), "ns/a=10.0.0.1/ ns/b=10.0.0.2/ ns/c=10.0.0.3/ ");
  uint64_t seen = n.value();
  c.OnReplace({PodObj("c", "10.0.0.3"), PodObj("b", "10.0.0.2"), PodObj("a", "10.0.0.1")});
  EXPECT_EQ(n.value(), seen) << "a re-list that changes nothing must not wake the consumer";
  EXPECT_EQ(Show(c.Drain()), "");
  c.OnReplace({PodObj("a", "10.0.0.1"), PodObj("b", "10.0.0.22"), PodObj("d", "10.0.0.4")});
  EXPECT_EQ(Show(c.Drain()), "ns/b=10.0.0.22/ ns/c=deleted ns/d=10.0.0.4/ ");
  // An event, then a re-list that undoes it before the consumer looked: no delta.
  c.OnEvent(EventType::kDeleted, PodObj("a", ""));
  c.OnReplace({PodObj("a", "10.0.0.1"), PodObj("b", "10.0.0.22"), PodObj("d", "10.0.0.4")});
  EXPECT_EQ(Show(c.Drain()), "");
  auto snap = c.Snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap["ns/b"].ip, "10.0.0.22");
  EXPECT_EQ(c.Get("ns/d")->ip, "10.0.0.4");
  EXPECT_FALSE(c.Get("ns/c").has_value());
}

TEST(Cache, DecodeNulloptOrThrowIsAbsent) {
  Cache<PodView> c(DecodePod, nullptr);
  json boom = PodObj("e", "10.0.0.5");
  boom["metadata"]["labels"]["boom"] = "1";
  c.OnReplace({PodObj("a", ""), PodObj("b", "10.0.0.2"), boom, json::parse(R"({"metadata":{}})")});
  EXPECT_EQ(Show(c.Drain()), "ns/b=10.0.0.2/ ");
  c.OnEvent(EventType::kModified, PodObj("b", ""));  // lost its IP: as if deleted
  c.OnEvent(EventType::kAdded, PodObj("a", ""));      // still no IP: nothing
  c.OnEvent(EventType::kAdded, boom);
  EXPECT_EQ(Show(c.Drain()), "ns/b=deleted ");
  c.OnEvent(EventType::kModified, PodObj("a", "10.0.0.1"));
  EXPECT_EQ(Show(c.Drain()), "ns/a=10.0.0.1/ ");
}

TEST(Cache, FedByTheInformerPageByPage) {
  Script script;
  ChangeNotifier n;
  Cache<PodView> c(DecodePod, &n);
  script.steps = {Page({PodObj("a", "10.0.0.1"), PodObj("x", "10.0.0.99")}, "10", "t"), GetStatus(410),
                  Page({PodObj("a", "10.0.0.1"), PodObj("b", "10.0.0.2")}, "20", "u"),
                  Page({PodObj("c", "10.0.0.3")}, "20"),
                  WatchLines({Ev("MODIFIED", PodObj("a", "10.0.0.1", "web")), Ev("DELETED", PodObj("c", ""))})};
  ResourceSpec spec{"pods", "/api/v1/pods"};
  ControlPlaneStats stats;
  Informer inf(std::make_unique<FakeApi>(&script), spec, c, stats);
  inf.SetSleepForTesting([](std::chrono::milliseconds, const std::atomic<bool>& stop) { return !stop.load(); });
  EXPECT_FALSE(c.synced());
  inf.Run(script.stop);
  EXPECT_TRUE(c.synced());
  // x was on the abandoned first pass only.
  EXPECT_EQ(Show(c.Drain()), "ns/a=10.0.0.1/web ns/b=10.0.0.2/ ");
  EXPECT_GE(n.value(), 3u);
}

TEST(ChangeNotifier, WaitReturnsOnChangeTimeoutOrStop) {
  ChangeNotifier n;
  std::atomic<bool> stop{false};
  EXPECT_EQ(n.Wait(0, std::chrono::milliseconds(10), stop), 0u);  // timeout
  n.Notify();
  EXPECT_EQ(n.Wait(0, std::chrono::seconds(10), stop), 1u);       // already differs
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    n.Notify();
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(n.Wait(1, std::chrono::seconds(10), stop), 2u);
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  stop = true;
  start = std::chrono::steady_clock::now();
  EXPECT_EQ(n.Wait(2, std::chrono::seconds(10), stop), 2u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

}  // namespace
}  // namespace weft::kube
