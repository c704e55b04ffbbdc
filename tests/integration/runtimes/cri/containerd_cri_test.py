#!/usr/bin/python3
"""Weft under containerd 1.6's CRI plugin, driven the way kubelet drives it.

containerd runs inside a node network namespace the test creates, with a
private root/state/sockets/conf dir; a small CRI client (grpc, Debian's
python3-grpcio) calls RunPodSandbox / PodSandboxStatus / StopPodSandbox /
RemovePodSandbox. Nothing outside the test's own namespaces and temp dir is
touched. Usage: containerd_cri_test.py --build BUILD_DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "wt%d" % os.getpid()
ARGS = None


def sh(*argv, check=True, **kw):
    r = subprocess.run(list(argv), capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
    return r


CGROUP_PARENT = PREFIX + "-cri"


def remove_cgroup_tree(name):
    """Kills what is left in the test's cgroup parent and removes it."""
    dirs = []
    for ctrl in os.listdir("/sys/fs/cgroup"):
        root = os.path.join("/sys/fs/cgroup", ctrl, name)
        for d, _, _ in os.walk(root):
            dirs.append(d)
    for d in dirs:
        try:
            for pid in open(os.path.join(d, "cgroup.procs")).read().split():
                os.kill(int(pid), 9)
        except OSError:
            pass
    for _ in range(50):
        left = False
        for d in sorted(dirs, key=len, reverse=True):
            try:
                if os.path.isdir(d):
                    os.rmdir(d)
            except OSError:
                left = True
        if not left:
            return
        time.sleep(0.1)


def http_get(netns, url, tries=20):
    """GET from inside a netns; servers start asynchronously, so retry."""
    code = "import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1],timeout=2).read().decode(),end='')"
    for _ in range(tries):
        r = sh("ip", "netns", "exec", netns, "/usr/bin/python3", "-c", code, url, check=False)
        if r.returncode == 0:
            return r.stdout
        time.sleep(0.25)
    return ""


class Cluster:
    """A node netns running a private containerd."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix=PREFIX + "-cri-")
        self.node = PREFIX + "-crinode"
        self.proc = None
        d = self.dir
        for sub in ("root", "state", "net.d", "bin", "opt", "gen", "img/rootfs/bin", "img/pm", "img/pmrun", "img/pmtmp"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.symlink(os.path.join(ARGS.build, "cmd/weft/weft"), os.path.join(d, "bin/weft"))
        os.symlink("/usr/lib/cni/loopback", os.path.join(d, "bin/loopback"))
        with open(os.path.join(d, "config.toml"), "w") as f:
            f.write(CONFIG.format(d=d))
        sh("ip", "netns", "add", self.node)
        sh("ip", "-n", self.node, "link", "set", "lo", "up")
        sh("ip", "-n", self.node, "link", "add", "up0", "type", "veth", "peer", "name", "up1")
        sh("ip", "-n", self.node, "addr", "add", "192.0.2.10/24", "dev", "up0")
        sh("ip", "-n", self.node, "link", "set", "up0", "up")
        sh("ip", "-n", self.node, "link", "set", "up1", "up")
        log = open(os.path.join(d, "containerd.log"), "w")
        # containerd (through libcni) caches results under the fixed
        # /var/lib/cni: give it a private mount namespace with a tmpfs there
        # so the machine's /var/lib is never written.
        launcher = ("import os, subprocess, sys\n"
                    "subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', '/var/lib'], check=True)\n"
                    "os.execvp('nsenter', ['nsenter', '--net=' + sys.argv[1], 'containerd', '--config', sys.argv[2]])\n")
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "/usr/bin/python3", "-c",
                                      launcher, "/run/netns/" + self.node, os.path.join(d, "config.toml")],
                                     stdout=log, stderr=log)
        sock = os.path.join(d, "containerd.sock")
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("containerd did not start: " + open(os.path.join(d, "containerd.log")).read()[-2000:])
        self.import_sandbox_image()
        sh("/usr/bin/python3", "-m", "grpc_tools.protoc", "-I", HERE, "--python_out=" + d + "/gen",
           "--grpc_python_out=" + d + "/gen", os.path.join(HERE, "weft_cri.proto"))
        sys.path.insert(0, d + "/gen")
        import grpc
        import weft_cri_pb2
        import weft_cri_pb2_grpc
        self.grpc, self.pb = grpc, weft_cri_pb2
        self.rt = weft_cri_pb2_grpc.RuntimeServiceStub(grpc.insecure_channel("unix://" + sock))

    def import_sandbox_image(self):
        """A pause image built locally from busybox (no registry)."""
        img = os.path.join(self.dir, "img")
        shutil.copy("/bin/busybox", img + "/rootfs/bin/busybox")
        os.symlink("busybox", img + "/rootfs/bin/sleep")
        sh("tar", "-C", img + "/rootfs", "-cf", img + "/rootfs.tar", ".")
        pm = ["podman", "--root", img + "/pm", "--runroot", img + "/pmrun", "--tmpdir", img + "/pmtmp",
              "--storage-driver", "vfs"]
        sh(*pm, "import", "--change", 'CMD=["/bin/sleep","2147483647"]', img + "/rootfs.tar", "localhost/weft-pause:test")
        sh(*pm, "save", "--format", "docker-archive", "-o", img + "/pause.tar", "localhost/weft-pause:test")
        sh("ctr", "--address", os.path.join(self.dir, "containerd.sock"), "-n", "k8s.io", "images", "import",
           img + "/pause.tar")

    def write_conflist(self, conf):
        """Write-then-rename, as weftd does: containerd sees one complete file."""
        tmp = os.path.join(self.dir, "net.d", ".10-weft.conflist.tmp")
        with open(tmp, "w") as f:
            json.dump(conf, f)
        os.rename(tmp, os.path.join(self.dir, "net.d", "10-weft.conflist"))

    def close(self):
        # Stop and remove every sandbox, the failed first attempt included
        # (containerd keeps it running in state UNKNOWN).
        if getattr(self, "rt", None):
            try:
                for sb in self.rt.ListPodSandbox(self.pb.ListPodSandboxRequest(), timeout=10).items:
                    for call, req in ((self.rt.StopPodSandbox, self.pb.StopPodSandboxRequest),
                                      (self.rt.RemovePodSandbox, self.pb.RemovePodSandboxRequest)):
                        try:
                            call(req(pod_sandbox_id=sb.id), timeout=30)
                        except self.grpc.RpcError:
                            pass
            except self.grpc.RpcError:
                pass
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        # Shims and sandbox processes live in their own process groups.
        sh("pkill", "-f", self.dir, check=False)
        mounts = [l.split()[1] for l in open("/proc/mounts") if l.split()[1].startswith(self.dir)]
        for m in sorted(mounts, reverse=True):
            sh("umount", "-l", m, check=False)
        sh("ip", "netns", "del", self.node, check=False)
        remove_cgroup_tree(CGROUP_PARENT)
        shutil.rmtree(self.dir, ignore_errors=True)

    # Inspection helpers.
    def host_veths(self):
        out = sh("ip", "-n", self.node, "-j", "link", "show").stdout
        return [l["ifname"] for l in json.loads(out or "[]") if l["ifname"].startswith("wft")]

    def db_rows(self):
        db = os.path.join(self.dir, "data", "ipam.db")
        if not os.path.exists(db):
            return []
        out = sh("sqlite3", "-json", db, "select container_id, name, namespace, netns, state from pods").stdout
        return json.loads(out or "[]")

    def weft_log(self):
        p = os.path.join(self.dir, "weft.log")
        return open(p).read() if os.path.exists(p) else ""


CONFIG = """version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = "{d}/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/weft-pause:test"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/bin"
    conf_dir = "{d}/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
"""


class ContainerdCriTest(unittest.TestCase):
    def setUp(self):
        if not shutil.which("containerd") or not shutil.which("podman"):
            why = "SKIPPED LOUDLY: containerd or podman is not installed (scripts/setup.sh installs them)"
            # CI runs scripts/setup.sh first: there a missing tool is a defect.
            if os.environ.get("CI") == "true":
                self.fail("CI=true, and scripts/setup.sh should have installed it: " + why)
            self.skipTest(why)
        self.c = Cluster()
        self.addCleanup(self.c.close)

    def sandbox_config(self, attempt=0):
        pb = self.c.pb
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name="web", uid="uid-web-1", namespace="default", attempt=attempt),
            hostname="web", log_directory=os.path.join(self.c.dir, "logs"),
            dns_config=pb.DNSConfig(servers=["10.96.0.10"], searches=["default.svc.cluster.local"], options=["ndots:5"]),
            port_mappings=[pb.PortMapping(protocol=pb.TCP, container_port=80, host_port=8080)],
            annotations={"weft.test/owner": "containerd_cri_test"},
            linux=pb.LinuxPodSandboxConfig(cgroup_parent="/" + CGROUP_PARENT))

    def test_pod_network_lifecycle_as_kubelet_drives_it(self):
        c, pb = self.c, self.c.pb
        # containerd starts before any CNI config exists, as on a node whose
        # agent has not written it yet: sandboxes fail until it appears.
        with self.assertRaises(c.grpc.RpcError) as err:
            c.rt.RunPodSandbox(pb.RunPodSandboxRequest(config=self.sandbox_config(attempt=0)))
        self.assertIn("cni", err.exception.details().lower())

        # The conflist arrives while containerd runs (inotify), no restart.
        c.write_conflist({"cniVersion": "1.0.0", "name": "weft", "plugins": [{
            "type": "weft", "mtu": 1500, "dataDir": os.path.join(c.dir, "data"), "ranges": ["10.88.0.0/24"],
            "capabilities": {"portMappings": True}, "logFile": os.path.join(c.dir, "weft.log"), "logLevel": "info"}]})
        sid = None
        for attempt in range(1, 40):
            try:
                sid = c.rt.RunPodSandbox(pb.RunPodSandboxRequest(config=self.sandbox_config(attempt=attempt))).pod_sandbox_id
                break
            except c.grpc.RpcError as e:
                if "cni" not in e.details().lower():
                    raise
                time.sleep(0.25)
        self.assertIsNotNone(sid, "containerd never picked up the conflist")

        # The IP Kubernetes would see comes from weft.
        st = c.rt.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=sid, verbose=True))
        ip = st.status.network.ip
        self.assertTrue(ip.startswith("10.88.0."), ip)
        self.assertEqual(st.status.annotations["weft.test/owner"], "containerd_cri_test")
        rows = c.db_rows()
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0]["container_id"], sid)
        # K8S_POD_* arrived in CNI_ARGS (in containerd's order) and were kept.
        self.assertEqual(rows[0]["name"], "web")
        self.assertEqual(rows[0]["namespace"], "default")
        self.assertEqual(rows[0]["state"], "ready")
        info = json.loads(st.info["info"])
        ns_path = [n["path"] for n in info["runtimeSpec"]["linux"]["namespaces"] if n["type"] == "network"][0]
        self.assertTrue(ns_path.startswith(c.dir), ns_path)  # netns_mounts_under_state_dir
        self.assertEqual(c.db_rows()[0]["netns"], ns_path)  # the CNI_NETNS weft was given
        # That bind mount lives in containerd's private mount namespace; the
        # sandbox process is in the pod netns, so enter through it.
        netns = "/proc/%d/ns/net" % info["pid"]
        addrs = json.loads(sh("nsenter", "--net=" + netns, "ip", "-j", "addr", "show").stdout)
        by_name = {a["ifname"]: a for a in addrs}
        # The loopback plugin ran beside weft: lo is up with 127.0.0.1.
        self.assertIn("127.0.0.1", [i["local"] for i in by_name["lo"]["addr_info"]])
        self.assertIn(ip, [i["local"] for i in by_name["eth0"]["addr_info"]])
        self.assertEqual(len(c.host_veths()), 1)
        # The node reaches the pod.
        self.assertEqual(sh("ip", "netns", "exec", c.node, "ping", "-c1", "-W2", ip, check=False).returncode, 0)

        # hostPort 8080 -> 80: containerd sends runtimeConfig.portMappings with
        # capitalised keys (HostPort, ContainerPort, Protocol, HostIP). A web
        # server in the pod's netns answers through it from another host.
        www = os.path.join(c.dir, "www")
        os.makedirs(www)
        with open(os.path.join(www, "index.html"), "w") as f:
            f.write("hello-from-weft\n")
        server = subprocess.Popen(["nsenter", "--net=" + netns, "/usr/bin/python3", "-m", "http.server", "80",
                                   "--bind", "0.0.0.0", "--directory", www],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(server.kill)
        client = PREFIX + "-criclient"
        sh("ip", "netns", "add", client)
        self.addCleanup(sh, "ip", "netns", "del", client, check=False)
        sh("ip", "-n", c.node, "link", "set", "up1", "netns", client)
        sh("ip", "-n", client, "addr", "add", "192.0.2.20/24", "dev", "up1")
        sh("ip", "-n", client, "link", "set", "up1", "up")
        self.assertEqual(http_get(client, "http://192.0.2.10:8080/"), "hello-from-weft\n")
        self.assertEqual(http_get(c.node, "http://127.0.0.1:8080/"), "hello-from-weft\n")

        # Stop: DEL with the netns. Remove: containerd's second DEL, with an
        # empty CNI_NETNS and no prevResult, must succeed too.
        c.rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sid))
        self.assertEqual(c.host_veths(), [])
        self.assertEqual(c.db_rows(), [])
        c.rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sid))
        self.assertEqual(c.host_veths(), [])
        self.assertEqual(c.db_rows(), [])
        self.assertEqual(json.loads(sh("ip", "-n", c.node, "-j", "route", "show", "proto", "201").stdout or "[]"), [])
        self.assertNotIn("8080", sh("ip", "netns", "exec", c.node, "nft", "list", "ruleset").stdout)
        self.assertEqual(http_get(client, "http://192.0.2.10:8080/", tries=1), "")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    ARGS, rest = p.parse_known_args()
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("%d passed, %d failed, %d skipped" % (result.testsRun - failed - len(result.skipped), failed, len(result.skipped)))
    sys.exit(1 if failed else 0)
