#include "agent/http.h"

#include <gtest/gtest.h>

namespace weft::agent::http_internal {
namespace {

TEST(ParseUrl, HostsPortsAndTargets) {
  auto u = ParseUrl("http://192.0.2.254:2379/v3/kv/range");
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->https);
  EXPECT_EQ(u->host, "192.0.2.254");
  EXPECT_EQ(u->port, 2379);
  EXPECT_EQ(u->host_header, "192.0.2.254:2379");
  EXPECT_EQ(u->target, "/v3/kv/range");
  u = ParseUrl("https://kubernetes.default.svc/api/v1/nodes?watch=1");
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->https);
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->target, "/api/v1/nodes?watch=1");
  u = ParseUrl("http://[fd00::1]:8080?x=1");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "fd00::1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->host_header, "[fd00::1]:8080");
  EXPECT_EQ(u->target, "/?x=1");
  u = ParseUrl("http://etcd");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->target, "/");
  EXPECT_FALSE(ParseUrl("ftp://x/"));
  EXPECT_FALSE(ParseUrl("http://:80/"));
  EXPECT_FALSE(ParseUrl("http://x:99999/"));
  EXPECT_FALSE(ParseUrl("http://x:12a/"));
  EXPECT_FALSE(ParseUrl("http://user@x/"));
  EXPECT_FALSE(ParseUrl("http://[fd00::1/"));
}

// Feeds `wire` in pieces of `step` bytes.
std::string FeedAll(ResponseParser& p, std::string_view wire, size_t step, Status* st = nullptr) {
  std::string body;
  Status s;
  for (size_t i = 0; i < wire.size() && s.ok(); i += step)
    s = p.Feed(wire.substr(i, step), [&](std::string_view b) {
      body.append(b);
      return true;
    });
  if (st) *st = s;
  else EXPECT_TRUE(s.ok()) << s.ToString();
  return body;
}

TEST(ResponseParser, ContentLengthInAnyPieces) {
  std::string wire = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 11\r\n\r\n{\"a\":\"bc\"}\nHTTP/1.1";
  for (size_t step : {1, 2, 7, 1000}) {
    ResponseParser p;
    EXPECT_EQ(FeedAll(p, wire.substr(0, wire.size() - 8), step), "{\"a\":\"bc\"}\n") << step;
    EXPECT_TRUE(p.done());
    EXPECT_EQ(p.status(), 200);
    EXPECT_TRUE(p.keep_alive());
  }
}

TEST(ResponseParser, ChunkedWithExtensionsAndTrailers) {
  std::string wire =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nline1\r\n"
      "7;ext=1\r\n\nline2\n\r\n"
      "1A\r\n" + std::string(26, 'x') + "\r\n"
      "0\r\nX-Trailer: y\r\n\r\n";
  for (size_t step : {1, 3, 4096}) {
    ResponseParser p;
    EXPECT_EQ(FeedAll(p, wire, step), "line1\nline2\n" + std::string(26, 'x')) << step;
    EXPECT_TRUE(p.done());
    EXPECT_TRUE(p.keep_alive());
  }
}

TEST(ResponseParser, StreamStopsWhenTheCallbackSaysSo) {
  ResponseParser p;
  std::string seen;
  Status st = p.Feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab\n\r\n3\r\ncd\n\r\n",
                     [&](std::string_view b) {
                       seen.append(b);
                       return false;
                     });
  EXPECT_TRUE(st.ok());
  EXPECT_TRUE(p.aborted());
  EXPECT_EQ(seen, "ab\n");
  EXPECT_FALSE(p.keep_alive());
}

TEST(ResponseParser, UntilCloseAndConnectionClose) {
  ResponseParser p;
  EXPECT_EQ(FeedAll(p, "HTTP/1.0 200 OK\r\n\r\nall of it", 4), "all of it");
  EXPECT_FALSE(p.done());
  EXPECT_TRUE(p.Eof().ok());
  EXPECT_TRUE(p.done());
  EXPECT_FALSE(p.keep_alive());

  ResponseParser q;
  FeedAll(q, "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno", 5);
  EXPECT_TRUE(q.done());
  EXPECT_EQ(q.status(), 404);
  EXPECT_FALSE(q.keep_alive());
}

TEST(ResponseParser, InterimResponsesAndEmptyBodies) {
  ResponseParser p;
  EXPECT_EQ(FeedAll(p, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", 3), "ok");
  EXPECT_EQ(p.status(), 201);
  EXPECT_TRUE(p.done());
  ResponseParser q;
  FeedAll(q, "HTTP/1.1 204 No Content\r\n\r\n", 100);
  EXPECT_TRUE(q.done());
  EXPECT_TRUE(q.keep_alive());
}

TEST(ResponseParser, CutOrMalformedResponsesAreErrors) {
  ResponseParser cut;
  FeedAll(cut, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 100);
  EXPECT_FALSE(cut.Eof().ok());
  ResponseParser cut_chunk;
  FeedAll(cut_chunk, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 100);
  EXPECT_FALSE(cut_chunk.Eof().ok());
  for (const char* bad : {"SSH-2.0-OpenSSH\r\n", "HTTP/1.1 2x0 OK\r\n",
                          "HTTP/1.1 200 OK\r\nno colon here\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n"}) {
    ResponseParser p;
    Status st;
    FeedAll(p, bad, 1000, &st);
    EXPECT_FALSE(st.ok()) << bad;
  }
}

}  // namespace
}  // namespace weft::agent::http_internal
