#include "base/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace weft::log {
namespace {

// Logging configuration is the one piece of process-wide state: it is set by
// main() before work starts and only read afterwards.
struct Sink {
  Level level = Level::kWarn;
  int fd = 2;
  std::string ctx;
  std::mutex mu;
};

Sink& GetSink() {
  static Sink sink;
  return sink;
}

const char* Name(Level l) {
  switch (l) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
    case Level::kOff: return "off";
  }
  return "?";
}

}  // namespace

bool ParseLevel(std::string_view s, Level* out) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff}) {
    if (s == Name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

void SetLevel(Level level) { GetSink().level = level; }
Level GetLevel() { return GetSink().level; }

bool SetFile(const std::string& path) {
  Sink& s = GetSink();
  if (path.empty()) {
    s.fd = 2;
    return true;
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  if (s.fd > 2) ::close(s.fd);
  s.fd = fd;
  return true;
}

void SetContext(std::string ctx) { GetSink().ctx = std::move(ctx); }

void Write(Level level, std::string_view msg) {
  Sink& s = GetSink();
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  std::string line = std::string("ts=") + ts + " level=" + Name(level) + " pid=" +
                     std::to_string(::getpid());
  if (!s.ctx.empty()) line += " " + s.ctx;
  line += " msg=\"";
  for (char c : msg) {
    if (c == '"' || c == '\\') line += '\\';
    line += (c == '\n') ? ' ' : c;
  }
  line += "\"\n";
  std::lock_guard<std::mutex> lock(s.mu);
  ssize_t n = ::write(s.fd, line.data(), line.size());
  (void)n;  // Logging must never fail an operation.
}

}  // namespace weft::log
