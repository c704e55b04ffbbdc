// weftd from the image deploy/build-image.sh builds, run the way
// deploy/weftd.yaml's DaemonSet runs it, against the stand-in API server:
// podman on the host network of a node netns, only the manifest's
// capabilities, /proc/sys read-only (as runtimes mount it), the manifest's
// mounts, environment, memory limit and commands (read from the manifest
// itself), the init step installing the plugin, then a pod on one node
// reaching a pod on the other through that plugin and the conflist weftd
// wrote, a sysctl the node does not provide, and the reboot reclaim over
// the mounted dataDir and netns dir.
//
// Cost: the image is built (or found up to date) by deploy/build-image.sh
// --prebuilt first: the Dockerfile's runtime stage around this build's
// weftd and plugin (the binaries every other suite tests), so nothing is
// compiled; the first build on a machine makes the Debian root filesystem
// and runs apt (a minute or two), later ones reuse the image while the
// binaries and the Dockerfile are unchanged. The test itself then takes
// about 10 s. WEFT_IMAGE_FROM_SOURCE=1 builds the image as shipped (its
// build stage compiles weftd and the plugin, several minutes the first
// time); WEFT_IMAGE_REF=<commit> builds that commit so. Skipped (loudly)
// only when podman cannot run a container here at all.
//
// Hygiene: containers are named with the test's prefix, live under a
// test-owned cgroup parent, and are removed in TearDown; host paths of the
// manifest's volumes map into the test's directory (the netns dir and
// /lib/modules are the machine's own, read-only).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "e2e/cluster.h"
#include "e2e/kube_api.h"
#include "sys/exec.h"

namespace weft::testing {
namespace {

using nlohmann::json;

const std::string kImage = std::string("localhost/weft/weftd:") + WEFT_VERSION;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
}

bool Contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The manifest's documents as JSON (python3's yaml module reads YAML).
json LoadManifest(const std::string& path) {
  std::string out, err;
  int rc = Cmd({"python3", "-c",
                "import json, sys, yaml\n"
                "print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))\n",
                path},
               &out, &err);
  if (rc != 0) throw std::runtime_error("cannot read " + path + ": " + err);
  return json::parse(out);
}

const json& Find(const json& docs, const std::string& kind, const std::string& name) {
  for (const auto& d : docs)
    if (d.value("kind", "") == kind && d["metadata"].value("name", "") == name) return d;
  throw std::runtime_error("the manifest has no " + kind + " " + name);
}

const json& Container(const json& list, const std::string& name) {
  for (const auto& c : list)
    if (c.value("name", "") == name) return c;
  throw std::runtime_error("the manifest has no container " + name);
}

// podman's default rlimits ask for more than a process without
// CAP_SYS_RESOURCE may set (this sandbox, some CI runners); a kubelet's
// runtime gives the container the node's limits, which these stay under.
std::vector<std::string> Ulimits() { return {"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"}; }

// podman's default network: a bridge in the root network namespace, made
// by the first container (or `podman build` RUN step) that is given no
// network. Every podman call here names one (none, or ns:<node netns>; the
// image build uses --network host), and TearDown proves it.
constexpr char kPodmanBridge[] = "cni-podman0";
bool RootHasLink(const std::string& name) { return Cmd({"ip", "link", "show", "dev", name}) == 0; }

class ImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    podman_bridge_before_ = RootHasLink(kPodmanBridge);
    ProbePodman();
    if (IsSkipped()) return;
    BuildImage();
    if (HasFatalFailure()) return;
    manifest_ = LoadManifest(std::string(WEFT_SOURCE_DIR) + "/deploy/weftd.yaml");
    ds_ = Find(manifest_, "DaemonSet", "weftd")["spec"]["template"]["spec"];
    root_ = TempDir("image");
    ul_ = std::make_unique<Underlay>();
    api_ = std::make_unique<FakeApiServer>(*ul_, root_ + "/api");
  }

  void TearDown() override {
    if (HasFailure()) {
      for (auto& n : nodes_) std::cerr << "---- " << n->name << " weftd container log ----\n" << Logs(*n) << "\n";
      if (api_) std::cerr << "---- API log ----\n" << api_->Log() << "\n";
    }
    pods_.clear();
    for (const auto& c : containers_) Cmd({"podman", "rm", "-f", "-t", "0", c});
    nodes_.clear();
    api_.reset();
    ul_.reset();
    if (probed_) Cmd({"podman", "rmi", "-f", probe_image_});
    RemoveCgroupTree(Prefix() + "-image");
    if (!root_.empty()) RemoveTree(root_);
    if (!podman_bridge_before_) {
      EXPECT_FALSE(RootHasLink(kPodmanBridge))
          << "podman made its default network's bridge " << kPodmanBridge
          << " in the root network namespace: a podman run without --network, or a build without --network host";
    }
  }

  // Can podman run a container here at all? A one-file image (static
  // busybox) says so in well under a second, before minutes of building.
  void ProbePodman() {
    std::string out, err;
    if (Cmd({"podman", "--version"}, &out, &err) != 0)
      WEFT_SKIP_UNLESS_SET_UP("SKIPPED LOUDLY: podman is not installed (scripts/setup.sh installs it)");
    std::string dir = TempDir("probe");
    Cmd({"mkdir", "-p", dir + "/rootfs/bin"});
    Cmd({"cp", "/bin/busybox", dir + "/rootfs/bin/busybox"});
    Cmd({"tar", "-C", dir + "/rootfs", "-cf", dir + "/rootfs.tar", "."});
    probe_image_ = "localhost/" + Prefix() + "-probe:test";
    int rc = Cmd({"podman", "import", "--quiet", dir + "/rootfs.tar", probe_image_}, &out, &err);
    probed_ = rc == 0;
    if (rc == 0) {
      std::vector<std::string> argv = {"podman", "run", "--rm", "--network", "none",
                                       "--cgroup-parent=/" + Prefix() + "-image"};
      for (auto& u : Ulimits()) argv.push_back(u);
      argv.insert(argv.end(), {probe_image_, "/bin/busybox", "true"});
      rc = Cmd(argv, &out, &err);
    }
    RemoveTree(dir);
    if (rc != 0) GTEST_SKIP() << "SKIPPED LOUDLY: podman cannot run a container here: " << err;
  }

  void BuildImage() {
    std::vector<std::string> argv = {"bash", std::string(WEFT_SOURCE_DIR) + "/deploy/build-image.sh"};
    // By default the image is the Dockerfile's runtime stage around this
    // build's binaries, the ones every other suite tests; WEFT_IMAGE_REF or
    // WEFT_IMAGE_FROM_SOURCE=1 build it as shipped (its build stage compiles).
    const char* ref = std::getenv("WEFT_IMAGE_REF");
    const char* from_source = std::getenv("WEFT_IMAGE_FROM_SOURCE");
    if (ref && *ref) {
      argv.insert(argv.end(), {"--ref", ref});
    } else if (!(from_source && std::string(from_source) == "1")) {
      argv.insert(argv.end(), {"--prebuilt", WEFT_BUILD_DIR});
    }
    auto t0 = std::chrono::steady_clock::now();
    // Not Cmd(): a first build takes minutes, past its two-minute limit.
    sys::ExecRequest req;
    req.path = "/bin/bash";
    req.argv = argv;
    req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"};
    req.timeout = std::chrono::minutes(35);
    auto r = sys::Exec(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count();
    std::cout << r->out << r->err << "IMAGE-BUILD seconds=" << s << "\n";
    ASSERT_FALSE(r->timed_out) << "deploy/build-image.sh took more than 35 minutes";
    ASSERT_EQ(r->exit_code, 0) << "deploy/build-image.sh failed";
  }

  // The host path of a manifest hostPath volume, for node `n`: the node's
  // own directory stands for its root filesystem, but for the pod netns
  // dir and the kernel modules, which are the machine's (mounted read-only).
  std::string HostPath(const WeftNode& n, const std::string& path) const {
    if (path == "/var/run/netns" || path == "/run/netns") return "/run/netns";
    if (path == "/lib/modules") return "/lib/modules";
    if (path == "/etc/cni/net.d") return n.conf_dir();  // where WeftNode reads the conflist
    return n.dir + "/host" + path;
  }

  // podman arguments for one of the manifest's containers on node `n`:
  // security context, env, memory limit, every volumeMount. A hostPath
  // volume whose file weftd writes and the plugin reads on the host is
  // mounted at the host path itself (the manifest mounts those at the
  // same path as on the host, so the conflist's paths hold on both sides);
  // the others at the manifest's mountPath.
  std::vector<std::string> ContainerArgs(const WeftNode& n, const json& c) {
    std::vector<std::string> a = {"--network", "ns:" + n.ns.path(), "--cgroup-parent=/" + Prefix() + "-image"};
    for (auto& u : Ulimits()) a.push_back(u);
    const json sc = c.value("securityContext", json::object());
    EXPECT_FALSE(sc.value("privileged", false)) << c["name"];
    const json caps = sc.value("capabilities", json::object());
    for (const auto& d : caps.value("drop", json::array())) a.push_back("--cap-drop=" + d.get<std::string>());
    for (const auto& d : caps.value("add", json::array())) a.push_back("--cap-add=" + d.get<std::string>());
    if (sc.contains("allowPrivilegeEscalation") && !sc["allowPrivilegeEscalation"].get<bool>())
      a.push_back("--security-opt=no-new-privileges");
    for (const auto& e : c.value("env", json::array())) {
      std::string v = e.value("value", "");
      if (e.contains("valueFrom") && e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName") v = n.name;
      a.push_back("--env=" + e["name"].get<std::string>() + "=" + v);
    }
    if (c.contains("resources") && c["resources"].contains("limits") && c["resources"]["limits"].contains("memory")) {
      std::string m = c["resources"]["limits"]["memory"];  // "128Mi"
      a.push_back("--memory=" + m.substr(0, m.size() - 2) + "m");
    }
    for (const auto& m : c.value("volumeMounts", json::array())) {
      const json* vol = nullptr;
      for (const auto& v : ds_["volumes"])
        if (v["name"] == m["name"]) vol = &v;
      if (!vol) throw std::runtime_error("no volume " + m["name"].get<std::string>());
      std::string mount_path = m["mountPath"], src;
      std::string opts = m.value("readOnly", false) ? "ro" : "rw";
      if (vol->contains("configMap")) {
        src = n.dir + "/configmap-" + (*vol)["configMap"]["name"].get<std::string>();
        Cmd({"mkdir", "-p", src});
        for (auto& [file, text] : Find(manifest_, "ConfigMap", (*vol)["configMap"]["name"])["data"].items())
          WriteAll(src + "/" + file, text.get<std::string>());
      } else {
        const std::string host = (*vol)["hostPath"]["path"];
        const std::string type = (*vol)["hostPath"].value("type", "");
        src = HostPath(n, host);
        if (src.rfind(n.dir, 0) != 0) {
          if (Cmd({"test", "-e", src}) != 0) continue;  // the machine has no such path: nothing to mount
        } else if (type == "FileOrCreate") {
          Cmd({"mkdir", "-p", src.substr(0, src.rfind('/'))});
          if (!std::ifstream(src)) WriteAll(src, "");
        } else {
          Cmd({"mkdir", "-p", src});
        }
        // weftd names these paths in the conflist the plugin reads on the host.
        const std::string vname = m["name"];
        if (vname == "cni-conf" || vname == "plugin-data" || vname == "state") {
          EXPECT_EQ(host, mount_path) << vname << " must be mounted at its host path";
          mount_path = src;
        }
      }
      if (m.value("mountPropagation", "") == "HostToContainer") opts += ",rslave";
      mounted_[n.name][m["name"]] = mount_path;
      a.push_back("--volume=" + src + ":" + mount_path + ":" + opts);
    }
    return a;
  }

  // The service account kubelet projects: token and CA, and the API
  // server's address in the environment (weftd's in-cluster config).
  std::vector<std::string> ServiceAccount(const WeftNode& n) {
    std::string sa = n.dir + "/serviceaccount";
    Cmd({"mkdir", "-p", sa});
    Cmd({"cp", root_ + "/api/token", sa + "/token"});
    Cmd({"cp", api_->ca_file(), sa + "/ca.crt"});
    return {"--volume=" + sa + ":/var/run/secrets/kubernetes.io/serviceaccount:ro",
            "--env=KUBERNETES_SERVICE_HOST=192.0.2.254", "--env=KUBERNETES_SERVICE_PORT=6443"};
  }

  WeftNode& AddNode(const std::string& name, int octet, const std::string& cidr) {
    api_->Apply({{"kind", "Node"},
                 {"metadata", {{"name", name}}},
                 {"spec", {{"podCIDR", cidr}, {"podCIDRs", {cidr}}}},
                 {"status", {{"addresses", {{{"type", "InternalIP"}, {"address", "192.0.2." + std::to_string(octet)}}}}}}});
    nodes_.push_back(std::make_unique<WeftNode>(*ul_, name, octet, root_));
    return *nodes_.back();
  }

  // The init container, as the DaemonSet runs it: to completion.
  int InstallPlugin(WeftNode& n, std::string* out) {
    const json& c = Container(ds_["initContainers"], "install-plugin");
    std::vector<std::string> argv = {"podman", "run", "--rm"};
    for (auto& s : ContainerArgs(n, c)) argv.push_back(s);
    // A container's `command` replaces the image's entrypoint.
    argv.push_back("--entrypoint=" + c["command"].dump());
    EXPECT_EQ(c["image"], std::string("weft/weftd:") + WEFT_VERSION);
    argv.push_back(kImage);
    std::string err;
    int rc = Cmd(argv, out, &err);
    *out += err;
    return rc;
  }

  // weftd's container. Paths weftd writes for the plugin are the host paths
  // (see ContainerArgs); flags override the config file's, as on a node
  // whose paths differ from the defaults.
  std::vector<std::string> WeftdArgv(WeftNode& n, bool detach) {
    const json& c = Container(ds_["containers"], "weftd");
    std::vector<std::string> argv = {"podman", "run"};
    if (detach) argv.insert(argv.end(), {"-d", "--name", Prefix() + "-" + n.name});
    else argv.push_back("--rm");
    for (auto& s : ContainerArgs(n, c)) argv.push_back(s);
    for (auto& s : ServiceAccount(n)) argv.push_back(s);
    argv.push_back("--entrypoint=" + c["command"].dump());
    argv.push_back(kImage);
    const auto& at = mounted_.at(n.name);
    argv.insert(argv.end(), {"--cni-conf-dir", at.at("cni-conf"), "--state-dir", at.at("state"),
                             "--plugin-data-dir", at.at("plugin-data"), "--plugin-log-file",
                             at.at("plugin-data") + "/plugin.log", "--resync-period", "5"});
    return argv;
  }

  void StartWeftd(WeftNode& n) {
    std::string out, err;
    ASSERT_EQ(Cmd(WeftdArgv(n, true), &out, &err), 0) << err;
    containers_.push_back(Prefix() + "-" + n.name);
  }

  void StopWeftd(WeftNode& n) {
    Cmd({"podman", "stop", "-t", "5", Prefix() + "-" + n.name});
    Cmd({"podman", "rm", "-f", Prefix() + "-" + n.name});
  }

  std::string Logs(const WeftNode& n) {
    std::string out, err;
    Cmd({"podman", "logs", Prefix() + "-" + n.name}, &out, &err);
    return out + err;
  }

  std::string Plugin(const WeftNode& n) { return HostPath(n, "/opt/cni/bin") + "/weft"; }

  struct ImagePod {
    std::string cid;
    std::unique_ptr<TestNetns> ns;
    std::string ip;
  };

  // A pod attached by the plugin the init step installed, with the
  // conflist weftd wrote.
  ImagePod& AddPod(WeftNode& n, const std::string& name) {
    auto p = std::make_unique<ImagePod>();
    p->cid = n.name + "-" + name;
    p->ns = std::make_unique<TestNetns>(n.name + "-" + name);
    auto env = CniEnv("ADD", p->cid, p->ns->path());
    env["CNI_ARGS"] = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name;
    auto r = RunPlugin(Plugin(n), n.ns, env, n.PluginConf());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    try {
      std::string a = r.Json()["ips"][0]["address"];
      p->ip = a.substr(0, a.find('/'));
    } catch (...) {
      ADD_FAILURE() << "no IP in " << r.out;
    }
    pods_.push_back(std::move(p));
    return *pods_.back();
  }

  json manifest_, ds_;
  // node -> volume name -> its path inside the container
  std::map<std::string, std::map<std::string, std::string>> mounted_;
  std::string probe_image_;
  bool probed_ = false;
  bool podman_bridge_before_ = false;
  std::string root_;
  std::unique_ptr<Underlay> ul_;
  std::unique_ptr<FakeApiServer> api_;
  std::vector<std::unique_ptr<WeftNode>> nodes_;
  std::vector<std::unique_ptr<ImagePod>> pods_;
  std::vector<std::string> containers_;
};

TEST_F(ImageTest, RunsAsTheDaemonSetRunsIt) {
  auto t0 = std::chrono::steady_clock::now();
  // The manifest's own facts this test relies on.
  const json& weftd = Container(ds_["containers"], "weftd");
  EXPECT_EQ(weftd["securityContext"]["capabilities"]["drop"], json({"ALL"}));
  EXPECT_EQ(weftd["securityContext"]["capabilities"]["add"], json({"NET_ADMIN", "NET_RAW"}));
  EXPECT_EQ(ds_["nodeSelector"]["kubernetes.io/os"], "linux");
  EXPECT_TRUE(ds_["hostNetwork"].get<bool>());

  WeftNode& n1 = AddNode("n1", 11, "10.244.1.0/24");
  WeftNode& n2 = AddNode("n2", 12, "10.244.2.0/24");

  // The init step: the image's plugin lands in the node's CNI bin dir.
  for (WeftNode* n : {&n1, &n2}) {
    std::string out;
    ASSERT_EQ(InstallPlugin(*n, &out), 0) << out;
    EXPECT_TRUE(Contains(out, "installed plugin")) << out;
    auto v = RunPlugin(Plugin(*n), n->ns, {{"CNI_COMMAND", "VERSION"}}, "{\"cniVersion\":\"1.0.0\"}");
    ASSERT_EQ(v.exit_code, 0) << "the installed plugin does not run on the host: " << v.out << v.err;
  }

  // A node that does not provide net.ipv4.ip_forward: weftd cannot set it
  // (read-only /proc/sys) and says what to do.
  ASSERT_EQ(n1.ns.Exec({"sysctl", "-qw", "net.ipv4.ip_forward=0"}), 0);
  {
    std::string out, err;
    int rc = Cmd(WeftdArgv(n1, false), &out, &err);
    std::cout << "---- weftd on a node without ip_forward ----\n" << out << err;
    EXPECT_NE(rc, 0);
    EXPECT_TRUE(Contains(out + err, "sysctl net.ipv4.ip_forward is 0, weftd needs 1 and cannot set it "
                                    "(/proc/sys is read-only here")) << out << err;
    EXPECT_TRUE(Contains(out + err, "`sysctl -w net.ipv4.ip_forward=1`")) << out << err;
  }
  for (WeftNode* n : {&n1, &n2}) ASSERT_EQ(n->ns.Exec({"sysctl", "-qw", "net.ipv4.ip_forward=1"}), 0);

  for (WeftNode* n : {&n1, &n2}) StartWeftd(*n);
  ASSERT_FALSE(HasFatalFailure());
  for (WeftNode* n : {&n1, &n2}) {
    ASSERT_TRUE(WaitFor([&] { return !n->PluginConf().empty() && n->AgentRoutes().size() == 1; }, 30000, 100))
        << n->name << ": no conflist or no route to the other node";
    int code = 0;
    ASSERT_TRUE(WaitFor([&] { return n->Http("/readyz", &code), code == 200; }, 20000, 100)) << n->name;
  }
  std::cout << "IMAGE-READY ms=" << std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now() - t0).count() << "\n";

  // Registered through the API: its VTEP MAC and host IP on the Node.
  auto node = api_->Get("Node", "", "n1");
  EXPECT_TRUE(node["metadata"]["annotations"].contains("weft.io/vtep-mac")) << node.dump();
  // What weftd really had: no capability but the two, /proc/sys read-only.
  // Read from the host through its pid (no exec into the container).
  {
    std::string pid, err;
    ASSERT_EQ(Cmd({"podman", "inspect", "--format", "{{.State.Pid}}", Prefix() + "-n1"}, &pid, &err), 0) << err;
    pid = pid.substr(0, pid.find('\n'));
    std::string status = ReadAll("/proc/" + pid + "/status");
    std::string caps = status.substr(status.find("CapInh:"), status.find("CapAmb:") - status.find("CapInh:"));
    EXPECT_TRUE(Contains(caps, "CapEff:\t0000000000003000")) << caps;  // NET_ADMIN | NET_RAW
    EXPECT_TRUE(Contains(caps, "CapBnd:\t0000000000003000")) << caps;
    std::string mounts, line;
    std::istringstream in(ReadAll("/proc/" + pid + "/mounts"));
    while (std::getline(in, line))
      if (Contains(line, " /proc/sys ")) mounts += line + "\n";
    EXPECT_TRUE(Contains(mounts, "proc /proc/sys proc ro,")) << mounts;
    std::cout << "---- weftd's process (pid " << pid << " on the host) ----\n" << caps << mounts;
  }
  std::string conflist = ReadAll(n1.conf_dir() + "/10-weft.conflist");
  std::cout << "---- conflist weftd wrote on n1 ----\n" << conflist;
  EXPECT_TRUE(Contains(conflist, "\"dataDir\": \"" + HostPath(n1, "/var/lib/weft") + "\"")) << conflist;
  EXPECT_TRUE(Contains(conflist, "\"namespacesFile\": \"" + HostPath(n1, "/var/lib/weftd") + "/netpol-namespaces\""))
      << conflist;

  // Pods attached with that conflist by the installed plugin, across nodes.
  ImagePod& a = AddPod(n1, "a");
  ImagePod& b = AddPod(n2, "b");
  ASSERT_FALSE(HasFailure());
  EXPECT_TRUE(a.ns->Ping(b.ip, 2)) << a.ip << " -> " << b.ip;
  EXPECT_TRUE(b.ns->Ping(a.ip, 2)) << b.ip << " -> " << a.ip;
  std::string ping;
  a.ns->Exec({"ping", "-c", "1", "-W", "2", b.ip}, &ping);
  std::cout << "---- pod a (n1) -> pod b (n2) ----\n" << ping;

  // The operator's tool in the image, as `kubectl -n kube-system exec
  // ds/weftd -- weftctl doctor` runs it: this node's state through the
  // DaemonSet's mounts and weftd's capabilities. (--data-dir: the
  // container mounts the plugin's dataDir at the test's host path, which
  // on a real node is /var/lib/weft itself.) Its findings are printed, not judged: what matters here is
  // that it runs and reads the node's database (pod a).
  {
    std::string out, err;
    const std::string data_dir = mounted_.at(n1.name).at("plugin-data");
    int rc = Cmd({"podman", "exec", Prefix() + "-n1", "weftctl", "doctor", "--data-dir", data_dir}, &out, &err);
    std::cout << "---- podman exec (kubectl exec ds/weftd --) weftctl doctor: exit " << rc << " ----\n"
              << out << err;
    EXPECT_TRUE(Contains(out, "weftctl doctor: dataDir " + data_dir + ", 1 attachment(s)")) << out << err;
    EXPECT_NE(rc, 126) << "weftctl cannot run in the image";
    EXPECT_NE(rc, 127) << "no weftctl in the image";
  }

  // A reboot that lost pod c but not pod a: weftd restarts and, reading the
  // plugin's database through its dataDir mount and the netns dir, gives
  // back c's address and leaves a alone.
  ImagePod& c = AddPod(n1, "c");
  ASSERT_FALSE(c.ip.empty());
  StopWeftd(n1);
  std::string host_veth;
  {
    // c's host veth: the one whose peer is in c's netns.
    auto peer = c.ns->IpJson({"link", "show", "dev", "eth0"});
    ASSERT_FALSE(peer.empty());
    int peer_index = peer[0].value("link_index", 0);
    for (auto& l : n1.ns.IpJson({"link", "show"}))
      if (l.value("ifindex", 0) == peer_index) host_veth = l["ifname"];
  }
  ASSERT_FALSE(host_veth.empty());
  std::string c_id = c.cid + "/eth0";
  c.ns.reset();  // the netns and its veth pair are gone, as after a reboot
  for (auto it = pods_.begin(); it != pods_.end(); ++it)
    if (it->get() == &c) {
      pods_.erase(it);
      break;
    }
  ASSERT_TRUE(WaitFor([&] { return !n1.ns.HasLink(host_veth); }, 5000));
  StartWeftd(n1);
  ASSERT_TRUE(WaitFor([&] { return Contains(Logs(n1), "reclaimed attachments"); }, 20000, 200)) << Logs(n1);
  std::string logs = Logs(n1);
  EXPECT_TRUE(Contains(logs, c_id)) << logs;
  EXPECT_FALSE(Contains(logs, a.cid + "/eth0")) << logs;
  int code = 0;
  ASSERT_TRUE(WaitFor([&] { return n1.Http("/readyz", &code), code == 200; }, 20000, 100));
  EXPECT_TRUE(a.ns->Ping(b.ip, 2)) << "pod a lost its network over weftd's restart";
  std::cout << "IMAGE-TEST seconds="
            << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count()
            << " (without the image build)\n";
}

}  // namespace
}  // namespace weft::testing
