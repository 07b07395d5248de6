// One file of an on-disk cache (the NVRTC JIT cache, the compiled-artifact
// cache): a header that says what the payload is and lets a reader prove it
// whole, then the payload.
//
//   offset  bytes  field
//        0      8  magic "KILNCACH"
//        8      4  format version (kCacheEntryVersion), little-endian
//       12      4  key length K
//       16      8  payload length P
//       24      8  FNV-1a 64 over the key, then the payload
//       32      K  key (the text the entry's name was derived from)
//     32+K      P  payload
//
// Writers write a unique temporary file in the entry's folder
// (<name>.tmp-<pid>-<n>), fsync it and rename it over the entry, so a reader
// sees the old entry, the new one, or none: never a mix. Two processes
// writing one entry at once both succeed; the last rename wins and both
// wrote the same bytes for the same key. A writer killed mid-write leaves
// only its temporary file, which no reader opens and removeStaleCacheTemps
// deletes once its process is gone.
//
// A reader that finds a truncated, corrupted, wrong-version or wrong-key
// entry reports it once on stderr (the file and what was wrong), deletes it
// and answers kRejected: the caller rebuilds the entry as for a miss.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "runtime/support/error.h"

namespace kiln {

inline constexpr uint32_t kCacheEntryVersion = 1;
inline constexpr size_t kCacheEntryHeaderBytes = 32;

// Writes `payload` under `key` to `path` atomically (see above). The error
// names the file and the system's reason (ENOSPC, EACCES, ...); no
// temporary file is left behind on error.
Status writeCacheEntry(const std::filesystem::path& path, std::string_view key,
                       std::string_view payload);

struct CacheLookup {
  enum class State { kMissing, kHit, kRejected };
  State state = State::kMissing;
  std::string payload;  // kHit
  std::string problem;  // kRejected: what was wrong with the file
};

// Reads the entry at `path` written for `key`.
CacheLookup readCacheEntry(const std::filesystem::path& path, std::string_view key);

// What is wrong with `bytes` as the entry for `key`, or empty when nothing is.
std::string cacheEntryProblem(std::string_view bytes, std::string_view key,
                              std::string* payload = nullptr);

// "kiln: cache entry PATH: PROBLEM; deleted, rebuilding it" on stderr, at
// most once per path in a process.
void reportRejectedCacheEntry(const std::filesystem::path& path, const std::string& problem);

// A fresh temporary name beside `path`: "<path>.tmp-<pid>-<n>".
std::filesystem::path cacheTempPath(const std::filesystem::path& path);
// The writer's pid when `name` is such a temporary name.
bool parseCacheTempName(std::string_view name, pid_t* pid);
// Deletes (files and folders) the temporary names in `dir` whose writing
// process no longer exists on this host; returns how many.
int removeStaleCacheTemps(const std::filesystem::path& dir);

// Tests only: called by writeCacheEntry once half the payload is written to
// the temporary file (before fsync and rename).
void setCacheWriteHookForTesting(std::function<void(const std::filesystem::path& temp)> hook);

}  // namespace kiln
