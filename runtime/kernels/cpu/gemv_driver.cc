// The small-m GEMM driver (ISA-free): transposed A gathered into rows, n split
// across threads in 16-column-aligned ranges, each range handed to the variant's
// row kernel; or (nn `order` 2) k split across threads, their partial sums added.
#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/gemv_kernel.h"
#include "kernels/cpu/gemv_params.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/thread_scratch.h"

namespace cliffguard::cpu {
namespace {

thread_local std::vector<float> tls_a;  // op(A) rows when A is stored transposed
thread_local ThreadScratch tls_a_blocks;  // op(A) in nt depth blocks (`kc`)
thread_local ThreadScratch tls_panels;  // op(B) packed, or transposed (tall), per call (a call without packed_b)

struct Job {
  GemvTask task;
  void (*rows)(const GemvTask&);
  int64_t units;      // units of n split across threads
  int64_t unit_cols;  // columns per unit
};

void RunRange(void* ctx, int tid, int nt) {
  const Job& job = *static_cast<const Job*>(ctx);
  const int64_t q = job.units / nt, r = job.units % nt;
  const int64_t u0 = tid * q + std::min<int64_t>(tid, r), u1 = u0 + q + (tid < r ? 1 : 0);
  GemvTask t = job.task;
  t.j0 = std::min(job.task.j1, u0 * job.unit_cols);
  t.j1 = std::min(job.task.j1, u1 * job.unit_cols);
  if (t.j0 < t.j1) job.rows(t);
}

int VectorRegs(const KernelVariant& v) { return (v.isa & kIsaAvx512) ? 32 : 16; }

// A gathered into rows when it is stored transposed (m <= 16, cheap next to B); the
// task's A, B, C and scalars from args, all of n.
GemvTask TaskOf(const GemmArgs& args, int block) {
  GemvTask t;
  t.m = static_cast<int>(args.m);
  t.k = args.k;
  t.a = static_cast<const float*>(args.a);
  t.lda = args.lda;
  if (args.trans_a) {
    tls_a.resize(size_t(args.m * args.k));
    for (int64_t pp = 0; pp < args.k; ++pp)
      for (int64_t i = 0; i < args.m; ++i) tls_a[size_t(i * args.k + pp)] = t.a[pp * args.lda + i];
    t.a = tls_a.data();
    t.lda = args.k;
  }
  t.b = static_cast<const float*>(args.b);
  t.ldb = args.ldb;
  t.c = static_cast<float*>(args.c);
  t.ldc = args.ldc;
  t.alpha = args.alpha;
  t.beta = args.beta;
  t.j0 = 0;
  t.j1 = args.n;
  t.block = block;
  return t;
}

// Threads splitting k: thread t of nt sums its contiguous run of rows of B into its
// m x n slice of `partial` (alpha 1, beta 0); the caller then adds the slices.
struct SplitKJob {
  GemvTask task;
  void (*rows)(const GemvTask&);
  float* partial;
};

void RunSplitKRange(void* ctx, int tid, int nt) {
  const SplitKJob& job = *static_cast<const SplitKJob*>(ctx);
  const GemvTask& all = job.task;
  const int64_t q = all.k / nt, r = all.k % nt;
  const int64_t p0 = tid * q + std::min<int64_t>(tid, r), p1 = p0 + q + (tid < r ? 1 : 0);
  GemvTask t = all;
  t.a = all.a + p0;
  t.b = all.b + p0 * all.ldb;
  t.k = p1 - p0;
  t.c = job.partial + int64_t{tid} * all.m * all.j1;
  t.ldc = all.j1;
  t.alpha = 1.0f;
  t.beta = 0.0f;
  if (t.k > 0) job.rows(t);
  else std::fill(t.c, t.c + all.m * all.j1, 0.0f);
}

thread_local ThreadScratch tls_partial;  // the split-k slices of a call

// C[:, j0:j1] = alpha * (the slices summed) + beta * C, summed into slice 0.
struct SplitKSum {
  const GemvTask* task;
  float* partial;
  int slices;
};

void SumSplitKColumns(const SplitKSum& s, int64_t j0, int64_t j1) {
  const GemvTask& all = *s.task;
  const int64_t slice = all.m * all.j1;
  for (int64_t i = 0; i < all.m; ++i) {
    float* sum = s.partial + i * all.j1;
    for (int t = 1; t < s.slices; ++t) {
      const float* part = sum + t * slice;
      for (int64_t j = j0; j < j1; ++j) sum[j] += part[j];
    }
    float* c = all.c + i * all.ldc;
    if (all.beta == 0.0f)
      for (int64_t j = j0; j < j1; ++j) c[j] = all.alpha * sum[j];
    else
      for (int64_t j = j0; j < j1; ++j) c[j] = all.alpha * sum[j] + all.beta * c[j];
  }
}

void RunSplitKSum(void* ctx, int tid, int nt) {
  const SplitKSum& s = *static_cast<const SplitKSum*>(ctx);
  const int64_t units = CeilDiv(s.task->j1, 16), q = units / nt, r = units % nt;
  const int64_t u0 = tid * q + std::min<int64_t>(tid, r), u1 = u0 + q + (tid < r ? 1 : 0);
  SumSplitKColumns(s, std::min(s.task->j1, u0 * 16), std::min(s.task->j1, u1 * 16));
}

// More than two slices are summed by the threads that made them, each a range of
// columns; two by the caller alone (measured on 2 cores, where a second dispatch
// would cost more than the sum).
Status GemvSplitK(const Job& job, int32_t threads) {
  const GemvTask& all = job.task;
  const int64_t slice = all.m * all.j1;
  const int nt = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(threads, all.k), 1, ThreadPool::kMaxThreads));
  float* partial = tls_partial.Get(nt * slice);
  if (partial == nullptr)
    return Internal(fmt::format("gemv: cannot allocate {} bytes of split-k scratch", nt * slice * int64_t{sizeof(float)}));
  SplitKJob sk{all, job.rows, partial};
  SplitKSum sum{&all, partial, ThreadPool::Global().Run(nt, &RunSplitKRange, &sk)};
  if (sum.slices > 2) ThreadPool::Global().Run(sum.slices, &RunSplitKSum, &sum);
  else SumSplitKColumns(sum, 0, all.j1);
  return Status::Ok();
}

void RunJob(Job& job, int32_t threads) {
  const int nt = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(threads, job.units), 1, ThreadPool::kMaxThreads));
  ThreadPool::Global().Run(nt, &RunRange, &job);
}

// `rows` rows of `cols` (leading dimension ld) into dst, dense: as they are, or
// transposed (cols rows of `rows`).
void CopyRows(const float* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  for (int64_t i = 0; i < rows; ++i) std::copy_n(src + i * ld, cols, dst + i * cols);
}
void TransposeRows(const float* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * ld + j];
}

}  // namespace

void NTPackDepthBlocks(const float* a, int64_t lda, int64_t m, int64_t k, int64_t kc, float* dst) {
  for (int64_t p0 = 0; p0 < k; p0 += kc, dst += m * kc)
    for (int64_t i = 0; i < m; ++i) std::copy_n(a + i * lda + p0, std::min(kc, k - p0), dst + i * kc);
}

int32_t GemvThreads(const OpKey& key, const DeviceInfo& device) {
  return ThreadsWithin(WeightElements(key) * double(DTypeSize(key.dtype)) / kGemvBytesPerThread, device);
}

template <bool kTransB>
Status GemvCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device) {
  if (p[kGemvThreads] > device.threads)
    return InvalidArgument(
        fmt::format("{}: threads={} must be <= device threads={}", v.name, p[kGemvThreads], device.threads));
  if (kTransB && p[kGemvNTKc] > 0 && p[kGemvOrder] != 0)
    return InvalidArgument(
        fmt::format("{}: kc={} runs order 0 only (order={})", v.name, p[kGemvNTKc], p[kGemvOrder]));
  if (!kTransB && p[kGemvUnrollK] == kGemvNNDeepStepRows && (key.m() != 1 || !(v.isa & kIsaAvx512)))
    return InvalidArgument(fmt::format("{}: unroll_k={} runs m = 1 on AVX-512 only (m={})", v.name, p[kGemvUnrollK],
                                       key.m()));
  return Status::Ok();
}
template Status GemvCheck<false>(const KernelVariant&, const OpKey&, const ParamValues&, const DeviceInfo&);
template Status GemvCheck<true>(const KernelVariant&, const OpKey&, const ParamValues&, const DeviceInfo&);

template <bool kTransB>
Status GemvSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo&) {
  if (key.m() > GemvMaxM(kTransB))
    return Unimplemented(fmt::format("{}: m={} is over {}", v.name, key.m(), GemvMaxM(kTransB)));
  if (key.trans_b != kTransB)
    return Unimplemented(fmt::format("{}: runs B stored {}, the key has it {}", v.name, kTransB ? "n x k" : "k x n",
                                     key.trans_b ? "n x k" : "k x n"));
  return Status::Ok();
}
template Status GemvSupports<false>(const KernelVariant&, const OpKey&, const DeviceInfo&);
template Status GemvSupports<true>(const KernelVariant&, const OpKey&, const DeviceInfo&);

template <bool kTransB>
void GemvFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  const int32_t threads = GemvThreads(key, device);
  p[kGemvThreads] = threads;
  if (kTransB) {
    // At least 8 accumulators (two FMA ports of 4 cycles' latency), every row of A in
    // one pass where the registers allow (NTMaxRows).
    const bool wide = (v.isa & kIsaAvx512) != 0;
    p[kGemvBlock] = (wide ? key.m() <= 3 : key.m() == 1) ? 8 : wide || key.m() == 2 ? 4 : 2;
    p[kGemvOrder] = device.vendor == kCpuVendorAmd &&
                    key.k() * int64_t(DTypeSize(key.dtype)) <= GemvRowsWholeMaxBytes(key.m(), threads);
    p[kGemvNTPrefetch] = GemvNTDefaultPrefetch(device.vendor == kCpuVendorIntel);
    p[kGemvNTKc] = GemvNTDefaultKc(device.vendor == kCpuVendorIntel, wide, key.m(), key.k());
  } else {
    // Rows of B up to kGemvNNRowsWholeMaxBytes: a tile of C in registers, its threads
    // splitting k where all of n fits it (splitting such short rows by n, they read
    // each other's lines), else n where a thread's columns fit it. Otherwise steps of
    // rows, their threads splitting k where a thread's share of a row split by n would
    // be at most kGemvNNSplitKMaxThreadRowBytes.
    const int regs = VectorRegs(v);  // 32 vectors of 16 floats (AVX-512) or 16 of 8 (AVX2)
    const int64_t tile = int64_t{GemvNNWholeVectors(regs, key.m())} * (regs == 32 ? 16 : 8);
    const bool short_rows =
        key.m() <= GemvMaxM(false) && key.n() * int64_t(DTypeSize(key.dtype)) <= kGemvNNRowsWholeMaxBytes;
    const int64_t cols = (key.n() + threads - 1) / threads;
    const bool split_k = threads > 1 && cols * int64_t(DTypeSize(key.dtype)) <= kGemvNNSplitKMaxThreadRowBytes;
    p[kGemvOrder] = short_rows && key.n() <= tile ? (threads > 1 ? kGemvNNTileSplitK : kGemvNNTile)
                    : short_rows && cols <= tile  ? kGemvNNTile
                    : split_k                     ? kGemvNNStepsSplitK
                                                  : kGemvNNSteps;
    // A thread's whole rows of C when their m rows fit in 32 KiB of L1 (on Intel, at m up
    // to kGemvNNWholeRowsIntelMaxM, when its columns fit the widest block): B then
    // streams through once, front to back. Otherwise the widest block whose rows fit in 16 KiB.
    for (int32_t nb : kGemvNbValues)
      if (key.m() * nb * 4 <= (16 << 10)) p[kGemvBlock] = nb;
    const bool intel_whole_rows = device.vendor == kCpuVendorIntel && key.m() <= kGemvNNWholeRowsIntelMaxM &&
                                  cols <= std::end(kGemvNbValues)[-1];
    if (key.m() * cols * 4 <= (32 << 10) || intel_whole_rows)
      for (int32_t nb : kGemvNbValues)
        if (nb >= cols) {
          p[kGemvBlock] = std::max(p[kGemvBlock], nb);
          break;
        }
    if (p[kGemvOrder] == kGemvNNStepsSplitK) p[kGemvBlock] = std::end(kGemvNbValues)[-1];
    const int64_t row_bytes = key.n() * int64_t(DTypeSize(key.dtype));
    const bool deep = device.vendor == kCpuVendorAmd && key.m() == 1 && (v.isa & kIsaAvx512) &&
                      !GemvNNTiles(p[kGemvOrder]) && row_bytes >= kGemvNNDeepStepsMinRowBytes &&
                      row_bytes <= kGemvNNDeepStepsMaxRowBytes && row_bytes % kL1AliasBytes != 0;
    p[kGemvUnrollK] = deep ? kGemvNNDeepStepRows : 8;
  }
}
template void GemvFitDefaults<false>(const KernelVariant&, const OpKey&, const DeviceInfo&, ParamValues&);
template void GemvFitDefaults<true>(const KernelVariant&, const OpKey&, const DeviceInfo&, ParamValues&);

Status GemvF32(const GemmArgs& args, const ParamValues& p, void (*rows)(const GemvTask&)) {
  Job job{TaskOf(args, p[kGemvBlock]), rows, (args.n + 15) / 16, 16};
  job.task.rows_whole = GemvNNTiles(p[kGemvOrder]);  // nt: order 1, rows of B read whole
  if (args.trans_b) {
    job.task.prefetch_next_tile = p[kGemvNTPrefetch] != 0;
    if (p[kGemvNTKc] > 0 && p[kGemvNTKc] < args.k) {
      GemvTask& t = job.task;
      t.kc = p[kGemvNTKc];
      const int64_t floats = NTDepthBlockFloats(t.m, t.k, t.kc);
      float* blocks = tls_a_blocks.Get(floats);
      if (!blocks)
        return Internal(
            fmt::format("gemv: cannot allocate {} bytes for A in depth blocks", floats * int64_t{sizeof(float)}));
      NTPackDepthBlocks(t.a, t.lda, t.m, t.k, t.kc, blocks);
      t.a = blocks;
      t.lda = t.kc;
    }
  } else {
    job.task.step_rows = p[kGemvUnrollK];
  }
  if (GemvNNSplitsK(p[kGemvOrder]) && p[kGemvThreads] > 1) return GemvSplitK(job, p[kGemvThreads]);
  RunJob(job, p[kGemvThreads]);
  return Status::Ok();
}

Status GemvTallSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo&) {
  if (key.n() > kGemvTallMaxN) return Unimplemented(fmt::format("{}: n={} is over {}", v.name, key.n(), kGemvTallMaxN));
  if (key.trans_a)
    return Unimplemented(fmt::format("{}: runs A stored m x k (rows of k), the key has it k x m", v.name));
  return Status::Ok();
}

bool GemvTallPreferredDefault(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  return GemvTallSupports(v, key, device).ok() && key.m() > GemvMaxM(key.trans_b);
}

void GemvTallFitDefaults(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  const double a_bytes = double(key.m()) * double(key.k()) * double(DTypeSize(key.dtype));
  p[kGemvThreads] = ThreadsWithin(a_bytes / kGemvBytesPerThread, device);
  p[kGemvBlock] = 8;
  p[kGemvTallFormParam] = GemvTallDefaultForm(key);
  p[kGemvTallPrefetchParam] = key.n() > 1 ? 1 : 0;
}

size_t GemvTallWeightsBytes(const KernelVariant& /*v*/, const OpKey& key, const ParamValues& /*p*/) {
  return size_t(key.n() * key.k()) * sizeof(float);
}

Status GemvTallPackWeights(const KernelVariant& v, const OpKey& key, const ParamValues& p, const void* weights,
                           int64_t ld, void* dst) {
  if (key.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: packs f32 weights, not {}", v.name, DTypeName(key.dtype)));
  const bool dot = p[kGemvTallFormParam] == kGemvTallDot;
  const float* b = static_cast<const float*>(weights);
  float* out = static_cast<float*>(dst);
  // The form's layout is B's own or its transpose: op(B)^T (n x k) is B as stored when trans_b.
  if (dot == key.trans_b) CopyRows(b, ld, dot ? key.n() : key.k(), dot ? key.k() : key.n(), out);
  else TransposeRows(b, ld, dot ? key.k() : key.n(), dot ? key.n() : key.k(), out);
  return Status::Ok();
}

Status GemvTallF32(const KernelVariant& v, const GemmArgs& args, const ParamValues& p, void (*rows)(const GemvTask&),
                   void (*tall)(const GemvTask&)) {
  const bool dot = p[kGemvTallFormParam] == kGemvTallDot;
  GemvTask t;
  t.m = static_cast<int>(args.n);
  t.k = args.k;
  t.a = static_cast<const float*>(args.packed_b ? args.packed_b : args.b);
  t.lda = args.packed_b ? (dot ? args.k : args.n) : args.ldb;
  if (!args.packed_b && dot != args.trans_b) {
    float* bt = tls_panels.Get(args.n * args.k);
    if (!bt)
      return Internal(fmt::format("{}: cannot allocate {} bytes for B transposed", v.name,
                                  args.n * args.k * static_cast<int64_t>(sizeof(float))));
    // B stored k x n for dot products (its n x k transpose), or n x k for broadcasts.
    TransposeRows(static_cast<const float*>(args.b), args.ldb, dot ? args.k : args.n, dot ? args.n : args.k, bt);
    t.a = bt;
    t.lda = dot ? args.k : args.n;
  }
  t.b = static_cast<const float*>(args.a);
  t.ldb = args.lda;
  t.c = static_cast<float*>(args.c);
  t.ldc = 1;
  t.ldc_col = args.ldc;
  t.alpha = args.alpha;
  t.beta = args.beta;
  t.j0 = 0;
  t.j1 = args.m;
  t.block = p[kGemvBlock];
  t.prefetch = p[kGemvTallPrefetchParam];  // dot form: the nt kernel's tile order 0
  Job job{t, dot ? rows : tall, CeilDiv(args.m, 16), 16};
  RunJob(job, p[kGemvThreads]);
  return Status::Ok();
}

void GemvPanelPack(const float* b, int64_t ld, bool trans_b, int64_t n, int64_t k, int64_t panel, int64_t width,
                   float* dst) {
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    const int64_t w = std::min(panel, n - j0);
    const int64_t pw = RoundUp(w, width);  // `panel` but for a narrower last panel
    if (trans_b) {  // column j of op(B) is row j of B: read along k, write down the panel
      for (int64_t j = 0; j < w; ++j)
        for (int64_t pp = 0; pp < k; ++pp) dst[pp * pw + j] = b[(j0 + j) * ld + pp];
    } else {
      for (int64_t pp = 0; pp < k; ++pp) std::copy_n(b + pp * ld + j0, w, dst + pp * pw);
    }
    if (w < pw)
      for (int64_t pp = 0; pp < k; ++pp) std::fill(dst + pp * pw + w, dst + (pp + 1) * pw, 0.0f);
    dst += k * pw;
  }
}

Status GemvPackedSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo&) {
  if (!key.constant_weights)
    return Unimplemented(fmt::format("{}: runs constant-weights keys (B packed once by a plan); {} packs per call",
                                     v.name, key.ToString()));
  if (key.m() > kGemvPackedMaxM)
    return Unimplemented(fmt::format("{}: m={} is over {}", v.name, key.m(), kGemvPackedMaxM));
  if (!GemvPackedTileFits(key.m(), kGemvPackedMinNv, VectorRegs(v)))
    return Unimplemented(fmt::format("{}: m={} rows by nv={} vectors of accumulators do not fit the ISA's {} vector "
                                     "registers",
                                     v.name, key.m(), kGemvPackedMinNv, VectorRegs(v)));
  if (key.n() < v.config.gemm.nr)
    return Unimplemented(fmt::format("{}: n={} is under one vector of {} columns", v.name, key.n(), v.config.gemm.nr));
  return Status::Ok();
}

Status GemvPackedCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device) {
  if (p[kGemvThreads] > device.threads)
    return InvalidArgument(
        fmt::format("{}: threads={} must be <= device threads={}", v.name, p[kGemvThreads], device.threads));
  if (!GemvPackedTileFits(key.m(), p[kGemvBlock], VectorRegs(v)))
    return InvalidArgument(fmt::format("{}: nv={} with m={} needs {} vector registers, the ISA has {}", v.name,
                                       p[kGemvBlock], key.m(), key.m() * p[kGemvBlock] + p[kGemvBlock] + 2,
                                       VectorRegs(v)));
  return Status::Ok();
}

bool GemvPackedPreferredDefault(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  return v.isa == kIsaAvx2 && key.constant_weights && key.m() == 1 && (device.isa & kIsaAvx512) &&
         device.vendor == kCpuVendorAmd && device.family == 25;
}

void GemvPackedFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  p[kGemvThreads] = GemvThreads(key, device);
  const int64_t vectors = CeilDiv(key.n(), v.config.gemm.nr);
  p[kGemvBlock] = kGemvNvValues[0];
  for (int32_t nv : kGemvNvValues)
    if (GemvPackedTileFits(std::min(key.m(), kGemvPackedMaxM), nv, VectorRegs(v)) && (nv == 1 || vectors >= nv))
      p[kGemvBlock] = nv;
  if (key.m() > kGemvPackedWideMaxM) p[kGemvBlock] = std::min(p[kGemvBlock], int32_t{2});
  p[kGemvPrefetch] = GemvPackedDefaultPrefetch(device.vendor == kCpuVendorIntel, key.m());
}

size_t GemvPackedWeightsBytes(const KernelVariant& v, const OpKey& key, const ParamValues& /*p*/) {
  return size_t(GemvPanelFloats(key.n(), key.k(), v.config.gemm.nr)) * sizeof(float);
}

Status GemvPackWeights(const KernelVariant& v, const OpKey& key, const ParamValues& p, const void* weights, int64_t ld,
                       void* dst) {
  if (key.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: packs f32 weights, not {}", v.name, DTypeName(key.dtype)));
  GemvPanelPack(static_cast<const float*>(weights), ld, key.trans_b, key.n(), key.k(),
                int64_t{v.config.gemm.nr} * p[kGemvBlock], v.config.gemm.nr, static_cast<float*>(dst));
  return Status::Ok();
}

Status GemvPackedF32(const KernelVariant& v, const GemmArgs& args, const ParamValues& p,
                     void (*panels)(const GemvTask&)) {
  const int64_t panel = int64_t{v.config.gemm.nr} * p[kGemvBlock];
  Job job{TaskOf(args, p[kGemvBlock]), panels, CeilDiv(args.n, panel), panel};
  job.task.prefetch = p[kGemvPrefetch];
  if (args.packed_b) {
    job.task.b = static_cast<const float*>(args.packed_b);
  } else {
    const int64_t floats = GemvPanelFloats(args.n, args.k, v.config.gemm.nr);
    float* scratch = tls_panels.Get(floats);
    if (!scratch)
      return Internal(fmt::format("{}: cannot allocate {} bytes to pack B for a call without packed weights", v.name,
                                  floats * static_cast<int64_t>(sizeof(float))));
    GemvPanelPack(static_cast<const float*>(args.b), args.ldb, args.trans_b, args.n, args.k, panel, v.config.gemm.nr,
                  scratch);
    job.task.b = scratch;
  }
  job.task.ldb = 0;
  RunJob(job, p[kGemvThreads]);
  return Status::Ok();
}

}  // namespace cliffguard::cpu
