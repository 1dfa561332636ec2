// A fake GEMM-like parameter table shared by the search tests: 8 parameters,
// 8 * 8 * 8 * 3 * 3 * 4 * 2 * 2 = 147,456 points per variant before constraints.
#pragma once

#include "cliffguard/kernel.h"

namespace cliffguard::tuner::testing {

constexpr int32_t kMc[] = {16, 32, 48, 64, 96, 128, 192, 256};
constexpr int32_t kKc[] = {32, 64, 128, 192, 256, 384, 512, 768};
constexpr int32_t kNc[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};
constexpr int32_t kPar[] = {0, 1, 2};
constexpr int32_t kThreads[] = {1, 2, 4};
constexpr int32_t kUnroll[] = {1, 2, 4, 8};
constexpr int32_t kBool[] = {0, 1};
const ParamSpec kParams[] = {{"mc", kMc, 64, ""},         {"kc", kKc, 256, ""},    {"nc", kNc, 512, ""},
                             {"par", kPar, 0, ""},        {"threads", kThreads, 1, ""},
                             {"unroll_k", kUnroll, 4, ""}, {"prefetch", kBool, 1, ""}, {"pack_a", kBool, 1, ""}};

}  // namespace cliffguard::tuner::testing
