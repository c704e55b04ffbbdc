#include "cni/skel.h"

#include <gtest/gtest.h>

#include <map>

namespace weft::cni {
namespace {

using nlohmann::json;

class FakePlugin : public Plugin {
 public:
  Result<CniResult> CmdAdd(const CmdArgs&) override {
    ++adds;
    if (add_error) return *add_error;
    CniResult r;
    r.ips.push_back({*IpPrefix::Parse("10.0.0.2/32"), std::nullopt, std::nullopt});
    return r;
  }
  Status CmdDel(const CmdArgs&) override { ++dels; return Status::Ok(); }
  Status CmdCheck(const CmdArgs&) override { ++checks; return Status::Ok(); }
  Status CmdStatus(const CmdArgs&) override { ++statuses; return Status::Ok(); }
  Status CmdGc(const CmdArgs&, const std::vector<Attachment>& v) override {
    gc_valid = v;
    return Status::Ok();
  }
  int adds = 0, dels = 0, checks = 0, statuses = 0;
  std::optional<Status> add_error;
  std::vector<Attachment> gc_valid;
};

// The environment of `cmd`, with `key` set to `value` when given.
EnvLookup Env(const std::string& cmd, const std::string& key = "", const std::string& value = "") {
  auto m = std::make_shared<std::map<std::string, std::string>>(std::map<std::string, std::string>{
      {"CNI_COMMAND", cmd}, {"CNI_CONTAINERID", "c1"}, {"CNI_NETNS", "/run/netns/x"},
      {"CNI_IFNAME", "eth0"}, {"CNI_PATH", "/usr/lib/cni"}});
  if (!key.empty()) (*m)[key] = value;
  return [m](const char* k) -> const char* {
    auto it = m->find(k);
    return it == m->end() ? nullptr : it->second.c_str();
  };
}

std::string Conf(const std::string& version) {
  return R"({"cniVersion":")" + version + R"(","name":"n1","type":"weft"})";
}

TEST(Skel, AddPrintsTheResultInTheConfigVersion) {
  FakePlugin p;
  std::string out;
  EXPECT_EQ(PluginMain(p, Env("ADD"), Conf("0.3.1"), &out), 0);
  auto j = json::parse(out);
  EXPECT_EQ(j["cniVersion"], "0.3.1");
  EXPECT_EQ(j["ips"][0]["version"], "4");
  EXPECT_EQ(PluginMain(p, Env("ADD"), R"({"name":"n1","type":"weft"})", &out), 0);
  EXPECT_EQ(json::parse(out)["cniVersion"], "0.1.0");  // missing cniVersion means 0.1.0
  EXPECT_TRUE(json::parse(out).contains("ip4"));
}

TEST(Skel, ErrorsAreCniErrorObjects) {
  FakePlugin p;
  std::string out;
  p.add_error = Status::Error(Reason::kExhausted, Domain::kStore, "no free address in 10.0.0.0/30", "4 of 4 in use");
  EXPECT_EQ(PluginMain(p, Env("ADD"), Conf("1.0.0"), &out), 1);
  auto j = json::parse(out);
  EXPECT_EQ(j["code"], 100);
  EXPECT_EQ(j["cniVersion"], "1.0.0");
  EXPECT_EQ(j["details"], "4 of 4 in use");

  EXPECT_EQ(PluginMain(p, Env("ADD"), "{not json", &out), 1);
  EXPECT_EQ(json::parse(out)["code"], 6);
  EXPECT_EQ(PluginMain(p, Env("ADD"), Conf("0.9.0"), &out), 1);
  EXPECT_EQ(json::parse(out)["code"], 1);
  EXPECT_EQ(PluginMain(p, Env("ADD"), R"({"cniVersion":"1.0.0","type":"weft"})", &out), 1);
  EXPECT_EQ(json::parse(out)["code"], 7);
  EXPECT_EQ(PluginMain(p, Env("BOGUS"), Conf("1.0.0"), &out), 1);
  EXPECT_EQ(json::parse(out)["code"], 4);
}

TEST(Skel, VerbsAreGatedByVersion) {
  FakePlugin p;
  std::string out;
  EXPECT_EQ(PluginMain(p, Env("CHECK"), Conf("0.3.1"), &out), 1);
  EXPECT_EQ(json::parse(out)["code"], 1);
  EXPECT_EQ(PluginMain(p, Env("CHECK"), Conf("0.4.0"), &out), 0);
  EXPECT_EQ(PluginMain(p, Env("STATUS"), Conf("1.0.0"), &out), 1);
  EXPECT_EQ(json::parse(out)["code"], 1);
  EXPECT_EQ(PluginMain(p, Env("STATUS"), Conf("1.1.0"), &out), 0);
  EXPECT_EQ(PluginMain(p, Env("GC"), Conf("1.0.0"), &out), 1);
  EXPECT_EQ(p.checks, 1);
  EXPECT_EQ(p.statuses, 1);
}

TEST(Skel, VersionAnswersAllSupportedVersions) {
  FakePlugin p;
  std::string out;
  EXPECT_EQ(PluginMain(p, Env("VERSION"), R"({"cniVersion":"0.4.0"})", &out), 0);
  auto j = json::parse(out);
  EXPECT_EQ(j["cniVersion"], "0.4.0");
  EXPECT_EQ(j["supportedVersions"].size(), 7u);
  EXPECT_EQ(PluginMain(p, Env("VERSION"), "", &out), 0);
  EXPECT_EQ(json::parse(out)["cniVersion"], "1.1.0");
}

TEST(Skel, GcReadsBothAttachmentKeys) {
  FakePlugin p;
  std::string out;
  std::string conf = R"({"cniVersion":"1.1.0","name":"n1","type":"weft",
      "cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]})";
  EXPECT_EQ(PluginMain(p, Env("GC"), conf, &out), 0);
  ASSERT_EQ(p.gc_valid.size(), 1u);
  EXPECT_EQ(p.gc_valid[0].container_id, "a");
  std::string old = R"({"cniVersion":"1.1.0","name":"n1","type":"weft",
      "cni.dev/attachments":[{"containerID":"b","ifname":"net1"}]})";
  EXPECT_EQ(PluginMain(p, Env("GC"), old, &out), 0);
  ASSERT_EQ(p.gc_valid.size(), 1u);
  EXPECT_EQ(p.gc_valid[0].ifname, "net1");
  std::string bad = R"({"cniVersion":"1.1.0","name":"n1","type":"weft","cni.dev/valid-attachments":{}})";
  EXPECT_EQ(PluginMain(p, Env("GC"), bad, &out), 1);
  EXPECT_EQ(json::parse(out)["code"], 7);
}

// What a hostile runtime can send: bytes that are not UTF-8, a huge or
// deeply nested stdin. Each is answered with its code by a parseable error
// object, before the plugin does anything; none is 999.
TEST(Skel, BytesAndSizesGetTheirCodesBeforeThePluginRuns) {
  struct Case {
    const char* what;
    EnvLookup env;
    std::string in;
    int code;
  } cases[] = {
      {"a non-UTF-8 byte in name", Env("ADD"), "{\"cniVersion\":\"1.0.0\",\"name\":\"n\xff\",\"type\":\"weft\"}", 6},
      {"a non-UTF-8 byte outside any string", Env("ADD"), Conf("1.0.0") + "\xc3", 6},
      {"an overlong '/'", Env("DEL"), "{\"cniVersion\":\"1.0.0\",\"name\":\"n\xc0\xaf\"}", 6},
      {"stdin over 1 MiB", Env("ADD"),
       R"({"cniVersion":"1.0.0","name":"n1","type":"weft","pad":")" + std::string(kMaxStdinBytes, 'x') + "\"}", 6},
      {"nested 65 deep", Env("ADD"),
       R"({"cniVersion":"1.0.0","name":"n1","type":"weft","x":)" + std::string(64, '[') + std::string(64, ']') +
           "}",
       6},
      {"nested 500000 deep", Env("CHECK"), std::string(500000, '[') + std::string(500000, ']'), 6},
      {"CNI_IFNAME with 0xff", Env("ADD", "CNI_IFNAME", "eth\xff"), Conf("1.0.0"), 4},
      {"CNI_IFNAME in UTF-8", Env("ADD", "CNI_IFNAME", "eth\xc3\xa9"), Conf("1.0.0"), 4},
      {"CNI_NETNS with 0xfe", Env("ADD", "CNI_NETNS", "/run/netns/\xfe"), Conf("1.0.0"), 4},
      {"CNI_ARGS with a surrogate", Env("ADD", "CNI_ARGS", "K8S_POD_NAME=\xed\xa0\x80"), Conf("1.0.0"), 4},
      {"CNI_COMMAND with 0x80", Env("ADD\x80"), Conf("1.0.0"), 4},
      {"CNI_CONTAINERID with 0xff", Env("DEL", "CNI_CONTAINERID", "c\xff"), Conf("1.0.0"), 4},
  };
  for (const auto& c : cases) {
    FakePlugin p;
    std::string out;
    EXPECT_EQ(PluginMain(p, c.env, c.in, &out), 1) << c.what;
    json j = json::parse(out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << c.what << ": " << out.substr(0, 200);
    EXPECT_EQ(j["code"], c.code) << c.what << ": " << out.substr(0, 300);
    EXPECT_EQ(p.adds + p.dels + p.checks, 0) << c.what;
  }
  // The limits themselves pass: exactly 1 MiB, nested 64 deep.
  FakePlugin p;
  std::string out;
  std::string head = R"({"cniVersion":"1.0.0","name":"n1","type":"weft","pad":")";
  std::string full = head + std::string(kMaxStdinBytes - head.size() - 2, 'x') + "\"}";
  ASSERT_EQ(full.size(), kMaxStdinBytes);
  EXPECT_EQ(PluginMain(p, Env("ADD"), full, &out), 0) << out;
  std::string deep = R"({"cniVersion":"1.0.0","name":"n1","type":"weft","x":)" + std::string(63, '[') +
                     std::string(63, ']') + "}";
  EXPECT_EQ(PluginMain(p, Env("ADD"), deep, &out), 0) << out;
  // Brackets inside strings are not nesting.
  EXPECT_EQ(PluginMain(p, Env("ADD"), R"({"cniVersion":"1.0.0","name":"n1","type":"weft","s":")" +
                                          std::string(100, '[') + R"(\""})", &out), 0) << out;
  EXPECT_EQ(p.adds, 3);
  // VERSION still answers (its config is only a hint).
  EXPECT_EQ(PluginMain(p, Env("VERSION"), std::string(kMaxStdinBytes + 1, '{'), &out), 0);
  EXPECT_EQ(json::parse(out)["cniVersion"], "1.1.0");
}

// The backstop for a library message quoting bytes it could not decode.
TEST(Skel, ErrorJsonNeverThrows) {
  std::string out = ErrorJson(
      Status::Error(Reason::kInternal, Domain::kNone, "bad \xff byte", "[json.exception] \xc3"), "1.0.0");
  json j = json::parse(out);
  EXPECT_EQ(j["code"], 999);
  EXPECT_EQ(j["msg"], "bad \xef\xbf\xbd byte");  // U+FFFD
}

}  // namespace
}  // namespace weft::cni
