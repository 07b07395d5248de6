#include "runtime/support/cache_entry.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "runtime/support/content_hash.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'C', 'H'};
constexpr std::string_view kTempMarker = ".tmp-";

std::mutex& hookMutex() {
  static std::mutex m;
  return m;
}
std::function<void(const fs::path&)>& writeHook() {
  static std::function<void(const fs::path&)> hook;
  return hook;
}

void putU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
uint64_t getLE(std::string_view bytes, size_t offset, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= uint64_t(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return v;
}

uint64_t checksum(std::string_view key, std::string_view payload) {
  Fnv1a64 h;
  h.add(key);
  h.add(payload);
  return h.value();
}

// Writes all of `data`, retrying short writes and EINTR; false with errno set.
bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EIO;
      return false;
    }
    data.remove_prefix(size_t(n));
  }
  return true;
}

// The folder's entry for the renamed file reaches the disk too; best effort
// (some file systems refuse fsync on a folder).
void syncFolder(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

bool processExists(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH); }

}  // namespace

fs::path cacheTempPath(const fs::path& path) {
  static std::atomic<uint64_t> counter{0};
  return fs::path(path.string() + fmt::format("{}{}-{}", kTempMarker, ::getpid(), counter++));
}

bool parseCacheTempName(std::string_view name, pid_t* pid) {
  size_t at = name.rfind(kTempMarker);
  if (at == std::string_view::npos) return false;
  std::string_view rest = name.substr(at + kTempMarker.size());
  size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash + 1 == rest.size()) return false;
  int64_t value = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (i == dash) continue;
    if (rest[i] < '0' || rest[i] > '9') return false;
    if (i < dash) {
      value = value * 10 + (rest[i] - '0');
      if (value > INT32_MAX) return false;
    }
  }
  *pid = pid_t(value);
  return true;
}

int removeStaleCacheTemps(const fs::path& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    pid_t pid = 0;
    if (!parseCacheTempName(entry.path().filename().string(), &pid) || processExists(pid)) continue;
    std::error_code remove_ec;
    if (fs::remove_all(entry.path(), remove_ec) > 0 && !remove_ec) ++removed;
  }
  return removed;
}

void setCacheWriteHookForTesting(std::function<void(const fs::path&)> hook) {
  std::lock_guard lock(hookMutex());
  writeHook() = std::move(hook);
}

Status writeCacheEntry(const fs::path& path, std::string_view key, std::string_view payload) {
  std::string header(kMagic, sizeof(kMagic));
  putU32(header, kCacheEntryVersion);
  putU32(header, uint32_t(key.size()));
  putU64(header, payload.size());
  putU64(header, checksum(key, payload));
  header.append(key);

  const fs::path temp = cacheTempPath(path);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return makeError("{}: cannot create a cache file: {}", temp.string(), std::strerror(errno));
  auto fail = [&](const char* what) -> Status {
    const int error = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    return makeError("{}: cannot {} the cache file: {}", temp.string(), what, std::strerror(error));
  };
  const size_t half = payload.size() / 2;
  if (!writeAll(fd, header) || !writeAll(fd, payload.substr(0, half))) return fail("write");
  {
    std::function<void(const fs::path&)> hook;
    {
      std::lock_guard lock(hookMutex());
      hook = writeHook();
    }
    if (hook) hook(temp);
  }
  if (!writeAll(fd, payload.substr(half))) return fail("write");
  if (::fsync(fd) != 0) return fail("sync");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return makeError("{}: cannot close the cache file: {}", temp.string(), std::strerror(error));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return makeError("{}: cannot rename the cache file into place: {}", path.string(), std::strerror(error));
  }
  syncFolder(path.parent_path());
  return Status::success();
}

std::string cacheEntryProblem(std::string_view bytes, std::string_view key, std::string* payload) {
  if (bytes.size() < kCacheEntryHeaderBytes)
    return fmt::format("truncated: {} bytes, shorter than the {}-byte header", bytes.size(),
                       kCacheEntryHeaderBytes);
  if (bytes.substr(0, sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic)))
    return "not a kiln cache entry (its first 8 bytes are not \"KILNCACH\")";
  const uint64_t version = getLE(bytes, 8, 4);
  if (version != kCacheEntryVersion)
    return fmt::format("format version {}, expected {}", version, kCacheEntryVersion);
  const uint64_t key_len = getLE(bytes, 12, 4), payload_len = getLE(bytes, 16, 8);
  const uint64_t stored_sum = getLE(bytes, 24, 8);
  const uint64_t body = bytes.size() - kCacheEntryHeaderBytes;
  if (key_len > body || payload_len > body - key_len)
    return fmt::format("truncated: the header promises {} key and {} payload bytes, the file holds {}",
                       key_len, payload_len, body);
  if (key_len + payload_len != body)
    return fmt::format("{} bytes past the {} key and {} payload bytes the header promises",
                       body - key_len - payload_len, key_len, payload_len);
  std::string_view stored_key = bytes.substr(kCacheEntryHeaderBytes, key_len);
  std::string_view data = bytes.substr(kCacheEntryHeaderBytes + key_len);
  const uint64_t sum = checksum(stored_key, data);
  if (sum != stored_sum)
    return fmt::format("checksum mismatch: the header says {:016x}, the contents hash to {:016x}",
                       stored_sum, sum);
  if (stored_key != key)
    return fmt::format("written for key \"{}\", expected \"{}\"", stored_key, key);
  if (payload) payload->assign(data);
  return {};
}

void reportRejectedCacheEntry(const fs::path& path, const std::string& problem) {
  static std::mutex mutex;
  static std::set<std::string> reported;
  std::lock_guard lock(mutex);
  if (!reported.insert(path.string()).second) return;
  std::fprintf(stderr, "kiln: cache entry %s: %s; deleted, rebuilding it\n", path.c_str(), problem.c_str());
  std::fflush(stderr);
}

CacheLookup readCacheEntry(const fs::path& path, std::string_view key) {
  CacheLookup out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;  // missing (or unreadable: rebuilt as for a miss)
  std::string bytes;
  struct stat st{};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(size_t(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.problem = fmt::format("cannot read it: {}", std::strerror(errno));
      break;
    }
    if (n == 0) break;
    bytes.append(buffer, size_t(n));
  }
  ::close(fd);
  if (out.problem.empty()) out.problem = cacheEntryProblem(bytes, key, &out.payload);
  if (out.problem.empty()) {
    out.state = CacheLookup::State::kHit;
    return out;
  }
  out.state = CacheLookup::State::kRejected;
  out.payload.clear();
  reportRejectedCacheEntry(path, out.problem);
  std::error_code ec;
  fs::remove(path, ec);
  return out;
}

}  // namespace kiln
