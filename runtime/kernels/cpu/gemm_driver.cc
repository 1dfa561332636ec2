#include "kernels/cpu/gemm_driver.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <fmt/format.h>

#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/thread_scratch.h"

namespace cliffguard::cpu {
namespace {

thread_local ThreadScratch tls_scratch;

// Contiguous share [begin, end) of `total` units for thread `tid` of `nt`.
void Split(int64_t total, int tid, int nt, int64_t& begin, int64_t& end) {
  const int64_t q = total / nt, r = total % nt;
  begin = tid * q + std::min<int64_t>(tid, r);
  end = begin + q + (tid < r ? 1 : 0);
}

// dst[0:n] = src[0:n], dst[n:width] = 0. Short rows: an inline loop beats memcpy.
inline void CopyRow(float* __restrict dst, const float* __restrict src, int n, int width) {
  for (int j = 0; j < n; ++j) dst[j] = src[j];
  for (int j = n; j < width; ++j) dst[j] = 0.0f;
}

// rows x W floats from src (row stride ld) to dst (row stride W). The size of each
// copy is a constant, so the compiler inlines it: a loop over a runtime width became
// a memmove call per row, 56% of a 16x3072x768 call that packs B.
template <int W>
void CopyPanelRows(float* __restrict dst, const float* __restrict src, int64_t ld, int64_t rows) {
  for (int64_t p = 0; p < rows; ++p) __builtin_memcpy(dst + p * W, src + p * ld, W * sizeof(float));
}

// The same for every mr and nr of the variant table (gemm_f32.inc); false for
// another width.
inline bool CopyFullPanel(float* dst, const float* src, int64_t ld, int64_t rows, int width) {
  switch (width) {
    case 4: CopyPanelRows<4>(dst, src, ld, rows); return true;
    case 6: CopyPanelRows<6>(dst, src, ld, rows); return true;
    case 8: CopyPanelRows<8>(dst, src, ld, rows); return true;
    case 14: CopyPanelRows<14>(dst, src, ld, rows); return true;
    case 16: CopyPanelRows<16>(dst, src, ld, rows); return true;
    case 24: CopyPanelRows<24>(dst, src, ld, rows); return true;
    case 32: CopyPanelRows<32>(dst, src, ld, rows); return true;
    case 64: CopyPanelRows<64>(dst, src, ld, rows); return true;
    default: return false;
  }
}

// Transposing copy: dst[p * width + i] = src[i * ld + p] for i < rows, p < depth
// (rows of the source become columns of the panel). Four rows at a time through
// 4x4 SSE transposes, then two at a time through unpacks (SSE2 is the x86-64
// baseline this ISA-free file may use).
inline void PackTransposedDepth(float* __restrict dst, int width, const float* __restrict src, int64_t ld, int rows,
                                int64_t depth) {
  int i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= rows; i += 4) {
    const float* s0 = src + i * ld;
    const float* s1 = s0 + ld;
    const float* s2 = s1 + ld;
    const float* s3 = s2 + ld;
    float* d = dst + i;
    int64_t p = 0;
    for (; p + 4 <= depth; p += 4) {
      __m128 r0 = _mm_loadu_ps(s0 + p), r1 = _mm_loadu_ps(s1 + p), r2 = _mm_loadu_ps(s2 + p),
             r3 = _mm_loadu_ps(s3 + p);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(d + (p + 0) * width, r0);
      _mm_storeu_ps(d + (p + 1) * width, r1);
      _mm_storeu_ps(d + (p + 2) * width, r2);
      _mm_storeu_ps(d + (p + 3) * width, r3);
    }
    for (; p < depth; ++p) {
      d[p * width + 0] = s0[p];
      d[p * width + 1] = s1[p];
      d[p * width + 2] = s2[p];
      d[p * width + 3] = s3[p];
    }
  }
  for (; i + 2 <= rows; i += 2) {
    const float* s0 = src + i * ld;
    const float* s1 = s0 + ld;
    float* d = dst + i;
    int64_t p = 0;
    for (; p + 4 <= depth; p += 4) {
      const __m128 r0 = _mm_loadu_ps(s0 + p), r1 = _mm_loadu_ps(s1 + p);
      const __m128 lo = _mm_unpacklo_ps(r0, r1), hi = _mm_unpackhi_ps(r0, r1);
      _mm_storel_pi(reinterpret_cast<__m64*>(d + (p + 0) * width), lo);
      _mm_storeh_pi(reinterpret_cast<__m64*>(d + (p + 1) * width), lo);
      _mm_storel_pi(reinterpret_cast<__m64*>(d + (p + 2) * width), hi);
      _mm_storeh_pi(reinterpret_cast<__m64*>(d + (p + 3) * width), hi);
    }
    for (; p < depth; ++p) {
      d[p * width + 0] = s0[p];
      d[p * width + 1] = s1[p];
    }
  }
#endif
  for (; i < rows; ++i)
    for (int64_t p = 0; p < depth; ++p) dst[p * width + i] = src[i * ld + p];
}

// Depth steps per pass over the panel's rows in PackTransposed: every group of rows
// advances together, and the stores of one pass are still in L1 when the next group
// fills its columns. Whole-depth passes made the pack-bound 3136 x 64 x 576 run 1.10x
// (1 thread) and 1.18x (2 threads) slower on the fitted 8x32, 14x32 and 6x64 tiles,
// medians of same-binary runs; shapes with k <= 128 moved 0.96-1.02x (bench/RESULTS.md).
inline constexpr int64_t kPackDepthStep = 32;

inline void PackTransposed(float* __restrict dst, int width, const float* __restrict src, int64_t ld, int rows,
                           int64_t depth) {
  for (int64_t p0 = 0; p0 < depth; p0 += kPackDepthStep)
    PackTransposedDepth(dst + p0 * width, width, src + p0, ld, rows, std::min(kPackDepthStep, depth - p0));
}

struct AView {
  const float* base;
  int64_t panel_stride, rs, ks;
};

struct BView {
  const float* base;
  int64_t panel_stride, ks;
  int64_t edge_q;  // index of the packed edge panel when B is read in place, else -1
  const float* edge;
};

struct Ctx {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  bool ta;
  const float* b;
  int64_t ldb;
  bool tb;
  float* c;
  int64_t ldc;
  float alpha, beta;
  const float* packed_b;  // B packed ahead (PackWeightsF32), or nullptr
  int64_t n_pad;          // n rounded up to nr: the packed row of one depth step
  UkernelFn uk;
  PackRowsFn pack_rows;  // B as stored into panels; nullptr: the portable copies (PackWeightsF32)
  int mr, nr;
  GemmBlocking blk;  // mc, kc, nc clipped to the problem
  int64_t a_floats, b_floats, edge_floats;
  float* shared;       // par 1, 2: B block (or edge panel) then A block (par 2)
  float* priv;         // per-thread regions of priv_stride floats
  int64_t priv_stride;
  SpinBarrier* barrier;
};

// Packs panels [r0, r1) of the op(A) block rows [ic, ic+mcb) x depth [pc, pc+kcb):
// panel r at dst + r*mr*kcb, element (i, p) at [p*mr + i]. Rows past mcb are not
// written (the micro-kernel never reads them).
void PackA(const Ctx& c, int64_t ic, int64_t mcb, int64_t pc, int64_t kcb, int64_t r0, int64_t r1, float* dst) {
  const int mr = c.mr;
  for (int64_t r = r0; r < r1; ++r) {
    float* d = dst + r * mr * kcb;
    const int64_t ib = ic + r * mr;
    const int mb = static_cast<int>(std::min<int64_t>(mr, mcb - r * mr));
    if (!c.ta) {
      PackTransposed(d, mr, c.a + ib * c.lda + pc, c.lda, mb, kcb);
    } else {
      const float* src = c.a + pc * c.lda + ib;
      if (mb == mr && CopyFullPanel(d, src, c.lda, kcb, mr)) continue;
      for (int64_t p = 0; p < kcb; ++p) CopyRow(d + p * mr, src + p * c.lda, mb, mb);
    }
  }
}

// `rows` rows of nb <= nr columns of B as stored (row stride ldb) into a panel at dst.
void CopyRowsOfB(const Ctx& c, float* dst, const float* src, int64_t rows, int nb) {
  if (c.pack_rows) return c.pack_rows(dst, src, c.ldb, rows, nb);
  if (nb == c.nr && CopyFullPanel(dst, src, c.ldb, rows, c.nr)) return;
  for (int64_t p = 0; p < rows; ++p) CopyRow(dst + p * c.nr, src + p * c.ldb, nb, c.nr);
}

// Packs panel q of the op(B) block depth [pc, pc+kcb) x columns [jc, jc+ncb) at dst:
// element (p, j) at [p*nr + j], zero padded to nr.
void PackBPanel(const Ctx& c, int64_t jc, int64_t ncb, int64_t pc, int64_t kcb, int64_t q, float* dst) {
  const int nr = c.nr;
  const int64_t jb = jc + q * nr;
  const int nb = static_cast<int>(std::min<int64_t>(nr, ncb - q * nr));
  if (!c.tb) {
    CopyRowsOfB(c, dst, c.b + pc * c.ldb + jb, kcb, nb);
    return;
  }
  if (nb < nr)
    for (int64_t p = 0; p < kcb; ++p)
      for (int j = nb; j < nr; ++j) dst[p * nr + j] = 0.0f;
  PackTransposed(dst, nr, c.b + jb * c.ldb + pc, c.ldb, nb, kcb);
}

// Packs panels [q0, q1) of the op(B) block depth [pc, pc+kcb) x columns [jc, jc+ncb):
// panel q at dst + q*nr*kcb, element (p, j) at [p*nr + j], zero padded to nr.
// B not transposed is read a few whole rows at a time (sequential reads for the
// prefetchers); panel by panel, each row read would be ldb apart.
void PackB(const Ctx& c, int64_t jc, int64_t ncb, int64_t pc, int64_t kcb, int64_t q0, int64_t q1, float* dst) {
  const int nr = c.nr;
  if (!c.tb) {
    constexpr int64_t kRowsAtOnce = 8;
    for (int64_t p0 = 0; p0 < kcb; p0 += kRowsAtOnce) {
      const int64_t rows = std::min(kRowsAtOnce, kcb - p0);
      for (int64_t q = q0; q < q1; ++q) {
        float* d = dst + q * nr * kcb + p0 * nr;
        const float* src = c.b + (pc + p0) * c.ldb + jc + q * nr;
        CopyRowsOfB(c, d, src, rows, static_cast<int>(std::min<int64_t>(nr, ncb - q * nr)));
      }
    }
    return;
  }
  for (int64_t q = q0; q < q1; ++q) PackBPanel(c, jc, ncb, pc, kcb, q, dst + q * nr * kcb);
}

// Packs A panels [r0, r1) into dst (pack_a) or describes A in place.
AView PrepareA(const Ctx& c, int64_t ic, int64_t mcb, int64_t pc, int64_t kcb, int64_t r0, int64_t r1, float* dst) {
  if (c.blk.pack_a) {
    PackA(c, ic, mcb, pc, kcb, r0, r1, dst);
    return {dst, c.mr * kcb, 1, c.mr};
  }
  if (!c.ta) return {c.a + ic * c.lda + pc, c.mr * c.lda, c.lda, 1};
  return {c.a + pc * c.lda + ic, c.mr, 1, c.lda};
}

// Packs B panels [q0, q1) into dst (pack_b), or describes B in place and packs only
// its partial last panel (if it lies in [q0, q1)) so that every panel has nr
// readable columns.
BView PrepareB(const Ctx& c, int64_t jc, int64_t ncb, int64_t pc, int64_t kcb, int64_t q0, int64_t q1, float* dst) {
  if (c.packed_b) return {c.packed_b + pc * c.n_pad + jc * kcb, c.nr * kcb, c.nr, -1, nullptr};
  if (c.blk.pack_b) {
    PackB(c, jc, ncb, pc, kcb, q0, q1, dst);
    return {dst, c.nr * kcb, c.nr, -1, nullptr};
  }
  BView v{c.b + pc * c.ldb + jc, c.nr, c.ldb, -1, dst};
  if (ncb % c.nr != 0) {
    v.edge_q = ncb / c.nr;
    if (v.edge_q >= q0 && v.edge_q < q1)
      CopyRowsOfB(c, dst, v.base + v.edge_q * c.nr, kcb, static_cast<int>(ncb % c.nr));
  }
  return v;
}

// A B panel in contiguous memory (packed), as the L2 prefetch of the panel that runs
// next sees it: its first float and its length in cache lines. Empty: nothing to fetch.
struct Panel {
  const float* base = nullptr;
  int64_t lines = 0;
};

int64_t PanelLines(const Ctx& c, int64_t kcb) { return kcb * c.nr * int64_t{sizeof(float)} / 64; }

// Panel q of a block view, when its panels are contiguous (packed; B read in place,
// and its edge panel, are not).
Panel ViewPanel(const Ctx& c, const BView& bv, int64_t q, int64_t kcb) {
  if (bv.ks != c.nr) return {};
  return {bv.base + q * bv.panel_stride, PanelLines(c, kcb)};
}

// Panel q of the block at (jc, pc) of constant weights packed ahead (PackWeightsF32's
// layout); empty when there are none.
Panel PackedPanel(const Ctx& c, int64_t jc, int64_t pc, int64_t q) {
  if (!c.packed_b) return {};
  const int64_t kcb = std::min(c.blk.kc, c.k - pc);
  return {c.packed_b + pc * c.n_pad + jc * kcb + q * c.nr * kcb, PanelLines(c, kcb)};
}

// The panel a thread runs after the last of block (jc, pc, ic), whose first panel is
// q (the same in the blocks that follow: the thread's share depends on the block's
// width, equal for blocks of one jc): the block again for the next ic, else the next
// depth block, else (next_jc < end) the next column block. The caller passes `next_q`
// for the next column block.
Panel AfterBlock(const Ctx& c, const BView& bv, int64_t kcb, int64_t q, int64_t ic_next, int64_t ic_end,
                 int64_t jc, int64_t pc, int64_t next_jc, int64_t jc_end, int64_t next_q) {
  if (ic_next < ic_end) return ViewPanel(c, bv, q, kcb);
  if (pc + kcb < c.k) return PackedPanel(c, jc, pc + kcb, q);
  if (next_jc < jc_end) return PackedPanel(c, next_jc, 0, next_q);
  return {};
}

}  // namespace

UkLines RectangleWalk(const void* first, int64_t rows, int64_t row_bytes, int64_t stride, int64_t& lines) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(first) | static_cast<uintptr_t>(stride)) & 63) == 0;
  UkLines walk;
  walk.line = static_cast<const char*>(first);
  walk.row_lines = rows > 0 && row_bytes > 0 ? (row_bytes + 63) / 64 + (aligned ? 0 : 1) : 0;
  walk.row_left = walk.row_lines;
  walk.stride = stride;
  lines = rows * walk.row_lines;
  return walk;
}

namespace {

// The source of rows [i0, i1) x depth [pc, pc+kcb) of an operand whose element
// (i, p) is at x[p * ld + i] (depth_major) or x[i * ld + p], as a walk over its
// cache lines; `lines` is their number.
UkLines SourceLines(const float* x, int64_t ld, bool depth_major, int64_t i0, int64_t i1, int64_t pc, int64_t kcb,
                    int64_t& lines) {
  const float* first = depth_major ? x + pc * ld + i0 : x + i0 * ld + pc;
  const int64_t rows = depth_major ? kcb : i1 - i0, width = depth_major ? i1 - i0 : kcb;
  return RectangleWalk(first, std::max<int64_t>(0, rows), std::max<int64_t>(0, width) * int64_t{sizeof(float)},
                       ld * int64_t{sizeof(float)}, lines);
}

// The source of op(A) panels [r0, r1) of the block rows [ic, ic+mcb) x depth [pc, pc+kcb).
UkLines ASourceLines(const Ctx& c, int64_t ic, int64_t mcb, int64_t pc, int64_t kcb, int64_t r0, int64_t r1,
                     int64_t& lines) {
  return SourceLines(c.a, c.lda, c.ta, ic + r0 * c.mr, ic + std::min(r1 * c.mr, mcb), pc, kcb, lines);
}

// The source of op(B) panel q of the block depth [pc, pc+kcb) x columns [jc, jc+ncb).
UkLines BPanelSourceLines(const Ctx& c, int64_t jc, int64_t ncb, int64_t pc, int64_t kcb, int64_t q,
                          int64_t& lines) {
  const int64_t j0 = jc + q * c.nr;
  return SourceLines(c.b, c.ldb, !c.tb, j0, j0 + std::min<int64_t>(c.nr, ncb - q * c.nr), pc, kcb, lines);
}

// The source of the first B panel after block (jc, pc) of a thread whose columns end
// at n_end: the next depth block's, else the next column block's; none (0 lines) after
// the last.
UkLines FirstPanelAfter(const Ctx& c, int64_t jc, int64_t ncb, int64_t pc, int64_t kcb, int64_t n_end,
                        int64_t& lines) {
  lines = 0;
  if (pc + kcb < c.k) return BPanelSourceLines(c, jc, ncb, pc + kcb, std::min(c.blk.kc, c.k - pc - kcb), 0, lines);
  if (jc + c.blk.nc < n_end)
    return BPanelSourceLines(c, jc + c.blk.nc, std::min(c.blk.nc, n_end - jc - c.blk.nc), 0, std::min(c.blk.kc, c.k),
                             0, lines);
  return {};
}

// B packed panel by panel (GemmBlocking::pack_b_panelwise): panel q of a block is
// packed into `dst` just before its micro-kernel calls, over which the source of the
// panel after it is prefetched into L2; `after` (with `after_lines`) is the source
// of the first panel after the block's last.
struct PanelwiseB {
  float* dst;
  UkLines after;
  int64_t after_lines;
};

// The walk over the source of the A block a thread packs after block (ic, pc) of
// column block jc, within its rows [m0, m1) and columns up to n_end: the next ic,
// else the first of the next depth block, else of the next column block. With
// nt > 1 the thread packs its share of each block's panels (par = 2). Returns the
// walk's lines; 0 when there is none or A is not packed.
int64_t NextASourceLines(const Ctx& c, int64_t ic, int64_t pc, int64_t jc, int64_t m0, int64_t m1, int64_t n_end,
                         int tid, int nt, UkLines& walk) {
  const GemmBlocking& blk = c.blk;
  if (!blk.prefetch_next_a) return 0;
  int64_t nic = ic + blk.mc, npc = pc;
  if (nic >= m1) {
    nic = m0;
    npc = pc + blk.kc;
    if (npc >= c.k) {
      npc = 0;
      if (jc + blk.nc >= n_end) return 0;
    }
  }
  const int64_t mcb = std::min(blk.mc, m1 - nic), kcb = std::min(blk.kc, c.k - npc);
  int64_t r0 = 0, r1 = CeilDiv(mcb, c.mr), lines = 0;
  if (nt > 1) Split(r1, tid, nt, r0, r1);
  walk = ASourceLines(c, nic, mcb, npc, kcb, r0, r1, lines);
  return lines;
}

// Micro-kernel loops over B panels [q0, q1) and all A panels of one block, in the
// schedule's `order`. Panels of B outer (kOrderPanelsOfB): the panel after each
// (q + 1, then `after` for the last) is prefetched into L2 over the micro-kernel
// calls of the one before it. Rows of C outer (kOrderRowsOfC): each A panel runs
// against the block's B panels left to right, without that prefetch. Both spread
// the `next_a_lines` of `next_a` (the source of the A block packed next) over all
// the block's calls. With `pw` (panels of B outer), each panel is packed first and
// its calls prefetch the next panel's source instead.
void ComputeBlock(const Ctx& c, const AView& av, const BView& bv, int64_t ic, int64_t mcb, int64_t jc, int64_t ncb,
                  int64_t pc, int64_t kcb, float beta, int64_t q0, int64_t q1, Panel after, UkLines next_a,
                  int64_t next_a_lines, const PanelwiseB* pw = nullptr) {
  UkArgs u;
  u.kc = kcb;
  u.ldc = c.ldc;
  u.alpha = c.alpha;
  u.beta = beta;
  u.unroll_k = c.blk.unroll_k;
  u.prefetch = c.blk.prefetch;
  u.a_rs = av.rs;
  u.a_ks = av.ks;
  u.next_a = &next_a;
  const int64_t rpanels = CeilDiv(mcb, c.mr);
  const int64_t a_per_call = CeilDiv(next_a_lines, std::max<int64_t>(1, (q1 - q0) * rpanels));
  const auto panel_of_b = [&](int64_t q) {
    u.n = static_cast<int>(std::min<int64_t>(c.nr, ncb - q * c.nr));
    u.b = q == bv.edge_q ? bv.edge : bv.base + q * bv.panel_stride;
    u.b_ks = q == bv.edge_q ? c.nr : bv.ks;
  };
  const auto panel_of_a = [&](int64_t r) {
    u.m = static_cast<int>(std::min<int64_t>(c.mr, mcb - r * c.mr));
    u.a = av.base + r * av.panel_stride;
  };
  const auto call = [&](int64_t r, int64_t q) {
    u.c = c.c + (ic + r * c.mr) * c.ldc + jc + q * c.nr;
    u.next_a_lines = std::min(a_per_call, next_a_lines);
    next_a_lines -= u.next_a_lines;
    c.uk(u);
  };
  if (c.blk.order == kOrderRowsOfC) {
    u.next_b_lines = 0;
    for (int64_t r = 0; r < rpanels; ++r) {
      panel_of_a(r);
      for (int64_t q = q0; q < q1; ++q) {
        panel_of_b(q);
        call(r, q);
      }
    }
    return;
  }
  if (pw) {
    for (int64_t q = q0; q < q1; ++q) {
      PackBPanel(c, jc, ncb, pc, kcb, q, pw->dst);
      panel_of_b(q);  // bv: the one panel at pw->dst
      u.next_b_lines = 0;
      int64_t lines = pw->after_lines;
      UkLines src = q + 1 < q1 ? BPanelSourceLines(c, jc, ncb, pc, kcb, q + 1, lines) : pw->after;
      u.next_a = &src;
      for (int64_t r = 0; r < rpanels; ++r) {
        panel_of_a(r);
        u.c = c.c + (ic + r * c.mr) * c.ldc + jc + q * c.nr;
        u.next_a_lines = lines * (r + 1) / rpanels - lines * r / rpanels;
        c.uk(u);
      }
    }
    return;
  }
  for (int64_t q = q0; q < q1; ++q) {
    panel_of_b(q);
    Panel next{};
    if (c.blk.prefetch_next) next = q + 1 < q1 ? ViewPanel(c, bv, q + 1, kcb) : after;
    for (int64_t r = 0; r < rpanels; ++r) {
      panel_of_a(r);
      const int64_t l0 = next.lines * r / rpanels, l1 = next.lines * (r + 1) / rpanels;
      u.next_b = reinterpret_cast<const char*>(next.base) + l0 * 64;
      u.next_b_lines = l1 - l0;
      call(r, q);
    }
  }
}

// par = 0: each thread owns a contiguous range of nr panels of N and runs the
// whole loop nest over it with private packing buffers; no synchronization.
void RunParN(const Ctx& c, int tid, int nt) {
  int64_t q_begin, q_end;
  Split(CeilDiv(c.n, c.nr), tid, nt, q_begin, q_end);
  const int64_t n0 = q_begin * c.nr, n1 = std::min(c.n, q_end * c.nr);
  float* pa = c.priv + tid * c.priv_stride;
  float* pb = pa + RoundUp(c.a_floats, kAlignFloats);
  const GemmBlocking& blk = c.blk;
  for (int64_t jc = n0; jc < n1; jc += blk.nc) {
    const int64_t ncb = std::min(blk.nc, n1 - jc), qn = CeilDiv(ncb, c.nr);
    for (int64_t pc = 0; pc < c.k; pc += blk.kc) {
      const int64_t kcb = std::min(blk.kc, c.k - pc);
      const float beta = pc == 0 ? c.beta : 1.0f;
      if (blk.pack_b_panelwise) {  // one row block: c.m <= mc
        const AView av = PrepareA(c, 0, c.m, pc, kcb, 0, CeilDiv(c.m, c.mr), pa);
        PanelwiseB pw{pb, {}, 0};
        pw.after = FirstPanelAfter(c, jc, ncb, pc, kcb, n1, pw.after_lines);
        ComputeBlock(c, av, BView{pb, 0, c.nr, -1, nullptr}, 0, c.m, jc, ncb, pc, kcb, beta, 0, qn, Panel{}, {}, 0,
                     &pw);
        continue;
      }
      const BView bv = PrepareB(c, jc, ncb, pc, kcb, 0, qn, pb);
      for (int64_t ic = 0; ic < c.m; ic += blk.mc) {
        const int64_t mcb = std::min(blk.mc, c.m - ic);
        const AView av = PrepareA(c, ic, mcb, pc, kcb, 0, CeilDiv(mcb, c.mr), pa);
        UkLines next_a;
        const int64_t a_lines = NextASourceLines(c, ic, pc, jc, 0, c.m, n1, tid, 1, next_a);
        ComputeBlock(c, av, bv, ic, mcb, jc, ncb, pc, kcb, beta, 0, qn,
                     AfterBlock(c, bv, kcb, 0, ic + blk.mc, c.m, jc, pc, jc + blk.nc, n1, 0), next_a, a_lines);
      }
    }
  }
}

// par = 1: the B block is packed by all threads into a shared buffer; each thread
// owns a contiguous range of mr panels of M and packs its own A blocks.
void RunParM(const Ctx& c, int tid, int nt) {
  int64_t r_begin, r_end;
  Split(CeilDiv(c.m, c.mr), tid, nt, r_begin, r_end);
  const int64_t m0 = r_begin * c.mr, m1 = std::min(c.m, r_end * c.mr);
  float* pa = c.priv + tid * c.priv_stride;
  const GemmBlocking& blk = c.blk;
  for (int64_t jc = 0; jc < c.n; jc += blk.nc) {
    const int64_t ncb = std::min(blk.nc, c.n - jc), qn = CeilDiv(ncb, c.nr);
    int64_t q0, q1;
    Split(qn, tid, nt, q0, q1);
    for (int64_t pc = 0; pc < c.k; pc += blk.kc) {
      const int64_t kcb = std::min(blk.kc, c.k - pc);
      const float beta = pc == 0 ? c.beta : 1.0f;
      const BView bv = PrepareB(c, jc, ncb, pc, kcb, q0, q1, c.shared);
      if (!c.packed_b) c.barrier->Wait(nt);  // the shared B block is packed
      for (int64_t ic = m0; ic < m1; ic += blk.mc) {
        const int64_t mcb = std::min(blk.mc, m1 - ic);
        const AView av = PrepareA(c, ic, mcb, pc, kcb, 0, CeilDiv(mcb, c.mr), pa);
        UkLines next_a;
        const int64_t a_lines = NextASourceLines(c, ic, pc, jc, m0, m1, c.n, tid, 1, next_a);
        ComputeBlock(c, av, bv, ic, mcb, jc, ncb, pc, kcb, beta, 0, qn,
                     AfterBlock(c, bv, kcb, 0, ic + blk.mc, m1, jc, pc, jc + blk.nc, c.n, 0), next_a, a_lines);
      }
      if (!c.packed_b) c.barrier->Wait(nt);  // every thread is done with it
    }
  }
}

// par = 2: B and A blocks are packed cooperatively into shared buffers; threads
// split the nr micro-panels of each block (BLIS jr loop).
void RunParMicroPanels(const Ctx& c, int tid, int nt) {
  const GemmBlocking& blk = c.blk;
  float* sa = c.shared + (c.packed_b ? 0 : RoundUp(std::max(c.b_floats, c.edge_floats), kAlignFloats));
  for (int64_t jc = 0; jc < c.n; jc += blk.nc) {
    const int64_t ncb = std::min(blk.nc, c.n - jc), qn = CeilDiv(ncb, c.nr);
    int64_t q0, q1;
    Split(qn, tid, nt, q0, q1);
    for (int64_t pc = 0; pc < c.k; pc += blk.kc) {
      const int64_t kcb = std::min(blk.kc, c.k - pc);
      const float beta = pc == 0 ? c.beta : 1.0f;
      const BView bv = PrepareB(c, jc, ncb, pc, kcb, q0, q1, c.shared);
      if (!c.packed_b) c.barrier->Wait(nt);
      for (int64_t ic = 0; ic < c.m; ic += blk.mc) {
        const int64_t mcb = std::min(blk.mc, c.m - ic);
        int64_t r0, r1;
        Split(CeilDiv(mcb, c.mr), tid, nt, r0, r1);
        const AView av = PrepareA(c, ic, mcb, pc, kcb, r0, r1, sa);
        if (blk.pack_a) c.barrier->Wait(nt);
        int64_t next_q0 = 0, next_q1 = 0;  // this thread's share of the next column block
        if (blk.prefetch_next && jc + blk.nc < c.n)
          Split(CeilDiv(std::min(blk.nc, c.n - jc - blk.nc), c.nr), tid, nt, next_q0, next_q1);
        UkLines next_a;
        const int64_t a_lines = NextASourceLines(c, ic, pc, jc, 0, c.m, c.n, tid, nt, next_a);
        ComputeBlock(c, av, bv, ic, mcb, jc, ncb, pc, kcb, beta, q0, q1,
                     q0 < q1 ? AfterBlock(c, bv, kcb, q0, ic + blk.mc, c.m, jc, pc, jc + blk.nc, c.n, next_q0) : Panel{},
                     next_a, a_lines);
        if (blk.pack_a) c.barrier->Wait(nt);
      }
      if (!c.packed_b) c.barrier->Wait(nt);
    }
  }
}

void RunThread(void* ctx, int tid, int nt) {
  const Ctx& c = *static_cast<const Ctx*>(ctx);
  switch (c.blk.par) {
    case kParM:
      RunParM(c, tid, nt);
      break;
    case kParMicroPanels:
      RunParMicroPanels(c, tid, nt);
      break;
    default:
      RunParN(c, tid, nt);
      break;
  }
}


}  // namespace

void ScaleC(const GemmArgs& a) {
  float* c = static_cast<float*>(a.c);
  for (int64_t i = 0; i < a.m; ++i) {
    float* row = c + i * a.ldc;
    if (a.beta == 0.0f) {
      std::fill(row, row + a.n, 0.0f);
    } else if (a.beta != 1.0f) {
      for (int64_t j = 0; j < a.n; ++j) row[j] *= a.beta;
    }
  }
}

int64_t PackedWeightsFloats(int64_t n, int64_t k, int nr) { return k * RoundUp(n, nr); }

void PackWeightsF32(const float* b, int64_t ldb, bool trans_b, int64_t n, int64_t k, int64_t kc, int nr, float* dst) {
  Ctx c{};
  c.n = n;
  c.k = k;
  c.b = b;
  c.ldb = ldb;
  c.tb = trans_b;
  c.nr = nr;
  const int64_t n_pad = RoundUp(n, nr), kcl = std::max<int64_t>(1, std::min(kc, k));
  for (int64_t pc = 0; pc < k; pc += kcl) PackB(c, 0, n, pc, std::min(kcl, k - pc), 0, n_pad / nr, dst + pc * n_pad);
}

GemmBlocking BlockingFromParams(const ParamValues& p) {
  GemmBlocking b;
  b.mc = p[kParamMc];
  b.kc = p[kParamKc];
  b.nc = p[kParamNc];
  b.par = p[kParamPar];
  b.threads = p[kParamThreads];
  b.unroll_k = p[kParamUnrollK];
  b.prefetch = p[kParamPrefetch];
  b.pack_a = p[kParamPackA] != 0;
  b.pack_b = p[kParamPackB] != kPackBInPlace;
  b.pack_b_panelwise = p[kParamPackB] == kPackBPanels;
  b.order = p[kParamOrder];
  b.prefetch_next = true;
  b.prefetch_next_a = true;
  return b;
}

bool PanelwiseBApplies(const GemmBlocking& blk, int64_t m, bool packed_ahead) {
  return blk.pack_b_panelwise && blk.pack_b && !packed_ahead && blk.par == kParN && blk.order == kOrderPanelsOfB &&
         blk.prefetch == 0 && m <= blk.mc;
}

Status GemmF32(const GemmArgs& args, const GemmBlocking& blk_in, UkernelFn ukernel, PackRowsFn pack_rows, int mr,
               int nr) {
  if (args.alpha == 0.0f) {  // BLAS semantics: A and B are not read
    ScaleC(args);
    return Status::Ok();
  }
  Ctx c;
  c.m = args.m;
  c.n = args.n;
  c.k = args.k;
  c.a = static_cast<const float*>(args.a);
  c.lda = args.lda;
  c.ta = args.trans_a;
  c.b = static_cast<const float*>(args.b);
  c.ldb = args.ldb;
  c.tb = args.trans_b;
  c.c = static_cast<float*>(args.c);
  c.ldc = args.ldc;
  c.alpha = args.alpha;
  c.beta = args.beta;
  c.packed_b = static_cast<const float*>(args.packed_b);
  c.n_pad = RoundUp(c.n, nr);
  c.uk = ukernel;
  c.pack_rows = pack_rows;
  c.mr = mr;
  c.nr = nr;
  c.blk = blk_in;
  GemmBlocking& blk = c.blk;
  if (args.trans_b || c.packed_b) blk.pack_b = true;  // check() rejects trans_b with pack_b=0; stay correct anyway
  blk.prefetch_next = blk.prefetch_next && c.packed_b;
  blk.prefetch_next_a = blk.prefetch_next_a && blk.pack_a && blk.prefetch == 0 && c.n <= kNextASourceMaxN;
  blk.mc = std::max<int64_t>(mr, std::min(RoundUp(blk.mc, mr), RoundUp(c.m, mr)));
  blk.nc = std::max<int64_t>(nr, std::min(RoundUp(blk.nc, nr), RoundUp(c.n, nr)));
  blk.kc = std::max<int64_t>(1, std::min(blk.kc, c.k));
  blk.pack_b_panelwise = PanelwiseBApplies(blk, c.m, c.packed_b != nullptr);

  int64_t units = CeilDiv(c.n, nr);
  if (blk.par == kParM) units = CeilDiv(c.m, mr);
  if (blk.par == kParMicroPanels) units = CeilDiv(blk.nc, nr);
  const int nt = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(blk.threads, units), 1,
                                                      ThreadPool::kMaxThreads));

  c.a_floats = blk.mc * blk.kc;
  c.b_floats = blk.pack_b_panelwise ? blk.kc * nr : blk.nc * blk.kc;
  c.edge_floats = blk.kc * nr;
  const int64_t b_region = c.packed_b ? 0 : RoundUp(blk.pack_b ? c.b_floats : c.edge_floats, kAlignFloats);
  const int64_t a_region = RoundUp(c.a_floats, kAlignFloats);
  int64_t shared = 0, priv = 0;
  switch (blk.par) {
    case kParM:
      shared = b_region;
      priv = blk.pack_a ? a_region : 0;
      break;
    case kParMicroPanels:
      shared = (c.packed_b ? 0 : RoundUp(std::max(c.b_floats, c.edge_floats), kAlignFloats)) +
               (blk.pack_a ? a_region : 0);
      break;
    default:
      priv = a_region + b_region;
      break;
  }
  c.priv_stride = priv;
  float* base = tls_scratch.Get(shared + priv * nt + kAlignFloats);
  if (!base)
    return Internal(fmt::format("gemm: cannot allocate {} bytes of packing scratch",
                                (shared + priv * nt) * static_cast<int64_t>(sizeof(float))));
  c.shared = base;
  c.priv = base + shared;
  SpinBarrier barrier;
  c.barrier = &barrier;
  ThreadPool::Global().Run(nt, &RunThread, &c);
  return Status::Ok();
}

}  // namespace cliffguard::cpu
