// The NetworkPolicy suite's in-pod helper (libc only), run with
// `ip netns exec <pod netns> netpol_agent ...`:
//
//   netpol_agent serve [--name NAME] [--tcp 80,81] [--udp 80] [--sctp 80]
//     TCP/SCTP: accepts, writes NAME and closes. UDP: echoes each datagram
//     prefixed with "NAME ". Defaults: TCP 80 and 81, UDP 80, SCTP 80; SCTP
//     is skipped silently where the kernel has none.
//
//   netpol_agent probe [--timeout-ms N] [--source IP] [--resend-ms N] TARGET...
//     TARGET is tcp:IP:PORT, udp:IP:PORT or sctp:IP:PORT. Every target is
//     probed at once (non-blocking sockets and one poll loop), so a probe of
//     any number of targets takes at most one timeout. Prints one line per
//     target, in argument order: "TARGET ok REPLY" or "TARGET fail REASON".
//     A stream target is ok once the server's reply (its name) arrived; a
//     UDP target once its echo did (the datagram is resent every 200 ms, or
//     every --resend-ms: a long probe with a short interval watches a
//     denied UDP path for any datagram getting through).
//     --source binds every socket to that local address first.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

constexpr int kIpProtoSctp = 132;

long long NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

std::vector<int> ParsePorts(const char* s) {
  std::vector<int> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == 0) {
      if (!cur.empty()) out.push_back(atoi(cur.c_str()));
      cur.clear();
      if (*p == 0) break;
    } else {
      cur += *p;
    }
  }
  return out;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// A listening or bound socket on 0.0.0.0:port; -1 when the protocol is
// missing (SCTP) or the bind fails.
int Listen(int type, int proto, int port) {
  int fd = socket(AF_INET, type | SOCK_CLOEXEC, proto);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || (type == SOCK_STREAM && listen(fd, 128) != 0)) {
    fprintf(stderr, "netpol_agent: bind %s/%d: %s\n", proto == kIpProtoSctp ? "sctp" : type == SOCK_STREAM ? "tcp" : "udp",
            port, strerror(errno));
    close(fd);
    return -1;
  }
  SetNonBlocking(fd);
  return fd;
}

int Serve(int argc, char** argv) {
  std::string name = "agent";
  std::vector<int> tcp = {80, 81}, udp = {80}, sctp = {80};
  for (int i = 0; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--name") name = argv[i + 1];
    else if (f == "--tcp") tcp = ParsePorts(argv[i + 1]);
    else if (f == "--udp") udp = ParsePorts(argv[i + 1]);
    else if (f == "--sctp") sctp = ParsePorts(argv[i + 1]);
    else {
      fprintf(stderr, "netpol_agent serve: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  struct Sock {
    int fd;
    bool stream;
  };
  std::vector<Sock> socks;
  bool failed = false;
  for (int p : tcp) {
    int fd = Listen(SOCK_STREAM, IPPROTO_TCP, p);
    if (fd < 0) failed = true;
    else socks.push_back({fd, true});
  }
  for (int p : udp) {
    int fd = Listen(SOCK_DGRAM, IPPROTO_UDP, p);
    if (fd < 0) failed = true;
    else socks.push_back({fd, false});
  }
  for (int p : sctp) {
    int fd = Listen(SOCK_STREAM, kIpProtoSctp, p);  // no SCTP in the kernel: skipped
    if (fd >= 0) socks.push_back({fd, true});
  }
  if (failed) return 1;
  printf("serving %s\n", name.c_str());
  fflush(stdout);
  std::vector<pollfd> pfds;
  for (auto& s : socks) pfds.push_back({s.fd, POLLIN, 0});
  for (;;) {
    if (poll(pfds.data(), pfds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & POLLIN)) continue;
      if (socks[i].stream) {
        for (;;) {
          int c = accept4(socks[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
          if (c < 0) break;
          // A fresh connection's send buffer is empty: this never blocks.
          ssize_t n = write(c, name.data(), name.size());
          (void)n;
          close(c);
        }
      } else {
        char buf[2048];
        for (;;) {
          sockaddr_storage from{};
          socklen_t fl = sizeof from;
          ssize_t n = recvfrom(socks[i].fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &fl);
          if (n < 0) break;
          std::string reply = name + " " + std::string(buf, static_cast<size_t>(n));
          sendto(socks[i].fd, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), fl);
        }
      }
    }
  }
}

struct Target {
  std::string text;
  std::string proto;  // tcp, udp, sctp
  sockaddr_in addr{};
  int fd = -1;
  bool connected = false;
  bool done = false;
  bool ok = false;
  std::string reply;
  std::string reason = "timeout";
  long long last_send = 0;
};

bool ParseTarget(const std::string& t, Target* out) {
  size_t c1 = t.find(':');
  size_t c2 = t.rfind(':');
  if (c1 == std::string::npos || c2 == c1) return false;
  out->text = t;
  out->proto = t.substr(0, c1);
  if (out->proto != "tcp" && out->proto != "udp" && out->proto != "sctp") return false;
  std::string ip = t.substr(c1 + 1, c2 - c1 - 1);
  int port = atoi(t.c_str() + c2 + 1);
  if (port <= 0 || port > 65535) return false;
  out->addr.sin_family = AF_INET;
  out->addr.sin_port = htons(port);
  return inet_pton(AF_INET, ip.c_str(), &out->addr.sin_addr) == 1;
}

void Finish(Target& t, bool ok, const std::string& why) {
  t.done = true;
  t.ok = ok;
  if (ok) t.reply = why;
  else t.reason = why;
  if (t.fd >= 0) close(t.fd);
  t.fd = -1;
}

void SendProbe(Target& t) {
  static const char kMsg[] = "probe";
  if (send(t.fd, kMsg, sizeof kMsg - 1, 0) < 0 && errno == ECONNREFUSED) Finish(t, false, "refused");
  t.last_send = NowMs();
}

int Probe(int argc, char** argv) {
  int timeout_ms = 1000;
  sockaddr_in source{};
  bool bind_source = false;
  int resend_ms = 200;
  std::vector<Target> targets;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--timeout-ms" && i + 1 < argc) {
      timeout_ms = atoi(argv[++i]);
      continue;
    }
    if (a == "--resend-ms" && i + 1 < argc) {
      resend_ms = atoi(argv[++i]);
      if (resend_ms < 1) resend_ms = 1;
      continue;
    }
    if (a == "--source" && i + 1 < argc) {
      source.sin_family = AF_INET;
      if (inet_pton(AF_INET, argv[++i], &source.sin_addr) != 1) {
        fprintf(stderr, "netpol_agent probe: bad --source %s\n", argv[i]);
        return 2;
      }
      bind_source = true;
      continue;
    }
    Target t;
    if (!ParseTarget(a, &t)) {
      fprintf(stderr, "netpol_agent probe: bad target %s (want tcp|udp|sctp:IP:PORT)\n", a.c_str());
      return 2;
    }
    targets.push_back(t);
  }
  signal(SIGPIPE, SIG_IGN);
  for (auto& t : targets) {
    int type = t.proto == "udp" ? SOCK_DGRAM : SOCK_STREAM;
    int proto = t.proto == "udp" ? IPPROTO_UDP : t.proto == "tcp" ? IPPROTO_TCP : kIpProtoSctp;
    t.fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);
    if (t.fd < 0) {
      Finish(t, false, errno == EPROTONOSUPPORT ? "unsupported" : strerror(errno));
      continue;
    }
    if (bind_source && bind(t.fd, reinterpret_cast<sockaddr*>(&source), sizeof source) != 0) {
      Finish(t, false, std::string("bind: ") + strerror(errno));
      continue;
    }
    int r = connect(t.fd, reinterpret_cast<sockaddr*>(&t.addr), sizeof t.addr);
    if (r == 0) t.connected = true;
    else if (errno != EINPROGRESS) {
      Finish(t, false, errno == ECONNREFUSED ? "refused" : strerror(errno));
      continue;
    }
    if (t.proto == "udp") {
      t.connected = true;
      SendProbe(t);
    }
  }
  long long end = NowMs() + timeout_ms;
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<Target*> owners;
    for (auto& t : targets) {
      if (t.done) continue;
      pfds.push_back({t.fd, static_cast<short>(t.connected ? POLLIN : POLLOUT), 0});
      owners.push_back(&t);
    }
    long long now = NowMs();
    if (pfds.empty() || now >= end) break;
    long long wait = end - now;
    if (wait > resend_ms) wait = resend_ms;  // resend UDP datagrams on time
    int n = poll(pfds.data(), pfds.size(), static_cast<int>(wait));
    if (n < 0 && errno != EINTR) break;
    for (size_t i = 0; i < pfds.size(); ++i) {
      Target& t = *owners[i];
      short ev = pfds[i].revents;
      if (!t.connected && (ev & (POLLOUT | POLLERR | POLLHUP))) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(t.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          Finish(t, false, err == ECONNREFUSED ? "refused" : strerror(err));
          continue;
        }
        t.connected = true;
        continue;
      }
      if (t.connected && (ev & (POLLIN | POLLERR | POLLHUP))) {
        char buf[512];
        ssize_t r = recv(t.fd, buf, sizeof buf, 0);
        if (r > 0) {
          t.reply.append(buf, static_cast<size_t>(r));
          if (t.proto == "udp") Finish(t, true, t.reply);
        } else if (r == 0) {
          // Stream closed by the server after its name: connected end to end.
          if (t.reply.empty()) Finish(t, false, "closed");
          else Finish(t, true, t.reply);
        } else if (errno != EAGAIN && errno != EINTR) {
          Finish(t, false, errno == ECONNREFUSED ? "refused" : strerror(errno));
        }
      }
    }
    now = NowMs();
    for (auto& t : targets)
      if (!t.done && t.proto == "udp" && now - t.last_send >= resend_ms) SendProbe(t);
  }
  for (auto& t : targets) {
    if (!t.done) Finish(t, false, t.connected && t.proto != "udp" ? "noreply" : "timeout");
    // Replies are names without spaces, but keep the line format whatever comes back.
    std::string extra = t.ok ? t.reply : t.reason;
    for (auto& ch : extra)
      if (ch == '\n' || ch == '\r') ch = ' ';
    printf("%s %s %s\n", t.text.c_str(), t.ok ? "ok" : "fail", extra.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "serve") == 0) return Serve(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "probe") == 0) return Probe(argc - 2, argv + 2);
  fprintf(stderr,
          "usage: netpol_agent serve [--name NAME] [--tcp P,..] [--udp P,..] [--sctp P,..]\n"
          "       netpol_agent probe [--timeout-ms N] [--source IP] [--resend-ms N] tcp|udp|sctp:IP:PORT...\n");
  return 2;
}
