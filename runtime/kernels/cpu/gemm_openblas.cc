// cpu_f32_gemm_openblas: OpenBLAS cblas_sgemm as a kernel variant (contracts in
// gemm_library.h).
#include <pthread.h>
#include <strings.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>

#include <cblas.h>
#include <fmt/format.h>

#include "cliffguard/device.h"
#include "cliffguard/log.h"
#include "kernels/cpu/gemm_library.h"

extern "C" char* openblas_get_corename(void);

namespace cliffguard::cpu {
namespace {

constexpr int kOpenblasDefaultTimeout = 28;  // OPENBLAS_THREAD_TIMEOUT when unset

// Guards OpenBLAS's process-global thread count: calls with threads = 1 hold it
// shared (the count is 1 then), a call with threads > 1 exclusively. Writers are
// preferred, so a stream of single-threaded calls cannot starve a threaded one.
pthread_rwlock_t* ThreadCountLock() {
  static pthread_rwlock_t* lock = [] {
    auto* l = new pthread_rwlock_t;  // never destroyed: calls may run during exit
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(l, &attr);
    pthread_rwlockattr_destroy(&attr);
    openblas_set_num_threads(1);
    return l;
  }();
  return lock;
}

class LockGuard {
 public:
  LockGuard(pthread_rwlock_t* l, bool exclusive) : l_(l) { exclusive ? pthread_rwlock_wrlock(l) : pthread_rwlock_rdlock(l); }
  ~LockGuard() { pthread_rwlock_unlock(l_); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  pthread_rwlock_t* l_;
};

// OpenBLAS's idle workers yield in a loop for 2^OPENBLAS_THREAD_TIMEOUT cycles (2^28,
// about 0.1 s, unless set) after they start and after every threaded call, and take
// the core that the next call's threads need: an own 2-thread GEMM measured 4x slower
// in that window. Said once per process, at the first threaded call.
void WarnIfWorkersSpin() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("OPENBLAS_THREAD_TIMEOUT");
    const int set = env ? std::atoi(env) : 0;
    // OpenBLAS keeps its default (28) for values <= 0 and clamps the rest to [4, 30].
    const int timeout = set <= 0 ? kOpenblasDefaultTimeout : std::clamp(set, 4, 30);
    if (timeout <= kMaxQuietOpenblasThreadTimeout) return;
    LogMessage(LogLevel::kWarn,
               fmt::format("cpu_f32_gemm_openblas: OPENBLAS_THREAD_TIMEOUT is {}: OpenBLAS's idle workers spin for "
                           "2^{} cycles after each threaded call and slow the threaded calls after it; set "
                           "OPENBLAS_THREAD_TIMEOUT={} in the process environment (README, \"Library schedules\")",
                           env ? env : "unset", timeout, kQuietOpenblasThreadTimeout));
  });
}

}  // namespace

Status OpenblasGemm(const KernelVariant& self, const GemmArgs& args, const ParamValues& params) {
  if (args.dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: runs f32, not {}", self.name, DTypeName(args.dtype)));
  if (args.alpha == 0.0f) {
    ScaleC(args);
    return Status::Ok();
  }
  if (args.lda > INT_MAX || args.ldb > INT_MAX || args.ldc > INT_MAX)
    return InvalidArgument(fmt::format("{}: lda={}, ldb={}, ldc={}: cblas_sgemm takes leading dimensions <= {}",
                                       self.name, args.lda, args.ldb, args.ldc, INT_MAX));
  const int threads = params[kOpenblasThreads];
  LockGuard lock(ThreadCountLock(), threads > 1);
  if (threads > 1) {
    WarnIfWorkersSpin();
    openblas_set_num_threads(threads);
  } else if (openblas_get_num_threads() != 1) {
    // Changed by code outside this variant; every holder of the shared lock wants 1.
    openblas_set_num_threads(1);
  }
  cblas_sgemm(CblasRowMajor, args.trans_a ? CblasTrans : CblasNoTrans, args.trans_b ? CblasTrans : CblasNoTrans,
              int(args.m), int(args.n), int(args.k), args.alpha, static_cast<const float*>(args.a), int(args.lda),
              static_cast<const float*>(args.b), int(args.ldb), args.beta, static_cast<float*>(args.c),
              int(args.ldc));
  if (threads > 1) openblas_set_num_threads(1);
  return Status::Ok();
}

const char* OpenblasCore() {
  const char* core = openblas_get_corename();
  return core ? core : "unknown";
}

uint32_t OpenblasCoreIsa(const char* core) {
  auto is = [core](const char* name) { return core && strcasecmp(core, name) == 0; };
  if (is("SkylakeX") || is("Cooperlake") || is("SapphireRapids")) return kIsaAvx512;
  if (is("Haswell") || is("Zen") || is("Excavator")) return kIsaAvx2;
  return kIsaScalar;
}

const char* OpenblasCoreTypeFor(uint32_t isa) {
  if (isa & kIsaAvx512) return "SkylakeX";
  if (isa & kIsaAvx2) return "Haswell";
  return nullptr;
}

Status OpenblasSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device) {
  if (key.m() > INT_MAX || key.n() > INT_MAX || key.k() > INT_MAX)
    return Unimplemented(fmt::format("{}: {}: cblas_sgemm takes 32-bit int m, n and k (<= {})", v.name, key.ToString(), INT_MAX));
  return OpenblasCoreFits(v, OpenblasCore(), device.isa);
}

Status OpenblasCoreFits(const KernelVariant& v, const char* core, uint32_t isa) {
  const char* wanted = OpenblasCoreTypeFor(isa);
  if (wanted && OpenblasCoreIsa(core) < OpenblasCoreIsa(wanted))
    return Unimplemented(fmt::format(
        "{}: OpenBLAS runs its {} kernels on this {} host, below the host's vector ISA (its CPU detection does not "
        "know the CPU); start the process with OPENBLAS_CORETYPE={} to use it (the cliffguard command does)",
        v.name, core ? core : "unknown", IsaLevelName(isa), wanted));
  return Status::Ok();
}

Status OpenblasCheck(const KernelVariant& v, const OpKey& /*key*/, const ParamValues& p, const DeviceInfo& device) {
  if (p[kOpenblasThreads] > device.threads)
    return InvalidArgument(
        fmt::format("{}: threads={} must be <= device threads={}", v.name, p[kOpenblasThreads], device.threads));
  return Status::Ok();
}

void OpenblasFitDefaults(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device, ParamValues& p) {
  p[kOpenblasThreads] = ThreadsForWork(key, device);
}

bool OpenblasPreferredDefault(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device) {
  return ShapeClassOf(key) == ShapeClass::kLarge || OpenblasTinyFits(key, device);
}

bool OpenblasTinyFits(const OpKey& key, const DeviceInfo& device) {
  bool tiny = false;
  if (PerCallSmallNnOnAvx512(key, device))
    tiny = key.Flops() < kOpenblasTinyMaxFlops && (device.vendor != kCpuVendorIntel || key.k() <= kOpenblasTinyIntelMaxK);
  else if (GemmShallowNtDecodeHolds(key, device))
    tiny = key.k() >= kOpenblasTinyNtMinK && key.Flops() < kOpenblasTinyNtMaxFlops;
#ifdef CLIFFGUARD_WITH_ONEDNN
  else
    tiny = device.vendor == kCpuVendorIntel && key.k() <= kOpenblasTinySkinnyMaxK &&
           key.Flops() < kOpenblasTinySkinnyMaxFlops && OnednnMayTakeDefaults(device) &&
           OnednnSkinnySgemmFits(key, device);
#endif
  return tiny && (OpenblasCoreIsa(OpenblasCore()) & kIsaAvx512) != 0;  // the library call last
}

std::vector<ParamValues> OpenblasCandidates(const KernelVariant& /*v*/, const OpKey& key, const DeviceInfo& device) {
  std::vector<ParamValues> out;
  for (int32_t threads : ThreadCountCandidates(device, ThreadsForWork(key, device))) {
    ParamValues p{};
    p[kOpenblasThreads] = threads;
    out.push_back(p);
  }
  return out;
}

}  // namespace cliffguard::cpu
