#include "runtime/cuda/executor/weight_upload.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

namespace kiln::cuda {

Status uploadToDevice(const CudaDriver& d, const DriverExtras& x, CUcontext context,
                      const std::vector<HostToDeviceCopy>& copies, const UploadOptions& options) {
  // Chunks of at most chunk_bytes, handed out in order through one counter.
  std::vector<HostToDeviceCopy> chunks;
  uint64_t total = 0;
  for (const HostToDeviceCopy& c : copies) {
    for (uint64_t at = 0; at < c.bytes; at += options.chunk_bytes)
      chunks.push_back({c.src + at, std::min(options.chunk_bytes, c.bytes - at), c.dst + CUdeviceptr(at)});
    total += c.bytes;
  }
  if (chunks.empty()) return {};
  const int threads = int(std::clamp<size_t>(size_t(options.threads), 1, chunks.size()));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status error;
  auto fail = [&](Status s) {
    std::lock_guard lock(error_mutex);
    if (error.ok()) error = std::move(s);
    failed = true;
  };

  auto worker = [&] {
    if (Status s = d.check(d.cuCtxSetCurrent(context), "cuCtxSetCurrent (weight upload)"); !s.ok())
      return fail(std::move(s));
    CUstream stream = nullptr;
    void* staging[2] = {nullptr, nullptr};
    CUevent landed[2] = {nullptr, nullptr};
    bool pending[2] = {false, false};
    Status s = d.check(x.streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate (weight upload)");
    for (int b = 0; b < 2 && s.ok(); ++b) {
      s = d.check(x.memAllocHost(&staging[b], options.chunk_bytes), "cuMemAllocHost (weight upload staging)");
      if (s.ok()) s = d.check(d.cuEventCreate(&landed[b], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    }
    for (int turn = 0; s.ok() && !failed; ++turn) {
      const size_t i = next.fetch_add(1);
      if (i >= chunks.size()) break;
      const int b = turn % 2;
      if (pending[b]) s = d.check(d.cuEventSynchronize(landed[b]), "weight upload (host-to-device copy)");
      if (!s.ok()) break;
      std::memcpy(staging[b], chunks[i].src, chunks[i].bytes);  // faults the mapped pages in
      s = d.check(x.memcpyHtoDAsync(chunks[i].dst, staging[b], chunks[i].bytes, stream), "cuMemcpyHtoDAsync (weights)");
      if (s.ok()) s = d.check(d.cuEventRecord(landed[b], stream), "cuEventRecord");
      pending[b] = true;
      done += chunks[i].bytes;
    }
    if (stream) {
      Status synced = d.check(x.streamSynchronize(stream), "weight upload (host-to-device copy)");
      if (s.ok()) s = synced;
      x.streamDestroy(stream);
    }
    for (int b = 0; b < 2; ++b) {
      if (landed[b]) d.cuEventDestroy_v2(landed[b]);
      if (staging[b]) x.memFreeHost(staging[b]);
    }
    if (!s.ok()) fail(std::move(s));
  };

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  if (options.progress) {
    // Report from this thread while the workers copy.
    while (done < total && !failed) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "\r[kiln] uploading weights: %.1f / %.1f GB (%.1f GB/s)   ", double(done) / 1e9,
                   double(total) / 1e9, double(done) / 1e9 / std::max(s, 1e-3));
    }
  }
  for (std::thread& t : pool) t.join();
  if (options.progress) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "\r[kiln] uploaded %.1f GB of weights in %.2f s (%.1f GB/s)          \n",
                 double(total) / 1e9, s, double(total) / 1e9 / std::max(s, 1e-3));
  }
  return error;
}

}  // namespace kiln::cuda
