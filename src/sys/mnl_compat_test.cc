// The static plugin's libmnl (sys/mnl_compat.cc) against Debian's libmnl,
// in one process: the compat file is compiled here again with every name
// prefixed compat_, and each test runs the same calls through both and
// compares bytes, return values and errno.

#define WEFT_MNL_NAME(name) compat_mnl_##name
#define WEFT_MNL_TYPE(name) compat_mnl_##name
#include "mnl_compat.cc"

#include <gtest/gtest.h>
#include <linux/netfilter/nfnetlink.h>

#include <string>
#include <utility>
#include <vector>

namespace {

// The calls of one message build, through the real libmnl or the compat one.
template <bool kCompat>
std::string BuildMessage(char fill = 0) {
  alignas(4) char buf[1024] = {};
  std::memset(buf, fill, sizeof buf);
  nlmsghdr* nlh;
  if constexpr (kCompat) {
    nlh = compat_mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = 0x0a06;
    auto* nfg = static_cast<nfgenmsg*>(compat_mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
    nfg->nfgen_family = 1;
    compat_mnl_attr_put_strz(nlh, 1, "weft-guard");
    compat_mnl_attr_put_str(nlh, 2, "odd");
    compat_mnl_attr_put_u8(nlh, 3, 7);
    compat_mnl_attr_put_u16(nlh, 4, 0x1234);
    auto* nest = compat_mnl_attr_nest_start(nlh, 5);
    compat_mnl_attr_put_u32(nlh, 1, 0xdeadbeef);
    auto* inner = compat_mnl_attr_nest_start(nlh, 2);
    compat_mnl_attr_put_u64(nlh, 1, 0x0102030405060708ull);
    compat_mnl_attr_put(nlh, 2, 5, "\x01\x02\x03\x04\x05");
    compat_mnl_attr_nest_end(nlh, inner);
    compat_mnl_attr_nest_end(nlh, nest);
    auto* cancelled = compat_mnl_attr_nest_start(nlh, 6);
    compat_mnl_attr_put_u32(nlh, 1, 1);
    compat_mnl_attr_nest_cancel(nlh, cancelled);
    compat_mnl_attr_put(nlh, 7, 0, nullptr);
  } else {
    nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = 0x0a06;
    auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
    nfg->nfgen_family = 1;
    mnl_attr_put_strz(nlh, 1, "weft-guard");
    mnl_attr_put_str(nlh, 2, "odd");
    mnl_attr_put_u8(nlh, 3, 7);
    mnl_attr_put_u16(nlh, 4, 0x1234);
    auto* nest = mnl_attr_nest_start(nlh, 5);
    mnl_attr_put_u32(nlh, 1, 0xdeadbeef);
    auto* inner = mnl_attr_nest_start(nlh, 2);
    mnl_attr_put_u64(nlh, 1, 0x0102030405060708ull);
    mnl_attr_put(nlh, 2, 5, "\x01\x02\x03\x04\x05");
    mnl_attr_nest_end(nlh, inner);
    mnl_attr_nest_end(nlh, nest);
    auto* cancelled = mnl_attr_nest_start(nlh, 6);
    mnl_attr_put_u32(nlh, 1, 1);
    mnl_attr_nest_cancel(nlh, cancelled);
    mnl_attr_put(nlh, 7, 0, nullptr);
  }
  return std::string(buf, nlh->nlmsg_len);
}

TEST(MnlCompat, BuildsTheSameBytes) {
  const std::string real = BuildMessage<false>();
  const std::string compat = BuildMessage<true>();
  ASSERT_FALSE(real.empty());
  EXPECT_EQ(real, compat);
}

// One deliberate difference: libmnl 1.0.4 (Debian 12) leaves an attribute's
// padding as the buffer held it; the compat one zeroes it (as libmnl 1.0.5
// does), so no stale bytes reach the kernel.
TEST(MnlCompat, ZeroesPadding) {
  const std::string compat = BuildMessage<true>(0x5a);
  EXPECT_EQ(compat, BuildMessage<true>(0));
  EXPECT_EQ(compat.find('\x5a'), std::string::npos);
}

struct Seen {
  std::vector<std::pair<uint16_t, uint16_t>> attrs;  // type, payload length
};

int RealCb(const nlattr* a, void* data) {
  auto* s = static_cast<Seen*>(data);
  s->attrs.push_back({mnl_attr_get_type(a), mnl_attr_get_payload_len(a)});
  if (mnl_attr_get_type(a) == 5) mnl_attr_parse_nested(a, RealCb, data);
  return MNL_CB_OK;
}
int CompatCb(const nlattr* a, void* data) {
  auto* s = static_cast<Seen*>(data);
  s->attrs.push_back({compat_mnl_attr_get_type(a), compat_mnl_attr_get_payload_len(a)});
  if (compat_mnl_attr_get_type(a) == 5) compat_mnl_attr_parse_nested(a, CompatCb, data);
  return MNL_CB_OK;
}
int RealStopAt3(const nlattr* a, void* data) {
  static_cast<Seen*>(data)->attrs.push_back({mnl_attr_get_type(a), 0});
  return mnl_attr_get_type(a) == 3 ? MNL_CB_STOP : MNL_CB_OK;
}
int CompatStopAt3(const nlattr* a, void* data) {
  static_cast<Seen*>(data)->attrs.push_back({compat_mnl_attr_get_type(a), 0});
  return compat_mnl_attr_get_type(a) == 3 ? MNL_CB_STOP : MNL_CB_OK;
}

TEST(MnlCompat, ParsesTheSameAttributes) {
  std::string msg = BuildMessage<false>();
  const auto* nlh = reinterpret_cast<const nlmsghdr*>(msg.data());
  Seen real, compat;
  EXPECT_EQ(mnl_attr_parse(nlh, sizeof(nfgenmsg), RealCb, &real),
            compat_mnl_attr_parse(nlh, sizeof(nfgenmsg), CompatCb, &compat));
  EXPECT_EQ(real.attrs, compat.attrs);
  EXPECT_GE(real.attrs.size(), 8u);
  Seen real_stop, compat_stop;
  EXPECT_EQ(mnl_attr_parse(nlh, sizeof(nfgenmsg), RealStopAt3, &real_stop),
            compat_mnl_attr_parse(nlh, sizeof(nfgenmsg), CompatStopAt3, &compat_stop));
  EXPECT_EQ(real_stop.attrs, compat_stop.attrs);
  EXPECT_EQ(real_stop.attrs.size(), 3u);
  // A message cut inside an attribute: both stop before it.
  for (size_t cut = sizeof(nlmsghdr); cut < msg.size(); cut += 3) {
    std::string part = msg.substr(0, cut);
    auto* h = reinterpret_cast<nlmsghdr*>(part.data());
    h->nlmsg_len = static_cast<uint32_t>(cut);
    Seen r, c;
    mnl_attr_parse(h, sizeof(nfgenmsg), RealCb, &r);
    compat_mnl_attr_parse(h, sizeof(nfgenmsg), CompatCb, &c);
    EXPECT_EQ(r.attrs, c.attrs) << "cut at " << cut;
  }
}

TEST(MnlCompat, ValidatesAsLibmnl) {
  // Attributes of payload lengths 0..9 (a NUL-terminated string at some),
  // against every data type: the same answer and errno.
  for (size_t len = 0; len < 10; ++len) {
    for (bool nul : {false, true}) {
      alignas(4) char buf[64] = {};
      auto* nlh = mnl_nlmsg_put_header(buf);
      std::string payload(len, 'x');
      if (nul && len > 0) payload.back() = '\0';
      mnl_attr_put(nlh, 1, len, payload.data());
      const auto* a = static_cast<const nlattr*>(mnl_nlmsg_get_payload(nlh));
      for (int t = MNL_TYPE_UNSPEC; t <= MNL_TYPE_MAX; ++t) {
        const auto type = static_cast<mnl_attr_data_type>(t);
        errno = 0;
        const int r = mnl_attr_validate(a, type);
        const int re = errno;
        errno = 0;
        const int c = compat_mnl_attr_validate(a, type);
        EXPECT_EQ(r, c) << "len " << len << " type " << t;
        EXPECT_EQ(re, errno) << "len " << len << " type " << t;
        errno = 0;
        const int r2 = mnl_attr_validate2(a, type, 4);
        const int re2 = errno;
        errno = 0;
        EXPECT_EQ(r2, compat_mnl_attr_validate2(a, type, 4)) << "len " << len << " type " << t;
        EXPECT_EQ(re2, errno);
      }
      for (uint16_t max : {0, 1, 2}) {
        errno = 0;
        const int r = mnl_attr_type_valid(a, max);
        const int re = errno;
        errno = 0;
        EXPECT_EQ(r, compat_mnl_attr_type_valid(a, max));
        EXPECT_EQ(re, errno);
      }
    }
  }
}

TEST(MnlCompat, ReadsIntegersAndStrings) {
  std::string msg = BuildMessage<false>();
  const auto* nlh = reinterpret_cast<const nlmsghdr*>(msg.data());
  const auto* a = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)));
  int len = static_cast<int>(static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh)) -
                             reinterpret_cast<const char*>(a));
  EXPECT_EQ(compat_mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)), a);
  EXPECT_EQ(compat_mnl_nlmsg_get_payload_tail(nlh), mnl_nlmsg_get_payload_tail(nlh));
  EXPECT_EQ(compat_mnl_nlmsg_get_payload(nlh), mnl_nlmsg_get_payload(nlh));
  EXPECT_EQ(compat_mnl_nlmsg_get_payload_len(nlh), mnl_nlmsg_get_payload_len(nlh));
  int n = 0;
  for (; mnl_attr_ok(a, len); a = mnl_attr_next(a), ++n) {
    ASSERT_TRUE(compat_mnl_attr_ok(a, len));
    EXPECT_EQ(compat_mnl_attr_next(a), mnl_attr_next(a));
    EXPECT_EQ(compat_mnl_attr_get_len(a), mnl_attr_get_len(a));
    EXPECT_EQ(compat_mnl_attr_get_payload(a), mnl_attr_get_payload(a));
    if (mnl_attr_get_payload_len(a) >= 1) {
      EXPECT_EQ(compat_mnl_attr_get_u8(a), mnl_attr_get_u8(a));
    }
    if (mnl_attr_get_payload_len(a) >= 2) {
      EXPECT_EQ(compat_mnl_attr_get_u16(a), mnl_attr_get_u16(a));
    }
    if (mnl_attr_get_payload_len(a) >= 4) {
      EXPECT_EQ(compat_mnl_attr_get_u32(a), mnl_attr_get_u32(a));
    }
    if (mnl_attr_get_payload_len(a) >= 8) {
      EXPECT_EQ(compat_mnl_attr_get_u64(a), mnl_attr_get_u64(a));
    }
    EXPECT_EQ(compat_mnl_attr_get_str(a), mnl_attr_get_str(a));
    len -= MNL_ALIGN(a->nla_len);
  }
  EXPECT_FALSE(compat_mnl_attr_ok(a, len));
  EXPECT_EQ(n, 6);  // 1, 2, 3, 4, the nest 5, the empty 7
}

// A datagram of answers: what the kernel sends back to a batch or a dump.
std::string Answers(const std::vector<std::pair<uint16_t, int>>& msgs, uint32_t seq, uint32_t pid,
                    uint16_t flags = 0) {
  std::string out;
  for (auto [type, error] : msgs) {
    alignas(4) char buf[256] = {};
    auto* nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = type;
    nlh->nlmsg_seq = seq;
    nlh->nlmsg_pid = pid;
    nlh->nlmsg_flags = flags;
    if (type == NLMSG_ERROR) {
      auto* e = static_cast<nlmsgerr*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nlmsgerr)));
      e->error = error;
    } else {
      mnl_attr_put_u32(nlh, 1, 42);
    }
    out.append(buf, nlh->nlmsg_len);
  }
  return out;
}

int CountData(const nlmsghdr*, void* data) {
  ++*static_cast<int*>(data);
  return MNL_CB_OK;
}

TEST(MnlCompat, RunsCallbacksAsLibmnl) {
  struct Case {
    std::string buf;
    unsigned seq, portid;
  };
  const uint16_t kData = NLMSG_MIN_TYPE + 1;
  std::vector<Case> cases = {
      {Answers({{kData, 0}, {kData, 0}, {NLMSG_DONE, 0}}, 7, 99), 7, 99},
      {Answers({{kData, 0}, {NLMSG_ERROR, 0}}, 7, 99), 7, 99},                // an ack
      {Answers({{NLMSG_ERROR, -ENOENT}, {kData, 0}}, 7, 99), 7, 99},          // an error first
      {Answers({{NLMSG_NOOP, 0}, {kData, 0}}, 7, 99), 7, 99},                 // a no-op
      {Answers({{kData, 0}}, 8, 99), 7, 99},                                  // another seq
      {Answers({{kData, 0}}, 7, 98), 7, 99},                                  // another port
      {Answers({{kData, 0}}, 7, 99), 0, 0},                                   // any seq, any port
      {Answers({{kData, 0}}, 7, 99, NLM_F_DUMP_INTR), 7, 99},                 // an interrupted dump
      {Answers({{kData, 0}, {kData, 0}}, 7, 99).substr(0, 30), 7, 99},        // cut short
  };
  // An error message too short for its header.
  std::string short_err = Answers({{NLMSG_ERROR, 0}}, 7, 99);
  reinterpret_cast<nlmsghdr*>(short_err.data())->nlmsg_len = sizeof(nlmsghdr) + 4;
  cases.push_back({short_err.substr(0, sizeof(nlmsghdr) + 4), 7, 99});
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    int real_n = 0, compat_n = 0;
    errno = 0;
    const int r = mnl_cb_run(c.buf.data(), c.buf.size(), c.seq, c.portid, CountData, &real_n);
    const int re = errno;
    errno = 0;
    const int k = compat_mnl_cb_run(c.buf.data(), c.buf.size(), c.seq, c.portid, CountData, &compat_n);
    EXPECT_EQ(r, k) << "case " << i;
    EXPECT_EQ(re, errno) << "case " << i;
    EXPECT_EQ(real_n, compat_n) << "case " << i;
  }
}

template <bool kCompat>
std::vector<size_t> FillBatch(size_t limit) {
  alignas(4) char buf[512];
  std::vector<size_t> sizes;
  auto one = [&](auto* b, auto next, auto current, auto size, auto is_empty, auto reset) {
    sizes.push_back(is_empty(b));
    for (int i = 0; i < 12; ++i) {
      auto* nlh = mnl_nlmsg_put_header(current(b));
      mnl_attr_put_u32(nlh, 1, static_cast<uint32_t>(i));
      if (i % 3 == 0) mnl_attr_put_strz(nlh, 2, "a longer attribute");
      if (!next(b)) {
        sizes.push_back(1000 + size(b));
        reset(b);
        sizes.push_back(2000 + size(b));
      } else {
        sizes.push_back(size(b));
      }
    }
    sizes.push_back(is_empty(b));
  };
  if constexpr (kCompat) {
    auto* b = compat_mnl_nlmsg_batch_start(buf, limit);
    EXPECT_EQ(compat_mnl_nlmsg_batch_head(b), buf);
    one(b, compat_mnl_nlmsg_batch_next, compat_mnl_nlmsg_batch_current, compat_mnl_nlmsg_batch_size,
        compat_mnl_nlmsg_batch_is_empty, compat_mnl_nlmsg_batch_reset);
    compat_mnl_nlmsg_batch_stop(b);
  } else {
    auto* b = mnl_nlmsg_batch_start(buf, limit);
    EXPECT_EQ(mnl_nlmsg_batch_head(b), buf);
    one(b, mnl_nlmsg_batch_next, mnl_nlmsg_batch_current, mnl_nlmsg_batch_size, mnl_nlmsg_batch_is_empty,
        mnl_nlmsg_batch_reset);
    mnl_nlmsg_batch_stop(b);
  }
  return sizes;
}

TEST(MnlCompat, BatchesAsLibmnl) {
  for (size_t limit : {100, 200, 256}) EXPECT_EQ(FillBatch<false>(limit), FillBatch<true>(limit)) << limit;
}

TEST(MnlCompat, MessagesWalkAsLibmnl) {
  const std::string buf = Answers({{NLMSG_MIN_TYPE, 0}, {NLMSG_ERROR, -1}, {NLMSG_DONE, 0}}, 1, 1);
  for (int len : {0, 10, 16, 20, 24, 44, static_cast<int>(buf.size())}) {
    const auto* nlh = reinterpret_cast<const nlmsghdr*>(buf.data());
    int lr = len, lc = len;
    while (mnl_nlmsg_ok(nlh, lr)) {
      ASSERT_TRUE(compat_mnl_nlmsg_ok(nlh, lc));
      EXPECT_EQ(compat_mnl_nlmsg_seq_ok(nlh, 1), mnl_nlmsg_seq_ok(nlh, 1));
      EXPECT_EQ(compat_mnl_nlmsg_seq_ok(nlh, 2), mnl_nlmsg_seq_ok(nlh, 2));
      EXPECT_EQ(compat_mnl_nlmsg_portid_ok(nlh, 2), mnl_nlmsg_portid_ok(nlh, 2));
      const auto* next = compat_mnl_nlmsg_next(nlh, &lc);
      nlh = mnl_nlmsg_next(nlh, &lr);
      EXPECT_EQ(next, nlh);
      EXPECT_EQ(lc, lr);
    }
    EXPECT_FALSE(compat_mnl_nlmsg_ok(nlh, lc)) << len;
  }
  EXPECT_EQ(compat_mnl_nlmsg_size(12), mnl_nlmsg_size(12));
}

TEST(MnlCompat, OpensAndBindsASocket) {
  // No message is sent: the socket is opened, bound to a port the kernel
  // picks, and closed.
  auto* real = mnl_socket_open(NETLINK_NETFILTER);
  auto* compat = compat_mnl_socket_open(NETLINK_NETFILTER);
  ASSERT_NE(real, nullptr);
  ASSERT_NE(compat, nullptr);
  ASSERT_EQ(mnl_socket_bind(real, 0, MNL_SOCKET_AUTOPID), 0);
  ASSERT_EQ(compat_mnl_socket_bind(compat, 0, MNL_SOCKET_AUTOPID), 0);
  EXPECT_NE(compat_mnl_socket_get_portid(compat), 0u);
  EXPECT_NE(compat_mnl_socket_get_portid(compat), mnl_socket_get_portid(real));
  EXPECT_GE(compat_mnl_socket_get_fd(compat), 0);
  int one = 1;
  EXPECT_EQ(compat_mnl_socket_setsockopt(compat, NETLINK_CAP_ACK, &one, sizeof one),
            mnl_socket_setsockopt(real, NETLINK_CAP_ACK, &one, sizeof one));
  int v = 0;
  socklen_t vl = sizeof v;
  EXPECT_EQ(compat_mnl_socket_getsockopt(compat, NETLINK_CAP_ACK, &v, &vl), 0);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(mnl_socket_close(real), 0);
  EXPECT_EQ(compat_mnl_socket_close(compat), 0);
}

}  // namespace
