// The serving runtime: loads bundles and dispatches every operator call to its
// tuned schedule when the (device, op key) is cached, else to a default schedule
// while counting, timing and reporting the miss.
//
// Thread-safety: every member function may be called from any number of threads at
// once, including LoadBundle*/ReplaceBundles while other threads dispatch.
//
// Hit path (Gemm on a cached key, GemmPlan::Run on a hit plan): no lock, no
// allocation, no string work, no syscall. The dispatch table is immutable once
// built; loading or reloading bundles builds a new table and swaps it atomically.
// (That is the dispatch. A schedule of a library variant then runs the library's
// call, which may take a lock of its own (OpenBLAS: a shared one around its global
// thread count) or allocate (oneDNN: its argument map).)
//
// Miss path: never fails the call because of the miss. What runs it, in order: the
// bucket of a tuned key of its family holding its varying dimension, the nearest
// tuned key of its family (as the FallbackPolicy allows), the bundle default of its
// op and shape class, the built-in default. Resolved once per key, dispatch table
// and thread (a repeated bucket or nearest call costs about a hit). Counted exactly
// per key and per kind that served it (ServedBy; no lost counts under concurrency),
// warned once per key through the cliffguard logger (log.h), and the time spent in
// the schedule that served it accumulated per key (bucket and nearest calls: one in
// MissEntry::kTimeSampling timed). A call that fails (bad arguments, no kernel for
// its dtype on this device) is neither a hit nor a miss.
//
// Reports: Stats and GetMissReport each read one snapshot, consistent while other
// threads dispatch. A Runtime in a global or static variable writes its report at
// exit like any other. In a child of fork() counts start at zero and the report goes
// to <report>.<pid>.json (fork while no other thread is inside a cliffguard call).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cliffguard/bundle.h"
#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/miss_report.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"

namespace cliffguard {

// How far a missed key may look for a tuned schedule before the defaults (the lookup
// order is exact key, bucket, nearest, bundle default, built-in default):
//   kExact:   the key's own entry only;
//   kBucket:  also the bucket of a tuned key of its family (KeyFamily) whose range
//             holds the call's varying dimension (m for gemm);
//   kNearest: also, after buckets, the tuned key of its family nearest in
//             |log2(v) - log2(v')| of the varying dimension (ties: the larger v'), when
//             its schedule is valid for the call's key and v' is within a factor of
//             kNearestMaxRatio of v (further away, kernels change class: a schedule
//             tuned for m=8 can take twice the built-in default's matrix-vector
//             kernel at m=1, so a far key is not used; a bucket states its own range).
// Environment: CLIFFGUARD_FALLBACK=exact|bucket|nearest. Default kNearest.
enum class FallbackPolicy : uint8_t { kExact = 0, kBucket = 1, kNearest = 2 };
inline constexpr int64_t kNearestMaxRatio = 2;
const char* FallbackPolicyName(FallbackPolicy p);  // "exact", "bucket", "nearest"
StatusOr<FallbackPolicy> ParseFallbackPolicy(std::string_view s);

struct RuntimeOptions {
  // The device calls run on (ProbeDevice): "" or "cpu" for the host CPU, "cuda:N"
  // for GPU N (builds with CUDA). Bundles apply only when tuned for this device.
  std::string device;
  // Thread budget for kernels (part of a CPU device's identity). 0: CLIFFGUARD_THREADS
  // from the environment, else every CPU available to the process. A bad value is
  // refused by Create, naming it.
  int threads = 0;
  // When non-empty, the miss report is written here (atomically) when the Runtime
  // is destroyed. Empty: CLIFFGUARD_MISS_REPORT from the environment, if set.
  std::string miss_report_path;
  // Seconds between rewrites of the miss report while serving, by a thread of the
  // runtime (atomically, like the one at destruction), so that a process killed by
  // SIGKILL or the OOM killer leaves a report at most this old. 0: the report is
  // written at destruction only, unless CLIFFGUARD_MISS_REPORT_INTERVAL is set. Needs
  // a miss report path; a bad value is refused by Create, naming it.
  double miss_report_interval_s = 0;
  // Metrics (MetricsText, Prometheus text format): when a path is given, the text is
  // also written there every metrics_interval_s (0: 15 s), atomically, for
  // node_exporter's textfile collector (name it *.prom in the collector's directory).
  // Unset: CLIFFGUARD_METRICS_FILE and CLIFFGUARD_METRICS_INTERVAL. metrics_top_keys
  // bounds the per-key series to the N missed keys with the most calls (0: none; unset,
  // i.e. -1: CLIFFGUARD_METRICS_TOP_KEYS, else 10). Bad values are refused by Create.
  std::string metrics_path;
  double metrics_interval_s = 0;
  int metrics_top_keys = -1;
  // Bundle files loaded by Create (each as LoadBundleFile; one that fails fails
  // Create, naming it), after those in CLIFFGUARD_BUNDLES (paths separated by ':').
  std::vector<std::string> bundles;
  // The operator's switches. When the environment variable is set (to 0 or 1; another
  // value is refused by Create, naming it), it overrides the field.
  // One warning per missed key (first miss only). CLIFFGUARD_WARN_ON_MISS.
  bool warn_on_miss = true;
  // Accept bundles whose device fingerprint differs from this device when backend
  // and arch match (reported as "device rule: same-arch" in the load report).
  // Off by default: a bundle applies only to the device it was tuned on.
  // CLIFFGUARD_SAME_ARCH.
  bool allow_same_arch_bundles = false;
  // Every call runs the built-in default, still counted and reported (as a miss
  // served by builtin_default): bundles load and are reported but none is used.
  // CLIFFGUARD_DISABLE.
  bool disable = false;
  // What a missed key may run before the defaults. Unset: CLIFFGUARD_FALLBACK from
  // the environment (a bad value is refused by Create, naming it), else kNearest.
  std::optional<FallbackPolicy> fallback;
};

// What loading one bundle did.
struct LoadReport {
  std::string source;            // path, or the name given for a buffer
  std::string producer;          // what wrote it ("cliffguard") and its version; a bundle of a
  std::string producer_version;  // newer producer loads when its schema_version is one this build reads
  uint32_t schema_version = 0;
  std::string device_fingerprint;  // the bundle's device
  bool device_match = false;     // its entries apply to this runtime's device
  // "exact", "same-arch", or why it does not apply, naming each property that differs
  // ("thread budget 4, here 2; model 'X', here 'Y'")
  std::string device_rule;
  size_t entries_total = 0;
  size_t entries_loaded = 0;     // usable entries (rejected ones excluded)
  std::vector<RejectedEntry> rejected;
  size_t defaults_loaded = 0;
};

// Per-key dispatch counts since the Runtime was created (across reloads).
struct KeyStats {
  OpKey key;
  uint64_t hits = 0;    // served[kExact]
  uint64_t misses = 0;  // the other kinds
  uint64_t served[kNumServedBy] = {};  // calls per ServedBy
};

class GemmPlan;
class Conv2dPlan;
struct MissEntry;

class Runtime {
 public:
  static StatusOr<std::unique_ptr<Runtime>> Create(const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const DeviceInfo& device() const;

  // Loads one more bundle beside those already loaded. A file that fails
  // verification is refused (the error names the file and the rule) and the loaded
  // set is unchanged; bad entries are rejected and reported in LoadReport, the rest
  // load. When two loaded bundles hold the same key, the faster tuned_us wins.
  StatusOr<LoadReport> LoadBundleFile(const std::string& path);
  StatusOr<LoadReport> LoadBundleBuffer(std::span<const uint8_t> bytes, const std::string& source);
  // Replaces every loaded bundle with these files, atomically: all verify and the
  // table is swapped, or the call fails and nothing changes.
  StatusOr<std::vector<LoadReport>> ReplaceBundles(const std::vector<std::string>& paths);
  // Unloads everything (every later call misses with kind "device miss").
  void UnloadAll();

  // Per-call GEMM: validates args, looks the key up, runs the tuned schedule (hit)
  // or the fallback (miss). Errors only for invalid arguments or kernel failures.
  Status Gemm(const GemmArgs& args);

  // Creates a plan for one shape (hot loops): validation and lookup happen here,
  // Run() only takes pointers. The plan keeps the schedule resolved at creation;
  // create a new plan to pick up bundles loaded later.
  StatusOr<GemmPlan> PlanGemm(const OpKey& key);
  // Creates a plan whose B (the weights, stored as the key says: k x n, or n x k
  // when trans_b; leading dimension ldb) is the same on every call. B is packed here,
  // once, into the layout the resolved schedule reads (or copied densely when its
  // variant reads B as stored), and Run takes A and C only. The plan owns that
  // copy (weights_bytes(); in memory from AllocateWeights, huge pages from 2 MiB up
  // where the system allows them): `weights` may be freed when this returns. Looks up the
  // key with constant_weights set, then without it (either is a hit); a miss is
  // recorded under the constant-weights key. f32, cpu devices.
  StatusOr<GemmPlan> PlanGemm(const OpKey& key, const float* weights, int64_t ldb);

  // Per-call conv2d (NHWC, Conv2dArgs): the same contract as Gemm. The filter is
  // re-laid-out on every call (into the schedule's layout); a plan does that once.
  Status Conv2d(const Conv2dArgs& args);
  // Creates a plan for one conv2d key whose filter (`weights`, oc*kh*kw*ic floats in
  // `layout`) and bias (oc floats, or null) are the same on every call: the filter is
  // packed here, once, into the layout the resolved schedule reads (OIHW is converted
  // first), and Run takes x and y only. The plan owns copies of both (weights_bytes();
  // the filter's from AllocateWeights).
  // Looks up the key with constant_weights set, then without it (either is a hit); a
  // miss is recorded under the constant-weights key. f32, cpu devices.
  StatusOr<Conv2dPlan> PlanConv2d(const OpKey& key, const float* weights, ConvWeightLayout layout,
                                  const float* bias = nullptr);

  // The schedule a call with this key would use now, and whether it is a hit.
  struct Resolution {
    Schedule schedule;
    bool hit = false;
    MissKind miss_kind = MissKind::kShapeMiss;  // when !hit
    ServedBy served_by = ServedBy::kExact;
    OpKey served_from;                         // bucket, nearest: the tuned key whose schedule runs
    std::string fallback;                      // when !hit: "bucket", "nearest", "bundle default" or "built-in default"
  };
  StatusOr<Resolution> Resolve(const OpKey& key) const;

  std::vector<KeyStats> Stats() const;     // every key dispatched at least once
  MissReport GetMissReport() const;        // ranked by expected gain
  Status WriteMissReport(const std::string& path) const;  // JSON, atomic
  // The counters in Prometheus text exposition format (0.0.4), every family with HELP
  // and TYPE lines: cliffguard_calls_total{op,served_by}, cliffguard_misses_total{op,kind},
  // cliffguard_fallback_seconds_total{op,served_by}, cliffguard_expected_gain_seconds{op}
  // (the miss report's expected gain), cliffguard_missed_keys{op}, bundle gauges and
  // counters (loads, rejected entries, reloads), cliffguard_info, and per-key series
  // cliffguard_key_calls_total / cliffguard_key_fallback_seconds_total for the top
  // metrics_top_keys missed keys by calls (a key that leaves the top N stops being
  // exported). One snapshot, as for reports; costs what GetMissReport costs, off the
  // hit path.
  std::string MetricsText() const;
  std::vector<LoadReport> LoadReports() const;  // of the bundles loaded now

  struct Impl;

 private:
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class GemmPlan;
  friend class Conv2dPlan;
};

// A GEMM resolved once for one op key. Movable, not copyable. Thread-safe to Run
// from several threads. Must not outlive its Runtime.
class GemmPlan {
 public:
  GemmPlan() = default;
  GemmPlan(GemmPlan&&) noexcept;
  GemmPlan& operator=(GemmPlan&&) noexcept;
  ~GemmPlan();

  bool ready() const { return runtime_ != nullptr; }
  bool hit() const { return hit_; }
  // What runs the plan's calls: kExact on a hit, else the miss's kind (bucket, nearest, a default).
  ServedBy served_by() const { return hit_ ? ServedBy::kExact : served_by_; }
  const OpKey& key() const { return key_; }
  const Schedule& schedule() const { return schedule_; }

  // Whether the plan holds its weights (PlanGemm with weights) and the bytes they take.
  bool has_weights() const { return weights_ != nullptr; }
  size_t weights_bytes() const { return weights_bytes_; }

  // C = alpha * op(A) * op(B) + beta * C for the plan's shape. kInvalidState on a
  // default-constructed or moved-from plan, or on a plan that holds its weights;
  // kInvalidArgument for null pointers or leading dimensions too small for the shape.
  Status Run(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
             float alpha = 1.0f, float beta = 0.0f) const;
  // The same with the plan's own weights as B (kInvalidState on a plan without them).
  Status Run(const float* a, int64_t lda, float* c, int64_t ldc, float alpha = 1.0f, float beta = 0.0f) const;

 private:
  friend class Runtime;
  struct FreeWeights {
    void operator()(float* p) const noexcept { std::free(p); }
  };
  Status Dispatch(GemmArgs& args) const;

  Runtime::Impl* runtime_ = nullptr;
  OpKey key_;
  Schedule schedule_;
  GemmLdBounds ld_{};          // the leading dimensions Run accepts
  bool hit_ = false;
  uint32_t plan_index_ = 0;    // the key's index in the runtime's per-thread plan hit counters
  MissEntry* miss_ = nullptr;  // owned by the runtime: this key's miss record
  ServedBy served_by_ = ServedBy::kExact;  // what serves a missed plan
  std::unique_ptr<float, FreeWeights> weights_;  // packed (packed_layout_) or dense copy of B
  size_t weights_bytes_ = 0;
  bool packed_layout_ = false;  // weights_ is in the schedule's packed layout (GemmArgs::packed_b)
};

// A conv2d resolved once for one key, with its filter and bias packed at creation
// (Runtime::PlanConv2d). Movable, not copyable. Thread-safe to Run from several
// threads. Must not outlive its Runtime.
class Conv2dPlan {
 public:
  Conv2dPlan() = default;
  Conv2dPlan(Conv2dPlan&&) noexcept;
  Conv2dPlan& operator=(Conv2dPlan&&) noexcept;
  ~Conv2dPlan();

  bool ready() const { return runtime_ != nullptr; }
  bool hit() const { return hit_; }
  ServedBy served_by() const { return hit_ ? ServedBy::kExact : served_by_; }
  const OpKey& key() const { return key_; }
  const Schedule& schedule() const { return schedule_; }
  // Bytes of the plan's filter copy (packed, or OHWI when the variant reads it so) and bias.
  size_t weights_bytes() const { return weights_bytes_; }

  // y = conv2d(x) + bias for the plan's key: x holds n*h*w*ic floats (NHWC), y
  // n*oh*ow*oc. kInvalidState on an empty plan; kInvalidArgument for null pointers.
  Status Run(const float* x, float* y) const;

 private:
  friend class Runtime;
  struct Free {
    void operator()(float* p) const noexcept { std::free(p); }
  };

  Runtime::Impl* runtime_ = nullptr;
  OpKey key_;
  Schedule schedule_;
  bool hit_ = false;
  uint32_t plan_index_ = 0;
  MissEntry* miss_ = nullptr;
  ServedBy served_by_ = ServedBy::kExact;
  std::unique_ptr<float, Free> weights_;  // packed (packed_layout_) or dense OHWI
  std::unique_ptr<float, Free> bias_;     // oc floats, or null
  size_t weights_bytes_ = 0;
  bool packed_layout_ = false;
};

}  // namespace cliffguard
