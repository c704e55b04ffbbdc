// weft: the CNI plugin. One process per pod operation.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "build_info.h"
#include "cni/skel.h"
#include "plugin/weft_plugin.h"

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
  std::string in;
  char buf[65536];
  ssize_t n;
  while ((n = read(STDIN_FILENO, buf, sizeof buf)) > 0) in.append(buf, static_cast<size_t>(n));
  weft::plugin::WeftPlugin plugin;
  std::string out;
  int rc = weft::cni::PluginMain(plugin, [](const char* k) { return std::getenv(k); }, in, &out);
  if (!out.empty()) (void)!write(STDOUT_FILENO, out.data(), out.size());
  return rc;
}
