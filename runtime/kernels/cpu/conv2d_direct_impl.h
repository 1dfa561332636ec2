// The direct conv2d register-tile template, shared by every direct variant's
// translation unit. A variant's TU includes a traits header (gemm_ukernel_avx2.h,
// gemm_ukernel_avx512.h: the vector traits are the GEMM family's) and then
// CG_DEFINE_CONV2D_DIRECT_TILE(name, traits, oc_tile, ow_tile).
//
// Everything here has internal linkage (anonymous namespace), as in
// gemm_ukernel_impl.h: each TU is compiled with different -m flags and the linker
// must never merge an AVX-512 instantiation into another caller.
//
// Design: broadcast-input / vector-filter outer products. Per filter element the
// tile loads NV vectors of the packed filter (oc_tile lanes) and broadcasts one
// input value per output pixel into M*NV FMAs; M * NV accumulators + NV + 1 <=
// register count. Narrower tiles (m < ow_tile pixels, fewer oc vectors) are their
// own instantiations, so edge tiles cost only what they compute.
#pragma once

#include <cstdint>
#include <utility>

#include "kernels/cpu/conv2d_direct.h"

#ifndef CG_INLINE
#define CG_INLINE inline __attribute__((always_inline))
#endif

namespace cliffguard::cpu {
namespace {

template <class T, int OCT, int M, int NV>
void DirectTile(const ConvTileArgs& a) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  static_assert(NV * W <= OCT);
  const int last = a.ocn - (NV - 1) * W;  // lanes of the last vector: 1..W
  const float* x[M];
#pragma GCC unroll 16
  for (int j = 0; j < M; ++j) x[j] = a.x[j];
  const int64_t len = a.len;
  for (int64_t t = 0; t < a.tiles; ++t) {
    float* const yt = a.y + t * OCT;
    V acc[M][NV];
    if (a.accumulate) {
#pragma GCC unroll 16
      for (int j = 0; j < M; ++j) {
        const float* y = yt + j * a.y_cs;
#pragma GCC unroll 8
        for (int v = 0; v + 1 < NV; ++v) acc[j][v] = T::Load(y + v * W);
        acc[j][NV - 1] = T::LoadN(y + (NV - 1) * W, last);
      }
    } else {
      V init[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) init[v] = T::Zero();
      if (a.bias) {
        const float* b = a.bias + t * OCT;
#pragma GCC unroll 8
        for (int v = 0; v + 1 < NV; ++v) init[v] = T::Load(b + v * W);
        init[NV - 1] = T::LoadN(b + (NV - 1) * W, last);
      }
#pragma GCC unroll 16
      for (int j = 0; j < M; ++j)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[j][v] = init[v];
    }

    const float* const wt = a.w + t * a.w_ts;
    for (int64_t r = 0; r < a.rows; ++r) {
      for (int64_t q = 0; q < a.rxs; ++q) {
        // One segment: input elements [xo, xo + len) of every pixel, one shared index.
        const int64_t xo = r * a.x_ry + q * a.x_rx;
        const float* w = wt + r * a.w_ry + q * a.w_rx;
#pragma GCC unroll 4
        for (int64_t e = xo; e < xo + len; ++e, w += OCT) {
          V wv[NV];
#pragma GCC unroll 8
          for (int v = 0; v < NV; ++v) wv[v] = T::Load(w + v * W);
#pragma GCC unroll 16
          for (int j = 0; j < M; ++j) {
            const V xv = T::Bcast(x[j] + e);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) T::FmaAcc(acc[j][v], xv, wv[v]);
          }
        }
      }
    }

#pragma GCC unroll 16
    for (int j = 0; j < M; ++j) {
      float* y = yt + j * a.y_cs;
#pragma GCC unroll 8
      for (int v = 0; v + 1 < NV; ++v) T::Store(y + v * W, acc[j][v]);
      if (last == W) {
        T::Store(y + (NV - 1) * W, acc[j][NV - 1]);
      } else {
        T::StoreN(y + (NV - 1) * W, acc[j][NV - 1], last);
      }
    }
  }
}

// Function table indexed by (nv - 1) * OWT + (m - 1).
template <class T, int OCT, int OWT, class Seq>
struct DirectTileTable;
template <class T, int OCT, int OWT, int... Is>
struct DirectTileTable<T, OCT, OWT, std::integer_sequence<int, Is...>> {
  static constexpr ConvTileFn kFns[] = {&DirectTile<T, OCT, Is % OWT + 1, Is / OWT + 1>...};
};

template <class T, int OCT, int OWT>
CG_INLINE void RunDirectTile(const ConvTileArgs& a) {
  static_assert(OCT % T::kWidth == 0, "oc_tile must be a multiple of the vector width");
  constexpr int kMaxNv = OCT / T::kWidth;
  using Table = DirectTileTable<T, OCT, OWT, std::make_integer_sequence<int, kMaxNv * OWT>>;
  const int nv = (a.ocn + T::kWidth - 1) / T::kWidth;
  Table::kFns[(nv - 1) * OWT + (a.m - 1)](a);
}

}  // namespace
}  // namespace cliffguard::cpu

// Defines the variant's tile entry point (external linkage).
#define CG_DEFINE_CONV2D_DIRECT_TILE(name, traits, oc_tile, ow_tile)                                   \
  namespace cliffguard::cpu {                                                                         \
  void name##_tile(const ConvTileArgs& args) { RunDirectTile<traits, oc_tile, ow_tile>(args); }       \
  }
