// weft-bench-exec: what one sys::Exec costs from a process as large as
// weftd (about 50 MB resident), the cost every nft/conntrack/iptables run
// of weftd and of the plugin pays before the tool itself starts.
//
//   weft-bench-exec [--resident-mb 50] [--runs 200] [--program /bin/true]
//
// Touches --resident-mb of heap (so the pages are really mapped), then execs
// --program --runs times through sys::Exec, one after the other, and prints
// one JSON object: the resident size, and the wall time per Exec (median,
// p90, mean, min) in microseconds.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "sys/exec.h"

namespace {

long ResidentKb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  int resident_mb = 50, runs = 200;
  std::string program = "/bin/true";
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (k == "--resident-mb" && v) resident_mb = std::atoi(argv[++i]);
    else if (k == "--runs" && v) runs = std::atoi(argv[++i]);
    else if (k == "--program" && v) program = argv[++i];
    else {
      std::fprintf(stderr, "usage: weft-bench-exec [--resident-mb N] [--runs N] [--program PATH]\n");
      return 2;
    }
  }
  if (runs < 1) runs = 1;
  // The ballast: written page by page so every page is resident.
  std::vector<char> ballast(static_cast<size_t>(resident_mb) << 20);
  for (size_t i = 0; i < ballast.size(); i += 4096) ballast[i] = static_cast<char>(i);

  weft::sys::ExecRequest req;
  req.path = program;
  std::vector<double> us;
  us.reserve(static_cast<size_t>(runs));
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = weft::sys::Exec(req);
    auto t1 = std::chrono::steady_clock::now();
    if (!r.ok() || r->exit_code != 0) {
      std::fprintf(stderr, "weft-bench-exec: %s failed: %s\n", program.c_str(),
                   r.ok() ? ("exit " + std::to_string(r->exit_code)).c_str() : r.status().ToString().c_str());
      return 1;
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::vector<double> s = us;
  std::sort(s.begin(), s.end());
  const double mean = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  std::printf(
      "{\"program\":\"%s\",\"runs\":%d,\"resident_mb\":%.1f,\"exec_us\":{\"median\":%.0f,\"p90\":%.0f,\"mean\":%.0f,"
      "\"min\":%.0f}}\n",
      program.c_str(), runs, static_cast<double>(ResidentKb()) / 1024.0, s[s.size() / 2], s[s.size() * 9 / 10], mean,
      s.front());
  if (!ballast.empty()) {
    volatile char keep = ballast[ballast.size() / 2];
    (void)keep;
  }
  return 0;
}
