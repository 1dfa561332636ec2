// The CPU fp32 conv2d drivers (internal, ISA-free: they reach the ISA only through
// a tile kernel or GEMM micro-kernel pointer).
//
// Direct (DirectConvF32), per image and thread share (par: output rows, oc tiles or
// images):
//   for each block of `rows` output rows   (pad_copy: its input rows copied, padded)
//     for each block of oc_block channels
//       for each block of ic_block input channels   (later blocks add into y)
//         loop 0: for each pixel tile: for each oc tile: tile kernel
//         loop 1: for each oc tile: for each pixel tile: tile kernel
// A pixel tile is up to ow_tile output pixels whose filter window lies inside the
// input (tiles of one row, balanced: 56 = 6 x 6 + 4 x 5); border pixels run one at
// a time over their valid window. With pad_copy the whole window is always valid
// and tiles run on across output rows.
//
// GEMM-based (GemmConvF32), for 1x1 and im2col variants: y (pixels x oc) =
// A (pixels x kh*kw*ic) * W^T, W the OHWI filter as oc x kh*kw*ic. Threads split
// the output pixels; each runs GemmF32 (one thread) per block of m_block pixels,
// with A read in place (1x1, stride 1, no padding) or built in the thread's
// scratch (rows gathered for strided 1x1, im2col otherwise), and y pre-filled with
// the bias when there is one (beta = 1).
//
// Weights: read from Conv2dArgs::packed_weights (laid out by the matching Pack*
// function for the same key and parameters), else packed per call into the
// calling thread's scratch (grown on first use, then reused; the threads share the
// packing work). Thread-safety: reentrant; after warm-up a call allocates nothing.
// Returns kInternal only when scratch memory cannot be allocated.
#pragma once

#include <cstdint>

#include "cliffguard/kernel.h"
#include "kernels/cpu/conv2d_direct.h"
#include "kernels/cpu/gemm_ukernel.h"

namespace cliffguard::cpu {

// Largest ow_tile a direct variant may declare.
inline constexpr int kMaxConvOwTile = 16;

// ---- Direct ----
// Packed filter floats: ceil(oc / oc_tile) tiles of kh*kw*ic elements x oc_tile
// lanes; element (ry, rx, c) of tile t at [(t * kh*kw*ic + (ry*kw + rx)*ic + c) *
// oc_tile + lane], lanes past oc zero.
int64_t DirectPackedFloats(const OpKey& key, int oc_tile);
// Packs oc tiles [t0, t1) of the filter `w` (layout `layout`; rows of ld >= kh*kw*ic
// floats for OHWI, dense for OIHW) into `dst` (the whole packed array).
void PackDirectWeights(const float* w, int64_t ld, ConvWeightLayout layout, const OpKey& key, int oc_tile,
                       int64_t t0, int64_t t1, float* dst);
// params: conv2d_params.h Conv2dDirectParam. oc_tile % vector width == 0,
// 1 <= ow_tile <= kMaxConvOwTile.
Status DirectConvF32(const Conv2dArgs& args, const ParamValues& params, ConvTileFn tile, int oc_tile, int ow_tile);

// ---- GEMM-based ----
// Packed filter floats (PackWeightsF32's layout of the oc x kh*kw*ic matrix).
int64_t GemmConvPackedFloats(const OpKey& key, int nr);
// Packs the OHWI filter (rows of ld >= kh*kw*ic floats) for depth blocks of kc.
void GemmConvPackWeights(const float* w, int64_t ld, const OpKey& key, int64_t kc, int nr, float* dst);
// params: conv2d_params.h Conv2dGemmParam. A 1x1 variant passes only keys its
// supports() accepts; the driver itself runs any key.
Status GemmConvF32(const Conv2dArgs& args, const ParamValues& params, UkernelFn ukernel, PackRowsFn pack_rows,
                   int mr, int nr);

// ---- The portable reference (CG_CONV2D_REF rows; params: kConv2dRefSpecs) ----
// Packed filter: the OHWI filter, dense.
#define CG_CONV2D_GEMM(isa, name, algo, gemm, mr, nr)
#define CG_CONV2D_DIRECT(isa, name, oc_tile, ow_tile)
#define CG_CONV2D_REF(isa, name) \
  Status name##_run(const KernelVariant& self, const Conv2dArgs& args, const ParamValues& params);
#include "kernels/cpu/conv2d_f32.inc"

// Contiguous share [begin, end) of `total` units for thread `tid` of `nt`.
inline void SplitRange(int64_t total, int tid, int nt, int64_t& begin, int64_t& end) {
  const int64_t q = total / nt, r = total % nt;
  begin = tid * q + (tid < r ? tid : r);
  end = begin + q + (tid < r ? 1 : 0);
}

}  // namespace cliffguard::cpu
