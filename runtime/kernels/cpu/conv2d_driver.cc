#include "kernels/cpu/conv2d_driver.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "kernels/cpu/conv2d_params.h"
#include "kernels/cpu/gemm_driver.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/thread_scratch.h"

namespace cliffguard::cpu {
namespace {

// The calling thread's scratch (packed weights, pad buffers of every thread) and
// each thread's own (im2col / gathered rows of the GEMM-based driver).
thread_local ThreadScratch tls_shared;
thread_local ThreadScratch tls_rows;

// The dimensions of a conv2d call, in key order.
struct Shape {
  int64_t n, h, w, ic, oc, kh, kw, sh, sw, ph, pw, oh, ow;
  int64_t K;  // kh * kw * ic: filter elements per output channel

  static Shape Of(const OpKey& key) {
    Shape s;
    s.n = key.dims[0];
    s.h = key.dims[1];
    s.w = key.dims[2];
    s.ic = key.dims[3];
    s.oc = key.dims[4];
    s.kh = key.dims[5];
    s.kw = key.dims[6];
    s.sh = key.dims[7];
    s.sw = key.dims[8];
    s.ph = key.dims[9];
    s.pw = key.dims[10];
    const Conv2dOutput o = Conv2dOutputDims(key);
    s.oh = o.oh;
    s.ow = o.ow;
    s.K = s.kh * s.kw * s.ic;
    return s;
  }
};

// ---------------------------------------------------------------------------
// Direct convolution
// ---------------------------------------------------------------------------

// Up to ow_tile output pixels sharing one filter window extent: rows [ry_lo,
// ry_lo + nry) and columns [rx_lo, rx_lo + nrx) of the filter; x[j] points at the
// input element (ry_lo, rx_lo, c0) of pixel j, y at its output channel 0.
struct Chunk {
  const float* x[kMaxConvOwTile];
  int m;
  int64_t nry, nrx, ry_lo, rx_lo;
  int64_t x_ry;  // floats between input rows
  float* y;
};

struct DirectCtx {
  OpKey key;
  Shape s;
  int oct, owt;
  ConvTileFn tile;
  const float* x;
  float* y;
  const float* bias;
  const float* w_src;  // per-call packing: the filter as given
  ConvWeightLayout layout;
  float* w_dst;        // per-call packing destination, or nullptr (packed_weights)
  const float* wp;     // the packed filter read by the tiles
  int64_t tiles;       // ceil(oc / oct)
  int64_t icb, ocb_tiles, rows_blk;
  int loop, par;
  bool pad_copy;
  int64_t wpad;        // pad_copy: pixels per buffer row ((ow - 1) * sw + kw)
  float* pad;          // pad_copy: per-thread buffers of pad_stride floats
  int64_t pad_stride;
  SpinBarrier* barrier;
};

// Where a thread reads its input: the image in place, or its padded buffer holding
// padded rows [pr0, ...) (padded row pr is input row pr - ph). `uniform`: every
// filter window lies inside (a padded buffer, or a key without padding), so pixel
// tiles may run on across output rows.
struct View {
  const float* base;
  int64_t row_stride;  // floats between input rows
  int64_t pr0;
  bool uniform;
};

// Calls f(chunk) for the pixel tiles of output rows [rb, re) of one image.
template <class F>
void ForEachChunk(const DirectCtx& c, const View& v, float* y_img, int64_t rb, int64_t re, int64_t c0, F&& f) {
  const Shape& s = c.s;
  Chunk ch;
  ch.x_ry = v.row_stride;
  if (v.uniform) {
    ch.nry = s.kh;
    ch.nrx = s.kw;
    ch.ry_lo = ch.rx_lo = 0;
    const int64_t total = (re - rb) * s.ow;
    const int64_t ntiles = CeilDiv(total, c.owt), base = total / ntiles, extra = total % ntiles;
    int64_t oy = rb, ox = 0, p = rb * s.ow;
    for (int64_t t = 0; t < ntiles; ++t) {
      ch.m = static_cast<int>(base + (t < extra ? 1 : 0));
      ch.y = y_img + p * s.oc;
      for (int j = 0; j < ch.m; ++j) {
        ch.x[j] = v.base + (oy * s.sh - v.pr0) * v.row_stride + (ox * s.sw) * s.ic + c0;
        if (++ox == s.ow) {
          ox = 0;
          ++oy;
        }
      }
      p += ch.m;
      f(ch);
    }
    return;
  }
  // In place: pixels whose window lies inside the input columns are [ox_lo, ox_hi).
  const int64_t ox_lo = std::min(s.ow, CeilDiv(s.pw, s.sw));
  const int64_t ox_hi = s.w + s.pw - s.kw >= 0 ? std::clamp((s.w + s.pw - s.kw) / s.sw + 1, ox_lo, s.ow) : ox_lo;
  for (int64_t oy = rb; oy < re; ++oy) {
    const int64_t iy0 = oy * s.sh - s.ph;
    ch.ry_lo = std::max<int64_t>(0, -iy0);
    ch.nry = std::max<int64_t>(0, std::min(s.kh, s.h - iy0) - ch.ry_lo);
    const float* xrow = ch.nry > 0 ? v.base + (iy0 + ch.ry_lo) * v.row_stride + c0 : v.base;
    float* yrow = y_img + oy * s.ow * s.oc;
    auto border = [&](int64_t ox) {
      const int64_t ix0 = ox * s.sw - s.pw;
      ch.rx_lo = std::max<int64_t>(0, -ix0);
      ch.nrx = std::max<int64_t>(0, std::min(s.kw, s.w - ix0) - ch.rx_lo);
      ch.m = 1;
      ch.x[0] = ch.nry > 0 && ch.nrx > 0 ? xrow + (ix0 + ch.rx_lo) * s.ic : v.base;
      ch.y = yrow + ox * s.oc;
      f(ch);
    };
    for (int64_t ox = 0; ox < ox_lo; ++ox) border(ox);
    if (ox_hi > ox_lo) {
      ch.rx_lo = 0;
      ch.nrx = s.kw;
      const int64_t total = ox_hi - ox_lo;
      const int64_t ntiles = CeilDiv(total, c.owt), base = total / ntiles, extra = total % ntiles;
      int64_t ox = ox_lo;
      for (int64_t t = 0; t < ntiles; ++t) {
        ch.m = static_cast<int>(base + (t < extra ? 1 : 0));
        ch.y = yrow + ox * s.oc;
        for (int j = 0; j < ch.m; ++j)
          ch.x[j] = ch.nry > 0 ? xrow + ((ox + j) * s.sw - s.pw) * s.ic : v.base;
        ox += ch.m;
        f(ch);
      }
    }
    for (int64_t ox = std::max(ox_hi, ox_lo); ox < s.ow; ++ox) border(ox);
  }
}

// Oc tiles [t, t + tiles) of one pixel tile (tiles > 1 only for full oc tiles).
inline void RunTile(const DirectCtx& c, const Chunk& ch, int64_t t, int64_t tiles, int64_t c0, int64_t cb) {
  const Shape& s = c.s;
  ConvTileArgs a;
  a.x = ch.x;
  a.x_ry = ch.x_ry;
  a.x_rx = s.ic;
  const bool merged = cb == s.ic;  // the window's kw positions are adjacent: one stream per filter row
  a.len = merged ? ch.nrx * s.ic : cb;
  a.rxs = merged ? 1 : ch.nrx;
  a.rows = ch.nrx > 0 ? ch.nry : 0;
  const float* wt = c.wp + t * s.K * c.oct;
  a.w = a.rows > 0 ? wt + ((ch.ry_lo * s.kw + ch.rx_lo) * s.ic + c0) * c.oct : wt;
  a.w_ry = s.kw * s.ic * c.oct;
  a.w_rx = s.ic * c.oct;
  a.w_ts = s.K * c.oct;
  a.tiles = tiles;
  a.y = ch.y + t * c.oct;
  a.y_cs = s.oc;
  a.bias = c.bias ? c.bias + t * c.oct : nullptr;
  a.m = ch.m;
  a.ocn = static_cast<int>(std::min<int64_t>(c.oct, s.oc - t * c.oct));
  a.accumulate = c0 > 0;
  c.tile(a);
}

// Padded rows [pr0, pr1) of one image (padded row pr is input row pr - ph; wpad
// pixels from padded column 0) into dst, zero where they lie in the padding.
void FillPadded(const DirectCtx& c, const float* x_img, int64_t pr0, int64_t pr1, float* dst) {
  const Shape& s = c.s;
  const int64_t row = c.wpad * s.ic;
  const int64_t left = std::min(s.pw, c.wpad), mid = std::max<int64_t>(0, std::min(s.w, c.wpad - s.pw));
  for (int64_t pr = pr0; pr < pr1; ++pr) {
    float* d = dst + (pr - pr0) * row;
    const int64_t iy = pr - s.ph;
    if (iy < 0 || iy >= s.h) {
      std::memset(d, 0, row * sizeof(float));
      continue;
    }
    std::memset(d, 0, left * s.ic * sizeof(float));
    std::memcpy(d + left * s.ic, x_img + iy * s.w * s.ic, mid * s.ic * sizeof(float));
    const int64_t right = c.wpad - left - mid;
    if (right > 0) std::memset(d + (left + mid) * s.ic, 0, right * s.ic * sizeof(float));
  }
}

void ComputeImage(const DirectCtx& c, int tid, int64_t b, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (r0 >= r1 || t0 >= t1) return;
  const Shape& s = c.s;
  const float* x_img = c.x + b * s.h * s.w * s.ic;
  float* y_img = c.y + b * s.oh * s.ow * s.oc;
  View v{x_img, s.w * s.ic, 0, s.ph == 0 && s.pw == 0};
  float* pad = c.pad_copy ? c.pad + tid * c.pad_stride : nullptr;
  for (int64_t rb = r0; rb < r1; rb += c.rows_blk) {
    const int64_t re = std::min(r1, rb + c.rows_blk);
    if (pad) {
      const int64_t pr0 = rb * s.sh, pr1 = (re - 1) * s.sh + s.kh;
      FillPadded(c, x_img, pr0, pr1, pad);
      v = View{pad, c.wpad * s.ic, pr0, true};
    }
    for (int64_t ob = t0; ob < t1; ob += c.ocb_tiles) {
      const int64_t oe = std::min(t1, ob + c.ocb_tiles);
      for (int64_t c0 = 0; c0 < s.ic; c0 += c.icb) {
        const int64_t cb = std::min(c.icb, s.ic - c0);
        if (c.loop == kLoopPixelsInner) {
          for (int64_t t = ob; t < oe; ++t)
            ForEachChunk(c, v, y_img, rb, re, c0, [&](const Chunk& ch) { RunTile(c, ch, t, 1, c0, cb); });
        } else {
          // The full oc tiles of the block in one call, a partial last tile in its own.
          const int64_t full = std::min(oe, s.oc / c.oct) - ob;
          ForEachChunk(c, v, y_img, rb, re, c0, [&](const Chunk& ch) {
            if (full > 0) RunTile(c, ch, ob, full, c0, cb);
            for (int64_t t = ob + std::max<int64_t>(full, 0); t < oe; ++t) RunTile(c, ch, t, 1, c0, cb);
          });
        }
      }
    }
  }
}

void DirectTask(void* ctx, int tid, int nt) {
  const DirectCtx& c = *static_cast<const DirectCtx*>(ctx);
  const Shape& s = c.s;
  if (c.w_dst) {
    int64_t t0, t1;
    SplitRange(c.tiles, tid, nt, t0, t1);
    PackDirectWeights(c.w_src, s.K, c.layout, c.key, c.oct, t0, t1, c.w_dst);
    if (nt > 1) c.barrier->Wait(nt);
  }
  int64_t a0, a1;
  switch (c.par) {
    case kConvParBatch:
      SplitRange(s.n, tid, nt, a0, a1);
      for (int64_t b = a0; b < a1; ++b) ComputeImage(c, tid, b, 0, s.oh, 0, c.tiles);
      break;
    case kConvParOc:
      SplitRange(c.tiles, tid, nt, a0, a1);
      for (int64_t b = 0; b < s.n; ++b) ComputeImage(c, tid, b, 0, s.oh, a0, a1);
      break;
    default:
      SplitRange(s.oh, tid, nt, a0, a1);
      for (int64_t b = 0; b < s.n; ++b) ComputeImage(c, tid, b, a0, a1, 0, c.tiles);
      break;
  }
}

// ---------------------------------------------------------------------------
// GEMM-based convolution
// ---------------------------------------------------------------------------

struct GemmConvCtx {
  Shape s;
  int64_t pixels;
  bool dense;  // 1x1, stride 1, no padding: pixel p's input row is x + p * ic
  const float* x;
  float* y;
  const float* bias;
  const float* w_src;  // per-call packing: the OHWI filter (dense)
  float* w_dst;        // per-call packing destination, or nullptr
  const float* packed_b;
  GemmBlocking blk;
  int64_t m_block;
  UkernelFn uk;
  PackRowsFn pack_rows;
  int mr, nr;
  SpinBarrier* barrier;
  std::atomic<bool>* failed;
};

// Row p - p0 of `dst` (K floats) = the filter window of output pixel p, zero where
// it reads padding (im2col; for 1x1 keys a gathered input row).
void BuildRows(const Shape& s, const float* x, int64_t p0, int64_t count, float* dst) {
  const int64_t img = s.oh * s.ow;
  int64_t b = p0 / img, oy = (p0 % img) / s.ow, ox = p0 % s.ow;
  const int64_t seg = s.kw * s.ic;
  for (int64_t i = 0; i < count; ++i) {
    float* d = dst + i * s.K;
    const float* x_img = x + b * s.h * s.w * s.ic;
    const int64_t ix0 = ox * s.sw - s.pw;
    const int64_t rx_lo = std::max<int64_t>(0, -ix0), rx_hi = std::min(s.kw, s.w - ix0);
    for (int64_t ry = 0; ry < s.kh; ++ry) {
      float* dr = d + ry * seg;
      const int64_t iy = oy * s.sh - s.ph + ry;
      if (iy < 0 || iy >= s.h || rx_lo >= rx_hi) {
        std::memset(dr, 0, seg * sizeof(float));
        continue;
      }
      if (rx_lo > 0) std::memset(dr, 0, rx_lo * s.ic * sizeof(float));
      std::memcpy(dr + rx_lo * s.ic, x_img + (iy * s.w + ix0 + rx_lo) * s.ic, (rx_hi - rx_lo) * s.ic * sizeof(float));
      if (rx_hi < s.kw) std::memset(dr + rx_hi * s.ic, 0, (s.kw - rx_hi) * s.ic * sizeof(float));
    }
    if (++ox == s.ow) {
      ox = 0;
      if (++oy == s.oh) {
        oy = 0;
        ++b;
      }
    }
  }
}

void GemmConvTask(void* ctx, int tid, int nt) {
  const GemmConvCtx& c = *static_cast<const GemmConvCtx*>(ctx);
  const Shape& s = c.s;
  if (c.w_dst) {
    // Depth blocks of kc, each split by nr panels across the threads.
    const int64_t n_pad = RoundUp(s.oc, c.nr), panels = n_pad / c.nr;
    int64_t q0, q1;
    SplitRange(panels, tid, nt, q0, q1);
    if (q0 < q1) {
      for (int64_t pc = 0; pc < s.K; pc += c.blk.kc) {
        const int64_t kcb = std::min<int64_t>(c.blk.kc, s.K - pc);
        PackWeightsF32(c.w_src + q0 * c.nr * s.K + pc, s.K, true, std::min(s.oc - q0 * c.nr, (q1 - q0) * c.nr), kcb,
                       kcb, c.nr, c.w_dst + pc * n_pad + q0 * c.nr * kcb);
      }
    }
    if (nt > 1) c.barrier->Wait(nt);
  }
  int64_t u0, u1;
  SplitRange(CeilDiv(c.pixels, c.mr), tid, nt, u0, u1);
  const int64_t p_end = std::min(c.pixels, u1 * c.mr);
  GemmArgs g;
  g.trans_b = true;
  g.n = s.oc;
  g.k = s.K;
  g.ldb = s.K;
  g.packed_b = c.packed_b;
  g.ldc = s.oc;
  g.beta = c.bias ? 1.0f : 0.0f;
  for (int64_t p = u0 * c.mr; p < p_end; p += c.m_block) {
    const int64_t mb = std::min(c.m_block, p_end - p);
    if (c.dense) {
      g.a = c.x + p * s.ic;
    } else {
      float* rows = tls_rows.Get(mb * s.K);
      if (!rows) {
        c.failed->store(true, std::memory_order_relaxed);
        return;
      }
      BuildRows(s, c.x, p, mb, rows);
      g.a = rows;
    }
    g.lda = s.K;
    g.m = mb;
    float* yb = c.y + p * s.oc;
    if (c.bias)
      for (int64_t i = 0; i < mb; ++i) std::memcpy(yb + i * s.oc, c.bias, s.oc * sizeof(float));
    g.c = yb;
    if (!GemmF32(g, c.blk, c.uk, c.pack_rows, c.mr, c.nr).ok()) {
      c.failed->store(true, std::memory_order_relaxed);
      return;
    }
  }
}

// d[k * N + o] = src[o * ld + k] for k < K, o < N: the destination written in
// order, each element gathered from N rows (as fast as a copy here; a loop in
// source order scatters and runs about 2x slower).
template <int N>
void GatherRows(const float* __restrict src, int64_t ld, int64_t K, float* __restrict d) {
  for (int64_t k = 0; k < K; ++k)
#pragma GCC unroll 64
    for (int o = 0; o < N; ++o) d[k * N + o] = src[o * ld + k];
}

}  // namespace

// ---- Direct ----

int64_t DirectPackedFloats(const OpKey& key, int oc_tile) {
  const Shape s = Shape::Of(key);
  return CeilDiv(s.oc, oc_tile) * oc_tile * s.K;
}

void PackDirectWeights(const float* w, int64_t ld, ConvWeightLayout layout, const OpKey& key, int oc_tile, int64_t t0,
                       int64_t t1, float* dst) {
  const Shape s = Shape::Of(key);
  const int64_t oct = oc_tile;
  for (int64_t t = t0; t < t1; ++t) {
    float* d = dst + t * s.K * oct;
    const int64_t valid = std::min(oct, s.oc - t * oct);
    if (layout == ConvWeightLayout::kOihw) {
      if (valid < oct)
        for (int64_t k = 0; k < s.K; ++k)
          for (int64_t o = valid; o < oct; ++o) d[k * oct + o] = 0.0f;
      const int64_t taps = s.kh * s.kw;
      for (int64_t o = 0; o < valid; ++o) {
        const float* src = w + (t * oct + o) * s.K;
        for (int64_t ci = 0; ci < s.ic; ++ci)
          for (int64_t tap = 0; tap < taps; ++tap) d[(tap * s.ic + ci) * oct + o] = src[ci * taps + tap];
      }
      continue;
    }
    const float* src = w + t * oct * ld;
    if (valid == 16 && oct == 16) {
      GatherRows<16>(src, ld, s.K, d);
    } else if (valid == 64 && oct == 64) {
      GatherRows<64>(src, ld, s.K, d);
    } else {
      for (int64_t k = 0; k < s.K; ++k) {
        float* dk = d + k * oct;
        for (int64_t o = 0; o < valid; ++o) dk[o] = src[o * ld + k];
        for (int64_t o = valid; o < oct; ++o) dk[o] = 0.0f;
      }
    }
  }
}

Status DirectConvF32(const Conv2dArgs& args, const ParamValues& p, ConvTileFn tile, int oc_tile, int ow_tile) {
  DirectCtx c{};
  c.key = Conv2dKeyOf(args);
  const Shape& s = c.s = Shape::Of(c.key);
  c.oct = oc_tile;
  c.owt = std::clamp(ow_tile, 1, kMaxConvOwTile);
  c.tile = tile;
  c.x = static_cast<const float*>(args.x);
  c.y = static_cast<float*>(args.y);
  c.bias = static_cast<const float*>(args.bias);
  c.w_src = static_cast<const float*>(args.weights);
  c.layout = args.weight_layout;
  c.tiles = CeilDiv(s.oc, oc_tile);
  c.icb = std::clamp<int64_t>(p[kDirIcBlock], 1, s.ic);
  c.ocb_tiles = std::clamp<int64_t>(p[kDirOcBlock] / oc_tile, 1, c.tiles);
  c.rows_blk = std::clamp<int64_t>(p[kDirRows], 1, s.oh);
  c.loop = p[kDirLoop];
  c.par = p[kDirPar];
  c.pad_copy = p[kDirPadCopy] != 0;
  c.wpad = (s.ow - 1) * s.sw + s.kw;

  int64_t units = s.oh;
  if (c.par == kConvParOc) units = c.tiles;
  if (c.par == kConvParBatch) units = s.n;
  const int nt = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(p[kDirThreads], units), 1,
                                                      ThreadPool::kMaxThreads));
  const int64_t w_floats = args.packed_weights ? 0 : RoundUp(c.tiles * oc_tile * s.K, kAlignFloats);
  c.pad_stride = c.pad_copy ? RoundUp(((c.rows_blk - 1) * s.sh + s.kh) * c.wpad * s.ic, kAlignFloats) : 0;
  const int64_t total = w_floats + c.pad_stride * nt;
  float* base = total > 0 ? tls_shared.Get(total) : nullptr;
  if (total > 0 && !base)
    return Internal(fmt::format("conv2d: cannot allocate {} bytes of scratch", total * int64_t{sizeof(float)}));
  if (args.packed_weights) {
    c.wp = static_cast<const float*>(args.packed_weights);
  } else {
    c.w_dst = base;
    c.wp = base;
  }
  c.pad = base + w_floats;
  SpinBarrier barrier;
  c.barrier = &barrier;
  ThreadPool::Global().Run(nt, &DirectTask, &c);
  return Status::Ok();
}

// ---- GEMM-based ----

int64_t GemmConvPackedFloats(const OpKey& key, int nr) {
  const Shape s = Shape::Of(key);
  return PackedWeightsFloats(s.oc, s.K, nr);
}

void GemmConvPackWeights(const float* w, int64_t ld, const OpKey& key, int64_t kc, int nr, float* dst) {
  const Shape s = Shape::Of(key);
  PackWeightsF32(w, ld, true, s.oc, s.K, kc, nr, dst);
}

Status GemmConvF32(const Conv2dArgs& args, const ParamValues& p, UkernelFn ukernel, PackRowsFn pack_rows, int mr,
                   int nr) {
  GemmConvCtx c{};
  const OpKey key = Conv2dKeyOf(args);
  const Shape& s = c.s = Shape::Of(key);
  c.pixels = s.n * s.oh * s.ow;
  c.dense = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
  c.x = static_cast<const float*>(args.x);
  c.y = static_cast<float*>(args.y);
  c.bias = static_cast<const float*>(args.bias);
  c.blk.mc = p[kCgMc];
  c.blk.kc = std::clamp<int64_t>(p[kCgKc], 1, s.K);
  c.blk.nc = p[kCgNc];
  c.blk.par = kParN;
  c.blk.threads = 1;
  c.blk.unroll_k = p[kCgUnrollK];
  c.blk.prefetch = p[kCgPrefetch];
  c.blk.pack_a = p[kCgPackA] != 0;
  c.blk.pack_b = true;
  c.blk.prefetch_next = args.packed_weights != nullptr;  // a plan's filter, cold between layers
  c.m_block = p[kCgMBlock];
  c.uk = ukernel;
  c.pack_rows = pack_rows;
  c.mr = mr;
  c.nr = nr;
  const int nt = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(p[kCgThreads], CeilDiv(c.pixels, mr)), 1,
                                                      ThreadPool::kMaxThreads));

  // Weights: packed ahead, or packed here from OHWI (OIHW converted first unless
  // the filter is 1x1, where both layouts are the same matrix).
  if (args.packed_weights) {
    c.packed_b = static_cast<const float*>(args.packed_weights);
  } else {
    const bool convert = args.weight_layout == ConvWeightLayout::kOihw && s.kh * s.kw > 1;
    const int64_t packed = RoundUp(PackedWeightsFloats(s.oc, s.K, nr), kAlignFloats);
    const int64_t total = packed + (convert ? s.oc * s.K : 0);
    float* base = tls_shared.Get(total);
    if (!base)
      return Internal(fmt::format("conv2d: cannot allocate {} bytes of scratch", total * int64_t{sizeof(float)}));
    c.w_dst = base;
    c.packed_b = base;
    c.w_src = static_cast<const float*>(args.weights);
    if (convert) {
      float* ohwi = base + packed;
      const int64_t taps = s.kh * s.kw;
      for (int64_t o = 0; o < s.oc; ++o)
        for (int64_t ci = 0; ci < s.ic; ++ci)
          for (int64_t tap = 0; tap < taps; ++tap) ohwi[(o * taps + tap) * s.ic + ci] = c.w_src[(o * s.ic + ci) * taps + tap];
      c.w_src = ohwi;
    }
  }
  std::atomic<bool> failed{false};
  c.failed = &failed;
  SpinBarrier barrier;
  c.barrier = &barrier;
  ThreadPool::Global().Run(nt, &GemmConvTask, &c);
  if (failed.load())
    return Internal(fmt::format("conv2d: cannot allocate {} bytes of GEMM scratch",
                                c.m_block * s.K * int64_t{sizeof(float)}));
  return Status::Ok();
}

}  // namespace cliffguard::cpu
