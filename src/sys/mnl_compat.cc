// libmnl's functions for the static weft plugin (issue 30).
//
// The plugin is a static binary (a static exec starts in about half the time
// of a dynamic one) that the DaemonSet copies onto hosts of any distribution.
// It encodes nftables objects with libnftnl, and Debian 12 ships libnftnl.a,
// but no libmnl.a: libnftnl's objects call the ~45 libmnl functions below
// (attribute and message building and parsing, batches, the netlink socket,
// the callback loop). This file gives the static link those functions, with
// the prototypes of <libmnl/libmnl.h> (so a changed signature does not
// compile) and libmnl 1.0's documented behaviour. Every other binary (weftd,
// weftctl, the tests, the sanitizer and fuzz trees) links Debian's libmnl.so.
//
// mnl_compat_test builds this file again with every name prefixed
// (WEFT_MNL_NAME) and checks it against the real libmnl, byte for byte, in
// the same process.

#include <libmnl/libmnl.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#ifndef WEFT_MNL_NAME
#define WEFT_MNL_NAME(name) mnl_##name
#define WEFT_MNL_TYPE(name) mnl_##name
#endif

namespace {

// The (aligned) end of what `nlh` holds, where the next attribute goes.
char* Tail(const nlmsghdr* nlh) {
  return const_cast<char*>(reinterpret_cast<const char*>(nlh)) + MNL_ALIGN(nlh->nlmsg_len);
}

// The payload length a type must have (0: any).
size_t TypeLen(enum mnl_attr_data_type type) {
  switch (type) {
    case MNL_TYPE_U8:
      return sizeof(uint8_t);
    case MNL_TYPE_U16:
      return sizeof(uint16_t);
    case MNL_TYPE_U32:
      return sizeof(uint32_t);
    case MNL_TYPE_U64:
    case MNL_TYPE_MSECS:
      return sizeof(uint64_t);
    default:
      return 0;
  }
}

}  // namespace

// libmnl's opaque types.
struct WEFT_MNL_TYPE(socket) {
  int fd;
  sockaddr_nl addr;
};
struct WEFT_MNL_TYPE(nlmsg_batch) {
  char* buf;
  size_t limit;
  size_t buflen;
  char* cur;
  bool overflow;
};

extern "C" {

// Messages.
size_t WEFT_MNL_NAME(nlmsg_size)(size_t len) { return len + MNL_NLMSG_HDRLEN; }
size_t WEFT_MNL_NAME(nlmsg_get_payload_len)(const nlmsghdr* nlh) { return nlh->nlmsg_len - MNL_NLMSG_HDRLEN; }

nlmsghdr* WEFT_MNL_NAME(nlmsg_put_header)(void* buf) {
  const size_t len = MNL_ALIGN(sizeof(nlmsghdr));
  auto* nlh = static_cast<nlmsghdr*>(buf);
  std::memset(buf, 0, len);
  nlh->nlmsg_len = len;
  return nlh;
}

void* WEFT_MNL_NAME(nlmsg_put_extra_header)(nlmsghdr* nlh, size_t size) {
  char* ptr = reinterpret_cast<char*>(nlh) + nlh->nlmsg_len;
  const size_t len = MNL_ALIGN(size);
  nlh->nlmsg_len += len;
  std::memset(ptr, 0, len);
  return ptr;
}

void* WEFT_MNL_NAME(nlmsg_get_payload)(const nlmsghdr* nlh) {
  return const_cast<char*>(reinterpret_cast<const char*>(nlh)) + MNL_NLMSG_HDRLEN;
}

void* WEFT_MNL_NAME(nlmsg_get_payload_offset)(const nlmsghdr* nlh, size_t offset) {
  return const_cast<char*>(reinterpret_cast<const char*>(nlh)) + MNL_NLMSG_HDRLEN + MNL_ALIGN(offset);
}

bool WEFT_MNL_NAME(nlmsg_ok)(const nlmsghdr* nlh, int len) {
  return len >= static_cast<int>(sizeof(nlmsghdr)) && nlh->nlmsg_len >= sizeof(nlmsghdr) &&
         static_cast<int>(nlh->nlmsg_len) <= len;
}

nlmsghdr* WEFT_MNL_NAME(nlmsg_next)(const nlmsghdr* nlh, int* len) {
  *len -= MNL_ALIGN(nlh->nlmsg_len);
  return reinterpret_cast<nlmsghdr*>(Tail(nlh));
}

void* WEFT_MNL_NAME(nlmsg_get_payload_tail)(const nlmsghdr* nlh) { return Tail(nlh); }

bool WEFT_MNL_NAME(nlmsg_seq_ok)(const nlmsghdr* nlh, unsigned int seq) {
  return nlh->nlmsg_seq && seq ? nlh->nlmsg_seq == seq : true;
}

bool WEFT_MNL_NAME(nlmsg_portid_ok)(const nlmsghdr* nlh, unsigned int portid) {
  return nlh->nlmsg_pid && portid ? nlh->nlmsg_pid == portid : true;
}

// Batches: messages written one after another into a caller's buffer.
WEFT_MNL_TYPE(nlmsg_batch) * WEFT_MNL_NAME(nlmsg_batch_start)(void* buf, size_t limit) {
  auto* b = static_cast<WEFT_MNL_TYPE(nlmsg_batch)*>(std::malloc(sizeof(WEFT_MNL_TYPE(nlmsg_batch))));
  if (b == nullptr) return nullptr;
  b->buf = static_cast<char*>(buf);
  b->limit = limit;
  b->buflen = 0;
  b->cur = b->buf;
  b->overflow = false;
  return b;
}

void WEFT_MNL_NAME(nlmsg_batch_stop)(WEFT_MNL_TYPE(nlmsg_batch) * b) { std::free(b); }

bool WEFT_MNL_NAME(nlmsg_batch_next)(WEFT_MNL_TYPE(nlmsg_batch) * b) {
  const auto* nlh = reinterpret_cast<const nlmsghdr*>(b->cur);
  if (b->buflen + nlh->nlmsg_len > b->limit) {
    b->overflow = true;
    return false;
  }
  b->cur = b->buf + b->buflen + nlh->nlmsg_len;
  b->buflen += nlh->nlmsg_len;
  return true;
}

void WEFT_MNL_NAME(nlmsg_batch_reset)(WEFT_MNL_TYPE(nlmsg_batch) * b) {
  if (b->overflow) {
    const auto* nlh = reinterpret_cast<const nlmsghdr*>(b->cur);
    std::memmove(b->buf, b->cur, nlh->nlmsg_len);
    b->buflen = nlh->nlmsg_len;
    b->cur = b->buf + b->buflen;
    b->overflow = false;
  } else {
    b->buflen = 0;
    b->cur = b->buf;
  }
}

size_t WEFT_MNL_NAME(nlmsg_batch_size)(WEFT_MNL_TYPE(nlmsg_batch) * b) { return b->buflen; }
void* WEFT_MNL_NAME(nlmsg_batch_head)(WEFT_MNL_TYPE(nlmsg_batch) * b) { return b->buf; }
void* WEFT_MNL_NAME(nlmsg_batch_current)(WEFT_MNL_TYPE(nlmsg_batch) * b) { return b->cur; }
bool WEFT_MNL_NAME(nlmsg_batch_is_empty)(WEFT_MNL_TYPE(nlmsg_batch) * b) { return b->buflen == 0; }

// Attributes.
uint16_t WEFT_MNL_NAME(attr_get_type)(const nlattr* attr) { return attr->nla_type & NLA_TYPE_MASK; }
uint16_t WEFT_MNL_NAME(attr_get_len)(const nlattr* attr) { return attr->nla_len; }
uint16_t WEFT_MNL_NAME(attr_get_payload_len)(const nlattr* attr) {
  return static_cast<uint16_t>(attr->nla_len - MNL_ATTR_HDRLEN);
}
void* WEFT_MNL_NAME(attr_get_payload)(const nlattr* attr) {
  return const_cast<char*>(reinterpret_cast<const char*>(attr)) + MNL_ATTR_HDRLEN;
}

bool WEFT_MNL_NAME(attr_ok)(const nlattr* attr, int len) {
  return len >= static_cast<int>(sizeof(nlattr)) && attr->nla_len >= sizeof(nlattr) &&
         static_cast<int>(attr->nla_len) <= len;
}

nlattr* WEFT_MNL_NAME(attr_next)(const nlattr* attr) {
  return reinterpret_cast<nlattr*>(const_cast<char*>(reinterpret_cast<const char*>(attr)) + MNL_ALIGN(attr->nla_len));
}

int WEFT_MNL_NAME(attr_type_valid)(const nlattr* attr, uint16_t max) {
  if (WEFT_MNL_NAME(attr_get_type)(attr) > max) {
    errno = EOPNOTSUPP;
    return -1;
  }
  return 1;
}

namespace {

int Validate(const nlattr* attr, enum mnl_attr_data_type type, size_t exp_len) {
  const uint16_t attr_len = WEFT_MNL_NAME(attr_get_payload_len)(attr);
  const char* attr_data = static_cast<const char*>(WEFT_MNL_NAME(attr_get_payload)(attr));
  if (attr_len < exp_len) {
    errno = ERANGE;
    return -1;
  }
  switch (type) {
    case MNL_TYPE_FLAG:
      if (attr_len > 0) {
        errno = ERANGE;
        return -1;
      }
      break;
    case MNL_TYPE_NUL_STRING:
      if (attr_len == 0) {
        errno = ERANGE;
        return -1;
      }
      if (attr_data[attr_len - 1] != '\0') {
        errno = EINVAL;
        return -1;
      }
      break;
    case MNL_TYPE_STRING:
      if (attr_len == 0) {
        errno = ERANGE;
        return -1;
      }
      break;
    case MNL_TYPE_NESTED:
      // An empty nest is valid; a non-empty one holds at least a header.
      if (attr_len == 0) break;
      if (attr_len < MNL_ATTR_HDRLEN) {
        errno = ERANGE;
        return -1;
      }
      break;
    default:
      break;
  }
  if (exp_len && attr_len > exp_len) {
    errno = ERANGE;
    return -1;
  }
  return 0;
}

}  // namespace

int WEFT_MNL_NAME(attr_validate)(const nlattr* attr, enum mnl_attr_data_type type) {
  if (type >= MNL_TYPE_MAX) {
    errno = EINVAL;
    return -1;
  }
  return Validate(attr, type, TypeLen(type));
}

int WEFT_MNL_NAME(attr_validate2)(const nlattr* attr, enum mnl_attr_data_type type, size_t exp_len) {
  if (type >= MNL_TYPE_MAX) {
    errno = EINVAL;
    return -1;
  }
  return Validate(attr, type, exp_len);
}

int WEFT_MNL_NAME(attr_parse)(const nlmsghdr* nlh, unsigned int offset, mnl_attr_cb_t cb, void* data) {
  int ret = MNL_CB_OK;
  const char* end = Tail(nlh);
  for (auto* attr = static_cast<const nlattr*>(WEFT_MNL_NAME(nlmsg_get_payload_offset)(nlh, offset));
       WEFT_MNL_NAME(attr_ok)(attr, static_cast<int>(end - reinterpret_cast<const char*>(attr)));
       attr = WEFT_MNL_NAME(attr_next)(attr))
    if ((ret = cb(attr, data)) <= MNL_CB_STOP) return ret;
  return ret;
}

int WEFT_MNL_NAME(attr_parse_nested)(const nlattr* nested, mnl_attr_cb_t cb, void* data) {
  int ret = MNL_CB_OK;
  const char* end = static_cast<const char*>(WEFT_MNL_NAME(attr_get_payload)(nested)) +
                    WEFT_MNL_NAME(attr_get_payload_len)(nested);
  for (auto* attr = static_cast<const nlattr*>(WEFT_MNL_NAME(attr_get_payload)(nested));
       WEFT_MNL_NAME(attr_ok)(attr, static_cast<int>(end - reinterpret_cast<const char*>(attr)));
       attr = WEFT_MNL_NAME(attr_next)(attr))
    if ((ret = cb(attr, data)) <= MNL_CB_STOP) return ret;
  return ret;
}

int WEFT_MNL_NAME(attr_parse_payload)(const void* payload, size_t payload_len, mnl_attr_cb_t cb, void* data) {
  int ret = MNL_CB_OK;
  const char* end = static_cast<const char*>(payload) + payload_len;
  for (auto* attr = static_cast<const nlattr*>(payload);
       WEFT_MNL_NAME(attr_ok)(attr, static_cast<int>(end - reinterpret_cast<const char*>(attr)));
       attr = WEFT_MNL_NAME(attr_next)(attr))
    if ((ret = cb(attr, data)) <= MNL_CB_STOP) return ret;
  return ret;
}

uint8_t WEFT_MNL_NAME(attr_get_u8)(const nlattr* attr) {
  return *static_cast<const uint8_t*>(WEFT_MNL_NAME(attr_get_payload)(attr));
}
uint16_t WEFT_MNL_NAME(attr_get_u16)(const nlattr* attr) {
  uint16_t v;
  std::memcpy(&v, WEFT_MNL_NAME(attr_get_payload)(attr), sizeof v);
  return v;
}
uint32_t WEFT_MNL_NAME(attr_get_u32)(const nlattr* attr) {
  uint32_t v;
  std::memcpy(&v, WEFT_MNL_NAME(attr_get_payload)(attr), sizeof v);
  return v;
}
uint64_t WEFT_MNL_NAME(attr_get_u64)(const nlattr* attr) {
  uint64_t v;
  std::memcpy(&v, WEFT_MNL_NAME(attr_get_payload)(attr), sizeof v);
  return v;
}
const char* WEFT_MNL_NAME(attr_get_str)(const nlattr* attr) {
  return static_cast<const char*>(WEFT_MNL_NAME(attr_get_payload)(attr));
}

void WEFT_MNL_NAME(attr_put)(nlmsghdr* nlh, uint16_t type, size_t len, const void* data) {
  auto* attr = reinterpret_cast<nlattr*>(Tail(nlh));
  const uint16_t payload_len = static_cast<uint16_t>(MNL_ALIGN(sizeof(nlattr)) + len);
  attr->nla_type = type;
  attr->nla_len = payload_len;
  char* payload = static_cast<char*>(WEFT_MNL_NAME(attr_get_payload)(attr));
  if (len) std::memcpy(payload, data, len);
  const size_t pad = MNL_ALIGN(len) - len;
  if (pad > 0) std::memset(payload + len, 0, pad);
  nlh->nlmsg_len += MNL_ALIGN(payload_len);
}

void WEFT_MNL_NAME(attr_put_u8)(nlmsghdr* nlh, uint16_t type, uint8_t data) {
  WEFT_MNL_NAME(attr_put)(nlh, type, sizeof data, &data);
}
void WEFT_MNL_NAME(attr_put_u16)(nlmsghdr* nlh, uint16_t type, uint16_t data) {
  WEFT_MNL_NAME(attr_put)(nlh, type, sizeof data, &data);
}
void WEFT_MNL_NAME(attr_put_u32)(nlmsghdr* nlh, uint16_t type, uint32_t data) {
  WEFT_MNL_NAME(attr_put)(nlh, type, sizeof data, &data);
}
void WEFT_MNL_NAME(attr_put_u64)(nlmsghdr* nlh, uint16_t type, uint64_t data) {
  WEFT_MNL_NAME(attr_put)(nlh, type, sizeof data, &data);
}
void WEFT_MNL_NAME(attr_put_str)(nlmsghdr* nlh, uint16_t type, const char* data) {
  WEFT_MNL_NAME(attr_put)(nlh, type, std::strlen(data), data);
}
void WEFT_MNL_NAME(attr_put_strz)(nlmsghdr* nlh, uint16_t type, const char* data) {
  WEFT_MNL_NAME(attr_put)(nlh, type, std::strlen(data) + 1, data);
}

nlattr* WEFT_MNL_NAME(attr_nest_start)(nlmsghdr* nlh, uint16_t type) {
  auto* start = reinterpret_cast<nlattr*>(Tail(nlh));
  start->nla_type = NLA_F_NESTED | type;
  nlh->nlmsg_len += MNL_ALIGN(sizeof(nlattr));
  return start;
}

void WEFT_MNL_NAME(attr_nest_end)(nlmsghdr* nlh, nlattr* start) {
  start->nla_len = static_cast<uint16_t>(Tail(nlh) - reinterpret_cast<char*>(start));
}

void WEFT_MNL_NAME(attr_nest_cancel)(nlmsghdr* nlh, nlattr* start) {
  nlh->nlmsg_len -= static_cast<uint32_t>(Tail(nlh) - reinterpret_cast<char*>(start));
}

// The netlink socket.
WEFT_MNL_TYPE(socket) * WEFT_MNL_NAME(socket_open2)(int bus, int flags) {
  auto* nl = static_cast<WEFT_MNL_TYPE(socket)*>(std::calloc(1, sizeof(WEFT_MNL_TYPE(socket))));
  if (nl == nullptr) return nullptr;
  nl->fd = ::socket(AF_NETLINK, SOCK_RAW | flags, bus);
  if (nl->fd == -1) {
    std::free(nl);
    return nullptr;
  }
  return nl;
}

WEFT_MNL_TYPE(socket) * WEFT_MNL_NAME(socket_open)(int bus) { return WEFT_MNL_NAME(socket_open2)(bus, 0); }

int WEFT_MNL_NAME(socket_get_fd)(const WEFT_MNL_TYPE(socket) * nl) { return nl->fd; }
unsigned int WEFT_MNL_NAME(socket_get_portid)(const WEFT_MNL_TYPE(socket) * nl) { return nl->addr.nl_pid; }

int WEFT_MNL_NAME(socket_bind)(WEFT_MNL_TYPE(socket) * nl, unsigned int groups, pid_t pid) {
  nl->addr.nl_family = AF_NETLINK;
  nl->addr.nl_groups = groups;
  nl->addr.nl_pid = static_cast<uint32_t>(pid);
  if (::bind(nl->fd, reinterpret_cast<sockaddr*>(&nl->addr), sizeof nl->addr) < 0) return -1;
  socklen_t len = sizeof nl->addr;
  if (::getsockname(nl->fd, reinterpret_cast<sockaddr*>(&nl->addr), &len) < 0) return -1;
  if (len != sizeof nl->addr || nl->addr.nl_family != AF_NETLINK) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

ssize_t WEFT_MNL_NAME(socket_sendto)(const WEFT_MNL_TYPE(socket) * nl, const void* buf, size_t len) {
  sockaddr_nl snl{};
  snl.nl_family = AF_NETLINK;
  return ::sendto(nl->fd, buf, len, 0, reinterpret_cast<const sockaddr*>(&snl), sizeof snl);
}

ssize_t WEFT_MNL_NAME(socket_recvfrom)(const WEFT_MNL_TYPE(socket) * nl, void* buf, size_t bufsiz) {
  sockaddr_nl addr{};
  iovec iov{buf, bufsiz};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = sizeof addr;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  const ssize_t ret = ::recvmsg(nl->fd, &msg, 0);
  if (ret == -1) return ret;
  if (msg.msg_flags & MSG_TRUNC) {
    errno = ENOSPC;
    return -1;
  }
  if (msg.msg_namelen != sizeof(sockaddr_nl)) {
    errno = EINVAL;
    return -1;
  }
  return ret;
}

int WEFT_MNL_NAME(socket_close)(WEFT_MNL_TYPE(socket) * nl) {
  const int ret = ::close(nl->fd);
  std::free(nl);
  return ret;
}

int WEFT_MNL_NAME(socket_setsockopt)(const WEFT_MNL_TYPE(socket) * nl, int type, void* buf, socklen_t len) {
  return ::setsockopt(nl->fd, SOL_NETLINK, type, buf, len);
}

int WEFT_MNL_NAME(socket_getsockopt)(const WEFT_MNL_TYPE(socket) * nl, int type, void* buf, socklen_t* len) {
  return ::getsockopt(nl->fd, SOL_NETLINK, type, buf, len);
}

// The callback loop over a datagram of answers.
namespace {

int ErrorCallback(const nlmsghdr* nlh) {
  const auto* err = static_cast<const nlmsgerr*>(WEFT_MNL_NAME(nlmsg_get_payload)(nlh));
  if (nlh->nlmsg_len < WEFT_MNL_NAME(nlmsg_size)(sizeof(nlmsgerr))) {
    errno = EBADMSG;
    return MNL_CB_ERROR;
  }
  // The kernel sends a negative error; libmnl takes either sign.
  errno = err->error < 0 ? -err->error : err->error;
  return err->error == 0 ? MNL_CB_STOP : MNL_CB_ERROR;
}

int RunCallbacks(const void* buf, size_t numbytes, unsigned int seq, unsigned int portid, mnl_cb_t cb_data,
                 void* data, const mnl_cb_t* cb_ctl_array, unsigned int cb_ctl_array_len) {
  int ret = MNL_CB_OK;
  int len = static_cast<int>(numbytes);
  const auto* nlh = static_cast<const nlmsghdr*>(buf);
  while (WEFT_MNL_NAME(nlmsg_ok)(nlh, len)) {
    if (!WEFT_MNL_NAME(nlmsg_portid_ok)(nlh, portid)) {
      errno = ESRCH;
      return -1;
    }
    if (!WEFT_MNL_NAME(nlmsg_seq_ok)(nlh, seq)) {
      errno = EPROTO;
      return -1;
    }
    if (nlh->nlmsg_flags & NLM_F_DUMP_INTR) {
      errno = EINTR;
      return -1;
    }
    if (nlh->nlmsg_type >= NLMSG_MIN_TYPE) {
      if (cb_data) {
        ret = cb_data(nlh, data);
        if (ret <= MNL_CB_STOP) return ret;
      }
    } else if (nlh->nlmsg_type < cb_ctl_array_len && cb_ctl_array && cb_ctl_array[nlh->nlmsg_type]) {
      ret = cb_ctl_array[nlh->nlmsg_type](nlh, data);
      if (ret <= MNL_CB_STOP) return ret;
    } else {
      switch (nlh->nlmsg_type) {
        case NLMSG_ERROR:
          ret = ErrorCallback(nlh);
          break;
        case NLMSG_DONE:
          ret = MNL_CB_STOP;
          break;
        default:  // NLMSG_NOOP, NLMSG_OVERRUN
          ret = MNL_CB_OK;
          break;
      }
      if (ret <= MNL_CB_STOP) return ret;
    }
    nlh = WEFT_MNL_NAME(nlmsg_next)(nlh, &len);
  }
  return ret;
}

}  // namespace

int WEFT_MNL_NAME(cb_run2)(const void* buf, size_t numbytes, unsigned int seq, unsigned int portid, mnl_cb_t cb_data,
                           void* data, mnl_cb_t* cb_ctl_array, unsigned int cb_ctl_array_len) {
  return RunCallbacks(buf, numbytes, seq, portid, cb_data, data, cb_ctl_array, cb_ctl_array_len);
}

int WEFT_MNL_NAME(cb_run)(const void* buf, size_t numbytes, unsigned int seq, unsigned int portid, mnl_cb_t cb_data,
                          void* data) {
  return RunCallbacks(buf, numbytes, seq, portid, cb_data, data, nullptr, 0);
}

}  // extern "C"
