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

// Several NaNs, and NaN next to infinity, in one group: every NaN ranks alike and above
// infinity in both pruners (ties to the lower index), whatever its payload or sign. The packed
// F16 pruner once ranked NaN payloads by their bits, the float one NaN level with infinity.
TEST(Sparse24Prepacked, PrunersAgreeOnNaNPayloadsAndInfinity) {
  struct Group {
    lowbit::SparseType type;
    uint32_t bits[4];
    int keep0, keep1;
  };
  const Group groups[] = {
      {lowbit::SparseType::kF16, {0x7C00, 0x7C00, 0x7E00, 0x3C00}, 0, 2},  // inf, inf, NaN, 1
      {lowbit::SparseType::kF16, {0x7C01, 0x7E00, 0x7FFF, 0x0000}, 0, 1},  // three NaN payloads
      {lowbit::SparseType::kF16, {0xFC00, 0x4200, 0x7C00, 0xFE00}, 0, 3},  // -inf, 3, inf, -NaN
      {lowbit::SparseType::kE4M3, {0x7E, 0xFF, 0x7F, 0x38}, 1, 2},         // 448, -NaN, NaN, 1
  };
  for (const Group& g : groups) {
    lowbit_test::RawMatrix a{g.type, 1, 32, std::vector<uint8_t>(32 * lowbit_test::elem_bytes(g.type), 0)};
    for (int i = 0; i < 4; ++i) a.set(0, i, g.bits[i]);
    Packed p;
    ASSERT_TRUE(pack_host(a, true, &p).ok());
    std::vector<float> got;
    std::string why;
    ASSERT_TRUE(lowbit_test::decode_prepacked(g.type, 1, 32, p.values, p.meta, &got, &why)) << why;
    std::vector<float> want(32);
    for (int c = 0; c < 32; ++c) want[c] = a.at(0, c);
    prune_2_4(want.data(), 1, 32);
    for (int i = 0; i < 4; ++i) {
      const bool kept = i == g.keep0 || i == g.keep1;
      const std::string where = "group {" + std::to_string(g.bits[0]) + ", ...} position " + std::to_string(i);
      EXPECT_EQ(got[i] != 0.0f || std::isnan(got[i]), kept) << "packed pruner, " << where;
      EXPECT_EQ(want[i] != 0.0f || std::isnan(want[i]), kept) << "float pruner, " << where;
    }
  }
}

// A refused compression holds no values: decompressing it gives nothing (it read past an empty
// index vector).
TEST(Sparse24, DecompressOfARefusedCompressionIsEmpty) {
  const std::vector<float> dense = {1, 1, 1, 0};
  const auto c = compress_2_4(dense.data(), 1, 4);
  ASSERT_FALSE(c.ok);
  EXPECT_TRUE(decompress_2_4(c).empty());
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

// The metadata layout pinned to the PTX ISA's figures for sparse wgmma ("Matrix fragments for
// sparse wgmma"; worked through in docs/notes/wgmma_sp_metadata.md, section 3), written out by
// hand here rather than through sparse24_chunk_pos: the round-trip tests decode with the same
// function the packer encodes with, so a wrong mapping there would round-trip perfectly.
// One group per case holds its two nonzeros at positions 2 and 3 (code 0xE); every other group
// is empty (code 0x4). The whole metadata buffer must then read 0x4 but at one nibble.
namespace {

struct PinnedNibble {
  int row, col;  // the group's first logical column
  size_t byte;   // where its code must land in the metadata buffer
  bool high;     // in the byte's high nibble
  const char* why;
};

void expect_pinned_layout(lowbit::SparseType type, int64_t m, int64_t k, const PinnedNibble& c,
                          const char* copy_why = nullptr, size_t copy_byte = 0) {
  lowbit_test::RawMatrix a{type, m, k,
                           std::vector<uint8_t>(static_cast<size_t>(m * k * lowbit_test::elem_bytes(type)), 0)};
  const uint32_t one = type == lowbit::SparseType::kE4M3 ? 0x38u : 0x3C00u;  // 1.0
  const uint32_t two = type == lowbit::SparseType::kE4M3 ? 0x40u : 0x4000u;  // 2.0
  a.set(c.row, c.col + 2, one);
  a.set(c.row, c.col + 3, two);
  std::vector<uint8_t> values(static_cast<size_t>(m * k / 2 * lowbit_test::elem_bytes(type)), 0xAB);
  std::vector<uint8_t> meta(lowbit::sparse24_meta_bytes(m, k, type), 0xCD);
  const auto st = lowbit::sparse24_compress_host(a.bytes.data(), m, k, type, false, values.data(), meta.data());
  ASSERT_TRUE(st.ok()) << st.to_string();
  // Values: group g's kept pair at columns 2g, 2g + 1 of its row, in index order.
  lowbit_test::RawMatrix v{type, m, k / 2, values};
  EXPECT_EQ(v.get(c.row, c.col / 2), one) << c.why;
  EXPECT_EQ(v.get(c.row, c.col / 2 + 1), two) << c.why;
  for (size_t b = 0; b < meta.size(); ++b) {
    const bool copy = copy_why != nullptr && b == copy_byte;
    const uint8_t want = b == c.byte || copy ? (c.high ? 0xE4 : 0x4E) : 0x44;
    ASSERT_EQ(meta[b], want) << c.why << (copy ? copy_why : "") << ": metadata byte " << b;
  }
}

}  // namespace

TEST(Sparse24Prepacked, E4M3MetadataSitsWherePtxSaysTheThreadReadsIt) {
  // m64nNk64: thread t = 32w + 4g + q holds row 16w + g + 8(q & 1), logical columns
  // 32(q >> 1) .. +31 of the MMA, nibble i = the group at 32(q >> 1) + 4i; word j = MMA j of
  // the 128-column K block, at bytes [8t + 4j, +4) of the slab's 1 KiB block. M = 100 pads to
  // two slabs, K = 256 is two K blocks: block (slab, kb) at (2 kb + slab) KiB.
  const PinnedNibble cases[] = {
      {0, 0, 0, false, "lane 0: row 0, columns 0..31, nibble 0"},
      {8, 4, 8, true, "lane 1: row 8, nibble 1"},
      {0, 32, 16, false, "lane 2: row 0, columns 32..63"},
      {1, 64, 4 * 8 + 4, false, "lane 4: row 1; columns 64.. are the second MMA's word"},
      {16, 124, 34 * 8 + 4 + 3, true, "warp 1 lane 2: row 16, second MMA columns 32..63, nibble 7"},
      {70, 0, 1024 + 24 * 8, false, "second slab (rows 64..127): row 6 there is lane 24"},
      {0, 128, 2048, false, "second K block, first slab"},
      {99, 252, 3072 + (64 + 4 * 3 + 2) * 8 + 4 + 3, true, "last row (slab 1 row 35: warp 2, g 3, q 2), last group"},
  };
  for (const auto& c : cases) expect_pinned_layout(lowbit::SparseType::kE4M3, 100, 256, c);
}

TEST(Sparse24Prepacked, F16MetadataSitsWherePtxSaysTheThreadReadsIt) {
  // m64nNk32, selector 0: threads q = 0, 1 of each quad supply it. Thread 32w + 4g + q holds
  // rows 16w + g (nibbles 0..3) and 16w + g + 8 (nibbles 4..7), logical columns 16(q & 1) ..
  // +15 of the MMA; word j = MMA j of the 64-column K block. Lanes q = 2, 3 carry copies of
  // q = 0, 1 (what selector 1 would read). M = 64 pads to two slabs; K = 128 is two K blocks.
  struct Case {
    PinnedNibble c;
    size_t copy;
  };
  const Case cases[] = {
      {{0, 0, 0, false, "lane 0: row 0, columns 0..15, nibble 0"}, 2 * 8},
      {{8, 4, 2, true, "lane 0: row 8 is nibble 5"}, 2 * 8 + 2},
      {{0, 16, 8, false, "lane 1: row 0, columns 16..31"}, 3 * 8},
      {{0, 32, 4, false, "lane 0: columns 32.. are the second MMA's word"}, 2 * 8 + 4},
      {{27, 60, (32 + 4 * 3 + 1) * 8 + 4 + 3, true, "warp 1, g 3, lane q 1: row 27 = 16 + 3 + 8, nibble 7"},
       (32 + 4 * 3 + 3) * 8 + 4 + 3},
      {{5, 64, 2048 + 5 * 4 * 8, false, "second K block (slab stride: two slabs)"}, 2048 + (5 * 4 + 2) * 8},
  };
  for (const auto& e : cases)
    expect_pinned_layout(lowbit::SparseType::kF16, 64, 128, e.c, " (copy in lane q + 2)", e.copy);
}
