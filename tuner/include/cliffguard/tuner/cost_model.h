// The learned cost model: gradient-boosted trees (XGBoost C API) over feature rows
// (features.h), predicting a score per candidate schedule; higher is faster.
//
// As in AutoTVM, the model is retrained from scratch on all measured data after each
// measured batch. One model is shared by every key of one (device, op): it keeps the
// measurements it was given (AddSample), grouped by key, and Retrain() turns them into
// targets normalised per key (best time in the group / time, in (0, 1]; failed
// measurements 0), so that fast and slow shapes weigh alike. With the default
// objective "rank:pairwise" each key is one query group (XGDMatrix "group" info):
// only orderings within a key are learned. "reg:squarederror" regresses the targets.
//
// Cost: training ~1000 rows x 60 trees of depth 6 (hist, 64 bins) takes tens of ms with
// nthread=1; prediction is one XGBoosterPredictFromDense call per batch (a fixed cost
// of ~25 us plus ~1 us per row): always predict in batches.
//
// Thread-safety: every method locks an internal mutex, so a model may be shared by
// threads, but calls are serialised (XGBoost runs on `nthread` threads inside each).
// Errors from XGBoost become kInternal statuses carrying XGBGetLastError(); nothing
// throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cliffguard/status.h"

namespace cliffguard::tuner {

struct CostModelOptions {
  std::string objective = "rank:pairwise";  // or "reg:squarederror"
  int num_rounds = 60;                      // boosting rounds (trees), retrained from scratch
  int max_depth = 6;                        // tree depth
  double eta = 0.25;                        // learning rate
  double min_child_weight = 1e-3;           // small: pairwise hessians are tiny
  int nthread = 1;                          // XGBoost threads for training and prediction
  std::string tree_method = "hist";         // "hist", "approx" or "exact"
  int max_bin = 64;                         // histogram bins per feature (hist/approx)
  uint64_t seed = 1;
};

class CostModel {
 public:
  // Default options (always valid).
  CostModel();
  // kInvalidArgument for an unknown objective or a non-positive rounds/depth/eta/nthread.
  static StatusOr<CostModel> Create(const CostModelOptions& options);
  ~CostModel();
  CostModel(CostModel&&) noexcept;
  CostModel& operator=(CostModel&&) noexcept;
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  const CostModelOptions& options() const;

  // ---- Low level: train on given rows -------------------------------------------
  // rows: n_rows x n_features floats, row-major. targets: n_rows values (higher is
  // better). group_sizes: consecutive query groups summing to n_rows (pairwise);
  // empty = one group. Replaces the current booster on success only.
  Status Train(const float* rows, size_t n_rows, int n_features, std::span<const float> targets,
               std::span<const uint32_t> group_sizes = {});

  // Scores for n_rows rows of num_features() floats, written to out (n_rows floats),
  // in ONE XGBoost call. Before any training (or after a failed first one) every
  // score is 0. kInvalidArgument when n_features differs from the trained width.
  Status Predict(const float* rows, size_t n_rows, int n_features, float* out) const;
  StatusOr<std::vector<float>> Predict(const float* rows, size_t n_rows, int n_features) const;

  bool trained() const;
  int num_features() const;  // 0 before training or loading

  // ---- Data store: everything measured, for Retrain ------------------------------
  // Records one measurement: `group` identifies the key (OpKey::Hash), `sample_id` the
  // schedule (ScheduleHash); a repeated (group, sample_id) replaces the earlier one.
  // time_us <= 0 or not finite means the measurement failed (target 0).
  // kInvalidArgument when the row width differs from earlier samples.
  Status AddSample(uint64_t group, uint64_t sample_id, std::span<const float> features, double time_us);
  bool HasSample(uint64_t group, uint64_t sample_id) const;
  size_t num_samples() const;
  // Trains from scratch on every stored sample (targets normalised per group).
  // kFailedPrecondition when no sample is stored.
  Status Retrain();

  // ---- Persistence ---------------------------------------------------------------
  // The booster as XGBoost JSON (XGBoosterSaveModelToBuffer, format "json"); the
  // stored samples are not included. kFailedPrecondition before training.
  StatusOr<std::vector<uint8_t>> Serialize() const;
  // Replaces the booster with one loaded from Serialize() bytes; kDataLoss when XGBoost
  // rejects them. Stored samples are kept.
  Status Deserialize(std::span<const uint8_t> bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cliffguard::tuner
