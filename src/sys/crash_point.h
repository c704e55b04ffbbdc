#pragma once
// Named crash points for fault-injection tests.
//
// WEFT_CRASH_POINT("after-veth") marks a place where a test may kill the
// process. It compiles to nothing unless the build defines
// WEFT_FAULT_INJECTION=1 (CMake option WEFT_FAULT_INJECTION): a production
// binary carries neither the names nor the code that reads the variable, so
// no environment can make it crash.
//
// In a fault-injection build the process dies with SIGKILL when the
// environment variable WEFT_TEST_CRASH_AT equals the point's name: no
// destructor, ScopeGuard, atexit handler or stdio flush runs, exactly like
// `kill -9` at that instruction. The variable is read once per process.
//
// Thread-safety: safe to hit from any thread (the read is a function-local
// static).

#if defined(WEFT_FAULT_INJECTION) && WEFT_FAULT_INJECTION

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace weft::fault {

inline constexpr const char* kCrashEnv = "WEFT_TEST_CRASH_AT";

// The configured point ("" when none), read once.
inline const char* ConfiguredCrashPoint() {
  static const char* const kAt = [] {
    const char* v = std::getenv(kCrashEnv);
    return v ? v : "";
  }();
  return kAt;
}

inline void CrashPoint(const char* name) {
  if (std::strcmp(ConfiguredCrashPoint(), name) != 0) return;
  // One line for the test log (write(2) is unbuffered), then a real death.
  static constexpr char kMsg[] = "weft: fault injection: crashing at ";
  (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  (void)!::write(STDERR_FILENO, name, std::strlen(name));
  (void)!::write(STDERR_FILENO, "\n", 1);
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);  // not reached
}

}  // namespace weft::fault

#define WEFT_CRASH_POINT(name) ::weft::fault::CrashPoint(name)
#define WEFT_HAS_CRASH_POINTS 1

#else

#define WEFT_CRASH_POINT(name) \
  do {                         \
  } while (0)
#define WEFT_HAS_CRASH_POINTS 0

#endif
