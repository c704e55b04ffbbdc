// Delegated IPAM with the reference host-local plugin (Debian's 1.1.1, which
// speaks CNI up to 1.0.0): ADD/CHECK/DEL forwarded, version skew handled,
// an ADD failing after IPAM releases the address through host-local's DEL.
#include <unistd.h>

#include "plugin_fixture.h"

namespace weft::testing {
namespace {

class DelegateTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    hl_dir_ = TempDir("hostlocal");
  }
  void TearDown() override {
    PluginTest::TearDown();
    RemoveTree(hl_dir_);
  }
  json HlConf(const std::string& version, const std::string& mode, json ipam_extra = json::object()) {
    json ipam = {{"type", "host-local"},
                 {"dataDir", hl_dir_},
                 {"ranges", json::array({json::array({{{"subnet", "10.77.0.0/24"}}})})},
                 {"routes", json::array({{{"dst", "0.0.0.0/0"}}})}};
    for (auto& [k, v] : ipam_extra.items()) ipam[k] = v;
    json c = Conf(version, {{"mode", mode}, {"bridge", "hlbr0"}, {"ipam", ipam}});
    c.erase("ranges");
    return c;
  }
  bool Leased(const std::string& ip) { return ::access((hl_dir_ + "/weftnet/" + ip).c_str(), F_OK) == 0; }
  std::string hl_dir_;
};

TEST_F(DelegateTest, HostLocalAddCheckDelInBothModesAndEveryVersion) {
  int n = 0;
  for (const char* mode : {"bridge", "routed"}) {
    for (const char* v : {"0.3.1", "0.4.0", "1.0.0", "1.1.0"}) {  // 1.1.0: host-local answers code 1 first
      std::string cid = std::string(mode) + std::to_string(n++);
      auto r = Add(cid, HlConf(v, mode));
      ASSERT_EQ(r.exit_code, 0) << mode << " " << v << ": " << r.out << r.err;
      std::string ip = PodIp(r);
      EXPECT_EQ(ip.rfind("10.77.0.", 0), 0u) << r.out;
      EXPECT_TRUE(Leased(ip)) << ip;
      if (std::string(mode) == "bridge") {
        EXPECT_EQ(r.Json()["ips"][0]["gateway"], "10.77.0.1");
        EXPECT_TRUE(Pod(cid).Ping("10.77.0.1")) << mode << " " << v;
      } else {
        EXPECT_TRUE(node_->Ping(ip)) << mode << " " << v;
      }
      json check = HlConf(v, mode);
      check["prevResult"] = r.Json();
      if (std::string(v) != "0.3.1") {
        auto c = Cni("CHECK", cid, Pod(cid).path(), check);
        EXPECT_EQ(c.exit_code, 0) << mode << " " << v << ": " << c.out;
      }
      EXPECT_EQ(Del(cid, check).exit_code, 0);
      EXPECT_FALSE(Leased(ip)) << mode << " " << v;
      EXPECT_EQ(Del(cid, check).exit_code, 0);
    }
  }
  ExpectNoPodsLeft();
}

TEST_F(DelegateTest, FailureAfterIpamReleasesTheAddress) {
  // The interface name is taken inside the pod: veth creation fails after
  // host-local handed out an address.
  Cmd({"ip", "-n", Pod("taken").name(), "link", "add", "eth0", "type", "veth", "peer", "name", "x0"});
  for (const char* mode : {"routed", "bridge"}) {
    auto r = Add("taken", HlConf("1.0.0", mode));
    EXPECT_EQ(r.Json()["code"], 106) << r.out;
    std::string out;
    Cmd({"ls", hl_dir_ + "/weftnet"}, &out);
    EXPECT_EQ(out.find("10.77.0."), std::string::npos) << mode << ": " << out;
    ExpectNoPodsLeft();
  }
  // A second ADD of a live attachment never reaches host-local (its rollback
  // DEL would free the first attachment's address).
  auto ok = Add("live", HlConf("1.0.0", "routed"));
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_EQ(Add("live", HlConf("1.0.0", "routed")).Json()["code"], 101);
  EXPECT_TRUE(Leased(PodIp(ok)));
  // IPAM failing is code 107 with host-local's words; nothing is left.
  auto bad = Add("bad", HlConf("1.0.0", "routed", {{"ranges", json::array({json::array({{{"subnet", "10.77.1.0/30"}, {"rangeStart", "10.77.1.9"}}})})}}));
  EXPECT_EQ(bad.Json()["code"], 107) << bad.out;
  EXPECT_FALSE(Pod("bad").HasLink("eth0"));
}

TEST_F(DelegateTest, StatusAndGcAreForwardedOnlyWhereHostLocalCan) {
  auto keep = Add("keep", HlConf("1.1.0", "routed"));
  auto gone = Add("gone", HlConf("1.1.0", "routed"));
  ASSERT_EQ(keep.exit_code, 0);
  ASSERT_EQ(gone.exit_code, 0);
  // host-local 1.1.1 has no STATUS or GC: weft's own answer stands.
  auto st = Cni("STATUS", "", "", HlConf("1.1.0", "routed"));
  EXPECT_EQ(st.exit_code, 0) << st.out;
  json gc = HlConf("1.1.0", "routed");
  gc["cni.dev/valid-attachments"] = {{{"containerID", "keep"}, {"ifname", "eth0"}}};
  auto g = Cni("GC", "", "", gc);
  EXPECT_EQ(g.exit_code, 0) << g.out;
  // GC tore "gone" down and released its lease through host-local's DEL.
  EXPECT_FALSE(Pod("gone").HasLink("eth0"));
  EXPECT_FALSE(Leased(PodIp(gone)));
  EXPECT_TRUE(Leased(PodIp(keep)));
  EXPECT_EQ(DbRows(), 1u);
}

}  // namespace
}  // namespace weft::testing
