#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "formats/sparse24.h"
#include "test_seed.h"

using namespace lowbit::formats;

TEST(Sparse24, PruneKeepsTwoLargestWithLowerIndexOnTies) {
  std::vector<float> x = {1, -5, 3, 2,   /**/ 2, 2, 2, 2,   /**/ 0, 0, 0, 7,   /**/ -1, 4, -4, 0};
  prune_2_4(x.data(), 1, 16);
  const std::vector<float> want = {0, -5, 3, 0, /**/ 2, 2, 0, 0, /**/ 0, 0, 0, 7, /**/ 0, 4, -4, 0};
  EXPECT_EQ(x, want);
  EXPECT_TRUE(check_2_4(x.data(), 1, 16).ok);
}

TEST(Sparse24, CheckerReportsTheFirstViolatingGroup) {
  std::vector<float> x(3 * 16, 0.0f);
  x[1 * 16 + 8] = 1;
  x[1 * 16 + 9] = 1;
  x[1 * 16 + 10] = 1;  // row 1, group 2: three nonzeros
  x[2 * 16 + 0] = x[2 * 16 + 1] = x[2 * 16 + 2] = x[2 * 16 + 3] = 1;  // a later, denser one
  const auto v = check_2_4(x.data(), 3, 16);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.row, 1);
  EXPECT_EQ(v.group, 2);
  EXPECT_EQ(v.nonzeros, 3);
}

TEST(Sparse24, CompressRoundTripsPrunedRandomMatrices) {
  const uint64_t seed = lowbit_test::seed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 37, cols = 128;
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = (rng() % 5 == 0) ? 0.0f : nd(rng);  // some groups end up with < 2 nonzeros
  prune_2_4(x.data(), rows, cols);
  ASSERT_TRUE(check_2_4(x.data(), rows, cols).ok);
  const auto c = compress_2_4(x.data(), rows, cols);
  for (uint8_t idx : c.indices) ASSERT_LT(idx & 3, (idx >> 2) & 3) << "indices distinct and increasing";
  EXPECT_EQ(decompress_2_4(c), x) << "seed " << seed;
}

TEST(Sparse24, EmptyAndSingleNonzeroGroups) {
  std::vector<float> x = {0, 0, 0, 0, /**/ 0, 0, 9, 0, /**/ 5, 0, 0, 0};
  const auto c = compress_2_4(x.data(), 1, 12);
  EXPECT_EQ(c.indices[0], 0 | (1 << 2));
  EXPECT_EQ(c.indices[1], 0 | (2 << 2));
  EXPECT_EQ(c.indices[2], 0 | (1 << 2));
  EXPECT_EQ(decompress_2_4(c), x);
}

// A row length that is not a multiple of 4 ends in a short group, padded with zeros: the
// checker looks at it (it ignored it once, so a dense tail passed as 2:4), the pruner prunes it,
// and the compressor refuses the shape instead of dropping the tail.
TEST(Sparse24, ShortTrailingGroupsAndRefusedCompression) {
  std::vector<float> x = {0, 0, 0, 0, /**/ 1, 1, 1};
  const auto v = check_2_4(x.data(), 1, 7);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.group, 1);
  EXPECT_EQ(v.nonzeros, 3);
  prune_2_4(x.data(), 1, 7);
  EXPECT_EQ(x, (std::vector<float>{0, 0, 0, 0, 1, 1, 0}));
  EXPECT_TRUE(check_2_4(x.data(), 1, 7).ok);
  EXPECT_FALSE(compress_2_4(x.data(), 1, 7).ok);
  std::vector<float> dense = {1, 1, 1, 0};  // three nonzeros: not 2:4
  const auto c = compress_2_4(dense.data(), 1, 4);
  EXPECT_FALSE(c.ok);
  EXPECT_TRUE(c.values.empty());
  std::vector<float> fine = {1, 0, 1, 0};
  EXPECT_TRUE(compress_2_4(fine.data(), 1, 4).ok);
}

// ---- lowbit's prepacked format (formats/sparse24_layout.h) and the host compressor ----------

#include "lowbit/sparse.h"
#include "sparse24_test_util.h"

namespace {

struct Packed {
  std::vector<uint8_t> values, meta;
};

lowbit::Status pack_host(const lowbit_test::RawMatrix& a, bool prune, Packed* out) {
  out->values.assign(static_cast<size_t>(a.rows * a.cols / 2 * lowbit_test::elem_bytes(a.type)), 0xAB);
  out->meta.assign(lowbit::sparse24_meta_bytes(a.rows, a.cols, a.type), 0xCD);
  return lowbit::sparse24_compress_host(a.bytes.data(), a.rows, a.cols, a.type, prune, out->values.data(),
                                        out->meta.data());
}

}  // namespace

TEST(Sparse24Prepacked, RoundTripsRandomMatricesOfBothTypes) {
  for (auto type : {lowbit::SparseType::kE4M3, lowbit::SparseType::kF16})
    for (int64_t m : {1, 3, 64, 129, 200})
      for (int64_t k : {32, 160, 288}) {
        const auto a = lowbit_test::random_matrix(type, m, k, false, 4.0f, true, lowbit_test::seed() + m * 1000 + k);
        Packed p;
        const auto st = pack_host(a, false, &p);
        ASSERT_TRUE(st.ok()) << st.to_string();
        std::vector<float> dense;
        std::string why;
        ASSERT_TRUE(lowbit_test::decode_prepacked(type, m, k, p.values, p.meta, &dense, &why)) << why;
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = 0; c < k; ++c)
            ASSERT_EQ(dense[r * k + c], a.at(r, c)) << "type " << static_cast<int>(type) << " " << m << "x" << k
                                                    << " at (" << r << ", " << c << ")";
      }
}

TEST(Sparse24Prepacked, HostCompressNamesTheFirstViolatingGroup) {
  for (auto type : {lowbit::SparseType::kE4M3, lowbit::SparseType::kF16}) {
    auto a = lowbit_test::random_matrix(type, 70, 64, true, 3.0f, true, lowbit_test::seed());
    for (int i = 0; i < 4; ++i) a.set(66, 20 + i, lowbit_test::encode(type, 1.0f));  // row 66, group 5: 4 nonzeros
    for (int i = 0; i < 3; ++i) a.set(69, 4 + i, lowbit_test::encode(type, 2.0f));   // a later one
    Packed p;
    const auto st = pack_host(a, false, &p);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.to_string().find("row 66, columns 20..23"), std::string::npos) << st.to_string();
  }
}

TEST(Sparse24Prepacked, HostPruneKeepsTheTwoLargestMagnitudes) {
  for (auto type : {lowbit::SparseType::kE4M3, lowbit::SparseType::kF16}) {
    const auto a = lowbit_test::random_matrix(type, 130, 96, false, 8.0f, false, lowbit_test::seed() + 7);
    Packed p;
    ASSERT_TRUE(pack_host(a, true, &p).ok());
    std::vector<float> want(a.rows * a.cols);
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t c = 0; c < a.cols; ++c) want[r * a.cols + c] = a.at(r, c);
    prune_2_4(want.data(), a.rows, a.cols);  // the float reference pruner
    std::vector<float> got;
    std::string why;
    ASSERT_TRUE(lowbit_test::decode_prepacked(type, a.rows, a.cols, p.values, p.meta, &got, &why)) << why;
    EXPECT_EQ(got, want);
  }
}

// NaN ranks above every number in both pruners (the float one never picked a NaN: comparisons
// with NaN are false), so they keep the same elements.
TEST(Sparse24Prepacked, HostPruneRanksNaNLikeTheFloatPruner) {
  for (auto type : {lowbit::SparseType::kE4M3, lowbit::SparseType::kF16}) {
    auto a = lowbit_test::random_matrix(type, 4, 64, false, 8.0f, false, lowbit_test::seed() + 11);
    const int eb = lowbit_test::elem_bytes(type);
    for (int64_t i : {2, 67, 129, 255}) {  // one NaN in four different groups and positions
      if (eb == 1) a.bytes[i] = 0x7F;
      else { a.bytes[2 * i] = 0x00; a.bytes[2 * i + 1] = 0x7E; }
    }
    Packed p;
    ASSERT_TRUE(pack_host(a, true, &p).ok());
    std::vector<float> want(a.rows * a.cols);
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t c = 0; c < a.cols; ++c) want[r * a.cols + c] = a.at(r, c);
    prune_2_4(want.data(), a.rows, a.cols);
    std::vector<float> got;
    std::string why;
    ASSERT_TRUE(lowbit_test::decode_prepacked(type, a.rows, a.cols, p.values, p.meta, &got, &why)) << why;
    ASSERT_EQ(got.size(), want.size());
    int nans = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      nans += std::isnan(want[i]);
      EXPECT_TRUE(std::isnan(got[i]) ? std::isnan(want[i]) : got[i] == want[i]) << "element " << i;
    }
    EXPECT_EQ(nans, 4) << "every NaN is among its group's two largest";
  }
}

TEST(Sparse24Prepacked, BadInputsAreErrors) {
  std::vector<uint8_t> buf(1 << 16);
  auto* p = buf.data();
  using lowbit::SparseType;
  EXPECT_FALSE(lowbit::sparse24_compress_host(p, 4, 48, SparseType::kE4M3, false, p, p).ok());  // K % 32
  EXPECT_FALSE(lowbit::sparse24_compress_host(p, 0, 64, SparseType::kE4M3, false, p, p).ok());
  EXPECT_FALSE(lowbit::sparse24_compress_host(nullptr, 4, 64, SparseType::kE4M3, false, p, p).ok());
  // An unknown type must not be read as one of the known ones.
  EXPECT_FALSE(lowbit::sparse24_compress_host(p, 4, 64, static_cast<SparseType>(7), false, p, p).ok());
  EXPECT_EQ(lowbit::sparse24_meta_bytes(128, 256, static_cast<SparseType>(7)), 0u);
  EXPECT_GT(lowbit::sparse24_meta_bytes(128, 256, SparseType::kE4M3), 0u);
  lowbit::Sparse24GemmConfig pick;
  EXPECT_EQ(lowbit::choose_sparse24_config(0, 256, 256, SparseType::kE4M3, &pick).code(),
            lowbit::StatusCode::kInvalidArgument);
  EXPECT_EQ(lowbit::choose_sparse24_config(128, 256, 256, static_cast<SparseType>(7), &pick).code(),
            lowbit::StatusCode::kInvalidArgument);
  // A config no launch would take sizes no workspace (block_n = 0 once divided by zero).
  lowbit::Sparse24GemmConfig ws_cfg;
  ws_cfg.block_n = 0;
  EXPECT_EQ(lowbit::sparse24_gemm_workspace_size(4096, 4096, 4096, SparseType::kE4M3, ws_cfg), 0u);
  ws_cfg.block_n = 128;
  ws_cfg.splits = -5;
  EXPECT_EQ(lowbit::sparse24_gemm_workspace_size(4096, 4096, 4096, SparseType::kE4M3, ws_cfg), 0u);
  ws_cfg.splits = 2;
  EXPECT_GT(lowbit::sparse24_gemm_workspace_size(4096, 4096, 4096, SparseType::kE4M3, ws_cfg), 0u);
  EXPECT_FALSE(lowbit::sparse24_compress(p, 4, 64, static_cast<SparseType>(7), true, p, p, nullptr, nullptr).ok());
  EXPECT_FALSE(lowbit::sparse24_compress(p, 4, 48, SparseType::kF16, false, p, p, nullptr, nullptr).ok());
  // Not pruning needs somewhere to report a violation.
  EXPECT_FALSE(lowbit::sparse24_compress(p, 4, 64, SparseType::kF16, false, p, p, nullptr, nullptr).ok());
  // The checked form reports under its own name (it never prunes).
  const lowbit::Status checked = lowbit::sparse24_compress_checked(p, 4, 64, SparseType::kF16, p, p, nullptr, nullptr);
  EXPECT_EQ(checked.message().rfind("sparse24_compress_checked: violation", 0), 0u) << checked.to_string();
  const lowbit::Status checked_k = lowbit::sparse24_compress_checked(p, 4, 48, SparseType::kF16, p, p, nullptr, nullptr);
  EXPECT_EQ(checked_k.message().rfind("sparse24_compress_checked: K", 0), 0u) << checked_k.to_string();

  lowbit::Sparse24GemmArgs g;
  g.m = 128;
  g.n = 128;
  g.k = 256;
  g.a_values = g.a_meta = g.b = p;
  g.d = p;
  // (g itself is valid; each case below breaks one rule and must fail before any device work,
  // so these run on the CPU machine too.)
  auto bad = [&](auto mutate, const char* what) {
    lowbit::Sparse24GemmArgs b = g;
    mutate(b);
    const auto st = lowbit::sparse24_gemm(b, nullptr);
    EXPECT_EQ(st.code(), lowbit::StatusCode::kInvalidArgument) << what << ": " << st.to_string();
  };
  bad([](auto& b) { b.m = 0; }, "M = 0");
  bad([](auto& b) { b.n = 24; }, "N % 16");
  bad([](auto& b) { b.k = 48; }, "K % 32");
  bad([](auto& b) { b.a_meta = nullptr; }, "null metadata");
  bad([&](auto& b) { b.b = p + 8; }, "misaligned B");
  bad([](auto& b) { b.type = static_cast<SparseType>(7); }, "unknown type");
  bad([&](auto& b) { b.workspace_bytes = 64; }, "workspace bytes without a workspace");
  lowbit::Sparse24GemmConfig cfg;
  EXPECT_FALSE(lowbit::parse_sparse24_config("bn=192", &cfg).ok());
  EXPECT_FALSE(lowbit::parse_sparse24_config("stages=3", &cfg).ok());
  ASSERT_TRUE(lowbit::parse_sparse24_config("bn=256,splits=2", &cfg).ok());
  EXPECT_EQ(cfg.block_n, 256);
  EXPECT_EQ(cfg.splits, 2);
}
