#include "cliffguard/tuner/cost_model.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "cliffguard/op_key.h"

namespace cliffguard::tuner {
namespace {

#define CG_XGB(call)                                                                        \
  do {                                                                                      \
    if ((call) != 0) return Internal(fmt::format("xgboost: {} failed: {}", #call, XGBGetLastError())); \
  } while (0)

struct BoosterDeleter {
  void operator()(void* h) const { XGBoosterFree(h); }
};
struct DMatrixDeleter {
  void operator()(void* h) const { XGDMatrixFree(h); }
};
using BoosterPtr = std::unique_ptr<void, BoosterDeleter>;
using DMatrixPtr = std::unique_ptr<void, DMatrixDeleter>;

Status SetParams(BoosterHandle b, const CostModelOptions& o) {
  const std::pair<std::string, std::string> params[] = {
      {"objective", o.objective},
      {"booster", "gbtree"},
      {"tree_method", o.tree_method},
      {"max_bin", std::to_string(o.max_bin)},
      {"max_depth", std::to_string(o.max_depth)},
      {"eta", fmt::format("{}", o.eta)},
      {"min_child_weight", fmt::format("{}", o.min_child_weight)},
      {"gamma", "0.0001"},
      {"lambda", "1"},
      {"nthread", std::to_string(o.nthread)},
      {"seed", std::to_string(o.seed)},
      {"verbosity", "0"},
  };
  for (const auto& [k, v] : params) CG_XGB(XGBoosterSetParam(b, k.c_str(), v.c_str()));
  return Status::Ok();
}

struct Sample {
  uint64_t group;
  std::vector<float> features;
  double time_us;
};

}  // namespace

struct CostModel::Impl {
  CostModelOptions options;
  mutable std::mutex mu;
  BoosterPtr booster;
  int n_features = 0;
  // Data store, in insertion order (deterministic training input).
  std::vector<Sample> samples;
  std::unordered_map<uint64_t, size_t> sample_index;  // MixHash64(group, id) -> samples[]
  int sample_width = 0;

  Status TrainLocked(const float* rows, size_t n_rows, int width, std::span<const float> targets,
                     std::span<const uint32_t> groups);
};

static uint64_t SampleKey(uint64_t group, uint64_t id) { return MixHash64(group * 0x9e3779b97f4a7c15ULL ^ MixHash64(id)); }

CostModel::CostModel() : impl_(std::make_unique<Impl>()) {}
CostModel::~CostModel() = default;
CostModel::CostModel(CostModel&&) noexcept = default;
CostModel& CostModel::operator=(CostModel&&) noexcept = default;

StatusOr<CostModel> CostModel::Create(const CostModelOptions& options) {
  if (options.objective != "rank:pairwise" && options.objective != "reg:squarederror")
    return InvalidArgument(fmt::format("cost model: objective '{}' is not one of rank:pairwise, reg:squarederror",
                                       options.objective));
  if (options.num_rounds < 1 || options.max_depth < 1 || !(options.eta > 0) || options.nthread < 1)
    return InvalidArgument(fmt::format("cost model: num_rounds={}, max_depth={}, eta={}, nthread={} must all be > 0",
                                       options.num_rounds, options.max_depth, options.eta, options.nthread));
  CostModel m;
  m.impl_->options = options;
  return m;
}

const CostModelOptions& CostModel::options() const { return impl_->options; }

Status CostModel::Impl::TrainLocked(const float* rows, size_t n_rows, int width, std::span<const float> targets,
                                    std::span<const uint32_t> groups) {
  if (n_rows == 0 || width <= 0)
    return InvalidArgument(fmt::format("cost model: train on {} rows of {} features; need >= 1 of each", n_rows, width));
  if (targets.size() != n_rows)
    return InvalidArgument(fmt::format("cost model: {} targets for {} rows", targets.size(), n_rows));
  uint64_t group_total = 0;
  for (uint32_t g : groups) group_total += g;
  if (!groups.empty() && group_total != n_rows)
    return InvalidArgument(fmt::format("cost model: group sizes sum to {}, not the {} rows", group_total, n_rows));

  DMatrixHandle dm_raw = nullptr;
  CG_XGB(XGDMatrixCreateFromMat(rows, n_rows, static_cast<bst_ulong>(width), std::nanf(""), &dm_raw));
  DMatrixPtr dm(dm_raw);
  CG_XGB(XGDMatrixSetFloatInfo(dm.get(), "label", targets.data(), n_rows));
  if (!groups.empty()) CG_XGB(XGDMatrixSetUIntInfo(dm.get(), "group", groups.data(), groups.size()));

  BoosterHandle b_raw = nullptr;
  DMatrixHandle dms[] = {dm.get()};
  CG_XGB(XGBoosterCreate(dms, 1, &b_raw));
  BoosterPtr b(b_raw);
  CG_RETURN_IF_ERROR(SetParams(b.get(), options));
  for (int it = 0; it < options.num_rounds; ++it) CG_XGB(XGBoosterUpdateOneIter(b.get(), it, dm.get()));
  booster = std::move(b);
  n_features = width;
  return Status::Ok();
}

Status CostModel::Train(const float* rows, size_t n_rows, int n_features, std::span<const float> targets,
                        std::span<const uint32_t> group_sizes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->TrainLocked(rows, n_rows, n_features, targets, group_sizes);
}

Status CostModel::Predict(const float* rows, size_t n_rows, int n_features, float* out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (n_rows == 0) return Status::Ok();
  if (!impl_->booster) {
    std::fill(out, out + n_rows, 0.0f);
    return Status::Ok();
  }
  if (n_features != impl_->n_features)
    return InvalidArgument(fmt::format("cost model: rows have {} features; the model was trained on {}", n_features,
                                       impl_->n_features));
  const std::string array = fmt::format(R"({{"data": [{}, true], "shape": [{}, {}], "typestr": "<f4", "version": 3}})",
                                        reinterpret_cast<uintptr_t>(rows), n_rows, n_features);
  static constexpr const char* kConfig =
      R"({"type": 0, "training": false, "iteration_begin": 0, "iteration_end": 0, "strict_shape": false, "cache_id": 0, "missing": NaN})";
  const bst_ulong* shape = nullptr;
  bst_ulong dim = 0;
  const float* result = nullptr;
  CG_XGB(XGBoosterPredictFromDense(impl_->booster.get(), array.c_str(), kConfig, nullptr, &shape, &dim, &result));
  bst_ulong total = 1;
  for (bst_ulong i = 0; i < dim; ++i) total *= shape[i];
  if (total != n_rows) return Internal(fmt::format("cost model: xgboost returned {} scores for {} rows", total, n_rows));
  std::copy(result, result + n_rows, out);
  return Status::Ok();
}

StatusOr<std::vector<float>> CostModel::Predict(const float* rows, size_t n_rows, int n_features) const {
  std::vector<float> out(n_rows);
  CG_RETURN_IF_ERROR(Predict(rows, n_rows, n_features, out.data()));
  return out;
}

bool CostModel::trained() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->booster != nullptr;
}

int CostModel::num_features() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->booster ? impl_->n_features : 0;
}

Status CostModel::AddSample(uint64_t group, uint64_t sample_id, std::span<const float> features, double time_us) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (features.empty()) return InvalidArgument("cost model: sample has no features");
  if (impl_->sample_width != 0 && static_cast<int>(features.size()) != impl_->sample_width)
    return InvalidArgument(fmt::format("cost model: sample has {} features; earlier samples have {}", features.size(),
                                       impl_->sample_width));
  impl_->sample_width = static_cast<int>(features.size());
  const double t = std::isfinite(time_us) && time_us > 0 ? time_us : 0.0;
  const uint64_t key = SampleKey(group, sample_id);
  auto [it, inserted] = impl_->sample_index.try_emplace(key, impl_->samples.size());
  if (inserted) {
    impl_->samples.push_back({group, {features.begin(), features.end()}, t});
  } else {
    Sample& s = impl_->samples[it->second];
    s.features.assign(features.begin(), features.end());
    s.time_us = t;
  }
  return Status::Ok();
}

bool CostModel::HasSample(uint64_t group, uint64_t sample_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->sample_index.count(SampleKey(group, sample_id)) != 0;
}

size_t CostModel::num_samples() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->samples.size();
}

Status CostModel::Retrain() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto& samples = impl_->samples;
  if (samples.empty()) return FailedPrecondition("cost model: Retrain with no stored samples");
  // Groups in order of first appearance; rows grouped contiguously, insertion order within.
  std::unordered_map<uint64_t, size_t> ordinal;
  std::vector<std::vector<size_t>> members;
  for (size_t i = 0; i < samples.size(); ++i) {
    auto [it, inserted] = ordinal.try_emplace(samples[i].group, members.size());
    if (inserted) members.emplace_back();
    members[it->second].push_back(i);
  }
  const int width = impl_->sample_width;
  std::vector<float> rows;
  rows.reserve(samples.size() * width);
  std::vector<float> targets;
  targets.reserve(samples.size());
  std::vector<uint32_t> groups;
  for (const auto& g : members) {
    double best = 0;
    for (size_t i : g)
      if (samples[i].time_us > 0 && (best == 0 || samples[i].time_us < best)) best = samples[i].time_us;
    for (size_t i : g) {
      rows.insert(rows.end(), samples[i].features.begin(), samples[i].features.end());
      targets.push_back(samples[i].time_us > 0 ? static_cast<float>(best / samples[i].time_us) : 0.0f);
    }
    groups.push_back(static_cast<uint32_t>(g.size()));
  }
  const bool pairwise = impl_->options.objective == "rank:pairwise";
  return impl_->TrainLocked(rows.data(), targets.size(), width, targets,
                            pairwise ? std::span<const uint32_t>(groups) : std::span<const uint32_t>());
}

StatusOr<std::vector<uint8_t>> CostModel::Serialize() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->booster) return FailedPrecondition("cost model: Serialize before any training");
  bst_ulong len = 0;
  const char* data = nullptr;
  CG_XGB(XGBoosterSaveModelToBuffer(impl_->booster.get(), R"({"format": "json"})", &len, &data));
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(data), reinterpret_cast<const uint8_t*>(data) + len);
}

Status CostModel::Deserialize(std::span<const uint8_t> bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (bytes.empty()) return DataLoss("cost model: Deserialize from 0 bytes");
  BoosterHandle b_raw = nullptr;
  CG_XGB(XGBoosterCreate(nullptr, 0, &b_raw));
  BoosterPtr b(b_raw);
  if (XGBoosterLoadModelFromBuffer(b.get(), bytes.data(), bytes.size()) != 0)
    return DataLoss(fmt::format("cost model: XGBoost rejected the {} model bytes: {}", bytes.size(), XGBGetLastError()));
  CG_XGB(XGBoosterSetParam(b.get(), "nthread", std::to_string(impl_->options.nthread).c_str()));
  bst_ulong nf = 0;
  CG_XGB(XGBoosterGetNumFeature(b.get(), &nf));
  if (nf == 0) return DataLoss("cost model: loaded model has 0 features");
  impl_->booster = std::move(b);
  impl_->n_features = static_cast<int>(nf);
  return Status::Ok();
}

}  // namespace cliffguard::tuner
