#include "runtime/support/content_hash.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace kiln {

std::string Fnv1a64::hex() const { return fmt::format("{:016x}", state_); }

Result<std::string> sampledContentHash(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return makeError("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return makeError("{}: cannot stat: {}", path, std::strerror(error));
  }
  const uint64_t size = uint64_t(st.st_size);
  constexpr uint64_t kEdge = 1ull << 20, kBlock = 64ull << 10;
  // (offset, length) ranges, in file order.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  if (size <= kSampledWholeBytes) {
    ranges.push_back({0, size});
  } else {
    ranges.push_back({0, kEdge});
    const uint64_t first = kEdge, last = size - kEdge - kBlock;
    for (int i = 0; i < kSampledBlocks; ++i)
      ranges.push_back({first + (last - first) * uint64_t(i) / uint64_t(kSampledBlocks - 1), kBlock});
    ranges.push_back({size - kEdge, kEdge});
  }
  Fnv1a64 h;
  h.addU64(size);
  std::vector<char> buffer(kEdge);
  for (auto [offset, length] : ranges) {
    while (length > 0) {
      const size_t want = size_t(std::min<uint64_t>(length, buffer.size()));
      ssize_t n = ::pread(fd, buffer.data(), want, off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int error = n < 0 ? errno : EIO;
        ::close(fd);
        return makeError("{}: cannot read {} bytes at offset {}: {}", path, want, offset,
                         n < 0 ? std::strerror(error) : "the file ended early");
      }
      h.add(std::string_view(buffer.data(), size_t(n)));
      offset += uint64_t(n);
      length -= uint64_t(n);
    }
  }
  ::close(fd);
  return h.hex();
}

}  // namespace kiln
