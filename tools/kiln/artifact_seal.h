// The compiled-artifact cache's proof that an artifact directory is whole:
// a cache entry (runtime/support/cache_entry.h) named artifact.kcache inside
// the directory, keyed by the cache key's full text, whose payload lists
// every other file with its size and FNV-1a 64 hash:
//   <size> <16 hex digits> <path relative to the directory>\n
// kiln-compile writes the artifact into a temporary directory, kiln seals
// it there and renames it into place; a directory that fails the check
// (unsealed, a file missing, changed or truncated) is never loaded.
#pragma once

#include <filesystem>
#include <string>

#include "runtime/support/error.h"

namespace kiln {

inline constexpr const char* kArtifactSealName = "artifact.kcache";

// Lists and hashes every file under `dir` into its seal.
Status sealArtifact(const std::filesystem::path& dir, const std::string& key);

// What is wrong with the sealed artifact `dir` for `key`, or empty.
std::string artifactProblem(const std::filesystem::path& dir, const std::string& key);

}  // namespace kiln
