// Tunable parameters of the CPU fp32 small-m GEMM family (gemv_f32.inc), as data.
#pragma once

#include <cstdint>

#include "cliffguard/kernel.h"
#include "kernels/cpu/gemm_params.h"
#include "kernels/cpu/gemv_kernel.h"

namespace cliffguard::cpu {

// Indices in ParamValues (declaration order of the kSpecs below).
enum GemvParam : int { kGemvThreads = 0, kGemvBlock = 1 };

// The largest m these variants run, by layout of B (measured, bench/RESULTS.md): nt
// tiles keep B in L1/L2 while every row group of A passes, and beat the packed path
// up to m = 16; nn keeps m rows of C in L1, whose rows alias in L1 sets once many
// rows are ldc apart, so beyond m = 4 the packed path is kept.
inline constexpr int64_t kGemvMaxM = 16;
constexpr int64_t GemvMaxM(bool trans_b) { return trans_b ? 16 : 4; }

inline constexpr int32_t kGemvNbValues[] = {64, 128, 256, 512, 1024, 2048, 4096};
inline constexpr int32_t kGemvNjValues[] = {1, 2, 4, 8};

inline constexpr ParamSpec kGemvNNSpecs[] = {
    {"threads", kGemmThreadValues, 1, "threads (caller included), each a contiguous range of n; <= device threads"},
    {"nb", kGemvNbValues, 1024, "columns of C per block, kept in L1/L2 while all k rows of B stream through"},
};
inline constexpr ParamSpec kGemvNTSpecs[] = {
    {"threads", kGemmThreadValues, 1, "threads (caller included), each a contiguous range of n; <= device threads"},
    {"nj", kGemvNjValues, 4, "rows of B (columns of C) per register tile; rows of A per tile: at most 4, as many as the registers hold"},
};

// check(): threads <= device.threads.
Status GemvCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device);
// supports(): m <= GemvMaxM(kTransB) and B in the variant's layout (kTransB: B stored n x k).
template <bool kTransB>
Status GemvSupports(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// fit_defaults(): threads from the bytes of B (each thread streams at least 1 MiB);
// nt: nj from m and the registers (one pass over B for m <= 4, 8 accumulators or more); nn: nb, the widest block whose m rows
// of C fit in 16 KiB.
template <bool kTransB>
void GemvFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p);

// Runs one call for validated args with the variant's row kernel.
Status GemvF32(const GemmArgs& args, const ParamValues& p, void (*rows)(const GemvTask&));

}  // namespace cliffguard::cpu
