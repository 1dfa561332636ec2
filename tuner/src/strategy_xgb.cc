// "xgb": AutoTVM's model-based search. Every measured result (and the history given
// at creation) becomes a feature row in the shared CostModel, which is retrained from
// scratch after each Update; each batch is the diverse top of a simulated-annealing
// search over the model's predictions (explorer.h) plus an epsilon share of random
// points. Until the model has been trained the batches are random.
#include "cliffguard/detail/logging.h"

#include "cliffguard/tuner/cost_model.h"
#include "cliffguard/tuner/explorer.h"
#include "cliffguard/tuner/features.h"
#include "cliffguard/tuner/strategy.h"

namespace cliffguard::tuner {
namespace {

class XgbStrategy final : public StrategyBase {
 public:
  XgbStrategy(const SearchSpace& space, const StrategyOptions& options)
      : StrategyBase(space, options),
        model_(options.model),
        explorer_(space_, [this](std::span<const Knobs> p, std::span<float> s) { Score(p, s); },
                  ExplorerOptions{.n_chains = options.sa_chains,
                                  .n_steps = options.sa_steps,
                                  .epsilon = options.epsilon,
                                  .seed = options.seed ^ 0x5a5a5a5a5a5a5a5aULL}) {
    MarkMeasured(options.history);
    if (AddSamples(options.history) || (!model_->trained() && model_->num_samples() > 0)) Retrain();
  }

  std::string_view name() const override { return "xgb"; }

  std::vector<Schedule> NextBatch(int n) override {
    if (n <= 0) return {};
    if (!model_->trained()) return Propose(RandomUnvisited(n));
    std::vector<Knobs> points = explorer_.NextBatch(n, [this](uint64_t id) { return Visited(id); });
    if (static_cast<int>(points.size()) < n) {  // nearly exhausted: scan for the rest
      for (const Knobs& k : points) visited_.insert(space_.Id(k));
      for (const Knobs& k : RandomUnvisited(n - static_cast<int>(points.size()))) points.push_back(k);
    }
    return Propose(points);
  }

  void Update(std::span<const MeasureResult> results) override {
    MarkMeasured(results);
    if (AddSamples(results)) Retrain();
  }

 private:
  // Adds results to the model's store; true when any was new or changed.
  bool AddSamples(std::span<const MeasureResult> results) {
    bool added = false;
    std::vector<float> row(NumFeatures());
    for (const MeasureResult& r : results) {
      if (!r.schedule.variant) continue;
      ExtractFeatures(r.key, r.schedule, space_.device(), row.data());
      const Status st = model_->AddSample(r.key.Hash(), ScheduleHash(r.schedule), row, r.ok ? r.median_us : 0.0);
      if (!st.ok()) {
        logging::Warn("xgb strategy: {}: measurement not used: {}", r.key.ToString(), st.ToString());
        continue;
      }
      added = true;
    }
    return added;
  }

  void Retrain() {
    const Status st = model_->Retrain();
    if (!st.ok()) logging::Warn("xgb strategy: {}: cost model not retrained: {}", space_.key().ToString(), st.ToString());
  }

  void Score(std::span<const Knobs> points, std::span<float> scores) {
    const int nf = NumFeatures();
    rows_.resize(points.size() * nf);
    for (size_t i = 0; i < points.size(); ++i)
      ExtractFeatures(space_.key(), space_.ToSchedule(points[i]), space_.device(), rows_.data() + i * nf);
    const Status st = model_->Predict(rows_.data(), points.size(), nf, scores.data());
    if (!st.ok()) {
      if (!predict_warned_) logging::Warn("xgb strategy: {}: prediction failed, scores 0: {}", space_.key().ToString(), st.ToString());
      predict_warned_ = true;
      std::fill(scores.begin(), scores.end(), 0.0f);
    }
  }

  CostModel* model_;
  Explorer explorer_;
  std::vector<float> rows_;
  bool predict_warned_ = false;
};

}  // namespace

std::unique_ptr<SearchStrategy> MakeXgbStrategy(const SearchSpace& space, const StrategyOptions& options) {
  return std::make_unique<XgbStrategy>(space, options);
}

}  // namespace cliffguard::tuner
