// Internal: what the measurer needs from one op to check and time schedules on one
// key (the per-op half of the measurer; the process half is sandbox.h). One harness
// per op, in its own file (gemm_harness.cc), reached through MakeHarness.
//
// Lifecycle: created with the key's inputs (uniform in [-1, 1] from the options'
// seed and the key) and its double-precision reference; the measurer caches it per
// key. Arm() then allocates the rotated copies of the operands the timed calls
// use, in the worker process.
#pragma once

#include <memory>
#include <string>

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
};

// kUnimplemented for an op (or dtype) that has no harness yet.
StatusOr<std::unique_ptr<OpHarness>> MakeHarness(const OpKey& key, const MeasureOptions& options);

// One op's harness factory (gemm_harness.cc, ...).
StatusOr<std::unique_ptr<OpHarness>> MakeGemmHarness(const OpKey& key, const MeasureOptions& options);

}  // namespace cliffguard::tuner
