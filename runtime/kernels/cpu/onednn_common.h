// What the oneDNN kernel variants share (internal): cpu_f32_gemm_onednn
// (gemm_onednn.cc, contracts in gemm_library.h) and cpu_f32_conv2d_onednn
// (conv2d_onednn.cc, contracts in conv2d_library.h). Built only with
// CLIFFGUARD_WITH_ONEDNN.
//
// OpenMP. oneDNN runs on OpenMP (libgomp). Each call sets the calling thread's
// OpenMP thread count (omp_set_num_threads, a per-thread setting) to its schedule's
// `threads` for its scope (OmpThreads) and restores it after; with threads = 1
// oneDNN runs on the calling thread and starts no OpenMP team. With threads > 1
// libgomp keeps a team per calling thread, whose idle workers spin for
// GOMP_SPINCOUNT (libgomp's default: 300000 spins) before they sleep, beside
// cliffguard's own pool: on a 2-core host the own pool's next call then ran up to
// 25x slower. libgomp reads its wait policy once at start, so the runtime cannot
// change it: check() accepts threads > 1 only when the process environment has
// OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0) (CheckThreads), and fit_defaults and
// candidates keep to threads = 1 otherwise (FittedThreads, ThreadCandidates).
//
// fork(). libgomp cannot start a team in a child of fork() on a thread that had
// one before the fork (it waits forever for the parent's workers). AdmitTeam tracks,
// per thread and for every oneDNN variant together, whether the thread started a
// team: in a child of fork(), a call with threads > 1 on a thread that started one
// in the parent (with any oneDNN variant) returns kFailedPrecondition instead of
// hanging; threads = 1 still runs.
//
// Primitive caches. Each variant keeps, per calling thread, a PrimitiveCache: its
// stream, at most kMaxCachedPrimitives primitives keyed by what changes them (least
// recently used evicted) and a reorder buffer that grows on demand. After its first
// call with a key, a call allocates nothing here. Not shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "cliffguard/kernel.h"

namespace cliffguard::cpu::onednn {

// The CPU engine every oneDNN variant creates its primitives and memory on (created
// on first use, thread-safe; never destroyed: thread_local caches holding primitives
// may outlive statics).
const dnnl::engine& Engine();

// Sets the calling thread's OpenMP thread count to `threads` for its scope, then
// restores the previous count.
class OmpThreads {
 public:
  explicit OmpThreads(int threads);
  ~OmpThreads();
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int prev_;
};

// OMP_WAIT_POLICY=passive or GOMP_SPINCOUNT=0 in the environment (read once).
bool OmpWaitsPassively();

// check()'s rule on `threads`: <= device.threads (kInvalidArgument), and > 1 only
// with passive OpenMP waiting (kFailedPrecondition); messages name the variant.
Status CheckThreads(const KernelVariant& v, int32_t threads, const DeviceInfo& device);
// Work per thread below which a oneDNN default does not add threads (flops). With
// passive waiting, each call that wakes the OpenMP team pays for it: measured on the
// Intel host (bench/RESULTS.md, "oneDNN's threads in the built-in default"), 2
// threads took 2.25x and 2.07x the time of 1 thread at 2.6 and 6.1 MFLOP, 1.35x at
// 12.3, 1.03x at 16.8 and 0.87x at 33.6 MFLOP; the default at 25.2 MFLOP ran about 5%
// faster on 2 threads than on 1. So 2 threads from 20 MFLOP, less the weights' share.
inline constexpr double kOnednnFlopsPerThread = 10e6;
// Bytes of weights per thread, added to the flops' share: a call also takes the time
// of reading its weights. 16 x 768 x 768 (19 MFLOP, 2.25 MiB of weights) took 0.78x
// the time on 2 threads, 64 x 256 x 512 (17 MFLOP, 0.5 MiB) 1.03x; the default at
// 16 x 512 x 768 (13 MFLOP, 1.5 MiB) and 32 x 512 x 512 (17 MFLOP, 1 MiB) ran
// 0.91-0.97x the better library on 1 thread and 1.00-1.08x on 2.
inline constexpr double kOnednnWeightBytesPerThread = 768 << 10;
// fit_defaults()'s threads: ThreadsWithin (gemm_params.h) of the work's flops over
// kOnednnFlopsPerThread plus its weights' bytes over kOnednnWeightBytesPerThread,
// with passive OpenMP waiting; else 1.
int32_t FittedThreads(const OpKey& key, const DeviceInfo& device);
// The thread counts CheckThreads accepts on `device`, FittedThreads first
// (ThreadCountCandidates, gemm_params.h, less those > 1 without passive waiting).
std::vector<int32_t> ThreadCandidates(const OpKey& key, const DeviceInfo& device);

// Call before running `self` on `threads` OpenMP threads from the calling thread
// (see fork() above): kFailedPrecondition for threads > 1 on a thread that started
// an OpenMP team before fork(); otherwise Ok, and with threads > 1 the thread is
// recorded as one that starts a team. Thread-safe.
Status AdmitTeam(const KernelVariant& self, int threads);

// Runs `f` (returning Status) with exceptions turned into kInternal naming the
// variant and `what` (STYLE H7).
template <typename F>
Status Guard(const KernelVariant& self, const char* what, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const dnnl::error& e) {
    return Internal(fmt::format("{}: {}: oneDNN: {} (status {})", self.name, what, e.what(), int(e.status)));
  } catch (const std::exception& e) {
    return Internal(fmt::format("{}: {}: {}", self.name, what, e.what()));
  }
}

// Ok for dnnl_success, else kInternal naming the variant and the failed step.
Status Check(const KernelVariant& self, dnnl_status_t st, const char* what);

// Binds `ptr` to `mem` (binding zero-fills the padding of blocked layouts: a write).
dnnl_status_t SetHandle(const dnnl::memory& mem, const void* ptr, const dnnl::stream& s);
// SetHandle unless `bound` already is `ptr`; records `ptr` in `bound` on success (a
// packed buffer shared by threads is bound once per thread).
dnnl_status_t Bind(const dnnl::memory& mem, const void*& bound, const void* ptr, const dnnl::stream& s);

// A memory object of layout `md` on Engine() without a buffer: its handle is bound
// per call. Throws dnnl::error.
dnnl::memory Unbound(const dnnl::memory::desc& md);

// A reorder a primitive runs per call, from the call's buffer into the calling
// thread's reorder buffer (both bound per call). Empty until constructed with its
// layouts.
class PerCallReorder {
 public:
  PerCallReorder() = default;
  // From layout `from` into layout `to`. Throws dnnl::error.
  PerCallReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

  // Queues on `s` the reorder of `src` into `dst` (at least to.get_size() bytes).
  // Binding `dst` zero-fills the layout's padding, so it is bound on every call:
  // another primitive's reorder into the same buffer may have written it. Errors
  // name the variant, `src_name` and `dst_name` ("binding B", "reorder of B").
  Status Run(const KernelVariant& self, const void* src, void* dst, const dnnl::stream& s, const char* src_name,
             const char* dst_name) const;

 private:
  dnnl::reorder reorder_;
  dnnl::memory from_, to_;
};

// Reorders `src` (layout `from`) into `dst` (layout `to`) on `s` and waits. Throws
// dnnl::error.
void Reorder(const dnnl::memory::desc& from, const void* src, const dnnl::memory::desc& to, void* dst,
             dnnl::stream& s);

inline constexpr size_t kMaxCachedPrimitives = 64;  // per calling thread and variant

// Hash of a primitive key: feed every field to Mix, then take Value.
class KeyHasher {
 public:
  void Mix(uint64_t v) {
    h_ ^= v + 0x9e3779b97f4a7c15ULL + (h_ << 6) + (h_ >> 2);
    h_ *= 0xff51afd7ed558ccdULL;
  }
  size_t Value() const { return size_t(h_); }

 private:
  uint64_t h_ = 0x9e3779b97f4a7c15ULL;
};

// One variant's primitives for one thread (see Primitive caches above). Key: what a
// primitive was created for (equality-comparable, hashed by Hash); Prim: the
// primitive with the memory objects bound per call. Use one per thread and variant
// through ThisThread().
template <typename Key, typename Hash, typename Prim>
class PrimitiveCache {
 public:
  PrimitiveCache() : stream_(Engine()) { prims_.reserve(kMaxCachedPrimitives + 1); }
  PrimitiveCache(const PrimitiveCache&) = delete;
  PrimitiveCache& operator=(const PrimitiveCache&) = delete;

  // The calling thread's cache of this type (created on first use).
  static PrimitiveCache& ThisThread() {
    thread_local PrimitiveCache cache;
    return cache;
  }

  dnnl::stream& stream() { return stream_; }

  // The primitive for `key`, made by `create()` (a std::unique_ptr<Prim>) on a miss
  // after evicting the least recently used when the cache is full. Throws what
  // `create` throws.
  template <typename Create>
  Prim& Lookup(const Key& key, Create&& create) {
    auto it = prims_.find(key);
    if (it == prims_.end()) {
      if (prims_.size() >= kMaxCachedPrimitives) {
        auto oldest = prims_.begin();
        for (auto i = prims_.begin(); i != prims_.end(); ++i)
          if (i->second.last_use < oldest->second.last_use) oldest = i;
        prims_.erase(oldest);
      }
      it = prims_.emplace(key, Entry{std::forward<Create>(create)(), 0}).first;
    }
    it->second.last_use = ++clock_;
    return *it->second.prim;
  }

  // The reorder buffer, 64-byte aligned and at least `bytes` long (grown when
  // shorter, its contents then lost); nullptr when it cannot be allocated.
  void* Scratch(size_t bytes) {
    if (scratch_bytes_ < bytes) {
      void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      if (!p) return nullptr;
      scratch_.reset(p);
      scratch_bytes_ = bytes;
    }
    return scratch_.get();
  }

 private:
  struct Entry {
    std::unique_ptr<Prim> prim;
    uint64_t last_use;
  };
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };

  dnnl::stream stream_;
  std::unordered_map<Key, Entry, Hash> prims_;
  uint64_t clock_ = 0;
  std::unique_ptr<void, Free> scratch_;
  size_t scratch_bytes_ = 0;
};

}  // namespace cliffguard::cpu::onednn
