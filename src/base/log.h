#pragma once
// Logging never goes to stdout (stdout belongs to the CNI result). By default
// lines go to stderr; a program can hand in another sink (sys/log_file.h
// opens a file: the plugin's config "logFile", weftd's --log-file). The
// logger itself opens nothing: it calls getpid(2) for the pid field, and
// writes to stderr through the C library when no sink is set.
//
// Lines are logfmt: a message and fields, each rendered once and quoted only
// when logfmt needs it (docs/logging.md):
//
//   WEFT_LOG(kInfo, "claimed subnet", {"subnets", joined}, {"lease", lease});
//   ts=2026-11-23T02:10:00.123Z level=info pid=42 msg="claimed subnet" subnets=10.244.1.0/24 lease=7
//
// The message is a constant sentence; what varies goes into fields, so lines
// can be grepped and parsed.

#include <concepts>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace weft::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Parses "debug|info|warn|error|off"; false on anything else.
bool ParseLevel(std::string_view s, Level* out);

// One key=value of a line. Keys are identifiers chosen by the caller; values
// are any text, numbers, or a Status (rendered by ToString()).
class Field {
 public:
  Field(std::string_view key, std::string_view value) : key_(key), value_(value) {}
  // A field whose key is built at run time.
  static Field Dynamic(std::string key, std::string value) {
    Field f("", std::string_view());
    f.key_ = std::move(key);
    f.value_ = std::move(value);
    return f;
  }
  Field(std::string_view key, const std::string& value) : key_(key), value_(value) {}
  Field(std::string_view key, const char* value) : key_(key), value_(value ? value : "") {}
  Field(std::string_view key, bool value) : key_(key), value_(value ? "true" : "false") {}
  template <std::integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, char>)
  Field(std::string_view key, T value) : key_(key), value_(std::to_string(value)) {}
  Field(std::string_view key, double value);
  Field(std::string_view key, const Status& st) : key_(key), value_(st.ToString()) {}

  const std::string& key() const { return key_; }
  const std::string& value() const { return value_; }

 private:
  std::string key_;
  std::string value_;
};

using Fields = std::initializer_list<Field>;

// Appends ` key=value` for each field to `out`, quoting values that are
// empty or hold spaces, '=', '"', '\' or control characters.
void AppendFields(std::string* out, Fields fields);
void AppendFields(std::string* out, const std::vector<Field>& fields);
// Appends one logfmt value, quoted when needed.
void AppendValue(std::string* out, std::string_view value);

// The text of one line without the trailing newline: ts, level, pid, the
// context fields, msg, then `fields`. Exposed for tests.
std::string FormatLine(Level level, std::string_view msg, Fields fields);

// Process-wide sink configuration, set once by main() before any threads.
void SetLevel(Level level);
Level GetLevel();
// Where finished lines go, one call per line (the line ends in '\n'); called
// under the logger's lock, so calls never overlap. Must not log.
using LineSink = std::function<void(std::string_view line)>;
// Sends every line to `sink` from now on; an empty sink means stderr. The
// previous sink is destroyed (a file sink closes its file).
void SetSink(LineSink sink);
// Fields printed on every line after pid (e.g. cmd=ADD cid=abc).
void SetContext(Fields fields);

void Write(Level level, std::string_view msg, Fields fields = {});
// The same with fields built at run time (e.g. one per phase of an ADD).
void Write(Level level, std::string_view msg, const std::vector<Field>& fields);

}  // namespace weft::log

// WEFT_LOG(kWarn, "message", {"key", value}, ...): the fields are evaluated
// only when the level is enabled.
#define WEFT_LOG(level, msg, ...)                                           \
  do {                                                                      \
    if (::weft::log::Level::level >= ::weft::log::GetLevel())               \
      ::weft::log::Write(::weft::log::Level::level, (msg), {__VA_ARGS__});  \
  } while (0)
