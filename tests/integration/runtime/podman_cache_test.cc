// The result cache against a real libcni runtime: podman 4.3 (CNI backend)
// writes /var/lib/cni/results/<network>-<id>-eth0 and reads it back on rm.
//  - podman attaches, weftctl tears down from podman's cache entry alone;
//  - podman attaches, the entry is rewritten by our ResultCache, and podman's
//    rm reads it (no "failed to load cached network config") and detaches.
// podman runs in a private node netns with private storage. libcni's cache
// dir is fixed (/var/lib/cni), so the test process moves into a private mount
// namespace with a tmpfs over /var/lib: podman and weftctl, its children,
// share that cache and the machine's /var/lib is never written.

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "runtime/cache.h"
#include "sys/exec.h"
#include "sys/netns.h"
#include "testutil/netns_fixture.h"

namespace weft::testing {
namespace {

class PodmanCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Cmd({"podman", "--version"}) != 0) WEFT_SKIP_UNLESS_SET_UP("SKIPPED LOUDLY: podman is not installed (scripts/setup.sh installs it)");
    ASSERT_EQ(::unshare(CLONE_NEWNS), 0);
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
    ASSERT_EQ(::mount("tmpfs", "/var/lib", "tmpfs", 0, "size=64m,mode=0755"), 0);
    private_var_lib_ = true;
    dir_ = TempDir("pmcache");
    network_ = Prefix() + "pm";
    node_ = std::make_unique<TestNode>("pmc");
    for (const char* d : {"root", "runroot", "tmp", "net", "data", "rootfs/bin", "rootfs/proc", "rootfs/sys",
                          "rootfs/dev", "rootfs/etc", "rootfs/tmp"})
      std::filesystem::create_directories(dir_ + "/" + d);
    Cmd({"cp", "/bin/busybox", dir_ + "/rootfs/bin/busybox"});
    Cmd({"ln", "-s", "busybox", dir_ + "/rootfs/bin/sleep"});
    std::ofstream(dir_ + "/containers.conf")
        << "[containers]\ndefault_ulimits = []\n[network]\nnetwork_backend = \"cni\"\nnetwork_config_dir = \"" << dir_
        << "/net\"\ncni_plugin_dirs = [\"" << WEFT_BUILD_DIR
        << "/cmd/weft\", \"/usr/lib/cni\"]\n[engine]\ncgroup_manager = \"cgroupfs\"\nruntime = \"runc\"\n"
           "events_logger = \"file\"\n";
    std::ofstream(dir_ + "/net/" + network_ + ".conflist")
        << R"({"cniVersion":"1.0.0","name":")" << network_ << R"(","plugins":[{"type":"weft","dataDir":")" << dir_
        << R"(/data","ranges":["10.79.0.0/24"],"capabilities":{"portMappings":true}}]})";
    Cmd({"tar", "-C", dir_ + "/rootfs", "-cf", dir_ + "/rootfs.tar", "."});
    std::string err;
    if (Podman({"import", "--change", R"(CMD=["/bin/sleep","600"])", dir_ + "/rootfs.tar", "localhost/weft-rt:test"},
               nullptr, &err) != 0)
      GTEST_SKIP() << "SKIPPED LOUDLY: podman cannot import an image here: " << err;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      Podman({"rm", "-af", "-t", "0"});
      Cmd({"umount", "-R", dir_ + "/runroot"});
      Cmd({"umount", "-R", dir_ + "/root"});
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(kResults, ec))
        if (e.path().filename().string().rfind(network_ + "-", 0) == 0) std::filesystem::remove(e.path(), ec);
    }
    node_.reset();
    RemoveCgroupTree(Prefix() + "-podman");
    RemoveTree(dir_);
    if (private_var_lib_) ::umount2("/var/lib", MNT_DETACH);
  }

  int Podman(const std::vector<std::string>& args, std::string* out = nullptr, std::string* err = nullptr) {
    std::vector<std::string> argv = {"env", "CONTAINERS_CONF=" + dir_ + "/containers.conf", "nsenter",
                                     "--net=" + node_->path(), "podman", "--root", dir_ + "/root", "--runroot",
                                     dir_ + "/runroot", "--tmpdir", dir_ + "/tmp", "--storage-driver", "vfs"};
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
  std::string RunContainer() {
    std::string out, err;
    EXPECT_EQ(Podman({"run", "-d", "--network", network_, "--ulimit", "host", "localhost/weft-rt:test"}, &out, &err), 0)
        << err;
    return out.substr(0, out.find('\n'));
  }
  int HostVeths() {
    int n = 0;
    for (auto& l : node_->IpJson({"link", "show"})) n += l.value("ifname", "").rfind("wft", 0) == 0;
    return n;
  }
  int DbRows() {
    std::string out;
    Cmd({"sqlite3", dir_ + "/data/ipam.db", "select count(*) from pods"}, &out);
    return std::atoi(out.c_str());
  }

  static constexpr const char* kResults = "/var/lib/cni/results";
  std::string dir_, network_;
  std::unique_ptr<TestNode> node_;
  bool private_var_lib_ = false;
};

TEST_F(PodmanCache, WeftctlTearsDownWhatPodmanAttached) {
  std::string cid = RunContainer();
  ASSERT_FALSE(cid.empty());
  const std::string file = std::string(kResults) + "/" + network_ + "-" + cid + "-eth0";
  ASSERT_TRUE(std::filesystem::exists(file));
  ASSERT_EQ(HostVeths(), 1);
  ASSERT_EQ(DbRows(), 1);

  // No conf dir, no netns: only podman's cache entry.
  auto ns = sys::Netns::Open(node_->path());
  ASSERT_TRUE(ns.ok());
  sys::ExecRequest req;
  req.path = BinaryPath("weftctl");
  req.argv = {req.path, "--cache-dir", "/var/lib/cni", "del", network_, "--container-id", cid, "--from-cache"};
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "NETCONFPATH=" + dir_ + "/nothing",
             "CNI_PATH=" + std::string(WEFT_BUILD_DIR) + "/cmd/weft:/usr/lib/cni"};
  req.netns_fd = ns->fd();
  auto r = sys::Exec(req);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(HostVeths(), 0);
  EXPECT_EQ(DbRows(), 0);
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST_F(PodmanCache, PodmanReadsAnEntryWeWrote) {
  std::string cid = RunContainer();
  ASSERT_FALSE(cid.empty());
  runtime::ResultCache cache("/var/lib/cni");
  auto theirs = cache.Get(network_, cid, "eth0");
  ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
  ASSERT_TRUE(theirs->has_value());
  const std::string file = (*theirs)->file;
  const std::string before = [&] {
    std::ifstream f(file);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  // Rewrite the entry with our writer, from what we read.
  ASSERT_TRUE(cache.Add(network_, (*theirs)->config, (*theirs)->ToRuntimeConf(), (*theirs)->result).ok());
  std::string after;
  {
    std::ifstream f(file);
    after.assign(std::istreambuf_iterator<char>(f), {});
  }
  EXPECT_EQ(nlohmann::json::parse(after), nlohmann::json::parse(before)) << "we lost or changed a field";

  std::string out, err;
  ASSERT_EQ(Podman({"rm", "-f", "-t", "0", cid}, &out, &err), 0) << err;
  EXPECT_EQ(err.find("Failed to load cached network config"), std::string::npos) << err;
  EXPECT_EQ(HostVeths(), 0);
  EXPECT_EQ(DbRows(), 0);
  EXPECT_FALSE(std::filesystem::exists(file));
}

}  // namespace
}  // namespace weft::testing
