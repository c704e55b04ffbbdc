#include "sys/tcp.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <memory>

namespace weft::sys {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};

// Waits for `events` on `fd` for up to `ms`; 0 = timeout, < 0 = error (errno).
int WaitFd(int fd, short events, std::chrono::milliseconds ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    int rc = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(ms.count(), 0)));
    if (rc < 0 && errno == EINTR) continue;
    return rc;
  }
}

}  // namespace

Result<TcpConn> TcpConn::Connect(const std::string& host, int port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  std::string what = host + ":" + std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return Status::Error(Code::kControlPlane, "resolve " + host, gai_strerror(rc));
  std::unique_ptr<addrinfo, AddrInfoDeleter> list(res);
  Status last = Status::Error(Code::kControlPlane, "connect " + what, "no address");
  for (addrinfo* a = res; a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd.valid()) {
      last = Status::FromErrno(Code::kControlPlane, "socket for " + what, errno);
      continue;
    }
    int one = 1;
    (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = Status::FromErrno(Code::kControlPlane, "connect " + what, errno);
        continue;
      }
      int w = WaitFd(fd.get(), POLLOUT, timeout);
      if (w <= 0) {
        last = w == 0 ? Status::Error(Code::kControlPlane, "connect " + what, "timed out", ETIMEDOUT)
                      : Status::FromErrno(Code::kControlPlane, "connect " + what, errno);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        last = Status::FromErrno(Code::kControlPlane, "connect " + what, err);
        continue;
      }
    }
    return TcpConn(std::move(fd));
  }
  return last;
}

Status TcpConn::SetKeepAlive(int idle_s, int interval_s) {
  int one = 1;
  if (::setsockopt(fd_.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0 ||
      ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s) != 0 ||
      ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s) != 0)
    return Status::FromErrno(Code::kControlPlane, "set TCP keepalive", errno);
  return Status::Ok();
}

Status TcpConn::SendAll(std::string_view data, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!data.empty()) {
    ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::FromErrno(Code::kControlPlane, "send", errno);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    int w = left.count() > 0 ? WaitFd(fd_.get(), POLLOUT, left) : 0;
    if (w == 0) return Status::Error(Code::kControlPlane, "send", "timed out", ETIMEDOUT);
    if (w < 0) return Status::FromErrno(Code::kControlPlane, "send", errno);
  }
  return Status::Ok();
}

Result<std::optional<size_t>> TcpConn::Recv(char* buf, size_t len, std::chrono::milliseconds wait) {
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf, len, 0);
    if (n >= 0) return std::optional<size_t>(static_cast<size_t>(n));
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Status::FromErrno(Code::kControlPlane, "receive", errno);
    int w = WaitFd(fd_.get(), POLLIN, wait);
    if (w == 0) return std::optional<size_t>();
    if (w < 0) return Status::FromErrno(Code::kControlPlane, "receive", errno);
    wait = std::chrono::milliseconds(0);  // readable now (or an error/EOF to collect)
  }
}

}  // namespace weft::sys
