#include "sys/nft_script.h"

#include <nftables/libnftables.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <mutex>

#include "base/unique_fd.h"

namespace weft::sys {
namespace {

struct CtxFree {
  void operator()(nft_ctx* c) const { nft_ctx_free(c); }
};

// libnftables does not document its contexts as independent between
// threads (it has process-wide pieces: GMP's allocator hooks, libxtables
// when it translates), and weftd calls it from its sync thread and its
// metrics thread: one call at a time in the process.
std::mutex& LibMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

Status NftRunScript(const std::string& script) {
  // The script goes to libnftables as a file (an anonymous memfd), not as a
  // buffer: for a buffer nft 1.0.6 quotes the script's first line under
  // every error, whatever line it is about; for a file it names the line
  // and quotes it, as `nft -f` does.
  UniqueFd fd(::memfd_create("weft-nft-script", MFD_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kFirewall, "nft: memfd_create", errno);
  for (size_t off = 0; off < script.size();) {
    ssize_t n = ::write(fd.get(), script.data() + off, script.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno(Reason::kFailed, Domain::kFirewall, "nft: write the script", errno);
    off += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd.get());
  // A context per call: libnftables keeps the ruleset it read back for
  // evaluation (its cache) in the context, and weftd's table is large; the
  // next call would read it again anyway, since this commit changed the
  // kernel's generation.
  std::lock_guard lock(LibMutex());
  std::unique_ptr<nft_ctx, CtxFree> ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) return Status::Error(Reason::kFailed, Domain::kFirewall, "libnftables: cannot create a context");
  if (nft_ctx_buffer_output(ctx.get()) != 0 || nft_ctx_buffer_error(ctx.get()) != 0)
    return Status::Error(Reason::kFailed, Domain::kFirewall, "libnftables: cannot buffer its output");
  if (nft_run_cmd_from_filename(ctx.get(), path.c_str()) != 0) {
    const char* err = nft_ctx_get_error_buffer(ctx.get());
    std::string details = err ? err : "";
    // "/proc/self/fd/7:3:12-20: Error: ..." -> "line 3:12-20: Error: ...".
    for (size_t at; (at = details.find(path + ":")) != std::string::npos;)
      details.replace(at, path.size() + 1, "line ");
    while (!details.empty() && details.back() == '\n') details.pop_back();
    if (details.size() > 4096) details = details.substr(0, 4096) + " ...";
    return Status::Error(Reason::kFailed, Domain::kFirewall, "nft: transaction refused", details);
  }
  return Status::Ok();
}

}  // namespace weft::sys
