// Workloads: the list of op keys to tune. Read from the command line (--shape, with
// ParseShape of op_key.h), from a workload file, or from a miss report. Schema: formats/workload.schema.json.
//
// Workload file, either form:
//   plain lines, each a shape in ParseShape's grammar (a canonical op key, or the
//   GEMM shorthand M,N,K[,LAYOUT]; '#' starts a comment, blank lines ignored):
//       # BERT-base FFN
//       gemm f32 nn m=128 n=3072 k=768
//   or a JSON array of the same strings:
//       ["gemm f32 nn m=128 n=3072 k=768", "gemm f32 nt m=16 n=768 k=768"]
// Duplicate keys are kept once (first occurrence). Every error names the source,
// the line (1-based) and the rule broken.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cliffguard/op_key.h"
#include "cliffguard/status.h"

namespace cliffguard::tuner {

// Parses workload text (plain lines or a JSON array, detected by the first
// non-blank character being '['). `source` names the text in error messages.
StatusOr<std::vector<OpKey>> ParseWorkload(std::string_view text, std::string_view source = "workload");
StatusOr<std::vector<OpKey>> ReadWorkloadFile(const std::string& path);

// Drops later duplicates, keeping first-seen order.
std::vector<OpKey> DedupKeys(const std::vector<OpKey>& keys);

// One of N shares of a workload, for tuning on N machines (`tune --shard I/N`).
struct Shard {
  int index = 0;  // 0 <= index < count, as Kubernetes' completion index and Slurm's array task id
  int count = 1;
};
// "I/N" with 0 <= I < N <= 65536; errors name the text and the rule.
StatusOr<Shard> ParseShard(std::string_view text);
// The positions in `names` (one per unit of work: a key's or a bucket's text) that
// `shard` takes: the units sorted by name, dealt round-robin. Every unit goes to
// exactly one of the N shards, shares differ by at most one, and the split does not
// depend on the order the units were given in.
std::vector<size_t> ShardIndices(const std::vector<std::string>& names, Shard shard);

}  // namespace cliffguard::tuner
