#include "base/log.h"

#include <unistd.h>  // getpid(2), the one system call of this file

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
  LineSink out;     // empty: stderr
  std::string ctx;  // rendered context fields, each with a leading space
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

bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

}  // namespace

Field::Field(std::string_view key, double value) : key_(key) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  value_ = buf;
}

bool ParseLevel(std::string_view s, Level* out) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff}) {
    if (s == Name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

void AppendValue(std::string* out, std::string_view v) {
  if (!NeedsQuotes(v)) {
    out->append(v);
    return;
  }
  out->push_back('"');
  for (unsigned char c : v) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < ' ' || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

namespace {
void AppendRange(std::string* out, const Field* begin, const Field* end) {
  for (const Field* f = begin; f != end; ++f) {
    out->push_back(' ');
    out->append(f->key());
    out->push_back('=');
    AppendValue(out, f->value());
  }
}

std::string FormatRange(Level level, std::string_view msg, const Field* begin, const Field* end);

void WriteLine(std::string line) {
  line.push_back('\n');
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.out) {
    s.out(line);
    return;
  }
  // stderr is unbuffered: one write per line. Logging must never fail an
  // operation, so the result is not checked.
  (void)std::fwrite(line.data(), 1, line.size(), stderr);
}
}  // namespace

void AppendFields(std::string* out, Fields fields) { AppendRange(out, fields.begin(), fields.end()); }
void AppendFields(std::string* out, const std::vector<Field>& fields) {
  AppendRange(out, fields.data(), fields.data() + fields.size());
}

void SetLevel(Level level) { GetSink().level = level; }
Level GetLevel() { return GetSink().level; }

void SetSink(LineSink sink) {
  Sink& s = GetSink();
  LineSink old;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    old = std::exchange(s.out, std::move(sink));
  }
  // `old` (and whatever it owns: a file) goes here, outside the lock.
}

void SetContext(Fields fields) {
  std::string ctx;
  AppendFields(&ctx, fields);
  GetSink().ctx = std::move(ctx);
}

std::string FormatLine(Level level, std::string_view msg, Fields fields) {
  return FormatRange(level, msg, fields.begin(), fields.end());
}

namespace {
std::string FormatRange(Level level, std::string_view msg, const Field* begin, const Field* end) {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char head[96];
  std::snprintf(head, sizeof head, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s pid=%d",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms), Name(level), static_cast<int>(::getpid()));
  std::string line = head;
  line += GetSink().ctx;
  line += " msg=";
  AppendValue(&line, msg);
  AppendRange(&line, begin, end);
  return line;
}
}  // namespace

void Write(Level level, std::string_view msg, Fields fields) {
  WriteLine(FormatRange(level, msg, fields.begin(), fields.end()));
}

void Write(Level level, std::string_view msg, const std::vector<Field>& fields) {
  WriteLine(FormatRange(level, msg, fields.data(), fields.data() + fields.size()));
}

}  // namespace weft::log
