// conv2d kernel variants that call a library (internal): oneDNN's convolution
// (cpu_f32_conv2d_onednn, conv2d_onednn.cc), built only when oneDNN is found at
// configure time (CLIFFGUARD_WITH_ONEDNN). They sit in CpuConv2dVariants() after
// the project's own variants and before the portable one, so the built-in default
// never picks them; the tuner searches them like any variant.
//
// cpu_f32_conv2d_onednn runs dnnl::convolution_forward (f32, forward inference) on
// NHWC activations (format_tag::nhwc for x and y). Weights:
//   reorder_weights = 0: the primitive reads the filter as the call stores it,
//     OHWI (format_tag::ohwi) or OIHW (format_tag::oihw) per
//     Conv2dArgs::weight_layout; pack_weights copies it densely in OHWI.
//   reorder_weights = 1: the primitive reads the filter in the layout oneDNN
//     prefers for this key, threads and algorithm (weights format_tag::any, queried
//     from a primitive descriptor without bias); pack_weights reorders it into that
//     layout once (a plan: what oneDNN users do with constant weights), and a call
//     without packed weights reorders it per call into a buffer of the calling
//     thread, then runs like a packed call.
// A null bias runs the primitive without bias; a non-null one the primitive with it.
//
// isa = kIsaAvx2 like the GEMM library variants (oneDNN dispatches on the host).
// Threads: oneDNN runs on OpenMP (libgomp) and the variant follows the rules every
// oneDNN variant shares (onednn_common.h; cpu_f32_gemm_onednn, gemm_library.h, too):
// each call sets the calling thread's OpenMP thread count to `threads` and restores
// it; threads > 1 passes check() only with OMP_WAIT_POLICY=passive (or
// GOMP_SPINCOUNT=0) in the environment; in a child of fork(), a call with threads >
// 1 on a thread that ran any oneDNN variant (this one or cpu_f32_gemm_onednn) on an
// OpenMP team before the fork returns kFailedPrecondition instead of hanging
// (threads = 1 still runs). Primitives are cached per calling thread
// (onednn::PrimitiveCache: at most 64, least recently used evicted), keyed by the
// shape, threads, algorithm, weights layout and bias presence.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cliffguard/kernel.h"

#ifdef CLIFFGUARD_WITH_ONEDNN
#include "kernels/cpu/gemm_params.h"  // kGemmThreadValues
#endif

namespace cliffguard::cpu {

// Library conv2d variants in this build (the macros are the runtime's own compile
// definitions: include this header from the runtime's sources only).
inline constexpr size_t kNumConv2dLibraryVariants = 0
#ifdef CLIFFGUARD_WITH_ONEDNN
                                                    + 1
#endif
    ;

#ifdef CLIFFGUARD_WITH_ONEDNN
enum OnednnConvParam : int { kOnednnConvThreads = 0, kOnednnConvReorderWeights, kOnednnConvAlgorithm };
// algorithm: dnnl::algorithm::convolution_auto (oneDNN picks direct or Winograd)
// or convolution_direct.
enum OnednnConvAlgorithm : int32_t { kOnednnConvAuto = 0, kOnednnConvDirect = 1 };
// check() refuses reorder_weights = 0: oneDNN 2.6 runs a filter in a plain layout
// (OHWI, OIHW) on its reference kernel, measured 100x-10000x slower than with its
// preferred layout on the ResNet-18 layers (0.3-3.7 s a call, some past 30 s). The
// kernel still runs it when called directly (tests), for a newer oneDNN.
inline constexpr int32_t kOnednnConvBoolValues[] = {0, 1};
inline constexpr int32_t kOnednnConvAlgorithmValues[] = {kOnednnConvAuto, kOnednnConvDirect};
inline constexpr ParamSpec kOnednnConvSpecs[] = {
    {"threads", kGemmThreadValues, 1, "OpenMP threads oneDNN runs on (caller included); must be <= device threads"},
    {"reorder_weights", kOnednnConvBoolValues, 1,
     "1 = filter in oneDNN's preferred layout (reordered once for a plan, else per call); 0 = filter as stored "
     "(refused by check(): oneDNN's reference kernel)"},
    {"algorithm", kOnednnConvAlgorithmValues, kOnednnConvAuto,
     "0 = convolution_auto (oneDNN chooses), 1 = convolution_direct"},
};

// fn.conv2d: oneDNN convolution_forward. After its first call with a primitive key
// on a thread, a call allocates nothing in this file (oneDNN's execute builds its
// own small argument map; a per-call reorder reuses the thread's buffer).
Status OnednnConv2d(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params);
// check(): threads <= device.threads; threads > 1 only with passive OpenMP waiting;
// reorder_weights = 1.
Status OnednnConv2dCheck(const KernelVariant& v, const OpKey& key, const ParamValues& p, const DeviceInfo& device);
// fit_defaults(): threads from the shape's work (onednn::FittedThreads; 1 without
// passive OpenMP waiting), reorder_weights = 1, algorithm auto.
void OnednnConv2dFitDefaults(const KernelVariant& v, const OpKey& key, const DeviceInfo& device, ParamValues& p);
// candidates: reorder_weights = 1 with the fitted threads (auto, then direct), and
// every other accepted thread count (auto).
std::vector<ParamValues> OnednnConv2dCandidates(const KernelVariant& v, const OpKey& key, const DeviceInfo& device);
// Packed weights (input: the filter OHWI, ld >= kh*kw*ic between output channels).
// reorder_weights = 0: OHWI dense, oc*kh*kw*ic floats. reorder_weights = 1: the
// primitive's preferred layout for this key, threads and algorithm (0 bytes when
// oneDNN cannot create the primitive; pack_weights then reports why).
size_t OnednnConv2dPackedWeightsBytes(const KernelVariant& self, const OpKey& key, const ParamValues& params);
Status OnednnConv2dPackWeights(const KernelVariant& self, const OpKey& key, const ParamValues& params,
                               const void* weights, int64_t ld, void* dst);
#endif

// The rows CpuConv2dVariants() inserts before its portable variant.
inline constexpr std::array<KernelVariant, kNumConv2dLibraryVariants> kConv2dLibraryVariants = {{
#ifdef CLIFFGUARD_WITH_ONEDNN
    {"cpu_f32_conv2d_onednn", Backend::kCpu, OpKind::kConv2d, DType::kF32, kIsaAvx2, kOnednnConvSpecs, nullptr,
     &OnednnConv2dCheck, &OnednnConv2dFitDefaults, {.conv2d = &OnednnConv2d}, {.conv2d = {1, 1}},
     &OnednnConv2dCandidates, nullptr, &OnednnConv2dPackedWeightsBytes, &OnednnConv2dPackWeights},
#endif
}};

}  // namespace cliffguard::cpu
