#include <unordered_set>

#include <gtest/gtest.h>

#include "cliffguard/op_key.h"

namespace cliffguard {
namespace {

TEST(OpKey, GemmCanonicalText) {
  EXPECT_EQ(OpKey::Gemm(128, 3072, 768).ToString(), "gemm f32 nn m=128 n=3072 k=768");
  EXPECT_EQ(OpKey::Gemm(1, 2, 3, true, false).ToString(), "gemm f32 tn m=1 n=2 k=3");
  EXPECT_EQ(OpKey::Gemm(1, 2, 3, false, true, DType::kBF16).ToString(), "gemm bf16 nt m=1 n=2 k=3");
}

TEST(OpKey, ParseRoundTripsEveryForm) {
  const OpKey keys[] = {OpKey::Gemm(1, 1, 1), OpKey::Gemm(384, 768, 3072, true, true), OpKey::Gemm(17, 31, 61, false, true),
                        OpKey::Conv2d(1, 56, 56, 64, 128, 3, 3, 2, 2, 1, 1), OpKey::Conv2d(1, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3, DType::kF16)};
  OpKey packed = OpKey::Gemm(1, 4096, 4096, false, true);
  packed.constant_weights = true;
  EXPECT_EQ(packed.ToString(), "gemm f32 nt m=1 n=4096 k=4096 weights=constant");
  EXPECT_NE(packed, OpKey::Gemm(1, 4096, 4096, false, true));
  EXPECT_NE(packed.Hash(), OpKey::Gemm(1, 4096, 4096, false, true).Hash());
  auto pshape = ParseShape("gemm f32 nt m=1 n=4096 k=4096 weights=constant");
  ASSERT_TRUE(pshape.ok());
  EXPECT_EQ(*pshape, packed);
  for (const OpKey& k : keys) {
    auto p = OpKey::Parse(k.ToString());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(*p, k);
    EXPECT_EQ(p->Hash(), k.Hash());
  }
}

TEST(OpKey, ParseToleratesExtraSpacesButNotOtherForms) {
  auto p = OpKey::Parse("  gemm  f32 nn   m=2 n=3 k=4 ");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, OpKey::Gemm(2, 3, 4));
  for (const char* bad : {"", "gemm", "gemm f32 nn m=2 n=3", "gemm f32 nn m=2 n=3 k=4 x=1", "gemm f32 nn m=2 n=3 k=4 weights=yes",
                          "gemm f32 nn m=2 n=3 weights=constant", "gemm f32 nn m=2 n=3 k=4 weights=constant x", "gemm f64 nn m=1 n=1 k=1",
                          "gemm f32 xx m=1 n=1 k=1", "gemm f32 nn n=1 m=1 k=1", "gemm f32 nn m=0 n=1 k=1",
                          "gemm f32 nn m=-3 n=1 k=1", "gemm f32 nn m=1x n=1 k=1", "gemm f32 nn m=99999999999999999999 n=1 k=1",
                          "matmul f32 nn m=1 n=1 k=1", "conv2d f32 nchw n=1 h=1 w=1 ic=1 oc=1 kh=1 kw=1 sh=1 sw=1 ph=0 pw=0"}) {
    auto r = OpKey::Parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(OpKey, ValidateNamesTheDimensionAndRule) {
  Status s = OpKey::Gemm(16, 0, 768).Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("n=0 must be >= 1"), std::string::npos) << s.message();
  s = OpKey::Gemm(int64_t{1} << 40, 1, 1).Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("must be <="), std::string::npos) << s.message();
  s = OpKey::Gemm(int64_t{1} << 31, int64_t{1} << 31, 4).Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("overflows"), std::string::npos) << s.message();
  EXPECT_FALSE(OpKey::Conv2d(1, 2, 2, 1, 1, 5, 5, 1, 1, 0, 0).Validate().ok());
}

TEST(OpKey, HashSeparatesNearbyKeys) {
  std::unordered_set<uint64_t> hashes;
  int n = 0;
  for (int m = 1; m <= 64; ++m)
    for (int t = 0; t < 4; ++t) {
      hashes.insert(OpKey::Gemm(m, 768, 768, t & 1, t & 2).Hash());
      hashes.insert(OpKey::Gemm(768, m, 768, t & 1, t & 2).Hash());
      n += 2;
    }
  EXPECT_EQ(hashes.size(), size_t(n));
}

TEST(OpKey, FlopsOfGemm) { EXPECT_DOUBLE_EQ(OpKey::Gemm(2, 3, 4).Flops(), 48.0); }

}  // namespace
}  // namespace cliffguard
