// Weft under a real runtime: podman 4.3 with its CNI backend (libcni).
// podman runs inside a node netns (nsenter --net, so /sys and the cgroup
// mounts stay visible to runc) with private storage, config and network
// dirs, and libcni's fixed cache dir (/var/lib/cni) on a tmpfs in a private
// mount namespace: the machine's own podman state, /var/lib and root netns
// are never touched.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <fstream>

#include "testutil/netns_fixture.h"

namespace weft::testing {
namespace {

using nlohmann::json;

class PodmanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Cmd({"podman", "--version"}) != 0) WEFT_SKIP_UNLESS_SET_UP("SKIPPED LOUDLY: podman is not installed (scripts/setup.sh installs it)");
    ASSERT_EQ(::unshare(CLONE_NEWNS), 0);
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
    ASSERT_EQ(::mount("tmpfs", "/var/lib", "tmpfs", 0, "size=64m,mode=0755"), 0);
    private_var_lib_ = true;
    dir_ = TempDir("podman");
    node_ = std::make_unique<TestNode>("pmnode");
    for (const char* d : {"root", "runroot", "tmp", "net", "data", "rootfs/bin", "rootfs/www", "rootfs/proc",
                          "rootfs/sys", "rootfs/dev", "rootfs/etc", "rootfs/tmp"})
      Cmd({"mkdir", "-p", dir_ + "/" + d});
    Cmd({"cp", "/bin/busybox", dir_ + "/rootfs/bin/busybox"});
    for (const char* a : {"sh", "httpd", "sleep"}) Cmd({"ln", "-s", "busybox", dir_ + "/rootfs/bin/" + a});
    Write(dir_ + "/rootfs/www/index.html", "hello-from-weft\n");
    Write(dir_ + "/containers.conf",
          "[containers]\ndefault_ulimits = []\n"
          "[network]\nnetwork_backend = \"cni\"\nnetwork_config_dir = \"" + dir_ + "/net\"\n"
          "cni_plugin_dirs = [\"" + std::string(WEFT_BUILD_DIR) + "/cmd/weft\", \"/usr/lib/cni\"]\n"
          "[engine]\ncgroup_manager = \"cgroupfs\"\nruntime = \"runc\"\nevents_logger = \"file\"\n");
    json conflist = {{"cniVersion", "1.0.0"},
                     {"name", "weftpm"},
                     {"plugins",
                      {{{"type", "weft"},
                        {"mtu", 1500},
                        {"dataDir", dir_ + "/data"},
                        {"ranges", {"10.77.0.0/24"}},
                        {"capabilities", {{"portMappings", true}}}}}}};
    Write(dir_ + "/net/weftpm.conflist", conflist.dump(2));
    Cmd({"tar", "-C", dir_ + "/rootfs", "-cf", dir_ + "/rootfs.tar", "."});
    std::string err;
    if (Podman({"import", "--change", R"(CMD=["/bin/httpd","-f","-p","80","-h","/www"])", dir_ + "/rootfs.tar",
                "localhost/weft-busybox:test"}, nullptr, &err) != 0)
      GTEST_SKIP() << "SKIPPED LOUDLY: podman cannot import an image here: " << err;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      Podman({"rm", "-af", "-t", "0"});
      Cmd({"umount", "-R", dir_ + "/runroot"});
      Cmd({"umount", "-R", dir_ + "/root"});
    }
    node_.reset();
    RemoveCgroupTree(Prefix() + "-podman");
    RemoveTree(dir_);
    if (private_var_lib_) ::umount2("/var/lib", MNT_DETACH);
  }

  static void Write(const std::string& path, const std::string& data) { std::ofstream(path) << data; }

  // podman with the private dirs, inside the node's network namespace.
  int Podman(const std::vector<std::string>& args, std::string* out = nullptr, std::string* err = nullptr) {
    std::vector<std::string> argv = {"env", "CONTAINERS_CONF=" + dir_ + "/containers.conf",
                                     "nsenter", "--net=" + node_->path(),
                                     "podman", "--root", dir_ + "/root", "--runroot", dir_ + "/runroot",
                                     "--tmpdir", dir_ + "/tmp", "--storage-driver", "vfs"};
    const bool run = !args.empty() && args[0] == "run";
    if (run) {
      // Containers (and conmon) live under a test-owned cgroup parent that
      // TearDown removes, so nothing is left in the machine's cgroup tree.
      argv.push_back("run");
      argv.push_back("--cgroup-parent=/" + Prefix() + "-podman");
    }
    argv.insert(argv.end(), args.begin() + (run ? 1 : 0), args.end());
    return Cmd(argv, out, err);
  }
  std::vector<std::string> HostVeths() {
    std::vector<std::string> out;
    for (auto& l : node_->IpJson({"link", "show"}))
      if (l.value("ifname", "").rfind("wft", 0) == 0) out.push_back(l["ifname"]);
    return out;
  }
  int DbRows() {
    std::string out;
    Cmd({"sqlite3", dir_ + "/data/ipam.db", "select count(*) from pods"}, &out);
    return std::atoi(out.c_str());
  }
  std::string dir_;
  std::unique_ptr<TestNode> node_;
  bool private_var_lib_ = false;
};

TEST_F(PodmanTest, RunGivesAWeftAddressAndRemoveLeavesNothing) {
  std::string out, err;
  ASSERT_EQ(Podman({"run", "-d", "--name", "web", "--network", "weftpm", "--ulimit", "host", "-p", "8080:80",
                    "localhost/weft-busybox:test"}, &out, &err), 0) << err;
  ASSERT_EQ(Podman({"inspect", "web", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"},
                   &out), 0);
  std::string ip(out.substr(0, out.find('\n')));
  EXPECT_EQ(ip.rfind("10.77.0.", 0), 0u) << ip;
  EXPECT_EQ(HostVeths().size(), 1u);
  EXPECT_EQ(DbRows(), 1);
  // The container serves HTTP on its weft address, reached from the node.
  EXPECT_EQ(HttpGet(*node_, "http://" + ip + "/"), "hello-from-weft\n");
  // -p 8080:80 reached podman's runtimeConfig.portMappings (lowerCamel keys):
  // the hostPort answers from another host on the uplink, from the node's
  // own address and from localhost.
  TestNetns client("pmclient");
  Cmd({"ip", "-n", node_->name(), "link", "set", "up1", "netns", client.name()});
  Cmd({"ip", "-n", client.name(), "addr", "add", "192.0.2.20/24", "dev", "up1"});
  Cmd({"ip", "-n", client.name(), "link", "set", "up1", "up"});
  EXPECT_EQ(HttpGet(client, "http://192.0.2.10:8080/"), "hello-from-weft\n");
  EXPECT_EQ(HttpGet(*node_, "http://192.0.2.10:8080/"), "hello-from-weft\n");
  EXPECT_EQ(HttpGet(*node_, "http://127.0.0.1:8080/"), "hello-from-weft\n");

  // Disconnect runs DEL: the veth, route and address go; reconnect works.
  ASSERT_EQ(Podman({"network", "disconnect", "weftpm", "web"}, nullptr, &err), 0) << err;
  EXPECT_TRUE(HostVeths().empty());
  EXPECT_EQ(DbRows(), 0);
  EXPECT_TRUE(node_->IpJson({"route", "show", "proto", "201"}).empty());
  ASSERT_EQ(Podman({"network", "connect", "weftpm", "web"}, nullptr, &err), 0) << err;
  EXPECT_EQ(HostVeths().size(), 1u);

  EXPECT_EQ(HttpGet(client, "http://192.0.2.10:8080/"), "hello-from-weft\n");  // mapping restored

  // rm -f runs DEL again: nothing is left — no address, veth, route or rule.
  ASSERT_EQ(Podman({"rm", "-f", "-t", "0", "web"}, nullptr, &err), 0) << err;
  EXPECT_TRUE(HostVeths().empty());
  EXPECT_EQ(DbRows(), 0);
  EXPECT_TRUE(node_->IpJson({"route", "show", "proto", "201"}).empty());
  std::string rules;
  node_->Exec({"nft", "list", "ruleset"}, &rules);
  EXPECT_EQ(rules.find("8080"), std::string::npos) << rules;
  EXPECT_EQ(HttpGet(client, "http://192.0.2.10:8080/", 1), "");
}

}  // namespace
}  // namespace weft::testing
