#include "cliffguard/tuner/explorer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>
#include <utility>

namespace cliffguard::tuner {
namespace {

struct Entry {
  float score;
  uint64_t id;
  Knobs knobs;
};
// Strict order, best first: higher score, then lower id (deterministic ties). Used as
// the heap's "less", it keeps the worst kept entry at the root.
bool Better(const Entry& a, const Entry& b) { return a.score != b.score ? a.score > b.score : a.id < b.id; }

}  // namespace

Explorer::Explorer(const SearchSpace& space, ScoreFn score, ExplorerOptions options)
    : space_(&space), score_(std::move(score)), opt_(options), rng_(options.seed) {}

std::vector<Knobs> Explorer::NextBatch(int n, const VisitedFn& visited) {
  std::vector<Knobs> out;
  stats_ = {};
  if (n <= 0) return out;
  const SearchSpace& space = *space_;

  if (chains_.empty()) {
    for (int c = 0; c < opt_.n_chains; ++c)
      if (auto k = space.SampleValid(rng_)) chains_.push_back(*k);
  }
  const size_t nc = chains_.size();
  std::vector<Entry> heap;
  std::unordered_set<uint64_t> in_heap;
  const size_t cap = static_cast<size_t>(std::max(n * std::max(1, opt_.heap_factor), n));
  auto offer = [&](const Knobs& k, float s) -> bool {
    if (std::isnan(s)) s = -std::numeric_limits<float>::infinity();
    const uint64_t id = space.Id(k);
    if (in_heap.count(id) || visited(id)) return false;
    Entry e{s, id, k};
    if (heap.size() >= cap) {
      if (!Better(e, heap.front())) return false;
      std::pop_heap(heap.begin(), heap.end(), Better);
      in_heap.erase(heap.back().id);
      heap.pop_back();
    }
    heap.push_back(e);
    std::push_heap(heap.begin(), heap.end(), Better);
    in_heap.insert(id);
    return true;
  };

  if (nc > 0) {
    chain_scores_.assign(nc, 0.0f);
    score_(chains_, chain_scores_);
    stats_.proposals_scored += static_cast<int>(nc);
    for (size_t c = 0; c < nc; ++c) offer(chains_[c], chain_scores_[c]);

    std::vector<Knobs> proposals(nc);
    std::vector<float> scores(nc);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    int last_change = 0;
    for (int step = 0; step < opt_.n_steps; ++step) {
      const double t = 1.0 - static_cast<double>(step) / opt_.n_steps;
      for (size_t c = 0; c < nc; ++c) proposals[c] = space.Neighbour(chains_[c], rng_, opt_.p_switch).value_or(chains_[c]);
      score_(proposals, scores);
      stats_.proposals_scored += static_cast<int>(nc);
      bool changed = false;
      for (size_t c = 0; c < nc; ++c) {
        changed |= offer(proposals[c], scores[c]);
        const double p = std::exp(std::min((scores[c] - chain_scores_[c]) / (t + 1e-5), 1.0));
        if (p > u01(rng_)) {
          chains_[c] = proposals[c];
          chain_scores_[c] = scores[c];
        }
      }
      stats_.steps = step + 1;
      if (changed) last_change = step;
      if (step - last_change > opt_.early_stop) break;
    }
  }

  // Diverse top of the heap, best first.
  std::sort(heap.begin(), heap.end(), Better);
  if (!heap.empty()) stats_.best_score = heap.front().score;
  const int n_random = std::min(n, static_cast<int>(std::lround(opt_.epsilon * n)));
  const size_t n_model = static_cast<size_t>(n - n_random);
  std::vector<const Entry*> skipped;
  std::unordered_set<uint64_t> picked;
  for (const Entry& e : heap) {
    if (out.size() >= n_model) break;
    bool diverse = true;
    for (const Knobs& p : out)
      if (KnobDistance(p, e.knobs) < opt_.min_knob_distance) {
        diverse = false;
        break;
      }
    if (diverse) {
      out.push_back(e.knobs);
      picked.insert(e.id);
    } else {
      skipped.push_back(&e);
    }
  }
  for (const Entry* e : skipped) {
    if (out.size() >= n_model) break;
    out.push_back(e->knobs);
    picked.insert(e->id);
  }
  // Random valid unvisited points: the epsilon share, and whatever the heap lacked.
  const int max_tries = 32 * n + 256;
  for (int t = 0; static_cast<int>(out.size()) < n && t < max_tries; ++t) {
    auto k = space.SampleValid(rng_, 64);
    if (!k) break;
    const uint64_t id = space.Id(*k);
    if (visited(id) || !picked.insert(id).second) continue;
    out.push_back(*k);
  }
  return out;
}

}  // namespace cliffguard::tuner
