// Feature vectors for the cost model: one fixed-length float row per
// (op key, schedule, device). The same layout is used for every variant and key so
// that one model, shared per (device, op), learns across shapes.
//
// Features describe the GEMM view of a key (m, n, k; conv2d as implicit GEMM,
// GemmViewOf), conv2d's own geometry (kernel, stride, padding, channels, output
// size, the variant's oc x ow register tile and working sets; -1 for other ops) and
// the schedule's knobs. Named knobs are those of the CPU GEMM family; they are
// looked up by name (KernelVariant::ParamIndex): mc, kc, nc (cache
// blocks, elements), par (which loop is parallel), threads, unroll_k, prefetch,
// pack_a, pack_b. A variant lacking a parameter gets -1 in its raw and log2 slots;
// derived features then use the natural default (block = whole dimension, threads =
// 1, par = 0). Generic slots p0..p9 also carry the raw values in declaration order,
// so variants with other parameter names (cuda) still give the model their knobs.
//
// `par` is read as in runtime/kernels/cpu/gemm_params.h: 0 = jc (nc blocks of N are
// split across threads), 1 = ic (mc blocks of M), 2 = jr (nr micro-panels inside an
// nc block); other values count ic x jc blocks. Work-item features for every split
// are included too, so another meaning of `par` stays learnable.
//
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "cliffguard/device.h"
#include "cliffguard/kernel.h"
#include "cliffguard/op_key.h"

namespace cliffguard::tuner {

// Length of every feature row.
int NumFeatures();
// Names of the features, NumFeatures() of them, in row order (for debugging and
// feature-importance dumps), e.g. "mc", "log2_mc", "pad_mr", "ws_a_over_l2".
std::span<const std::string_view> FeatureNames();

// Writes NumFeatures() floats to out. A schedule without a variant gives all -1.
void ExtractFeatures(const OpKey& key, const Schedule& schedule, const DeviceInfo& device, float* out);
std::vector<float> ExtractFeatures(const OpKey& key, const Schedule& schedule, const DeviceInfo& device);

}  // namespace cliffguard::tuner
