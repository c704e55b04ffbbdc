// weft-bench-conntrack: what weftd's two other netfilter protocols cost
// (issue 30: ctnetlink and NFLOG moved onto libnetfilter_conntrack and
// libnetfilter_log, "unless a measurement shows they cost the hot path
// something").
//
//   weft-bench-conntrack [--entries 1000,10000,50000] [--runs 5] [--nflog-seconds 1]
//
// For each table size N: a private netns (weftct-<pid>-N, removed on exit,
// on failure and on SIGINT/SIGTERM too) gets N TCP entries (1,000 source
// addresses, N/1000 entries each, all to 10.250.0.1:80), then
// sys::ConntrackSetMark runs --runs times in each case, inside the netns as
// weftd's NetworkPolicy controller runs it in the node's:
//   none  an address no entry has: the dump alone
//   one   one source address (a new one each run): the dump and N/1000 updates
//   all   0.0.0.0/0 with a new mark bit each run: the dump and N updates
// and prints the median wall time and the median CPU time of the calling
// thread (user+sys: the kernel's dump and update work runs on it too).
// Then ParseNflog's decoding throughput over buffers of 64 packets as the
// kernel queues them (prefix, interfaces, 128 bytes of payload).
// One JSON line per measurement. No timed assertion: the numbers depend on
// the machine and on what else runs on it.

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack_tcp.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/scope_guard.h"
#include "ns.h"
#include "sys/conntrack.h"
#include "sys/exec.h"
#include "sys/netns.h"
#include "sys/nflog.h"

namespace weft::bench {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

double ThreadCpuMs() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

std::string Src(size_t addr) {
  return "10.100." + std::to_string(addr / 256) + "." + std::to_string(addr % 256);
}

// N entries through ctnetlink (IPCTNL_MSG_CT_NEW, NLM_F_CREATE), in
// datagrams of ~200 messages; errors are drained after each. Runs in the
// netns.
Status CreateEntries(size_t n) {
  mnl_socket* nl = mnl_socket_open(NETLINK_NETFILTER);
  if (!nl) return Status::FromErrno(Reason::kFailed, Domain::kKernel, "open ctnetlink", errno);
  ScopeGuard close([&] { mnl_socket_close(nl); });
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
    return Status::FromErrno(Reason::kFailed, Domain::kKernel, "bind ctnetlink", errno);
  std::vector<char> buf(256 * 1024);
  size_t errors = 0;
  for (size_t i = 0; i < n;) {
    size_t len = 0;
    for (int k = 0; k < 200 && i < n; ++k, ++i) {
      nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data() + len);
      nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
      nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL;
      nlh->nlmsg_seq = static_cast<uint32_t>(i + 1);
      auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
      g->nfgen_family = AF_INET;
      g->version = NFNETLINK_V0;
      nf_conntrack* ct = nfct_new();
      nfct_set_attr_u8(ct, ATTR_L3PROTO, AF_INET);
      nfct_set_attr_u32(ct, ATTR_IPV4_SRC, inet_addr(Src(i % 1000).c_str()));
      nfct_set_attr_u32(ct, ATTR_IPV4_DST, inet_addr("10.250.0.1"));
      nfct_set_attr_u8(ct, ATTR_L4PROTO, IPPROTO_TCP);
      nfct_set_attr_u16(ct, ATTR_PORT_SRC, htons(static_cast<uint16_t>(1024 + i / 1000)));
      nfct_set_attr_u16(ct, ATTR_PORT_DST, htons(80));
      nfct_setobjopt(ct, NFCT_SOPT_SETUP_REPLY);
      nfct_set_attr_u8(ct, ATTR_TCP_STATE, TCP_CONNTRACK_ESTABLISHED);
      nfct_set_attr_u32(ct, ATTR_TIMEOUT, 3600);
      nfct_nlmsg_build(nlh, ct);
      nfct_destroy(ct);
      len += nlh->nlmsg_len;
    }
    if (mnl_socket_sendto(nl, buf.data(), len) < 0)
      return Status::FromErrno(Reason::kFailed, Domain::kKernel, "create conntrack entries", errno);
    char rb[8192];
    ssize_t r;
    while ((r = ::recv(mnl_socket_get_fd(nl), rb, sizeof rb, MSG_DONTWAIT)) > 0) {
      for (auto* h = reinterpret_cast<nlmsghdr*>(rb); mnl_nlmsg_ok(h, static_cast<int>(r));
           h = mnl_nlmsg_next(h, reinterpret_cast<int*>(&r)))
        if (h->nlmsg_type == NLMSG_ERROR && static_cast<nlmsgerr*>(mnl_nlmsg_get_payload(h))->error) ++errors;
    }
  }
  if (errors) return Status::Error(Reason::kFailed, Domain::kKernel, std::to_string(errors) + " entries not created");
  return Status::Ok();
}

struct Sample {
  double wall_ms, cpu_ms;
  size_t updates;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Body(int argc, char** argv) {
  std::vector<size_t> sizes = {1000, 10000, 50000};
  int runs = 5;
  double nflog_seconds = 1;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (k == "--entries" && v) {
      sizes.clear();
      std::string s = argv[++i];
      for (size_t p = 0; p < s.size();) {
        size_t c = s.find(',', p);
        sizes.push_back(std::stoul(s.substr(p, c - p)));
        p = c == std::string::npos ? s.size() : c + 1;
      }
    } else if (k == "--runs" && v) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (k == "--nflog-seconds" && v) {
      nflog_seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: weft-bench-conntrack [--entries N,N...] [--runs N] [--nflog-seconds S]\n");
      return 2;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  for (size_t n : sizes) {
    if (g_stop.load()) return 130;
    const std::string name = "weftct-" + std::to_string(::getpid()) + "-" + std::to_string(n);
    Status st = CreateNetns(name);
    if (!st.ok()) {
      std::fprintf(stderr, "weft-bench-conntrack: netns %s: %s\n", name.c_str(), st.ToString().c_str());
      return 1;
    }
    ScopeGuard drop([&] { DeleteNetns(name); });
    auto ns = sys::Netns::Open(NetnsPath(name));
    if (!ns.ok()) throw std::runtime_error(ns.status().ToString());
    auto t0 = std::chrono::steady_clock::now();
    st = sys::RunInNetns(*ns, [&] { return CreateEntries(n); });
    if (!st.ok()) throw std::runtime_error("create entries: " + st.ToString());
    double create_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    sys::ExecRequest count;
    count.path = "/usr/sbin/conntrack";
    count.argv = {"conntrack", "-C"};
    count.netns_fd = ns->fd();
    auto c = sys::Exec(count);
    std::string have = c.ok() ? c->out : "?";
    while (!have.empty() && (have.back() == '\n' || have.back() == ' ')) have.pop_back();
    std::printf("{\"entries\":%zu,\"in_table\":\"%s\",\"create_ms\":%.0f}\n", n, have.c_str(), create_ms);
    std::fflush(stdout);

    int bit = 0;
    for (const char* which : {"none", "one", "all"}) {
      std::vector<double> wall, cpu;
      size_t updates = 0;
      for (int r = 0; r < runs && !g_stop.load(); ++r) {
        std::vector<std::string> addrs;
        uint32_t mark = 1u << 20;
        if (std::string(which) == "none") addrs = {"10.99.0.1"};
        if (std::string(which) == "one") addrs = {Src(static_cast<size_t>(r) % 1000)};
        if (std::string(which) == "all") {
          addrs = {"0.0.0.0/0"};
          mark = 1u << (bit++ % 16);
        }
        Sample s{};
        st = sys::RunInNetns(*ns, [&]() -> Status {
          double c0 = ThreadCpuMs();
          auto w0 = std::chrono::steady_clock::now();
          auto u = sys::ConntrackSetMark(addrs, mark);
          s.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
          s.cpu_ms = ThreadCpuMs() - c0;
          if (!u.ok()) return u.status();
          s.updates = *u;
          return Status::Ok();
        });
        if (!st.ok()) throw std::runtime_error(std::string("ConntrackSetMark ") + which + ": " + st.ToString());
        wall.push_back(s.wall_ms);
        cpu.push_back(s.cpu_ms);
        updates = s.updates;
      }
      std::printf(
          "{\"entries\":%zu,\"case\":\"%s\",\"updates\":%zu,\"runs\":%zu,\"wall_ms_median\":%.2f,\"wall_ms_min\":%.2f,"
          "\"cpu_ms_median\":%.2f}\n",
          n, which, updates, wall.size(), Median(wall), wall.empty() ? 0 : *std::min_element(wall.begin(), wall.end()),
          Median(cpu));
      std::fflush(stdout);
    }
  }
  if (g_stop.load()) return 130;

  // NFLOG decoding: buffers of 64 packets, as one recv() returns them.
  if (nflog_seconds > 0) {
    std::string payload(128, '\x45');
    std::string buf;
    for (int i = 0; i < 64; ++i) {
      sys::NflogPacket p;
      p.family = AF_INET;
      p.hw_protocol = 0x0800;
      p.hook = 1;
      p.prefix = "weft-np in";
      p.indev = 7;
      p.outdev = 9;
      p.payload = payload;
      buf += sys::EncodeNflogPacket(p);
    }
    size_t packets = 0;
    auto t0 = std::chrono::steady_clock::now();
    double c0 = ThreadCpuMs();
    double secs = 0;
    do {
      for (int k = 0; k < 100; ++k) {
        auto got = sys::ParseNflog(buf);
        if (!got.ok() || got->size() != 64) throw std::runtime_error("ParseNflog decoded the wrong thing");
        packets += got->size();
      }
      secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (secs < nflog_seconds && !g_stop.load());
    double cpu = ThreadCpuMs() - c0;
    std::printf("{\"nflog_decode\":{\"packets\":%zu,\"seconds\":%.2f,\"packets_per_s\":%.0f,\"ns_per_packet_cpu\":%.0f}}\n",
                packets, secs, static_cast<double>(packets) / secs, cpu * 1e6 / static_cast<double>(packets));
  }
  return g_stop.load() ? 130 : 0;
}

}  // namespace
}  // namespace weft::bench

int main(int argc, char** argv) { return weft::bench::RunDriverMain("weft-bench-conntrack", argc, argv, weft::bench::Body); }
