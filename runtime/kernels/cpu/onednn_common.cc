#include "kernels/cpu/onednn_common.h"

#include <pthread.h>
#include <strings.h>

#include <cstring>
#include <mutex>

#include "kernels/cpu/gemm_params.h"  // ThreadCountCandidates, ThreadsWithin, WeightElements

// The OpenMP runtime oneDNN runs on (libgomp, linked beside it). Declared here
// rather than through <omp.h>, which only some compilers ship.
extern "C" {
int omp_get_max_threads(void);
void omp_set_num_threads(int);
}

namespace cliffguard::cpu::onednn {
namespace {

thread_local bool t_started_team = false;  // this thread ran a oneDNN variant on an OpenMP team
thread_local bool t_team_stale = false;    // ... and is now the copy of it in a child of fork()

void OnForkChild() {
  if (t_started_team) t_team_stale = true;
}

}  // namespace

const dnnl::engine& Engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

OmpThreads::OmpThreads(int threads) : prev_(omp_get_max_threads()) {
  if (prev_ != threads) omp_set_num_threads(threads);
}

OmpThreads::~OmpThreads() {
  if (omp_get_max_threads() != prev_) omp_set_num_threads(prev_);
}

bool OmpWaitsPassively() {
  static const bool passive = [] {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    return (policy && ::strcasecmp(policy, "passive") == 0) || (spin && std::strcmp(spin, "0") == 0);
  }();
  return passive;
}

Status CheckThreads(const KernelVariant& v, int32_t threads, const DeviceInfo& device) {
  if (threads > device.threads)
    return InvalidArgument(fmt::format("{}: threads={} must be <= device threads={}", v.name, threads, device.threads));
  if (threads > 1 && !OmpWaitsPassively())
    return FailedPrecondition(fmt::format(
        "{}: threads={} needs OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0) in the process environment: idle "
        "OpenMP workers otherwise spin and starve cliffguard's own thread pool",
        v.name, threads));
  return Status::Ok();
}

int32_t FittedThreads(const OpKey& key, const DeviceInfo& device) {
  if (!OmpWaitsPassively()) return 1;
  const double weights = WeightElements(key) * double(DTypeSize(key.dtype));
  return ThreadsWithin(key.Flops() / kOnednnFlopsPerThread + weights / kOnednnWeightBytesPerThread, device);
}

std::vector<int32_t> ThreadCandidates(const OpKey& key, const DeviceInfo& device) {
  std::vector<int32_t> out;
  for (int32_t t : ThreadCountCandidates(device, FittedThreads(key, device)))
    if (t == 1 || OmpWaitsPassively()) out.push_back(t);
  return out;
}

Status AdmitTeam(const KernelVariant& self, int threads) {
  if (threads <= 1) return Status::Ok();
  if (t_team_stale)
    return FailedPrecondition(fmt::format(
        "{}: threads={} on a thread that ran an OpenMP team before fork(): libgomp cannot start one in the "
        "child (it would wait forever); use threads=1 here",
        self.name, threads));
  static std::once_flag atfork;
  std::call_once(atfork, [] { ::pthread_atfork(nullptr, nullptr, &OnForkChild); });
  t_started_team = true;
  return Status::Ok();
}

Status Check(const KernelVariant& self, dnnl_status_t st, const char* what) {
  if (st == dnnl_success) return Status::Ok();
  return Internal(fmt::format("{}: oneDNN {} failed (status {})", self.name, what, int(st)));
}

dnnl_status_t SetHandle(const dnnl::memory& mem, const void* ptr, const dnnl::stream& s) {
  return dnnl_memory_set_data_handle_v2(mem.get(), const_cast<void*>(ptr), s.get());
}

dnnl_status_t Bind(const dnnl::memory& mem, const void*& bound, const void* ptr, const dnnl::stream& s) {
  if (bound == ptr) return dnnl_success;
  const dnnl_status_t st = SetHandle(mem, ptr, s);
  if (st == dnnl_success) bound = ptr;
  return st;
}

dnnl::memory Unbound(const dnnl::memory::desc& md) { return dnnl::memory(md, Engine(), DNNL_MEMORY_NONE); }

PerCallReorder::PerCallReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to)
    : from_(Unbound(from)), to_(Unbound(to)) {
  reorder_ = dnnl::reorder(from_, to_);
}

Status PerCallReorder::Run(const KernelVariant& self, const void* src, void* dst, const dnnl::stream& s,
                           const char* src_name, const char* dst_name) const {
  // Step names are formatted only on failure: a call allocates nothing.
  dnnl_status_t st = SetHandle(from_, src, s);
  if (st != dnnl_success) return Check(self, st, fmt::format("binding {}", src_name).c_str());
  st = SetHandle(to_, dst, s);
  if (st != dnnl_success) return Check(self, st, fmt::format("binding {}", dst_name).c_str());
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from_.get()}, {DNNL_ARG_TO, to_.get()}};
  st = dnnl_primitive_execute(reorder_.get(), s.get(), 2, args);
  if (st != dnnl_success) return Check(self, st, fmt::format("reorder of {}", src_name).c_str());
  return Status::Ok();
}

void Reorder(const dnnl::memory::desc& from, const void* src, const dnnl::memory::desc& to, void* dst,
             dnnl::stream& s) {
  dnnl::memory in(from, Engine(), const_cast<void*>(src));
  dnnl::memory out(to, Engine(), dst);
  dnnl::reorder(in, out).execute(s, in, out);
  s.wait();
}

}  // namespace cliffguard::cpu::onednn
