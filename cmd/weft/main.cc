// weft: the CNI plugin. One process per pod operation.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "build_info.h"
#include "cni/skel.h"
#include "cni/version.h"
#include "plugin/weft_plugin.h"
#include "sys/files.h"

int main(int argc, char** argv) {
  // Runtimes pass no arguments and set CNI_COMMAND: with it, argv is ignored
  // and CNI_COMMAND=VERSION answers the spec versions as before.
  if (!std::getenv("CNI_COMMAND") && argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("weft %s (commit %s)\n", weft::build::kVersion, weft::build::kCommit);
    return 0;
  }
  if (!std::getenv("CNI_COMMAND") && isatty(STDIN_FILENO)) {
    std::fprintf(stderr,
                 "weft CNI plugin %s: CNI spec 0.1.0 to 1.1.0. Run by container runtimes;\n"
                 "see docs/plugin.md. Set CNI_COMMAND=VERSION to list supported versions.\n",
                 weft::build::kVersion);
    return 0;
  }
  std::string out;
  // One byte past the cap, so that PluginMain refuses an oversized config
  // (code 6) instead of parsing its first MiB.
  auto in = weft::sys::ReadFd(STDIN_FILENO, weft::cni::kMaxStdinBytes + 1, "network config from stdin");
  int rc;
  if (!in.ok()) {
    out = weft::cni::ErrorJson(in.status(), std::string(weft::cni::kLatestVersion));  // code 5
    rc = 1;
  } else {
    weft::plugin::WeftPlugin plugin;
    rc = weft::cni::PluginMain(plugin, [](const char* k) { return std::getenv(k); }, *in, &out);
  }
  if (!out.empty()) (void)!write(STDOUT_FILENO, out.data(), out.size());
  return rc;
}
