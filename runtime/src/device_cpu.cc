#include <cpuid.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cliffguard/device.h"
#include "cliffguard/op_key.h"
#ifdef CLIFFGUARD_WITH_OPENBLAS
#include "kernels/cpu/gemm_library.h"  // OpenblasCore, OpenblasCoreIsa, OpenblasCoreTypeFor
#endif

namespace cliffguard {
namespace {

struct CpuProbe {
  std::string vendor, brand;
  int family = 0, model = 0;
  uint32_t isa = kIsaScalar;
  int64_t l1d = 0, l2 = 0, l3 = 0;
};

uint64_t Xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t{edx} << 32) | eax;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

// Deterministic cache parameters from cpuid leaf 4 (Intel) or 0x8000001D (AMD).
void ProbeCaches(CpuProbe& p, uint32_t leaf) {
  for (uint32_t sub = 0; sub < 16; ++sub) {
    unsigned a, b, c, d;
    __cpuid_count(leaf, sub, a, b, c, d);
    const unsigned type = a & 0x1f;
    if (type == 0) break;
    const unsigned level = (a >> 5) & 0x7;
    const int64_t ways = ((b >> 22) & 0x3ff) + 1, parts = ((b >> 12) & 0x3ff) + 1, line = (b & 0xfff) + 1,
                  sets = int64_t{c} + 1;
    const int64_t bytes = ways * parts * line * sets;
    if (level == 1 && (type == 1 || type == 3)) p.l1d = bytes;
    if (level == 2) p.l2 = bytes;
    if (level == 3) p.l3 = bytes;
  }
}

CpuProbe ProbeOnce() {
  CpuProbe p;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return p;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  p.vendor = vendor;

  __cpuid(1, a, b, c, d);
  const int base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
  p.family = base_family == 0xf ? base_family + int((a >> 20) & 0xff) : base_family;
  p.model = (base_family == 0x6 || base_family == 0xf) ? (int((a >> 16) & 0xf) << 4) + base_model : base_model;
  const bool osxsave = c & bit_OSXSAVE, avx = c & bit_AVX, fma = c & bit_FMA;
  const uint64_t xcr0 = osxsave ? Xgetbv0() : 0;
  const bool ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xe6) == 0xe6;
  if (max_leaf >= 7) {
    unsigned a7, b7, c7, d7;
    __cpuid_count(7, 0, a7, b7, c7, d7);
    const bool avx2 = b7 & bit_AVX2;
    const bool avx512 = (b7 & bit_AVX512F) && (b7 & bit_AVX512BW) && (b7 & bit_AVX512DQ) && (b7 & bit_AVX512VL);
    if (avx && avx2 && fma && ymm_os) p.isa |= kIsaAvx2;
    if ((p.isa & kIsaAvx2) && avx512 && zmm_os) p.isa |= kIsaAvx512;
  }

  unsigned ext_max = __get_cpuid_max(0x80000000, nullptr);
  if (ext_max >= 0x80000004) {
    unsigned regs[12];
    for (unsigned i = 0; i < 3; ++i)
      __cpuid(0x80000002 + i, regs[4 * i], regs[4 * i + 1], regs[4 * i + 2], regs[4 * i + 3]);
    char brand[49] = {};
    std::memcpy(brand, regs, 48);
    p.brand = Trim(brand);
  }
  if (p.vendor == kCpuVendorAmd && ext_max >= 0x8000001D) {
    ProbeCaches(p, 0x8000001D);
  } else if (max_leaf >= 4) {
    ProbeCaches(p, 4);
  }
  if (p.l1d == 0) p.l1d = 32 << 10;
  if (p.l2 == 0) p.l2 = 1 << 20;
  return p;
}

const CpuProbe& Probe() {
  static const CpuProbe probe = ProbeOnce();  // thread-safe init-once (STYLE H5)
  return probe;
}

}  // namespace

const char* BackendName(Backend b) {
  switch (b) {
#define CG_BACKEND(e, name) \
  case Backend::e: return #name;
#include "cliffguard/defs/backends.inc"
  }
  return "?";
}

const char* IsaLevelName(uint32_t mask) {
  static constexpr struct {
    uint32_t bit;
    const char* name;
  } kLevels[] = {
#define CG_ISA(e, bit, name, meaning) {e, #name},
#include "cliffguard/defs/isa_levels.inc"
  };
  const char* out = kLevels[0].name;
  for (const auto& l : kLevels)
    if (mask & l.bit) out = l.name;
  return out;
}

int AffinityCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string_view> SplitOn(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

bool ParsePositive(std::string_view s, int64_t& out) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out > 0;
}

// mountinfo escapes space, tab, newline and backslash in paths as \ooo.
std::string UnescapeMountPath(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t j) { return j < s.size() && s[j] >= '0' && s[j] <= '7'; };
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// quota / period in CPUs, or 0 when the directory sets no limit.
double CgroupDirLimit(const std::string& dir, bool v2) {
  int64_t quota = 0, period = 0;
  if (v2) {
    const std::string text = ReadSmallFile(dir + "/cpu.max");  // the fields view it
    const auto fields = SplitOn(text, ' ');
    if (fields.size() != 2 || !ParsePositive(fields[0], quota) || !ParsePositive(fields[1], period)) return 0;
  } else if (!ParsePositive(ReadSmallFile(dir + "/cpu.cfs_quota_us"), quota) ||
             !ParsePositive(ReadSmallFile(dir + "/cpu.cfs_period_us"), period)) {
    return 0;
  }
  return double(quota) / double(period);
}

// The lowest limit from the process's cgroup up to the hierarchy's mount point.
double HierarchyLimit(const std::string& root, std::string_view mount_root, std::string_view mount_point,
                      std::string_view cgroup_path, bool v2) {
  std::string rel(cgroup_path);  // the cgroup below the mount's root (a container sees its own as "/")
  if (mount_root != "/") {
    if (cgroup_path.substr(0, mount_root.size()) == mount_root &&
        (cgroup_path.size() == mount_root.size() || cgroup_path[mount_root.size()] == '/'))
      rel = std::string(cgroup_path.substr(mount_root.size()));
    else
      rel.clear();
  }
  const std::string top = root + std::string(mount_point);
  std::string dir = top + (rel == "/" ? "" : rel);
  double lowest = 0;
  for (;;) {
    const double l = CgroupDirLimit(dir, v2);
    if (l > 0 && (lowest == 0 || l < lowest)) lowest = l;
    if (dir.size() <= top.size()) return lowest;
    dir.resize(dir.rfind('/'));
  }
}

}  // namespace

double CgroupCpuLimit(std::string_view root_sv) {
  const std::string root(root_sv);
  std::string v2_path, v1_path;
  bool has_v2 = false, has_v1 = false;
  const std::string cgroups = ReadSmallFile(root + "/proc/self/cgroup");
  for (std::string_view line : SplitOn(cgroups, '\n')) {
    const size_t a = line.find(':'), b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.substr(0, a) == "0" && controllers.empty()) {
      v2_path = path;
      has_v2 = true;
    }
    for (std::string_view c : SplitOn(controllers, ','))
      if (c == "cpu") {
        v1_path = path;
        has_v1 = true;
      }
  }
  double lowest = 0;
  const std::string mounts = ReadSmallFile(root + "/proc/self/mountinfo");
  for (std::string_view line : SplitOn(mounts, '\n')) {
    const size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    const auto head = SplitOn(line.substr(0, dash), ' '), tail = SplitOn(line.substr(dash + 3), ' ');
    if (head.size() < 5 || tail.size() < 3) continue;
    const std::string mount_root = UnescapeMountPath(head[3]), mount_point = UnescapeMountPath(head[4]);
    double l = 0;
    if (tail[0] == "cgroup2" && has_v2) {
      l = HierarchyLimit(root, mount_root, mount_point, v2_path, true);
    } else if (tail[0] == "cgroup" && has_v1) {
      bool cpu = false;
      for (std::string_view o : SplitOn(tail[2], ',')) cpu = cpu || o == "cpu";
      if (cpu) l = HierarchyLimit(root, mount_root, mount_point, v1_path, false);
    }
    if (l > 0 && (lowest == 0 || l < lowest)) lowest = l;
  }
  return lowest;
}

int AvailableCpus() {
  const int affinity = AffinityCpus();
  const double limit = CgroupCpuLimit();
  if (limit <= 0) return affinity;
  const int capped = static_cast<int>(std::ceil(limit - 1e-9));
  return std::clamp(capped, 1, affinity);
}

StatusOr<int> ResolveThreadBudget(int requested, std::string_view origin) {
  if (requested < 0 || requested > kMaxThreadBudget)
    return InvalidArgument(fmt::format("{}={} must be in [0, {}] (0: CLIFFGUARD_THREADS, else every CPU available)",
                                       origin, requested, kMaxThreadBudget));
  if (requested > 0) return requested;
  if (const char* env = std::getenv("CLIFFGUARD_THREADS")) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || errno == ERANGE || v < 1 || v > kMaxThreadBudget)
      return InvalidArgument(fmt::format("CLIFFGUARD_THREADS='{}' must be an integer in [1, {}] (unset: every CPU available)",
                                         env, kMaxThreadBudget));
    return static_cast<int>(v);
  }
  return AvailableCpus();
}

int DefaultThreadBudget() {
  auto b = ResolveThreadBudget(0, "threads");
  return b.ok() ? *b : AvailableCpus();
}

namespace {

uint64_t Fnv1a(std::string_view basis) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed: stable across builds and hosts
  for (unsigned char ch : basis) h = (h ^ ch) * 0x100000001b3ULL;
  return MixHash64(h);
}

}  // namespace

void FinalizeDeviceInfo(DeviceInfo& d) {
  if (d.backend == Backend::kCpu) {
    d.properties = {{"family", d.family}, {"model", d.model},       {"isa", d.isa},
                    {"threads", d.threads}, {"l1d_bytes", d.l1d_bytes}, {"l2_bytes", d.l2_bytes},
                    {"l3_bytes", d.l3_bytes}};
    // The hardware and the budget; not the ISA bits (a new probed feature must not
    // turn existing bundles into device misses).
    std::string basis = fmt::format("{}|{}|{}", BackendName(d.backend), d.vendor, d.name);
    for (const auto& [k, v] : d.properties)
      if (k != "isa") basis += fmt::format("|{}={}", k, v);
    d.fingerprint = fmt::format("cpu-t{}-{:016x}", d.threads, Fnv1a(basis));
    // cliffguard 0.1: arch and every property, isa included.
    std::string legacy = fmt::format("{}|{}|{}|{}", BackendName(d.backend), d.vendor, d.name, d.arch);
    for (const auto& [k, v] : d.properties) legacy += fmt::format("|{}={}", k, v);
    d.legacy_fingerprint = fmt::format("cpu-{}-t{}-{:016x}", d.arch, d.threads, Fnv1a(legacy));
    return;
  }
  // The hardware, not the software versions (a driver update must not turn bundles
  // into device misses; a cuBLASLt schedule carries the cuBLAS version it needs).
  std::string basis = fmt::format("{}|{}|{}|{}", BackendName(d.backend), d.vendor, d.name, d.arch);
  for (const auto& [k, v] : d.properties)
    if (!k.ends_with("_version")) basis += fmt::format("|{}={}", k, v);
  d.fingerprint = fmt::format("{}-{}-{:016x}", BackendName(d.backend), d.arch, Fnv1a(basis));
  d.legacy_fingerprint.clear();
}

DeviceInfo HostCpuDevice(int threads) {
  const CpuProbe& p = Probe();
  DeviceInfo d;
  d.backend = Backend::kCpu;
  d.spec = "cpu";
  d.name = p.brand.empty() ? "unknown x86-64" : p.brand;
  d.vendor = p.vendor;
  d.isa = p.isa;
  d.arch = IsaLevelName(p.isa);
  d.family = p.family;
  d.model = p.model;
  d.threads = threads > 0 ? threads : DefaultThreadBudget();
  d.l1d_bytes = p.l1d;
  d.l2_bytes = p.l2;
  d.l3_bytes = p.l3;
  FinalizeDeviceInfo(d);
  return d;
}

bool SetQuietLibraryThreadEnvironment() {
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT")) {
    ::setenv("OPENBLAS_THREAD_TIMEOUT", std::to_string(kQuietOpenblasThreadTimeout).c_str(), 1);
    changed = true;
  }
  return changed;
}

bool SetOpenblasCoreEnvironment() {
#ifdef CLIFFGUARD_WITH_OPENBLAS
  const char* wanted = cpu::OpenblasCoreTypeFor(Probe().isa);
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (!wanted || cpu::OpenblasCoreIsa(cpu::OpenblasCore()) >= cpu::OpenblasCoreIsa(wanted) ||
      (set && std::string_view(set) == wanted))
    return false;
  ::setenv("OPENBLAS_CORETYPE", wanted, 1);
  return true;
#else
  return false;
#endif
}

bool SetLibraryEnvironment() {
  const bool quiet = SetQuietLibraryThreadEnvironment();
  return SetOpenblasCoreEnvironment() || quiet;
}

}  // namespace cliffguard
