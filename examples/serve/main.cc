// A serving loop that links cliffguard: loads the bundles named on the command line,
// runs a BERT-base layer's GEMMs at a few token counts, and prints what hit, what
// missed, and the ranked miss report.
//
//   serve [BUNDLE.cgb ...]
#include <cstdio>
#include <vector>

#include "cliffguard/runtime.h"

int main(int argc, char** argv) {
  using namespace cliffguard;
  RuntimeOptions options;  // CLIFFGUARD_MISS_REPORT=path also writes the report at exit
  auto rt = Runtime::Create(options);
  if (!rt.ok()) {
    std::fprintf(stderr, "serve: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  Runtime& runtime = **rt;
  for (int i = 1; i < argc; ++i) {
    auto report = runtime.LoadBundleFile(argv[i]);
    if (!report.ok()) {  // a bad bundle is refused; serving goes on without it
      std::fprintf(stderr, "serve: %s\n", report.status().ToString().c_str());
      continue;
    }
    std::printf("loaded %s: %zu of %zu entries\n", argv[i], report->entries_loaded, report->entries_total);
  }
  const int64_t hidden = 768, ffn = 3072;
  for (int64_t tokens : {16, 128}) {
    // QKV/output projection, FFN up, FFN down: C[tokens x n] = A[tokens x k] * W[k x n].
    for (auto [n, k] : {std::pair{hidden, hidden}, std::pair{ffn, hidden}, std::pair{hidden, ffn}}) {
      std::vector<float> a(size_t(tokens * k), 0.5f), w(size_t(k * n), 0.25f), c(size_t(tokens * n));
      auto plan = runtime.PlanGemm(OpKey::Gemm(tokens, n, k));  // resolve once per shape
      if (!plan.ok()) {
        std::fprintf(stderr, "serve: %s\n", plan.status().ToString().c_str());
        return 1;
      }
      for (int step = 0; step < 10; ++step) {
        Status st = plan->Run(a.data(), k, w.data(), n, c.data(), n);
        if (!st.ok()) {
          std::fprintf(stderr, "serve: %s\n", st.ToString().c_str());
          return 1;
        }
      }
      std::printf("%-34s %s  c[0]=%g\n", plan->key().ToString().c_str(), plan->hit() ? "hit " : "miss",
                  double(c[0]));
    }
  }
  const MissReport report = runtime.GetMissReport();
  std::printf("\n%llu calls, %llu hits, %llu misses\n", (unsigned long long)report.calls,
              (unsigned long long)report.hits, (unsigned long long)report.misses);
  std::printf("%s\n", MissReportToJson(report).c_str());
  return 0;
}
