// Internal: what the measurer needs from one op to check and time schedules on one
// key (the per-op half of the measurer; the process half is sandbox.h). One harness
// per op, in its own file (gemm_harness.cc), reached through MakeHarness.
//
// Lifecycle: created with the key's inputs (uniform in [-1, 1] from the options'
// seed and the key) and its double-precision reference; the measurer caches it per
// key. Arm() then allocates the rotated copies of the operands the timed calls
// use, in the worker process.
#pragma once

#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"
#include "cliffguard/status.h"
#include "cliffguard/tuner/measurer.h"

namespace cliffguard::tuner {

class OpHarness {
 public:
  virtual ~OpHarness() = default;
  virtual const OpKey& key() const = 0;
  // Allocates copies of the operands covering options.rotate_bytes (or twice the
  // device's cache), at most options.max_copies copies and 1 GiB.
  virtual void Arm(const DeviceInfo& device) = 0;
  // One call on inputs whose output is pre-filled with NaN, compared against the
  // reference: "" when correct, else the error ("wrong result: ...", "kernel failed: ...").
  virtual std::string Check(const Schedule& s) = 0;
  // One call on the next rotated copy of the operands.
  virtual Status Run(const Schedule& s) = 0;
  // One timed call, in microseconds: by default Run() between two reads of the host
  // clock; a device harness times the device's work (CUDA events) instead.
  virtual StatusOr<double> TimeOne(const Schedule& s);
  // Before schedules are timed together (MeasureInterleaved: the re-measurement,
  // the confirmation, bucket ends, `compare`), with them; after, with none. A
  // constant-weights harness then times their calls in serving's conditions
  // (PackedWeightsCache::Rotate). Default: nothing.
  virtual Status Rotate(std::span<const Schedule> /*batch*/) { return Status::Ok(); }
};

// Constant weights packed once per schedule (outside any timed call), as a plan
// packs them; shared by the harnesses of ops with constant-weights keys.
class PackedWeightsCache {
 public:
  // What a call of s reads (`weights` stored as pack_weights takes them, leading
  // dimension `ld`): `packed`, the weights in s's variant's layout (GemmArgs::packed_b;
  // `stored` is then `weights`), or for a variant that does not pack, `stored`
  // alone (`packed` null). Each is s's next rotated copy (Rotate), else its one copy
  // (packed on first use, never inside a timed call).
  struct Weights {
    const float* stored;
    const void* packed;
  };
  StatusOr<Weights> Call(const Schedule& s, const OpKey& key, const float* weights, int64_t ld);
  // Before a timed call of a constant-weights key: packs s's weights if not yet done
  // (never inside the timed call), then evicts what the call reads (the packed
  // weights, or the weights as stored for a variant that does not pack) from every
  // cache level, so that the call reads its weights from memory. A schedule of the
  // rotation is left as it is: its copies are displaced by the others' reads.
  Status Cool(const Schedule& s, const OpKey& key, const void* weights, int64_t ld, size_t weights_bytes);
  // Serving's conditions for schedules timed together: each gets copies of what its
  // calls read, so many that its own copies cover `cover_bytes` (the batch's at most
  // kMaxRotatedBytes), and Call hands them out in turn. A call then finds its weights
  // displaced by the reads of gigabytes of other weights, as a layer finds its own
  // displaced by the other layers' (bench_serving's plans rotate copies the same
  // way). A flushed single copy is not that state: it measured a GEMM schedule 1.14-1.22x faster than the
  // small-m kernel where bench_serving and this rotation found them within 4%
  // (bench/RESULTS.md). Shared among the batch, the cover left a schedule of three 2-3
  // copies of 9.4 MB weights, which Zen 4's 32 MiB L3 held: there the AVX-512 small-m
  // kernel measured 0.73x the AVX2 one's time, where bench_serving, whose rows each
  // rotate their own cover, found it 1.10-1.26x (bench/RESULTS.md, "AMD EPYC (Zen 4):
  // the serving table rerun"). No rotation (one flushed copy each) for a batch of one
  // schedule that fills the cover alone, or whose copies would exceed
  // kMaxRotatedBytes. An empty batch ends the rotation.
  Status Rotate(std::span<const Schedule> batch, const OpKey& key, const void* weights, int64_t ld,
                size_t weights_bytes, int64_t cover_bytes);

 private:
  struct Packed {
    Schedule schedule;
    std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
    size_t bytes = 0;
  };
  // Each copy allocated as a plan allocates its weights (AllocateWeights), so that it
  // is timed in the kind of pages a plan's weights are in: under KVM the small-m
  // kernel read one block of base pages 1.06x slower than base pages from the heap,
  // and either 1.1-1.2x slower than huge pages (bench/RESULTS.md, "... weights in
  // huge pages").
  struct Rotated {
    Schedule schedule;
    std::vector<std::unique_ptr<float, decltype(&std::free)>> copies;
    size_t next = 0;
  };
  // s's entry, packed now if it is not yet (nullptr for a variant without pack_weights).
  StatusOr<const Packed*> Entry(const Schedule& s, const OpKey& key, const void* weights, int64_t ld);
  Rotated* Rotation(const Schedule& s);
  // Enough for every schedule of an interleaved batch (all are checked, so packed,
  // before any is timed); beyond these bounds the oldest packings are dropped.
  static constexpr size_t kMaxPacked = 64;
  static constexpr size_t kMaxPackedBytes = size_t{2} << 30;
  static constexpr size_t kMaxRotatedBytes = size_t{2} << 30;
  std::vector<Packed> packed_;
  size_t packed_bytes_ = 0;
  std::vector<Rotated> rotated_;
};

// Evicts [p, p + bytes) from every cache level (clflushopt per line where the CPU
// has it, else clflush; then a fence).
void FlushFromCache(const void* p, size_t bytes);

// Fills `out` with values uniform on a grid of 2^24 points in [-1, 1), the i-th a
// function of (stream, i) alone (SplitMix64): about 1 ns a value where mt19937_64
// with a distribution took 17, over a second for the 68M inputs of a 2048 x 11008 x
// 4096 GEMM, paid at every key a measurement worker takes up. A harness draws each
// operand from its own stream (OperandStream).
void FillUniform(uint64_t stream, std::span<float> out);
// The stream of a harness's operand `index` (0, 1, ...) for a key and data seed: a
// hashed start, so that no operand's sequence is another's shifted by a few places
// (starts one SplitMix step apart would make it so).
inline uint64_t OperandStream(uint64_t data_seed, const OpKey& key, int index) {
  return MixHash64(MixHash64(data_seed ^ key.Hash()) ^ uint64_t(index + 1));
}

// The footprint rotated copies cover: options.rotate_bytes, or twice the device's
// cache (L3 + L2 x threads; 32 MiB when unknown).
int64_t CoverBytes(const MeasureOptions& options, const DeviceInfo& device);
// The number of rotated copies of an operand set of `set_bytes` that cover
// CoverBytes, within options.max_copies and 1 GiB.
int64_t RotatedCopies(int64_t set_bytes, const MeasureOptions& options, const DeviceInfo& device);

// The worst relative error of an output against its reference at the checked
// indices: |out[i] - ref[t]| / scale[t] (scale: sum of |products|). A NaN output or
// error counts as infinite and ends the scan. `where` is that output's index (-1
// when every error is 0).
struct WorstError {
  double error = 0;
  int64_t where = -1;
  bool nan = false;  // the worst output is NaN (or its error infinite)
};
WorstError FindWorstError(const float* out, std::span<const int64_t> checked, std::span<const double> ref,
                          std::span<const double> scale);
// "nan" or the error as "1.23e-04", for "wrong result: max rel error ..." messages.
std::string ErrorText(const WorstError& w);

// GEMM's double-precision reference on inputs as stored (dense, key's layout): the
// output indices i*n+j checked (every one up to options.full_check_elements, else
// the corners and options.max_checked drawn from `rng`), their values and sums of
// |products|. Shared by the host and device GEMM harnesses.
struct GemmReference {
  std::vector<int64_t> checked;
  std::vector<double> ref, scale;
};
GemmReference MakeGemmReference(const OpKey& key, const float* a, const float* b, const MeasureOptions& options,
                                std::mt19937_64& rng);

// The harness for a key on a device; kUnimplemented for an op, dtype or backend
// that has no harness.
StatusOr<std::unique_ptr<OpHarness>> MakeHarness(const OpKey& key, const MeasureOptions& options,
                                                 const DeviceInfo& device);

// One op's harness factory (gemm_harness.cc, conv2d_harness.cc; cuda_gemm_harness.cc
// in builds with CUDA).
StatusOr<std::unique_ptr<OpHarness>> MakeGemmHarness(const OpKey& key, const MeasureOptions& options);
StatusOr<std::unique_ptr<OpHarness>> MakeConv2dHarness(const OpKey& key, const MeasureOptions& options);
StatusOr<std::unique_ptr<OpHarness>> MakeCudaGemmHarness(const OpKey& key, const MeasureOptions& options,
                                                         const DeviceInfo& device);

}  // namespace cliffguard::tuner
