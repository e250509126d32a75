// The reliability rules that need no GPU (lowbit/status.h states them): null outputs refused,
// size queries that never wrap, choosers that refuse what their calls refuse, one rule for
// non-finite scalars, MoE config choice with a Status, and the grouped status text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "common/arg_check.h"
#include "gemm/grouped_status.h"
#include "lowbit/lowbit.h"
#include "lowbit/sparse.h"

using namespace lowbit;

namespace {

void expect_invalid(const Status& st, const char* needle) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

// The exact product of non-negative factors as a long double (no wrap), for comparison.
long double exact(std::initializer_list<long double> f) {
  long double r = 1;
  for (long double x : f) r *= x;
  return r;
}

// A size query must report at least the exact need, or SIZE_MAX.
void expect_not_under(size_t got, long double need, const char* what) {
  EXPECT_TRUE(got == SIZE_MAX || static_cast<long double>(got) >= need) << what << ": " << got << " < " << need;
}

}  // namespace

// A null `out` segfaulted in these; now each returns InvalidArgument, on any machine.
TEST(Reliability, NullOutputsAreRefused) {
  expect_invalid(query_device(nullptr), "out must be non-null");
  expect_invalid(parse_sparse24_config("bn=128", nullptr), "out must be non-null");
  expect_invalid(parse_nvfp4_config("tokens=16", nullptr), "out must be non-null");
  expect_invalid(parse_blockscaled_config("bn=128", nullptr), "out must be non-null");
  expect_invalid(parse_moe_config("tile=16", nullptr), "out must be non-null");
  expect_invalid(parse_fp8_config("bn=128", nullptr), "null out");
  expect_invalid(choose_nvfp4_config(16, 4096, 4096, nullptr), "out must be non-null");
  expect_invalid(choose_nvfp4_grouped_config(Nvfp4GroupedArgs{}, nullptr), "out must be non-null");
  expect_invalid(choose_sparse24_config(128, 256, 512, SparseType::kE4M3, nullptr), "out must be non-null");
  expect_invalid(choose_fp8_config(128, 256, 512, nullptr), "out must be non-null");
  expect_invalid(choose_moe_config(MoeShape{1, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr, nullptr),
                 "out must be non-null");
  expect_invalid(moe_workspace_view(MoeShape{1, 512, 2048, 256, 8}, MoeReduce::kAtomic, OutType::kFP32,
                                    reinterpret_cast<void*>(0x100000), size_t{1} << 30, nullptr),
                 "null");
}

// Size queries saturate at SIZE_MAX instead of wrapping (fp8 and 2:4 returned 16384 for
// m = 2^30, n = 1024 with a huge split; the metadata and prepacked sizes overflowed int64).
TEST(Reliability, SizeQueriesNeverUnderReport) {
  Fp8GemmConfig c;
  c.block_n = 128;
  for (int splits : {2, 1 << 20, 1 << 30, INT32_MAX}) {
    c.splits = splits;
    const size_t got = fp8_gemm_workspace_size(int64_t{1} << 30, 1024, 4096, c);
    expect_not_under(got, exact({1 << 23, 8, static_cast<long double>(splits), 128 * 128 * 4}), "fp8_gemm_workspace_size");
  }
  c.splits = 1 << 30;
  EXPECT_EQ(fp8_gemm_workspace_size(INT64_MAX, INT64_MAX, 4096, c), SIZE_MAX);
  Sparse24GemmConfig sc;
  sc.block_n = 256;
  for (int splits : {2, 1 << 20, INT32_MAX}) {
    sc.splits = splits;
    const size_t got = sparse24_gemm_workspace_size(int64_t{1} << 30, 1024, 4096, SparseType::kE4M3, sc);
    expect_not_under(got, exact({1 << 23, 4, static_cast<long double>(splits), 128 * 256 * 4}),
                     "sparse24_gemm_workspace_size");
  }
  EXPECT_EQ(sparse24_gemm_workspace_size(INT64_MAX, INT64_MAX, 64, SparseType::kF16, sc), SIZE_MAX);
  for (int64_t m : {int64_t{1} << 40, int64_t{1} << 55, INT64_MAX - 1, INT64_MAX})
    for (int64_t k : {int64_t{256}, int64_t{1} << 40, INT64_MAX}) {
      expect_not_under(sparse24_meta_bytes(m, k, SparseType::kE4M3), exact({static_cast<long double>(m), (long double)k, 1.0L / 8}),
                       "sparse24_meta_bytes");
      expect_not_under(nvfp4_prepacked_bytes(m, k), exact({static_cast<long double>(m), (long double)k, 0.5L}),
                       "nvfp4_prepacked_bytes");
    }
  EXPECT_EQ(sparse24_meta_bytes(INT64_MAX, INT64_MAX, SparseType::kF16), SIZE_MAX);
  EXPECT_EQ(nvfp4_prepacked_bytes(INT64_MAX, INT64_MAX), SIZE_MAX);
  // Small shapes keep their exact counts.
  EXPECT_EQ(sparse24_meta_bytes(128, 256, SparseType::kE4M3), 2u * 2 * 1024);
  EXPECT_GT(nvfp4_prepacked_bytes(128, 128), 128u * 128 / 2);
  // The checker's arithmetic.
  int64_t r = 0;
  EXPECT_FALSE(check::mul(INT64_MAX, 2, &r));
  EXPECT_FALSE(check::mul(-1, 2, &r));
  EXPECT_TRUE(check::mul(int64_t{1} << 31, int64_t{1} << 31, &r));
  EXPECT_EQ(r, int64_t{1} << 62);
  EXPECT_EQ(check::sat_mul(SIZE_MAX / 2, 3), SIZE_MAX);
  EXPECT_EQ(check::sat_add(SIZE_MAX, 1), SIZE_MAX);
  EXPECT_EQ(check::limit_text(INT32_MAX - 256), "2^31 - 257");
  EXPECT_EQ(check::limit_text(int64_t{1} << 40), "2^40");
  EXPECT_EQ(check::limit_text(1000), "1000");
}

// A chooser refuses the shapes its call refuses (choose_nvfp4_config accepted m near INT64_MAX
// and n = 8, k = 16, which nvfp4_gemm refuses).
TEST(Reliability, ChoosersRefuseWhatTheCallsRefuse) {
  Nvfp4GemmConfig nc;
  expect_invalid(choose_nvfp4_config(INT64_MAX - 5, 4096, 4096, &nc), "M must be at most 2^30 - 1");
  expect_invalid(choose_nvfp4_config(16, 8, 16, &nc), "N must be a positive multiple of 16");
  expect_invalid(choose_nvfp4_config(16, 16, 16, &nc), "K must be a positive multiple of 32");
  expect_invalid(choose_nvfp4_config(0, 4096, 4096, &nc), "M must be >= 1");
  Fp8GemmConfig fc;
  expect_invalid(choose_fp8_config(INT64_MAX, 256, 256, &fc), "M must be at most");
  expect_invalid(choose_fp8_config(64, 256, 256, &fc, static_cast<Fp8EpilogueKind>(9)), "unknown epilogue");
  expect_invalid(choose_fp8_config(64, 256, 256, &fc, Fp8EpilogueKind::kPlain, 0, static_cast<OutType>(4)),
                 "unknown out_type");
  expect_invalid(choose_fp8_config(64, 256, 256, &fc, Fp8EpilogueKind::kFused, 0, OutType::kFP16),
                 "FP16 output runs the plain and bias epilogues");
  Sparse24GemmConfig sc;
  expect_invalid(choose_sparse24_config(64, 256, 48, SparseType::kE4M3, &sc), "K must be a positive multiple of 32");
  expect_invalid(choose_sparse24_config(64, 256, 256, static_cast<SparseType>(3), &sc), "unknown sparse type");
  // explain_fp8_config answers for a bad shape with the refusal, not a table of nonsense.
  EXPECT_NE(explain_fp8_config(-5, 256, 256).find("M must be >= 1"), std::string::npos);
}

// One rule for host scalars in every family: NaN and Inf are refused (fp8, 2:4 and patch
// embedding accepted them; NVFP4 refused them). Checked before the GPU is touched.
TEST(Reliability, NonFiniteScalarsAreRefusedInEveryFamily) {
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    Fp8GemmArgs f;
    f.m = 128;
    f.n = 256;
    f.k = 512;
    f.a = reinterpret_cast<const void*>(0x100000000);
    f.b = reinterpret_cast<const void*>(0x200000000);
    f.d = reinterpret_cast<void*>(0x300000000);
    f.alpha = bad;
    expect_invalid(fp8_gemm(f, nullptr), "alpha must be finite");
    Sparse24GemmArgs s;
    s.m = 128;
    s.n = 256;
    s.k = 512;
    s.a_values = reinterpret_cast<const void*>(0x100000000);
    s.a_meta = reinterpret_cast<const void*>(0x200000000);
    s.b = reinterpret_cast<const void*>(0x300000000);
    s.d = reinterpret_cast<void*>(0x400000000);
    s.alpha = bad;
    expect_invalid(sparse24_gemm(s, nullptr), "alpha must be finite");
    PatchEmbedArgs p;
    p.m = 196;
    p.n = 256;
    p.k = 768;
    p.patches = reinterpret_cast<const void*>(0x100000000);
    p.weight = reinterpret_cast<const void*>(0x200000000);
    p.out = reinterpret_cast<void*>(0x300000000);
    p.bias = reinterpret_cast<const void*>(0x400000000);
    p.bias_len = 256;
    p.pos = reinterpret_cast<const void*>(0x500000000);
    p.pos_rows = 196;
    p.pos_cols = 256;
    p.alpha = bad;
    expect_invalid(patch_embed_fp8(p, nullptr), "alpha must be finite");
    Nvfp4GemmArgs n;
    n.m = 16;
    n.n = 256;
    n.k = 256;
    n.a_bf16 = reinterpret_cast<const void*>(0x100000000);
    n.b_prepacked = reinterpret_cast<const void*>(0x200000000);
    n.d = reinterpret_cast<void*>(0x300000000);
    n.b_global_scale = bad;
    expect_invalid(nvfp4_gemm(n, nullptr), "b_global_scale must be finite");
  }
}

// moe_choose_config returned forced fields out of range (tile = 7, grid = -5) without a Status.
// choose_moe_config refuses them; the old form returns the automatic choice and says why.
TEST(Reliability, MoeConfigChoiceRefusesBadForcedFields) {
  const MoeShape shape{128, 512, 2048, 256, 8};
  MoeConfig bad;
  bad.token_tile = 7;
  bad.grid = -5;
  MoeConfig out;
  std::string why;
  expect_invalid(choose_moe_config(shape, MoeReduce::kAtomic, 132, &bad, &out, &why), "token_tile");
  // The message lists the compiled tiles (moe/variants.def).
  expect_invalid(choose_moe_config(shape, MoeReduce::kAtomic, 132, &bad, &out, &why), "16, 32, 64 or 128");
  // Automatic: the smallest compiled tile that holds the average tokens per expert (m * 8 / 256).
  for (const auto& [m, tile] : {std::pair{256, 16}, {1024, 32}, {1536, 64}}) {
    ASSERT_TRUE(choose_moe_config(MoeShape{m, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr, &out, &why).ok());
    EXPECT_EQ(out.token_tile, tile) << m << ": " << why;
  }
  bad.token_tile = 0;
  expect_invalid(choose_moe_config(shape, MoeReduce::kAtomic, 132, &bad, &out, &why), "grid");
  expect_invalid(choose_moe_config(shape, MoeReduce::kAtomic, 0, nullptr, &out, &why), "sm_count");
  expect_invalid(choose_moe_config(MoeShape{1, 512, 2048, 0, 8}, MoeReduce::kAtomic, 132, nullptr, &out, &why),
                 "experts");
  expect_invalid(choose_moe_config(shape, static_cast<MoeReduce>(5), 132, nullptr, &out, &why), "reduce");
  bad.token_tile = 7;
  const MoeConfig old = moe_choose_config(shape, MoeReduce::kAtomic, 132, &bad, &why);
  EXPECT_TRUE(old.token_tile == 16 || old.token_tile == 32 || old.token_tile == 64 || old.token_tile == 128)
      << old.to_string();
  EXPECT_GE(old.grid, 0) << old.to_string();
  EXPECT_GE(old.splits, 1) << old.to_string();
  EXPECT_NE(why.find("token_tile"), std::string::npos) << why;
  // A refused shape whose sizes overflow the rules' int arithmetic: defaults, no UB.
  for (const MoeShape bad_shape : {MoeShape{1, INT32_MAX - 15, 128, 1, 1}, MoeShape{INT32_MAX, 1 << 30, 128, 8, 8},
                                   MoeShape{-4, 512, 2048, 256, 8}}) {
    const MoeConfig d = moe_choose_config(bad_shape, MoeReduce::kAtomic, 132, nullptr, &why);
    EXPECT_EQ(d.token_tile, 16) << why;
    EXPECT_EQ(d.splits, 1) << why;
  }
  ASSERT_TRUE(choose_moe_config(shape, MoeReduce::kAtomic, 132, nullptr, &out, &why).ok());
  EXPECT_EQ(out.token_tile, moe_choose_config(shape, MoeReduce::kAtomic, 132, nullptr).token_tile);
}

// The grouped status names everything not computed, and lists at most kListed groups.
TEST(Reliability, GroupedStatusText) {
  auto text = [](int code) { return code == 1 ? "bad one" : code == 2 ? "bad two" : "too many tiles"; };
  gemm::GroupedStatus s{};
  EXPECT_EQ(gemm::grouped_status_text(s, text), "");
  s.call_code = 3;
  s.invalid = 1;
  s.listed = 1;
  s.group[0] = 5;
  s.code[0] = 2;
  const std::string both = gemm::grouped_status_text(s, text);
  EXPECT_NE(both.find("nothing was computed"), std::string::npos) << both;
  EXPECT_NE(both.find("too many tiles"), std::string::npos) << both;
  EXPECT_NE(both.find("group 5: bad two"), std::string::npos) << both;
  s.call_code = 0;
  s.invalid = 20;
  s.listed = gemm::GroupedStatus::kListed;
  for (int i = 0; i < s.listed; ++i) {
    s.group[i] = 2 * i;
    s.code[i] = 1;
  }
  const std::string many = gemm::grouped_status_text(s, text);
  EXPECT_NE(many.find("20 invalid groups"), std::string::npos) << many;
  EXPECT_NE(many.find("group 22: bad one"), std::string::npos) << many;
  EXPECT_NE(many.find("and 8 more"), std::string::npos) << many;
  EXPECT_EQ(many.find("nothing was computed"), std::string::npos) << many;
}
