// The contract between the direct conv2d driver (ISA-free, conv2d_driver.cc) and
// its register-tile kernels (one translation unit per variant, compiled with that
// variant's ISA flags; conv2d_direct_impl.h).
#pragma once

#include <cstdint>

namespace cliffguard::cpu {

// `tiles` register tiles of one pixel tile: for each oc tile t < tiles, `ocn`
// output channels of `m` output pixels, summed over rows x rxs segments of `len`
// elements each:
//   acc[j][o] = init + sum over r < rows, q < rxs, e < len of
//               x[j][r * x_ry + q * x_rx + e] * wt[r * w_ry + q * w_rx + e * oc_tile + o]
// with wt = w + t * w_ts, where init is yt[j * y_cs + o] (accumulate), else
// bias[t * oc_tile + o] (zero when bias is null); then yt[j * y_cs + o] =
// acc[j][o] for j < m, o < ocn, with yt = y + t * oc_tile.
//   x: m pointers, one per output pixel, at the first input element the pixel reads
//     (channels contiguous: a segment is one filter row's ic channels, or kw*ic
//     elements when its kw positions are adjacent in memory).
//   w: the oc tile's packed filter (oc_tile floats per element, zero padded past
//     the key's oc), at the element matching x.
//   Units: all strides and lengths in floats. rows == 0 or rxs == 0 stores init.
//   1 <= m <= ow_tile, 1 <= ocn <= oc_tile, tiles >= 1 (tiles > 1 only with
//   ocn == oc_tile). Lanes past ocn are neither read from y or bias nor written.
struct ConvTileArgs {
  const float* const* x;
  int64_t x_ry, x_rx;
  const float* w;
  int64_t w_ry, w_rx, w_ts;
  int64_t len, rows, rxs;
  float* y;
  int64_t y_cs;
  const float* bias;
  int64_t tiles;
  int m, ocn;
  bool accumulate;
};

using ConvTileFn = void (*)(const ConvTileArgs&);

#define CG_CONV2D_GEMM(isa, name, algo, gemm, mr, nr)
#define CG_CONV2D_DIRECT(isa, name, oc_tile, ow_tile) void name##_tile(const ConvTileArgs& args);
#define CG_CONV2D_REF(isa, name)
#include "kernels/cpu/conv2d_f32.inc"

}  // namespace cliffguard::cpu
