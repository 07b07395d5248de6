#include "tools/kiln/artifact_seal.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "runtime/support/cache_entry.h"
#include "runtime/support/content_hash.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

struct FileHash {
  std::string relative;
  uint64_t size = 0;
  std::string hash;
};

Result<FileHash> hashFile(const fs::path& dir, const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return makeError("{}: cannot read", file.string());
  Fnv1a64 h;
  uint64_t size = 0;
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    const auto n = size_t(in.gcount());
    h.add(std::string_view(buffer.data(), n));
    size += n;
  }
  if (in.bad()) return makeError("{}: cannot read", file.string());
  return FileHash{fs::relative(file, dir).generic_string(), size, h.hex()};
}

}  // namespace

Status sealArtifact(const fs::path& dir, const std::string& key) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file() && it->path().filename() != kArtifactSealName) files.push_back(it->path());
  if (ec) return makeError("{}: cannot list the artifact: {}", dir.string(), ec.message());
  std::sort(files.begin(), files.end());
  std::string listing;
  for (const fs::path& file : files) {
    auto h = hashFile(dir, file);
    if (!h.ok()) return h.error();
    listing += fmt::format("{} {} {}\n", h->size, h->hash, h->relative);
  }
  return writeCacheEntry(dir / kArtifactSealName, key, listing);
}

std::string artifactProblem(const fs::path& dir, const std::string& key) {
  const fs::path seal = dir / kArtifactSealName;
  std::error_code ec;
  if (!fs::exists(seal, ec)) return fmt::format("it has no {} (not written whole, or by an older kiln)", kArtifactSealName);
  std::ifstream in(seal, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::string listing;
  if (std::string problem = cacheEntryProblem(bytes.str(), key, &listing); !problem.empty())
    return fmt::format("{}: {}", kArtifactSealName, problem);
  std::istringstream lines(listing);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    uint64_t size = 0;
    std::string hash, relative;
    fields >> size >> hash;
    std::getline(fields >> std::ws, relative);
    if (relative.empty()) return fmt::format("{}: a malformed line \"{}\"", kArtifactSealName, line);
    auto now = hashFile(dir, dir / relative);
    if (!now.ok()) return fmt::format("{} is missing or unreadable", relative);
    if (now->size != size) return fmt::format("{} has {} bytes, the seal records {}", relative, now->size, size);
    if (now->hash != hash) return fmt::format("{} hashes to {}, the seal records {}", relative, now->hash, hash);
    ++count;
  }
  if (count == 0) return fmt::format("{} lists no files", kArtifactSealName);
  return {};
}

}  // namespace kiln
