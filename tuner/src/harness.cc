// What every op's harness shares: the harness factory, rotated-copy counts and the
// cache of packed constant weights and their eviction before a timed call.
#include "harness.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace cliffguard::tuner {

StatusOr<const PackedWeightsCache::Packed*> PackedWeightsCache::Entry(const Schedule& s, const OpKey& key,
                                                                       const void* weights, int64_t ld) {
  const KernelVariant& v = *s.variant;
  if (!v.pack_weights) return static_cast<const Packed*>(nullptr);
  for (const Packed& p : packed_)
    if (p.schedule == s) return &p;
  const size_t bytes = v.packed_weights_bytes(v, key, s.params);
  while (!packed_.empty() && (packed_.size() >= kMaxPacked || packed_bytes_ + bytes > kMaxPackedBytes)) {
    packed_bytes_ -= packed_.front().bytes;
    packed_.erase(packed_.begin());
  }
  Packed p;
  p.schedule = s;
  p.data.reset(AllocateWeights(bytes));
  if (!p.data) return Internal(fmt::format("measurer: cannot allocate {} bytes of packed weights", bytes));
  CG_RETURN_IF_ERROR(v.pack_weights(v, key, s.params, weights, ld, p.data.get()));
  p.bytes = bytes;
  packed_bytes_ += bytes;
  packed_.push_back(std::move(p));
  return &packed_.back();
}

PackedWeightsCache::Rotated* PackedWeightsCache::Rotation(const Schedule& s) {
  for (Rotated& r : rotated_)
    if (r.schedule == s) return &r;
  return nullptr;
}

StatusOr<PackedWeightsCache::Weights> PackedWeightsCache::Call(const Schedule& s, const OpKey& key,
                                                               const float* weights, int64_t ld) {
  const void* w = weights;
  if (Rotated* r = Rotation(s)) {
    w = r->copies[r->next++ % r->copies.size()].get();
  } else {
    CG_ASSIGN_OR_RETURN(const Packed* p, Entry(s, key, weights, ld));
    if (p) w = p->data.get();
  }
  if (s.variant->pack_weights) return Weights{weights, w};
  return Weights{static_cast<const float*>(w), nullptr};
}

Status PackedWeightsCache::Cool(const Schedule& s, const OpKey& key, const void* weights, int64_t ld,
                                size_t weights_bytes) {
  if (Rotation(s)) return Status::Ok();
  CG_ASSIGN_OR_RETURN(const Packed* p, Entry(s, key, weights, ld));
  if (p) {
    FlushFromCache(p->data.get(), p->bytes);
  } else {
    FlushFromCache(weights, weights_bytes);
  }
  return Status::Ok();
}

Status PackedWeightsCache::Rotate(std::span<const Schedule> batch, const OpKey& key, const void* weights, int64_t ld,
                                  size_t weights_bytes, int64_t cover_bytes) {
  rotated_.clear();
  if (batch.empty()) return Status::Ok();
  const size_t cap = kMaxRotatedBytes / batch.size();  // per schedule
  const size_t share = std::min(size_t(std::max<int64_t>(cover_bytes, 1)), cap);
  std::vector<size_t> copies;
  size_t total = 0;
  for (const Schedule& s : batch) {
    const KernelVariant& v = *s.variant;
    const size_t b = ((v.pack_weights ? v.packed_weights_bytes(v, key, s.params) : weights_bytes) + 63) / 64 * 64;
    copies.push_back(std::max<size_t>(1, std::min((share + b - 1) / b, cap / b)));
    total += b * copies.back();
  }
  if (total > kMaxRotatedBytes || (batch.size() == 1 && copies[0] == 1)) return Status::Ok();
  for (size_t i = 0; i < batch.size(); ++i) {
    CG_ASSIGN_OR_RETURN(const Packed* p, Entry(batch[i], key, weights, ld));  // copied before the next Entry
    const void* src = p ? static_cast<const void*>(p->data.get()) : weights;
    const size_t used = p ? p->bytes : weights_bytes;
    Rotated r{batch[i], {}, 0};
    for (size_t c = 0; c < copies[i]; ++c) {
      r.copies.emplace_back(AllocateWeights(used), &std::free);
      if (!r.copies.back())
        return Internal(fmt::format("measurer: cannot allocate a {}-byte copy of the weights to rotate ({} in all)",
                                    used, total));
      std::memcpy(r.copies.back().get(), src, used);
    }
    rotated_.push_back(std::move(r));
  }
  return Status::Ok();
}

namespace {

bool HasClflushopt() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1);
}

// clflush is ordered with every other clflush: about 145 ns a line under KVM on
// an Emerald Rapids host (0.43 s for 180 MiB), against 7 ms with clflushopt.
__attribute__((target("clflushopt"))) void FlushLinesOpt(const char* c, size_t bytes) {
  auto* m = const_cast<char*>(c);  // _mm_clflushopt takes void*; nothing is written
  for (size_t off = 0; off < bytes; off += 64) _mm_clflushopt(m + off);
  _mm_clflushopt(m + bytes - 1);
}

void FlushLines(const char* c, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) _mm_clflush(c + off);
  _mm_clflush(c + bytes - 1);
}

}  // namespace

void FlushFromCache(const void* p, size_t bytes) {
  static const bool opt = HasClflushopt();
  if (bytes == 0) return;
  const auto* c = static_cast<const char*>(p);
  if (opt) {
    FlushLinesOpt(c, bytes);
  } else {
    FlushLines(c, bytes);
  }
  _mm_mfence();
}

void FillUniform(uint64_t stream, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t z = stream + 0x9e3779b97f4a7c15ULL * (uint64_t(i) + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    out[i] = float(int32_t(z >> 40) - (int32_t{1} << 23)) * (1.0f / float(1 << 23));
  }
}

int64_t CoverBytes(const MeasureOptions& options, const DeviceInfo& device) {
  if (options.rotate_bytes > 0) return options.rotate_bytes;
  const int64_t cache = device.l3_bytes + device.l2_bytes * std::max(1, device.threads);
  return 2 * (cache > 0 ? cache : (int64_t{32} << 20));
}

int64_t RotatedCopies(int64_t set_bytes, const MeasureOptions& options, const DeviceInfo& device) {
  const int64_t budget = CoverBytes(options, device);
  set_bytes = std::max<int64_t>(1, set_bytes);
  int64_t copies = (budget + set_bytes - 1) / set_bytes;
  copies = std::clamp<int64_t>(copies, 1, std::max(1, options.max_copies));
  return std::max<int64_t>(1, std::min<int64_t>(copies, (int64_t{1} << 30) / set_bytes));
}

WorstError FindWorstError(const float* out, std::span<const int64_t> checked, std::span<const double> ref,
                          std::span<const double> scale) {
  WorstError w;
  for (size_t t = 0; t < checked.size(); ++t) {
    const int64_t idx = checked[t];
    const double err = std::abs(static_cast<double>(out[idx]) - ref[t]) / std::max(scale[t], 1e-30);
    if (!(err <= w.error)) {  // also catches NaN
      w.error = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
      w.where = idx;
      if (std::isnan(err)) break;
    }
  }
  w.nan = w.where >= 0 && (std::isnan(out[w.where]) || std::isinf(w.error));
  return w;
}

std::string ErrorText(const WorstError& w) { return w.nan ? std::string("nan") : fmt::format("{:.2e}", w.error); }

StatusOr<double> OpHarness::TimeOne(const Schedule& s) {
  const auto t0 = std::chrono::steady_clock::now();
  CG_RETURN_IF_ERROR(Run(s));
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

StatusOr<std::unique_ptr<OpHarness>> MakeHarness(const OpKey& key, const MeasureOptions& options,
                                                 const DeviceInfo& device) {
  CG_RETURN_IF_ERROR(key.Validate());
  if (device.backend == Backend::kCuda) {
#ifdef CLIFFGUARD_WITH_CUDA
    if (key.op == OpKind::kGemm) return MakeCudaGemmHarness(key, options, device);
#endif
    return Unimplemented(fmt::format("measurer: {} on {} has no harness in this build", key.ToString(), device.spec));
  }
  switch (key.op) {
    case OpKind::kGemm: return MakeGemmHarness(key, options);
    case OpKind::kConv2d: return MakeConv2dHarness(key, options);
  }
  return Unimplemented(fmt::format("measurer: {} has no harness", key.ToString()));
}

}  // namespace cliffguard::tuner
