// The measurer: times candidate schedules for one op key on the device, running
// exactly the kernels the runtime dispatches to, behind a correctness gate and in
// an isolated worker process.
//
// Measurer is the interface the tuner drives (tests inject fakes with scripted
// times); SandboxMeasurer is the real one. It has two halves: a generic process
// sandbox (tuner/src/sandbox.h: worker processes, pipes, poll, deadlines, signals)
// and a per-op harness (tuner/src/harness.h: inputs, reference, arguments, check).
// Per batch a worker measures the candidates one after another and streams
// one result per candidate back. The parent enforces a per-candidate timeout. When
// a candidate crashes the worker (any signal) or hangs (timeout, then SIGKILL), that
// candidate becomes an error record naming the signal or the timeout, and a new
// worker resumes with the remaining candidates. The tuner process itself never runs
// a candidate kernel.
//
// Workers are forked (cheap; they inherit the cached inputs and reference) unless
// MeasureOptions::worker_command is set: then the worker is that program, spawned
// (posix_spawn), reading its jobs on stdin (RunMeasureWorker). Spawned workers are
// safe with a GPU context in the tuner process; forked ones are not. A spawned
// worker is kept for the next batches and keys (its CUDA context, cuBLAS and the
// key's inputs are set up once: 0.6-1 s per batch on an H200 when each batch had its
// own) until a candidate crashes or hangs it; the next batch starts a new one.
//
// Per candidate, in the worker:
//   1. correctness gate: one call on inputs whose output buffer is pre-filled with
//      NaN, compared against a double-precision reference of the same inputs
//      (every output element for outputs up to MeasureOptions::full_check_elements,
//      else a random sample of max_checked elements plus the four corners). The
//      error of element (i,j) is |c_ij - ref_ij| / sum_k |a_ik b_kj|; a maximum
//      above the tolerance (or a NaN) makes the candidate the error record
//      "wrong result: max rel error X > tol T at (i,j)", which can never win.
//   2. warm-up: calls for warmup_ms (at least one call).
//   3. timing: single calls, each timed with steady_clock, until the timed calls
//      sum to min_time_ms and at least min_repeats were made; the result is the
//      median per-call time.
// Inputs are rotated across several identical copies so that a call does not find
// its operands in cache from the previous call: the copies together cover twice the
// cache of the device (L3 + L2 x threads; 32 MiB when unknown), at most max_copies
// copies and 1 GiB. This models serving, where other layers' activations and
// weights displace an operator's operands between its calls, and is how
// bench_serving rotates them. (A cap of 16 copies left the activations of small keys
// in L3: on Zen 4 the tuner then timed a 14x32 tile reading A in place at 0.92x the
// default's time, where bench_serving and this cover timed it at 1.04-1.11x;
// bench/RESULTS.md, "the tuner's operands over the bench's cover".) A
// constant-weights key runs on its one packed copy of the weights, as a plan does,
// evicted from every cache level before each timed call (the eviction is not timed):
// a layer's weights come from memory in serving, and a warm copy favoured schedules
// that lose there (an own 6x64 schedule measured 4.3-4.5 ms warm and 6.6 ms through
// bench_serving's cold plans on BERT-base nt 128x768x3072, where oneDNN measured
// 5.1-5.2 ms both ways).
//
// Busy host: every timed result carries cpu_wait (MeasureResult), the share of its
// timed window the worker lost to other work on the host (its measuring thread's
// run-queue wait, plus the hypervisor's steal; tuner/src/cpu_wait.h): per candidate
// for Measure, one window over all rounds for MeasureInterleaved. The tuner measures
// a verdict again when it is high (TunerOptions::max_cpu_wait).
//
// Threads: the kernel runs with the thread count of its schedule; the measurer adds
// no threading of its own.
//
// Not thread-safe: one Measurer per thread. Measure() blocks until the batch is done.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"
#include "cliffguard/tuner/measure_result.h"

namespace cliffguard::tuner {

struct MeasureOptions {
  double min_time_ms = 30;      // timed calls per candidate sum to at least this (ms)
  int min_repeats = 3;          // and number at least this many calls
  int max_repeats = 100000;     // stop after this many calls even if min_time_ms is not reached
  double warmup_ms = 2;         // untimed calls before timing (at least one call), ms
  int64_t rotate_bytes = 0;     // footprint the rotated input copies should cover; 0: 2 x device cache
  int max_copies = 1 << 14;     // at most this many copies of (A, B, C), as bench_serving
  // Per-candidate timeout in seconds (from the candidate's start to its result);
  // 0: 30 s. Worker start-up (buffer allocation) gets 60 s more.
  double timeout_s = 0;
  // Maximum relative error (see the file comment) a correct output may have.
  double tolerance = 1e-5;
  int64_t full_check_elements = 65536;  // outputs up to this size are checked entirely
  int64_t max_checked = 4096;           // else this many sampled elements
  uint64_t data_seed = 42;              // inputs are uniform in [-1, 1] from this seed and the key
  // Interleaved re-measurement (MeasureInterleaved): rounds over the candidates;
  // each round gives each candidate min_time_ms / 2 of timed calls (and at least
  // min_repeats / rounds calls).
  int interleave_rounds = 6;
  // Empty: workers are forked. Else each worker is spawned as this program and
  // arguments (e.g. {"/usr/bin/cliffguard", "measure-worker"}) and reads its job on
  // stdin; required for a CUDA device. Planted variants (not in this build's table)
  // cannot be measured this way.
  std::vector<std::string> worker_command;
};

class Measurer {
 public:
  virtual ~Measurer() = default;
  virtual const DeviceInfo& device() const = 0;

  // Called as each result arrives (index into the batch). The tuner appends it to
  // the log from here, so a killed run loses at most the candidate in flight.
  using ResultCallback = std::function<void(size_t index, const MeasureResult& result)>;

  // Measures every schedule for `key`; returns one result per schedule, in order.
  // Schedules that fail CheckSchedule become error records without running.
  // Failures of candidates are results, never a non-OK return; the call fails only
  // when the key is invalid or the operating system refuses a pipe, fork or spawn.
  virtual StatusOr<std::vector<MeasureResult>> Measure(const OpKey& key, std::span<const Schedule> schedules,
                                                       const ResultCallback& on_result = {}) = 0;

  // Re-measures candidates together for a near-tie decision or a confirmation:
  // interleave_rounds rounds; within a round each candidate in turn (the r-th first
  // in round r) makes one untimed call and then a run of calls for its share, so a
  // slow spell of the machine (frequency, other processes, a hypervisor's steal)
  // hits all of them alike and round r of two candidates can be compared as a
  // pair. round_us holds a candidate's mean call time per round (a kernel's own
  // slow calls count, as serving pays them) and its result is their median. The
  // constant weights of a key are rotated meanwhile (the harness's Rotate).
  virtual StatusOr<std::vector<MeasureResult>> MeasureInterleaved(const OpKey& key,
                                                                  std::span<const Schedule> schedules) = 0;
  // Caps the per-candidate timeout of later calls at `seconds` (0: the configured
  // timeout again). The tuner sets it per key from the default schedule's time, so a
  // candidate far slower than the default is cut short instead of spending the
  // key's budget. Fakes may ignore it.
  virtual void CapCandidateTimeout(double seconds) { (void)seconds; }
};

class OpHarness;
class SpawnedWorker;

class SandboxMeasurer final : public Measurer {
 public:
  explicit SandboxMeasurer(DeviceInfo device, MeasureOptions options = {});
  ~SandboxMeasurer() override;

  const DeviceInfo& device() const override { return device_; }
  const MeasureOptions& options() const { return options_; }
  StatusOr<std::vector<MeasureResult>> Measure(const OpKey& key, std::span<const Schedule> schedules,
                                               const ResultCallback& on_result = {}) override;
  StatusOr<std::vector<MeasureResult>> MeasureInterleaved(const OpKey& key, std::span<const Schedule> schedules) override;
  void CapCandidateTimeout(double seconds) override { timeout_cap_s_ = seconds; }

 private:
  StatusOr<std::vector<MeasureResult>> Run(const OpKey& key, std::span<const Schedule> schedules, bool interleaved,
                                           const ResultCallback& on_result);
  StatusOr<OpHarness*> HarnessFor(const OpKey& key);

  DeviceInfo device_;
  MeasureOptions options_;
  double timeout_cap_s_ = 0;  // CapCandidateTimeout; 0: none
  std::vector<std::unique_ptr<OpHarness>> cache_;  // most recent last; a few keys
  std::unique_ptr<SpawnedWorker> worker_;          // spawn: kept across batches and keys
};

// The body of a spawned worker (e.g. `cliffguard measure-worker`): reads jobs (JSON,
// one per line, written by SandboxMeasurer) from `in` until its end; measures each,
// writing the result lines and then the line "E" to `out_fd`. The last key's
// harness (inputs, reference, device buffers) is kept for the next job. Returns the
// process exit status: 0 at the end of the input, or 5 for a job it cannot read or a
// device that is not the job's (the reason on stderr).
int RunMeasureWorker(std::FILE* in, int out_fd);

}  // namespace cliffguard::tuner
