// A serving binary that holds its Runtime in a global (argv[1] == "global") or in a
// function-local static ("static"), dispatches one missed GEMM and returns from
// main: the Runtime is destroyed during static destruction and must write its miss
// report (CLIFFGUARD_MISS_REPORT) and exit 0. Run by serving_correctness_test.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "cliffguard/runtime.h"

namespace {
std::unique_ptr<cliffguard::Runtime> g_runtime;

std::unique_ptr<cliffguard::Runtime>& StaticRuntime() {
  static std::unique_ptr<cliffguard::Runtime> rt;
  return rt;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace cliffguard;
  const bool global = argc > 1 && std::strcmp(argv[1], "global") == 0;
  auto created = Runtime::Create();
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 3;
  }
  std::unique_ptr<Runtime>& rt = global ? g_runtime : StaticRuntime();
  rt = std::move(*std::move(created));  // rvalue operator* of StatusOr
  const OpKey key = OpKey::Gemm(3, 5, 7);
  std::vector<float> a(21, 1.f), b(35, 1.f), c(15, 0.f);
  const Status st = rt->Gemm(DenseGemmArgs(key, a.data(), b.data(), c.data()));
  if (!st.ok() || c[0] != 7.f) return 4;
  return 0;
}
