#pragma once
// What the binaries say they are: the release (VERSION at the top of the
// tree) and the git commit they were built from. Defined in a file CMake
// generates at build time (write_build_info.cmake) that only the three
// binaries and version_test link, so a new commit recompiles that one file
// and relinks them, nothing else. The commit is 12 hex digits, with
// "-dirty" when tracked files differed from it, what -DWEFT_COMMIT= named
// (the image's build stage, which has no .git), or "unknown" (a tarball).

namespace weft::build {

extern const char kVersion[];  // "0.4.0"
extern const char kCommit[];   // "3a51fbe1c2d4", "3a51fbe1c2d4-dirty", "unknown"

}  // namespace weft::build
