// The small-m GEMM driver (ISA-free): transposed A gathered into rows, n split
// across threads in 16-column-aligned ranges, each range handed to the variant's
// row kernel.
#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/gemv_kernel.h"
#include "kernels/cpu/gemv_params.h"
#include "kernels/cpu/thread_pool.h"

namespace cliffguard::cpu {
namespace {

thread_local std::vector<float> tls_a;  // op(A) rows when A is stored transposed

struct Job {
  GemvTask task;
  void (*rows)(const GemvTask&);
  int64_t units;  // 16-column units of n
};

void RunRange(void* ctx, int tid, int nt) {
  const Job& job = *static_cast<const Job*>(ctx);
  const int64_t q = job.units / nt, r = job.units % nt;
  const int64_t u0 = tid * q + std::min<int64_t>(tid, r), u1 = u0 + q + (tid < r ? 1 : 0);
  GemvTask t = job.task;
  t.j0 = std::min(job.task.j1, u0 * 16);
  t.j1 = std::min(job.task.j1, u1 * 16);
  if (t.j0 < t.j1) job.rows(t);
}

}  // namespace

Status GemvCheck(const KernelVariant& v, const OpKey&, const ParamValues& p, const DeviceInfo& device) {
  if (p[kGemvThreads] > device.threads)
    return InvalidArgument(
        fmt::format("{}: threads={} must be <= device threads={}", v.name, p[kGemvThreads], device.threads));
  return Status::Ok();
}

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
  const double b_bytes = 4.0 * double(key.n()) * double(key.k());
  const int64_t limit = std::max<int64_t>(1, std::min<double>(device.threads, b_bytes / double(1 << 20)));
  int32_t threads = 1;
  for (int32_t t : kGemmThreadValues)
    if (t <= limit) threads = t;
  p[kGemvThreads] = threads;
  if (kTransB) {
    // At least 8 accumulators (two FMA ports of 4 cycles' latency), every row of A in
    // one pass where the registers allow (NTMaxRows).
    const bool wide = (v.isa & kIsaAvx512) != 0;
    p[kGemvBlock] = (wide ? key.m() <= 3 : key.m() == 1) ? 8 : wide || key.m() == 2 ? 4 : 2;
  } else {
    // A thread's whole rows of C when their m rows fit in 32 KiB of L1: B then streams
    // through once, front to back. Otherwise the widest block whose rows fit in 16 KiB.
    const int64_t cols = (key.n() + threads - 1) / threads;
    for (int32_t nb : kGemvNbValues)
      if (key.m() * nb * 4 <= (16 << 10)) p[kGemvBlock] = nb;
    if (key.m() * cols * 4 <= (32 << 10))
      for (int32_t nb : kGemvNbValues)
        if (nb >= cols) {
          p[kGemvBlock] = std::max(p[kGemvBlock], nb);
          break;
        }
  }
}
template void GemvFitDefaults<false>(const KernelVariant&, const OpKey&, const DeviceInfo&, ParamValues&);
template void GemvFitDefaults<true>(const KernelVariant&, const OpKey&, const DeviceInfo&, ParamValues&);

Status GemvF32(const GemmArgs& args, const ParamValues& p, void (*rows)(const GemvTask&)) {
  Job job;
  GemvTask& t = job.task;
  t.m = static_cast<int>(args.m);
  t.k = args.k;
  t.a = static_cast<const float*>(args.a);
  t.lda = args.lda;
  if (args.trans_a) {  // A is k x m: gather op(A) as m rows of k (m <= 16, cheap next to B)
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
  t.block = p[kGemvBlock];
  job.rows = rows;
  job.units = (args.n + 15) / 16;
  const int nt = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(p[kGemvThreads], job.units), 1,
                                                      ThreadPool::kMaxThreads));
  ThreadPool::Global().Run(nt, &RunRange, &job);
  return Status::Ok();
}

}  // namespace cliffguard::cpu
