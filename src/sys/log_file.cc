#include "sys/log_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "base/log.h"
#include "base/unique_fd.h"

namespace weft::sys {

Status SetLogFile(const std::string& path) {
  if (path.empty()) {
    log::SetSink({});
    return Status::Ok();
  }
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFile, "open log file " + path, errno);
  // Shared: std::function needs a copyable target; the last copy closes it.
  auto file = std::make_shared<UniqueFd>(std::move(fd));
  log::SetSink([file](std::string_view line) {
    ssize_t n = ::write(file->get(), line.data(), line.size());
    (void)n;  // Logging must never fail an operation.
  });
  return Status::Ok();
}

}  // namespace weft::sys
