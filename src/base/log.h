#pragma once
// Logging never goes to stdout (stdout belongs to the CNI result). By default
// lines go to stderr; a plugin can redirect them to a file (config "logFile").
// Lines are key=value structured: ts=... level=... msg="..." plus fields.

#include <string>
#include <string_view>

namespace weft::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Parses "debug|info|warn|error|off"; false on anything else.
bool ParseLevel(std::string_view s, Level* out);

// Process-wide sink configuration, set once by main() before any threads.
void SetLevel(Level level);
Level GetLevel();
// Appends to `path` (0600). An empty path means stderr. Returns false if the
// file cannot be opened; logging then stays on stderr.
bool SetFile(const std::string& path);
// Adds a field (e.g. "cmd=ADD cid=abc") printed on every line.
void SetContext(std::string ctx);

void Write(Level level, std::string_view msg);

}  // namespace weft::log

#define WEFT_LOG(level, msg)                                          \
  do {                                                                \
    if (::weft::log::Level::level >= ::weft::log::GetLevel())         \
      ::weft::log::Write(::weft::log::Level::level, (msg));           \
  } while (0)
