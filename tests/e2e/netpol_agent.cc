// The NetworkPolicy suite's in-pod helper (libc only), run with
// `ip netns exec <pod netns> netpol_agent ...`:
//
//   netpol_agent serve [--name NAME] [--tcp 80,81] [--udp 80] [--sctp 80] [--peer 1]
//     TCP/SCTP: accepts, writes NAME and closes. UDP: echoes each datagram
//     prefixed with "NAME ". Defaults: TCP 80 and 81, UDP 80, SCTP 80; SCTP
//     is skipped silently where the kernel has none. With --peer 1 a stream
//     reply is "NAME@PEER", PEER the address the connection came from (the
//     Service suite: whether a client's address was masqueraded).
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
//
//   netpol_agent echo [--tcp 82,..]
//     TCP: accepts and keeps every connection open, echoing what it reads.
//
//   netpol_agent stream [--interval-ms N] [--duration-ms N] TARGET...
//     One long-lived flow per target (tcp:IP:PORT to an `echo` server, one
//     connection; udp:IP:PORT to `serve`, one socket): sends a few bytes
//     every --interval-ms (default 5) for --duration-ms (default 3000) and
//     notes when replies come back. Prints "flowing" once every target has
//     had a reply, then at the end one line per target, in argument order:
//     "TARGET sent N replies N first_ms T last_ms T maxgap_ms N
//     maxgap_end_ms T error E" with times on CLOCK_MONOTONIC in ms (0 = no
//     reply; maxgap is the longest silence between two replies, or since
//     the last one until the end; error is "-" or why a TCP connection
//     ended). A TCP connection is never reopened: its replies are that one
//     connection's conntrack entry at work.
//
//   netpol_agent tcpraw DST_IP:PORT SPORT:FLAGS...
//     Sends one hand-made TCP segment per SPORT:FLAGS (FLAGS from S, A, F,
//     R, P: "SA" = SYN+ACK) from this pod's address to DST_IP:PORT through a
//     raw socket, in order, 2 ms apart: segments that belong to no
//     connection, which conntrack calls invalid (a SYN+ACK, a FIN, an RST).
//
//   netpol_agent sniff --port P
//     A packet socket: prints "sniffing" once bound, then one line per IPv4
//     TCP segment that arrives for port P: "seen SRC:SPORT FLAGS" (outgoing
//     packets are not counted). Runs until killed.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
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
  bool peer = false;
  for (int i = 0; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--name") name = argv[i + 1];
    else if (f == "--tcp") tcp = ParsePorts(argv[i + 1]);
    else if (f == "--udp") udp = ParsePorts(argv[i + 1]);
    else if (f == "--sctp") sctp = ParsePorts(argv[i + 1]);
    else if (f == "--peer") peer = std::string(argv[i + 1]) == "1";
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
          sockaddr_in from{};
          socklen_t fl = sizeof from;
          int c = accept4(socks[i].fd, reinterpret_cast<sockaddr*>(&from), &fl, SOCK_CLOEXEC);
          if (c < 0) break;
          std::string reply = name;
          if (peer) {
            char ip[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &from.sin_addr, ip, sizeof ip);
            reply += std::string("@") + ip;
          }
          // A fresh connection's send buffer is empty: this never blocks.
          ssize_t n = write(c, reply.data(), reply.size());
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

int Echo(int argc, char** argv) {
  std::vector<int> tcp = {82};
  for (int i = 0; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--tcp") tcp = ParsePorts(argv[i + 1]);
    else {
      fprintf(stderr, "netpol_agent echo: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  std::vector<pollfd> pfds;
  size_t listeners = 0;
  for (int p : tcp) {
    int fd = Listen(SOCK_STREAM, IPPROTO_TCP, p);
    if (fd < 0) return 1;
    pfds.push_back({fd, POLLIN, 0});
    ++listeners;
  }
  printf("echoing\n");
  fflush(stdout);
  for (;;) {
    if (poll(pfds.data(), pfds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    std::vector<pollfd> keep(pfds.begin(), pfds.begin() + static_cast<long>(listeners));
    std::vector<int> accepted;
    for (size_t i = 0; i < pfds.size(); ++i) {
      short ev = pfds[i].revents;
      if (i < listeners) {
        if (!(ev & POLLIN)) continue;
        for (;;) {
          int c = accept4(pfds[i].fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (c < 0) break;
          accepted.push_back(c);
        }
        continue;
      }
      bool open = true;
      if (ev & (POLLIN | POLLERR | POLLHUP)) {
        char buf[4096];
        for (;;) {
          ssize_t n = recv(pfds[i].fd, buf, sizeof buf, 0);
          if (n > 0) {
            // Small messages: a short write loses echo bytes, never blocks.
            ssize_t w = send(pfds[i].fd, buf, static_cast<size_t>(n), MSG_DONTWAIT);
            (void)w;
            continue;
          }
          if (n == 0 || (errno != EAGAIN && errno != EINTR)) open = false;
          break;
        }
      }
      if (open) keep.push_back({pfds[i].fd, POLLIN, 0});
      else close(pfds[i].fd);
    }
    for (int c : accepted) keep.push_back({c, POLLIN, 0});
    pfds = std::move(keep);
  }
}

struct Flow {
  Target t;
  long long sent = 0;
  long long replies = 0;
  long long first = 0;
  long long last = 0;
  long long maxgap = 0;
  long long maxgap_end = 0;
  std::string error = "-";
  bool open = true;
};

void NoteReply(Flow& f, long long now) {
  if (f.replies++ == 0) f.first = now;
  else if (now - f.last > f.maxgap) {
    f.maxgap = now - f.last;
    f.maxgap_end = now;
  }
  f.last = now;
}

void EndFlow(Flow& f, const std::string& why) {
  f.error = why;
  f.open = false;
  if (f.t.fd >= 0) close(f.t.fd);
  f.t.fd = -1;
}

int Stream(int argc, char** argv) {
  int interval_ms = 5;
  int duration_ms = 3000;
  std::vector<Flow> flows;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--interval-ms" && i + 1 < argc) {
      interval_ms = atoi(argv[++i]);
      if (interval_ms < 1) interval_ms = 1;
      continue;
    }
    if (a == "--duration-ms" && i + 1 < argc) {
      duration_ms = atoi(argv[++i]);
      continue;
    }
    Flow f;
    if (!ParseTarget(a, &f.t) || f.t.proto == "sctp") {
      fprintf(stderr, "netpol_agent stream: bad target %s (want tcp|udp:IP:PORT)\n", a.c_str());
      return 2;
    }
    flows.push_back(f);
  }
  signal(SIGPIPE, SIG_IGN);
  for (auto& f : flows) {
    bool udp = f.t.proto == "udp";
    f.t.fd = socket(AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (f.t.fd < 0) {
      EndFlow(f, strerror(errno));
      continue;
    }
    int r = connect(f.t.fd, reinterpret_cast<sockaddr*>(&f.t.addr), sizeof f.t.addr);
    f.t.connected = r == 0;  // UDP connects at once, TCP in the poll loop
    if (r != 0 && errno != EINPROGRESS) EndFlow(f, errno == ECONNREFUSED ? "refused" : strerror(errno));
  }
  long long start = NowMs();
  long long end = start + duration_ms;
  long long next_send = start;
  long long seq = 0;
  bool flowing = false;
  for (;;) {
    long long now = NowMs();
    if (now >= end) break;
    if (now >= next_send) {
      char msg[32];
      int len = snprintf(msg, sizeof msg, "s%lld\n", seq++);
      for (auto& f : flows) {
        if (!f.open || !f.t.connected) continue;
        if (send(f.t.fd, msg, static_cast<size_t>(len), MSG_DONTWAIT) == len) ++f.sent;
      }
      next_send += interval_ms;
      if (next_send <= now) next_send = now + interval_ms;  // never burst to catch up
    }
    std::vector<pollfd> pfds;
    std::vector<Flow*> owners;
    for (auto& f : flows) {
      if (!f.open) continue;
      pfds.push_back({f.t.fd, static_cast<short>(f.t.connected ? POLLIN : POLLOUT), 0});
      owners.push_back(&f);
    }
    long long wait = std::min(next_send, end) - now;
    if (poll(pfds.data(), pfds.size(), static_cast<int>(wait < 0 ? 0 : wait)) < 0 && errno != EINTR) return 1;
    now = NowMs();
    for (size_t i = 0; i < pfds.size(); ++i) {
      Flow& f = *owners[i];
      short ev = pfds[i].revents;
      if (!f.t.connected) {
        if (!(ev & (POLLOUT | POLLERR | POLLHUP))) continue;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(f.t.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) EndFlow(f, err == ECONNREFUSED ? "refused" : strerror(err));
        else f.t.connected = true;
        continue;
      }
      if (!(ev & (POLLIN | POLLERR | POLLHUP))) continue;
      char buf[2048];
      for (;;) {
        ssize_t n = recv(f.t.fd, buf, sizeof buf, 0);
        if (n > 0) {
          NoteReply(f, now);
          continue;
        }
        if (n == 0 && f.t.proto == "tcp") EndFlow(f, "closed");
        // UDP: an ICMP error (port unreachable) is not the end of the flow.
        else if (n < 0 && errno != EAGAIN && errno != EINTR && f.t.proto == "tcp")
          EndFlow(f, errno == ECONNRESET ? "reset" : strerror(errno));
        break;
      }
    }
    if (!flowing) {
      flowing = true;
      for (auto& f : flows) flowing = flowing && f.replies > 0;
      if (flowing) {
        printf("flowing\n");
        fflush(stdout);
      }
    }
  }
  long long now = NowMs();
  for (auto& f : flows) {
    // Silence at the end counts as a gap too.
    long long since = f.replies > 0 ? f.last : start;
    if (now - since > f.maxgap) {
      f.maxgap = now - since;
      f.maxgap_end = now;
    }
    for (auto& ch : f.error)
      if (ch == ' ') ch = '_';
    printf("%s sent %lld replies %lld first_ms %lld last_ms %lld maxgap_ms %lld maxgap_end_ms %lld error %s\n",
           f.t.text.c_str(), f.sent, f.replies, f.first, f.last, f.maxgap, f.maxgap_end, f.error.c_str());
    if (f.t.fd >= 0) close(f.t.fd);
  }
  fflush(stdout);
  return 0;
}

// The Internet checksum of `len` bytes, starting from `sum`.
uint16_t Checksum(const uint8_t* p, size_t len, uint32_t sum) {
  for (size_t i = 0; i + 1 < len; i += 2) sum += (uint32_t(p[i]) << 8) | p[i + 1];
  if (len & 1) sum += uint32_t(p[len - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

std::string FlagString(uint8_t flags) {
  std::string out;
  if (flags & 0x02) out += 'S';
  if (flags & 0x01) out += 'F';
  if (flags & 0x04) out += 'R';
  if (flags & 0x08) out += 'P';
  if (flags & 0x10) out += 'A';
  return out.empty() ? "-" : out;
}

int TcpRaw(int argc, char** argv) {
  Target dst;
  if (argc < 2 || !ParseTarget(std::string("tcp:") + argv[0], &dst)) {
    fprintf(stderr, "usage: netpol_agent tcpraw DST_IP:PORT SPORT:FLAGS...\n");
    return 2;
  }
  // The source address the kernel would pick for this destination.
  sockaddr_in src{};
  {
    int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof src;
    if (u < 0 || connect(u, reinterpret_cast<sockaddr*>(&dst.addr), sizeof dst.addr) != 0 ||
        getsockname(u, reinterpret_cast<sockaddr*>(&src), &len) != 0) {
      fprintf(stderr, "netpol_agent tcpraw: no route to %s: %s\n", argv[0], strerror(errno));
      return 1;
    }
    close(u);
  }
  int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) {
    fprintf(stderr, "netpol_agent tcpraw: raw socket: %s\n", strerror(errno));
    return 1;
  }
  for (int i = 1; i < argc; ++i) {
    std::string spec = argv[i];
    size_t colon = spec.find(':');
    int sport = atoi(spec.substr(0, colon).c_str());
    uint8_t flags = 0;
    for (char ch : colon == std::string::npos ? std::string() : spec.substr(colon + 1)) {
      if (ch == 'S') flags |= 0x02;
      else if (ch == 'A') flags |= 0x10;
      else if (ch == 'F') flags |= 0x01;
      else if (ch == 'R') flags |= 0x04;
      else if (ch == 'P') flags |= 0x08;
      else flags = 0xff;
    }
    if (sport <= 0 || sport > 65535 || flags == 0 || flags == 0xff) {
      fprintf(stderr, "netpol_agent tcpraw: bad segment %s (want SPORT:FLAGS, FLAGS of SAFRP)\n", spec.c_str());
      close(fd);
      return 2;
    }
    uint8_t seg[20] = {};
    auto put16 = [&](int off, uint32_t v) {
      seg[off] = uint8_t(v >> 8);
      seg[off + 1] = uint8_t(v);
    };
    auto put32 = [&](int off, uint32_t v) {
      put16(off, v >> 16);
      put16(off + 2, v & 0xffff);
    };
    put16(0, static_cast<uint32_t>(sport));
    put16(2, ntohs(dst.addr.sin_port));
    put32(4, 0x5746a000u + static_cast<uint32_t>(i) * 1000);    // seq
    put32(8, (flags & 0x10) ? 0x5746b000u : 0);                  // ack
    seg[12] = 5 << 4;                                            // data offset: 20 bytes
    seg[13] = flags;
    put16(14, 1024);                                             // window
    // The pseudo-header: source, destination, protocol, TCP length.
    uint8_t pseudo[12];
    memcpy(pseudo, &src.sin_addr, 4);
    memcpy(pseudo + 4, &dst.addr.sin_addr, 4);
    pseudo[8] = 0;
    pseudo[9] = IPPROTO_TCP;
    pseudo[10] = 0;
    pseudo[11] = sizeof seg;
    uint32_t sum = 0;
    for (int k = 0; k < 12; k += 2) sum += (uint32_t(pseudo[k]) << 8) | pseudo[k + 1];
    put16(16, Checksum(seg, sizeof seg, sum));
    sockaddr_in to = dst.addr;
    to.sin_port = 0;
    if (sendto(fd, seg, sizeof seg, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) != sizeof seg) {
      fprintf(stderr, "netpol_agent tcpraw: send %s: %s\n", spec.c_str(), strerror(errno));
      close(fd);
      return 1;
    }
    printf("sent %d %s\n", sport, FlagString(flags).c_str());
    usleep(2000);
  }
  close(fd);
  fflush(stdout);
  return 0;
}

int Sniff(int argc, char** argv) {
  int port = 0;
  for (int i = 0; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--port") port = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "netpol_agent sniff: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (port <= 0 || port > 65535) {
    fprintf(stderr, "netpol_agent sniff: --port P is required\n");
    return 2;
  }
  // Receives from every interface as soon as it exists: no bind needed.
  int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP));
  if (fd < 0) {
    fprintf(stderr, "netpol_agent sniff: packet socket: %s\n", strerror(errno));
    return 1;
  }
  printf("sniffing\n");
  fflush(stdout);
  for (;;) {
    uint8_t buf[256];
    sockaddr_ll from{};
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(fd, buf, sizeof buf, MSG_TRUNC, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (from.sll_pkttype == PACKET_OUTGOING || n < 20 || (buf[0] >> 4) != 4 || buf[9] != IPPROTO_TCP) continue;
    size_t ihl = static_cast<size_t>(buf[0] & 0x0f) * 4;
    if ((((buf[6] & 0x1f) << 8) | buf[7]) != 0) continue;  // a later fragment: no TCP header
    if (static_cast<size_t>(n) < ihl + 14 || ihl + 14 > sizeof buf) continue;
    const uint8_t* tcp = buf + ihl;
    int sport = (tcp[0] << 8) | tcp[1];
    int dport = (tcp[2] << 8) | tcp[3];
    if (dport != port) continue;
    char src[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, buf + 12, src, sizeof src);
    printf("seen %s:%d %s\n", src, sport, FlagString(tcp[13]).c_str());
    fflush(stdout);
  }
}

// flood udp:IP:PORT --pps N --seconds S: UDP datagrams (16 bytes) at about
// N a second from one socket, in batches of sendmmsg every millisecond, for
// S seconds (each from a new source port of a small range, so a policy sees
// many flows). Prints {"sent": n, "seconds": s}. For the drop-record bench.
int Flood(int argc, char** argv) {
  long pps = 100000;
  double seconds = 5;
  std::string target;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pps" && i + 1 < argc) pps = atol(argv[++i]);
    else if (a == "--seconds" && i + 1 < argc) seconds = atof(argv[++i]);
    else target = a;
  }
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  size_t c1 = target.find(':'), c2 = target.rfind(':');
  if (target.compare(0, 4, "udp:") != 0 || c1 == c2 ||
      inet_pton(AF_INET, target.substr(c1 + 1, c2 - c1 - 1).c_str(), &dst.sin_addr) != 1) {
    fprintf(stderr, "netpol_agent flood: want udp:IPv4:PORT\n");
    return 2;
  }
  dst.sin_port = htons(static_cast<uint16_t>(atoi(target.c_str() + c2 + 1)));
  const int kSocks = 16;
  int fds[kSocks];
  for (int& fd : fds) {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (fd < 0) return 1;
  }
  const int batch = static_cast<int>(std::max(1L, pps / 1000));
  std::vector<mmsghdr> msgs(static_cast<size_t>(batch));
  std::vector<iovec> iov(static_cast<size_t>(batch));
  char payload[16] = "weft-drop-flood";
  for (int i = 0; i < batch; ++i) {
    iov[i] = {payload, sizeof payload};
    msgs[i].msg_hdr = {};
    msgs[i].msg_hdr.msg_name = &dst;
    msgs[i].msg_hdr.msg_namelen = sizeof dst;
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long sent = 0, tick = 0;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
    if (el >= seconds) break;
    // Catch up to the schedule (ms ticks), never ahead of it.
    long due = static_cast<long>(el * 1000);
    if (tick > due) {
      timespec ts{0, 200000};
      nanosleep(&ts, nullptr);
      continue;
    }
    int n = sendmmsg(fds[tick % kSocks], msgs.data(), static_cast<unsigned>(batch), 0);
    if (n > 0) sent += n;
    ++tick;
  }
  clock_gettime(CLOCK_MONOTONIC, &now);
  double el = (now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
  printf("{\"sent\": %ld, \"seconds\": %.3f}\n", sent, el);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "flood") == 0) return Flood(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "serve") == 0) return Serve(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "probe") == 0) return Probe(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "echo") == 0) return Echo(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "stream") == 0) return Stream(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "tcpraw") == 0) return TcpRaw(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "sniff") == 0) return Sniff(argc - 2, argv + 2);
  fprintf(stderr,
          "usage: netpol_agent serve [--name NAME] [--tcp P,..] [--udp P,..] [--sctp P,..]\n"
          "       netpol_agent probe [--timeout-ms N] [--source IP] [--resend-ms N] tcp|udp|sctp:IP:PORT...\n"
          "       netpol_agent echo [--tcp P,..]\n"
          "       netpol_agent stream [--interval-ms N] [--duration-ms N] tcp|udp:IP:PORT...\n"
          "       netpol_agent tcpraw DST_IP:PORT SPORT:FLAGS...\n"
          "       netpol_agent sniff --port P\n"
          "       netpol_agent flood udp:IP:PORT [--pps N] [--seconds S]\n");
  return 2;
}
