// Simulated annealing over predicted scores, as in AutoTVM's SimulatedAnnealingOptimizer:
// parallel chains walk the space (SearchSpace::Neighbour), every step's proposals are
// scored in ONE batch call, and a heap keeps the best-scored unvisited points seen.
// The next measurement batch is the top of that heap, kept diverse, plus an
// epsilon-greedy share of uniformly random valid unvisited points.
//
// Thread-safety: an Explorer is used by one thread at a time. The scoring function is
// called on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "cliffguard/tuner/space.h"

namespace cliffguard::tuner {

// Scores a batch of points (higher = predicted faster); writes points.size() floats.
using ScoreFn = std::function<void(std::span<const Knobs> points, std::span<float> scores)>;
// True when a point (by SearchSpace::Id) was measured or proposed already.
using VisitedFn = std::function<bool(uint64_t id)>;

struct ExplorerOptions {
  int n_chains = 128;        // parallel annealing chains
  int n_steps = 500;         // steps per round at most
  int early_stop = 50;       // stop a round after this many steps without a heap change
  double epsilon = 0.05;     // share of each batch that is random valid unvisited points
  int min_knob_distance = 2; // diversity: picked points differ in at least this many knobs
  int heap_factor = 2;       // the heap keeps heap_factor * batch size best points
  double p_switch = 0.05;    // neighbour move: probability of switching variant
  uint64_t seed = 1;
};

struct ExplorerStats {
  int steps = 0;                // steps run in the last round
  int proposals_scored = 0;     // points scored in the last round
  float best_score = 0;         // best score in the heap after the last round
};

class Explorer {
 public:
  // `space` must outlive the explorer.
  Explorer(const SearchSpace& space, ScoreFn score, ExplorerOptions options = {});

  // Runs one annealing round (chains continue from where the last round left them;
  // the temperature goes linearly from 1 to 0 each round) and returns up to n
  // distinct, valid points for which visited() is false: the diverse top of the
  // heap, then random points (epsilon share, and to fill up when the heap is short).
  std::vector<Knobs> NextBatch(int n, const VisitedFn& visited);

  const ExplorerStats& stats() const { return stats_; }

 private:
  const SearchSpace* space_;
  ScoreFn score_;
  ExplorerOptions opt_;
  std::mt19937_64 rng_;
  std::vector<Knobs> chains_;
  std::vector<float> chain_scores_;
  ExplorerStats stats_;
};

}  // namespace cliffguard::tuner
