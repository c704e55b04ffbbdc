#include "bench/ns.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

#include "sys/exec.h"

namespace weft::bench {

std::atomic<bool>& InterruptFlag() {
  static std::atomic<bool> flag{false};
  return flag;
}

void CheckInterrupt() {
  if (InterruptFlag().load()) throw Interrupted{};
}

namespace {
void OnSignal(int) { InterruptFlag().store(true); }
}  // namespace

Status StartBenchDriver(const std::string& out, const std::string& build_dir,
                        const std::vector<std::string>& binaries) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  ::mkdir(out.c_str(), 0755);
  for (const auto& b : binaries)
    if (::access((build_dir + b).c_str(), X_OK) != 0)
      return Status::Error(Reason::kNotFound, Domain::kFile, build_dir + b + " is not built");
  return Status::Ok();
}

int RunDriverMain(const char* tool, int argc, char** argv, int (*body)(int, char**)) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return 1;
  }
}

Result<UniqueFd> OpenNetlinkListener(const std::string& netns_path, int protocol, uint32_t groups, int rcvbuf,
                                     const std::string& what) {
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(netns_path));
  int fd = -1;
  WEFT_RETURN_IF_ERROR(sys::RunInNetns(ns, [&] {
    fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, protocol);
    return fd < 0 ? Status::FromErrno(Reason::kFailed, Domain::kKernel, what + " socket", errno) : Status::Ok();
  }));
  UniqueFd sock(fd);
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = groups;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return Status::FromErrno(Reason::kFailed, Domain::kKernel, "bind " + what, errno);
  return sock;
}

std::string NetnsPath(const std::string& name) { return "/run/netns/" + name; }

Status CreateNetns(const std::string& name, bool lo_up) {
  const std::string path = NetnsPath(name);
  ::mkdir("/run/netns", 0755);
  int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(Reason::kFailed, Domain::kFile, "create " + path, errno);
  ::close(fd);
  // unshare(CLONE_NEWNET) moves only the calling thread, so a helper thread
  // does it and pins the new namespace with a bind mount before exiting.
  int err = 0;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      err = errno;
      return;
    }
    if (::mount("/proc/thread-self/ns/net", path.c_str(), "none", MS_BIND, nullptr) != 0) err = errno;
  });
  t.join();
  if (err != 0) {
    ::unlink(path.c_str());
    return Status::FromErrno(Reason::kFailed, Domain::kFile, "create netns " + name, err);
  }
  if (lo_up) {
    WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(path));
    WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::OpenIn(ns));
    WEFT_RETURN_IF_ERROR(nl.SetUp(1));
  }
  return Status::Ok();
}

void DeleteNetns(const std::string& name) {
  const std::string path = NetnsPath(name);
  ::umount2(path.c_str(), MNT_DETACH);
  ::unlink(path.c_str());
}

namespace {

std::vector<std::string> ListWithPrefix(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(prefix, 0) == 0) out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// Processes whose netns is the namespace mounted at `path`.
std::vector<pid_t> PidsIn(const std::string& path) {
  std::vector<pid_t> out;
  struct stat want {};
  if (::stat(path.c_str(), &want) != 0) return out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 1 || pid == ::getpid()) continue;
    struct stat st {};
    std::string p = std::string("/proc/") + e->d_name + "/ns/net";
    if (::stat(p.c_str(), &st) == 0 && st.st_ino == want.st_ino && st.st_dev == want.st_dev) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

}  // namespace

void CleanupPrefix(const std::string& prefix) {
  if (prefix.size() < 3) return;  // never a broad pattern
  for (const auto& n : ListWithPrefix("/run/netns", prefix)) {
    for (pid_t pid : PidsIn(NetnsPath(n))) ::kill(pid, SIGKILL);
    DeleteNetns(n);
  }
  for (const auto& n : ListWithPrefix("/tmp", prefix)) RemoveTree("/tmp/" + n);
}

std::string MakeTempDir(const std::string& prefix, const std::string& tag) {
  std::string t = "/tmp/" + prefix + "-" + tag + "-XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back(0);
  if (!::mkdtemp(buf.data())) return "";
  return buf.data();
}

void RemoveTree(const std::string& path) {
  if (path.rfind("/tmp/wb", 0) != 0) return;  // only the benchmark's own dirs
  sys::ExecRequest req;
  req.path = "/bin/rm";
  req.argv = {"rm", "-rf", "--one-file-system", path};
  req.env = {"PATH=/usr/bin:/bin"};
  (void)sys::Exec(req);
}

Result<int> LinkIndex(sys::Netlink& nl, const std::string& name) {
  WEFT_ASSIGN_OR_RETURN(auto l, nl.GetLink(name));
  if (!l) return Status::Error(Reason::kFailed, Domain::kKernel, "no link " + name);
  return l->index;
}

Status AddrUp(sys::Netlink& nl, const std::string& ifname, const std::string& cidr) {
  WEFT_ASSIGN_OR_RETURN(int idx, LinkIndex(nl, ifname));
  auto p = IpPrefix::Parse(cidr);
  if (!p) return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "bad cidr " + cidr);
  WEFT_RETURN_IF_ERROR(nl.AddAddress(idx, *p));
  return nl.SetUp(idx);
}

Status CreateNode(const std::string& name, int octet) {
  WEFT_RETURN_IF_ERROR(CreateNetns(name, /*lo_up=*/true));
  WEFT_ASSIGN_OR_RETURN(auto ns, sys::Netns::Open(NetnsPath(name)));
  WEFT_ASSIGN_OR_RETURN(auto nl, sys::Netlink::OpenIn(ns));
  WEFT_RETURN_IF_ERROR(nl.CreateVeth("up0", "up1", ns.fd(), 1500));
  WEFT_RETURN_IF_ERROR(AddrUp(nl, "up0", "192.0.2." + std::to_string(octet) + "/24"));
  WEFT_ASSIGN_OR_RETURN(int up1, LinkIndex(nl, "up1"));
  WEFT_RETURN_IF_ERROR(nl.SetUp(up1));
  WEFT_ASSIGN_OR_RETURN(int up0, LinkIndex(nl, "up0"));
  sys::RouteSpec def{*IpPrefix::Parse("0.0.0.0/0"), IpAddress::Parse("192.0.2.254"), up0, 0};
  return nl.AddRoute(def);
}

void Settle(const std::string& prefix, int pods_removed) {
  // Namespace and veth teardown run on kernel workqueues after the last
  // reference goes, taking RTNL in bursts; there is no "done" interface. So
  // wait until an RTNL-taking no-op (setting lo up in a scratch netns) has
  // been fast for 10 probes in a row, 20 ms apart, within a bounded time.
  using Clock = std::chrono::steady_clock;
  const std::string name = prefix + "-settle";
  if (::access(NetnsPath(name).c_str(), F_OK) != 0 && !CreateNetns(name).ok()) return;
  auto ns = sys::Netns::Open(NetnsPath(name));
  if (!ns.ok()) return;
  auto nl = sys::Netlink::OpenIn(*ns);
  if (!nl.ok()) return;
  auto deadline = Clock::now() + std::chrono::milliseconds(3000 + 10 * pods_removed);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int quiet = 0; quiet < 10 && Clock::now() < deadline;) {
    auto t0 = Clock::now();
    (void)nl->SetUp(1);
    quiet = Clock::now() - t0 < std::chrono::microseconds(500) ? quiet + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace weft::bench
