#include "cliffguard/tuner/space.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

namespace cliffguard::tuner {
namespace {

constexpr uint64_t kMaxSpaceSize = uint64_t{1} << 62;
constexpr uint64_t kMaxWalk = uint64_t{1} << 22;

uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); }

int NearestIndex(std::span<const int32_t> values, int64_t target) {
  int best = 0;
  int64_t best_d = INT64_MAX;
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t d = std::llabs(static_cast<int64_t>(values[i]) - target);
    if (d < best_d) best_d = d, best = static_cast<int>(i);
  }
  return best;
}

}  // namespace

int KnobDistance(const Knobs& a, const Knobs& b) {
  int d = a.variant != b.variant;
  for (int i = 0; i < kMaxParams; ++i) d += a.idx[i] != b.idx[i];
  return d;
}

uint64_t ScheduleHash(const Schedule& s) {
  uint64_t h = 0x6a09e667f3bcc909ULL;
  if (s.variant)
    for (const char* p = s.variant->name; *p; ++p) h = MixHash64(h ^ static_cast<unsigned char>(*p));
  for (int i = 0; i < kMaxParams; ++i) h = MixHash64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(s.params[i])) + 0x9e3779b97f4a7c15ULL * (i + 1)));
  return h;
}

StatusOr<SearchSpace> SearchSpace::Create(const OpKey& key, const DeviceInfo& device,
                                          std::span<const KernelVariant* const> variants) {
  CG_RETURN_IF_ERROR(key.Validate());
  std::vector<const KernelVariant*> candidates(variants.begin(), variants.end());
  if (variants.empty())
    for (const KernelVariant& v : AllKernelVariants()) candidates.push_back(&v);

  for (size_t vi = 0; vi < candidates.size(); ++vi)
    if (!candidates[vi]) return InvalidArgument(fmt::format("search space: variant #{} is null", vi));
  // The searched blocks first: the ids of variants measured only through their
  // candidates lie past searched_size_.
  std::stable_partition(candidates.begin(), candidates.end(), [](const KernelVariant* v) { return !v->candidates_only; });

  SearchSpace s;
  s.key_ = key;
  s.device_ = device;
  for (size_t vi = 0; vi < candidates.size(); ++vi) {
    const KernelVariant* v = candidates[vi];
    if (v->params.size() > static_cast<size_t>(kMaxParams))
      return InvalidArgument(fmt::format("search space: {} has {} parameters, more than kMaxParams={}", v->name,
                                         v->params.size(), kMaxParams));
    for (const ParamSpec& p : v->params) {
      if (p.values.empty() || p.values.size() > 32767)
        return InvalidArgument(fmt::format("search space: {}.{} has {} values; must have 1..32767", v->name, p.name,
                                           p.values.size()));
      if (!std::is_sorted(p.values.begin(), p.values.end()) ||
          std::adjacent_find(p.values.begin(), p.values.end()) != p.values.end())
        return InvalidArgument(fmt::format("search space: {}.{} values must be strictly ascending", v->name, p.name));
    }
    if (Status st = VariantSupports(*v, key, device); !st.ok()) {
      s.declined_.push_back(st.message());
      continue;
    }
    uint64_t block = 1;
    for (const ParamSpec& p : v->params) {
      if (block > kMaxSpaceSize / p.values.size())
        return InvalidArgument(fmt::format("search space: {} has 2^62 points or more", v->name));
      block *= p.values.size();
    }
    if (s.size_ + block >= kMaxSpaceSize)
      return InvalidArgument(fmt::format("search space for {} has 2^62 points or more", key.ToString()));
    s.variants_.push_back(v);
    s.block_start_.push_back(s.size_);
    s.block_size_.push_back(block);
    s.size_ += block;
    if (!v->candidates_only) {
      s.searched_size_ += block;
      s.num_searched_ = static_cast<int>(s.variants_.size());
    }
  }
  if (s.variants_.empty()) {
    std::string reasons;
    for (const auto& r : s.declined_) reasons += "\n  " + r;
    return Unimplemented(fmt::format("search space: no kernel variant supports {} on {} ({} candidates){}",
                                     key.ToString(), device.fingerprint, candidates.size(), reasons));
  }
  if (s.variants_.size() > 32767) return InvalidArgument("search space: more than 32767 variants");

  // Grid stride: about size/phi, coprime with size, so GridId is a bijection.
  if (s.searched_size_ > 2) {
    const uint64_t n = s.searched_size_;
    uint64_t stride = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<long double>(n) * 0.6180339887498949L));
    while (std::gcd(stride, n) != 1) ++stride;
    s.grid_stride_ = stride % n;
  }

  // Valid fraction: exact for small spaces, else a fixed-seed sample.
  constexpr uint64_t kSample = 4096;
  uint64_t valid = 0, total = 0;
  if (s.size_ <= kSample) {
    for (uint64_t id = 0; id < s.size_; ++id, ++total) valid += s.IsValid(s.FromId(id));
  } else {
    std::mt19937_64 rng(0x5eed);
    for (; total < kSample; ++total) valid += s.IsValid(s.FromId(UniformBelow(rng, s.size_)));
  }
  s.valid_fraction_ = static_cast<double>(valid) / static_cast<double>(total);
  return s;
}

uint64_t SearchSpace::Id(const Knobs& k) const {
  const KernelVariant& v = *variants_[k.variant];
  uint64_t id = 0;
  for (size_t i = 0; i < v.params.size(); ++i) id = id * v.params[i].values.size() + static_cast<uint64_t>(k.idx[i]);
  return block_start_[k.variant] + id;
}

Knobs SearchSpace::FromId(uint64_t id) const {
  Knobs k;
  const auto it = std::upper_bound(block_start_.begin(), block_start_.end(), id);
  k.variant = static_cast<int16_t>((it - block_start_.begin()) - 1);
  uint64_t rest = id - block_start_[k.variant];
  const KernelVariant& v = *variants_[k.variant];
  for (size_t i = v.params.size(); i-- > 0;) {
    const uint64_t r = v.params[i].values.size();
    k.idx[i] = static_cast<int16_t>(rest % r);
    rest /= r;
  }
  return k;
}

Schedule SearchSpace::ToSchedule(const Knobs& k) const {
  Schedule s;
  s.variant = variants_[k.variant];
  for (size_t i = 0; i < s.variant->params.size(); ++i) s.params[i] = s.variant->params[i].values[k.idx[i]];
  return s;
}

StatusOr<Knobs> SearchSpace::FromSchedule(const Schedule& s) const {
  const auto it = std::find(variants_.begin(), variants_.end(), s.variant);
  if (it == variants_.end())
    return NotFound(fmt::format("search space {}: variant {} is not in it", key_.ToString(),
                                s.variant ? s.variant->name : "<none>"));
  Knobs k;
  k.variant = static_cast<int16_t>(it - variants_.begin());
  const KernelVariant& v = **it;
  for (size_t i = 0; i < v.params.size(); ++i) {
    const auto& vals = v.params[i].values;
    const auto p = std::lower_bound(vals.begin(), vals.end(), s.params[i]);
    if (p == vals.end() || *p != s.params[i])
      return OutOfRange(fmt::format("{}: {}={} is not an allowed value: allowed are {}", v.name, v.params[i].name,
                                    s.params[i], AllowedValues(v.params[i])));
    k.idx[i] = static_cast<int16_t>(p - vals.begin());
  }
  for (size_t i = v.params.size(); i < static_cast<size_t>(kMaxParams); ++i)
    if (s.params[i] != 0) return InvalidArgument(fmt::format("{}: unused parameter slot {} is set", v.name, i));
  return k;
}


Status SearchSpace::Check(const Knobs& k) const {
  const KernelVariant& v = *variants_[k.variant];
  const Schedule s = ToSchedule(k);
  if (v.check) CG_RETURN_IF_ERROR(v.check(v, key_, s.params, device_));
  if (v.redundant && v.redundant(v, key_, s.params))
    return InvalidArgument(fmt::format("{}: {} is redundant for this key (skipped by the search)",
                                       v.name, s.ToString()));
  return Status::Ok();
}

Knobs SearchSpace::SampleAny(std::mt19937_64& rng) const { return FromId(UniformBelow(rng, searched_size_)); }

std::optional<Knobs> SearchSpace::SampleValid(std::mt19937_64& rng, int max_tries) const {
  if (searched_size_ == 0) return std::nullopt;
  for (int t = 0; t < max_tries; ++t) {
    Knobs k = SampleAny(rng);
    if (IsValid(k)) return k;
  }
  const uint64_t start = UniformBelow(rng, searched_size_);
  const uint64_t n = std::min(searched_size_, kMaxWalk);
  for (uint64_t j = 0; j < n; ++j) {
    Knobs k = FromId(GridId((start + j) % searched_size_));
    if (IsValid(k)) return k;
  }
  return std::nullopt;
}

Knobs SearchSpace::SwitchVariant(const Knobs& k, int v) const {
  const KernelVariant& from = *variants_[k.variant];
  const KernelVariant& to = *variants_[v];
  Knobs out;
  out.variant = static_cast<int16_t>(v);
  for (size_t i = 0; i < to.params.size(); ++i) {
    const int j = from.ParamIndex(to.params[i].name);
    const int64_t target = j >= 0 ? from.params[j].values[k.idx[j]] : to.params[i].default_value;
    out.idx[i] = static_cast<int16_t>(NearestIndex(to.params[i].values, target));
  }
  return out;
}

std::optional<Knobs> SearchSpace::Neighbour(const Knobs& k, std::mt19937_64& rng, double p_switch, int max_tries) const {
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const KernelVariant& v = *variants_[k.variant];
  const int np = static_cast<int>(v.params.size());
  for (int t = 0; t < max_tries; ++t) {
    Knobs c = k;
    const bool searched = k.variant < num_searched_;
    if (searched && num_searched_ > 1 && (np == 0 || u01(rng) < p_switch)) {
      int nv = static_cast<int>(UniformBelow(rng, num_searched_ - 1));
      if (nv >= k.variant) ++nv;
      c = SwitchVariant(k, nv);
    } else if (np > 0) {
      const int changes = (np > 1 && u01(rng) < 0.3) ? 2 : 1;
      for (int ch = 0; ch < changes; ++ch) {
        const int p = static_cast<int>(UniformBelow(rng, np));
        const int n = static_cast<int>(v.params[p].values.size());
        if (n == 1) continue;
        if (u01(rng) < 0.75) {
          int step = (rng() & 1) ? 1 : -1;
          if (c.idx[p] + step < 0 || c.idx[p] + step >= n) step = -step;
          c.idx[p] = static_cast<int16_t>(c.idx[p] + step);
        } else {
          int r = static_cast<int>(UniformBelow(rng, n - 1));
          if (r >= c.idx[p]) ++r;
          c.idx[p] = static_cast<int16_t>(r);
        }
      }
    }
    if (!(c == k) && IsValid(c)) return c;
  }
  return std::nullopt;
}

uint64_t SearchSpace::GridId(uint64_t i) const {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(i % searched_size_) * grid_stride_) % searched_size_);
}

}  // namespace cliffguard::tuner
