#pragma once
// The logger's file sink (base/log.h: SetSink): lines appended to a file
// with one write(2) each on an O_APPEND descriptor, so the lines of
// concurrent plugin processes sharing a logFile never interleave.

#include <string>

#include "base/status.h"

namespace weft::sys {

// Appends the log to `path` (created 0600); its directory must exist (the
// caller creates it). An empty path sends it back to stderr. On failure
// logging stays where it was and the error carries the path and errno.
Status SetLogFile(const std::string& path);

}  // namespace weft::sys
