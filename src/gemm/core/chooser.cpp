// The GEMM core's chooser: a cost model over a family's compiled tiles and split-K factors
// (gemm/core/chooser.h). Its rates and rules were fitted on the per-tensor FP8 kernels
// (docs/perf.md W1); a family whose kernels run otherwise passes its own (ScoreOptions).
#include "gemm/core/chooser.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "common/arg_check.h"

namespace lowbit::gemm {

// Model parameters, calibrated on an H100 SXM (docs/perf.md): sustained dense FP8 tensor rate,
// DRAM bandwidth, and the fraction of the tensor rate a tile width sustains (narrow tiles read
// more shared memory per FLOP and amortize the promotion adds over fewer MMAs).
namespace model {
constexpr double kFp8TflopsPerSm = 1979.0 / 132.0;  // nominal, per SM
constexpr double kDramTBs = 3.0;
constexpr double kUnitOverheadUs = 1.5;  // pipeline fill + epilogue not hidden behind the next unit
// What one CTA streams at most: ~200 KB in flight (the ring) over DRAM latency under load.
// Measured (W1 v7, 64-row tiles, K = 7168): 917 KB per CTA in 12-13 us whether 64 or 128
// CTAs ran (64 x 4096: 14.0 us, 128 x 4096: 13.9, 128 x 2112 without a split: 12.7).
constexpr double kSmStreamGBs = 75.0;
// The last split's extra latency: store its partial, count in, read the others back. W1 v7:
// 64-row tiles at 64 x 4096 x 7168 ran 14.0 us unsplit on 64 SMs and 15.0 split in two on 128.
constexpr double kSplitFixupUs = 1.5;
// The share of SMs that, streaming, already saturate DRAM. W1 v7: 64 CTAs (0.48 of the SMs)
// pulled 30 MB in 13.7 us at 64 x 4096 x 7168 (2.2 TB/s with launch and fill), no slower than 128
// split units; 0.7 before made the chooser split K there for a 7% loss.
constexpr double kFullBandwidthShare = 0.5;
// docs/perf.md W1 v4: at M = 4096, once wave quantization is counted, 128-, 192- and 256-wide
// tiles sustain the same tensor rate (4096x4096x7168: 221 / 247 / 225 us for 8 / 9 / 8
// tile-rounds of 128x128 work; 4096x2112x7168: 134 / 120 / 162 us for 5 / 4.5 / 6). The narrow
// tile pays its promotion adds over fewer MMAs.
// W1 v5: with promotion every two K blocks the 128/192/256 tiles run 7-16% faster at
// M = 4096, depending on the board (4096x8192x8192 bn=256: 537 -> 462 us and 519 -> 481 us).
// W1 v6 (128 x 176 tiles): per tile round, t = c * K + overhead fits every measured shape to
// ~3% (H100, promote=2): bn=256 c = 6.71 ns per K, 1.7 us; bn=176 4.45 ns, 2.1 us; bn=192 ~5.12
// ns. Per FLOP the 176 mainloop runs 3.5% faster than 256's (5 stages instead of 4, one partial
// instead of two parts) and pays more per tile, so it wins on long K and where 256 leaves the
// last wave empty (4096 x 7168 x 16384: 751 vs 781 us; 8192^3: 904 vs 928) and loses on short K.
// W1 v21 measured every class again on the kernels of W1 v20 (109 shapes, M = 256 ... 4096, each
// compiled tile timed beside the pick). Per K block of 128 x 128 output, over unsplit units
// that fill at least a wave, relative to the overlapped 256-wide tile (kOverlapEfficiency): the
// 128-wide tile promoting every block 0.953, every two blocks 0.879 (its double-buffered mainloop is
// the per-block one: promoting every two ran 6-13% slower, median by M); 176-wide 0.948; 192-wide
// 0.909; 128 x 64 0.666. The 64-row tiles and the wide tiles promoting every block were not
// re-measured.
// W1 v27 measured the narrow 128-row tiles at four tile rows and more (M = 512, 1024, 2048 over 22
// W7 pairs, each beside the unsplit 128-wide tile in one process): per K block of output, the
// geomean of their rate over the 128-wide tile's is 0.979 (112 wide), 0.998 (96) and 0.828 (80).
double tile_efficiency(int block_m, int block_n, int promote_every) {
  if (block_m == 64) return 0.40;  // one consumer warpgroup: nobody's MMAs cover its promotion adds
  if (block_n == 64) return 0.666;
  if (promote_every != 2) {
    switch (block_n) {
      case 128: return 0.953;
      case 112: return 0.953 * 0.979;
      case 96: return 0.953 * 0.998;
      case 80: return 0.953 * 0.828;
      default: return 0.80;
    }
  }
  switch (block_n) {
    case 128: return 0.879;
    case 176: return 0.948;
    case 192: return 0.909;
    default: return 0.93;
  }
}
// Fraction of the DRAM bandwidth a tile streams at small M: the double-buffered tiles (64, 128)
// keep a K block queued while they promote; the serial ones (192, 256) do not. Measured: 64 x
// 32768 x 512 took 9.8 us with 128 and 12.0 us with 192 (docs/perf.md W1 v2, v4).
double stream_efficiency(int block_n) { return block_n <= 128 ? 1.0 : 0.85; }
// Where the chooser overlaps each unit's epilogue with the next unit's first MMAs
// (Fp8GemmConfig::overlap): the measured wins only (docs/perf.md W1 v11). The 256-wide tile
// promoting every two K blocks, unsplit, gained 4-9% at M = 4096 (K = 512 ... 8192) and 3.8% at
// 8192^3; the 128-wide tile promoting every block gained 5-6% at M = 64 and 128 (N = 32768,
// K = 512). The 176-wide tile tied and the 128-wide one promoting every two blocks lost 2-10%
// at M = 4096, so neither is compiled.
bool overlap_pays(int block_m, int block_n, int promote_every, int splits, int64_t m) {
  if (block_m != 128 || splits != 1) return false;
  return (block_n == 256 && promote_every == 2 && m > 64) || (block_n == 128 && promote_every == 1 && m <= 128);
}
// The overlapped 256-wide tile, fitted at M = 4096 and 8192 (W1 v11): per round it runs like
// the 176-wide tile's mainloop (0.963 of the model's rate) and hides all but ~0.3 us of its
// epilogue (1.5 us without).
constexpr double kOverlapEfficiency = 0.963;
constexpr double kOverlapUnitOverheadUs = 0.3;
// A CTA's last unit has no next unit to hide its epilogue under: it pays the plain overhead once
// (W1 v21: in one or two rounds the overlapped tile's overhead per round fits 1.9-2.2 us, against
// 0.8 at M >= 2048).
constexpr double kOverlapLastUnitUs = kUnitOverheadUs - kOverlapUnitOverheadUs;
// A second launch on the same stream (Fp8GemmConfig::head_cols): the gap between the kernels, the
// second one's prologue and fill, and A read again. Fitted in the model's own microseconds to the
// head-against-one-launch ratios of 13 shapes (docs/perf.md W1 v22: 2.0 put a head ahead where it
// ran 2-7% slower).
constexpr double kSecondLaunchUs = 6.0;
// Stream-K (Fp8GemmConfig::stream_k): what the tail costs beyond its K blocks at the tile's rate,
// a unit's overhead per piece and one fix-up: the partials' stores and the walk's placing.
constexpr double kStreamKUs = 0.5;
// Each piece of a tile past three: the finisher reads one more partial. W1 v23: with up to three
// pieces a tile the tail cost 2-6 us more than its K blocks at M = 1024 (the charges above: 5); at
// 1024 x 2112 x 7168, runs of 3-4 K blocks and 16 pieces a tile, 15 us.
constexpr double kStreamKPartUs = 0.8;
}  // namespace model

// A grid that gives every CTA the same number of units, where the last round would be partial
// and units are long (at least 32 K blocks): ceil(units / rounds) CTAs run the same rounds as one
// per SM, without a last round that leaves some SMs idle. Measured against one CTA per SM
// (docs/perf.md W1 v12, same process): 8192^3 1.004-1.014 (four runs), 4096 x 8192 x 8192
// 0.999-1.008, 4096 x 4096 x 7168 and 4096 x 7168 x 16384 1.002-1.003, the 2:4 sparse kernel
// 1.009; short units lose (4096 x 24576 x 1536 0.972, 4096 x 32768 x 512 0.982), and so did the
// 176-wide tile at 4096 x 2112 x 7168 (0.995, three rounds), so the choosers apply it to the
// 256-wide tile. 0 = one per SM.
int balanced_grid(int units, int sm_count, int unit_k_blocks) {
  if (unit_k_blocks < 32 || units <= sm_count || units % sm_count == 0) return 0;
  const int rounds = (units + sm_count - 1) / sm_count;
  return (units + rounds - 1) / rounds;
}

// A wave of S CTAs walking g tile rows at a time touches g*BM rows of A and (S/g)*BN rows of B;
// their sum (the bytes a wave pulls through L2) is smallest at g = sqrt(S * BN / BM).
int raster_group_for(int sm_count, int block_m, int block_n) {
  const int g =
      static_cast<int>(std::lround(std::sqrt(static_cast<double>(sm_count) * block_n / static_cast<double>(block_m))));
  return std::max(1, std::min(g, kMaxRasterGroup));
}

int k_blocks(int64_t k) { return static_cast<int>((k + 127) / 128); }
int promotion_groups(int64_t k, int promote_every) {
  return (k_blocks(k) + promote_every - 1) / std::max(1, promote_every);
}

TileSchedule tile_schedule(int64_t m, int64_t n, int k_blocks, int block_m, int block_n, int cluster, int splits,
                           int raster_group, int sm_count, int uneven_grid) {
  TileSchedule s;
  s.tiles_m = static_cast<int>(((m + block_m - 1) / block_m + cluster - 1) / cluster);
  s.tiles_n = static_cast<int>((n + block_n - 1) / block_n);
  s.k_blocks = k_blocks;
  s.splits = splits;
  s.group_m = raster_group > 0 ? raster_group : std::max(1, raster_group_for(sm_count, block_m, block_n) / cluster);
  s.group_m = std::max(1, std::min({s.group_m, s.tiles_m, kMaxRasterGroup}));
  if (uneven_grid > 0) s.tiles_n = uneven_tiles_n(m, n, block_m, block_n, uneven_grid);
  return s;
}

UnevenColumnLayout uneven_layout(int64_t n, int block_n, const TileSchedule& s) {
  constexpr int kTrim = UnevenColumnLayout::kTrim;
  UnevenColumnLayout u;
  u.width = block_n;
  u.wide = static_cast<int>((n - static_cast<int64_t>(s.tiles_n) * (block_n - kTrim)) / kTrim);
  u.n = static_cast<int>(n);
  u.columns = FastDiv(s.tiles_n);
  return u;
}

int uneven_tiles_n(int64_t m, int64_t n, int block_m, int block_n, int grid) {
  constexpr int kTrim = UnevenColumnLayout::kTrim;
  if (n % kTrim != 0 || n < block_n || block_n <= kTrim || n > INT_MAX / 2 || m <= 0 || grid <= 0) return 0;
  const int64_t tiles_m = (m + block_m - 1) / block_m;
  int best = 0;
  double best_work = 0.0;
  for (int64_t c = (n + block_n - 1) / block_n; c * (block_n - kTrim) <= n; ++c) {
    const double work = static_cast<double>((tiles_m * c + grid - 1) / grid) * static_cast<double>(n) / c;
    if (best == 0 || work < best_work * (1.0 - 1e-9)) {
      best = static_cast<int>(c);
      best_work = work;
    }
  }
  return best;
}


StreamKWalk stream_k_walk(int64_t m, int64_t n, int64_t k, const Fp8GemmConfig& c, int sm_count) {
  const TileSchedule s = tile_schedule(m, n, promotion_groups(k, c.promote_every), c.block_m, c.block_n, 1, 1,
                                       c.raster_group, sm_count, 0);
  return StreamKWalk::of(s, c.grid > 0 ? c.grid : sm_count, c.stream_k);
}

int64_t tile_count(int64_t m, int64_t n, int block_m, int block_n) {
  // Saturated at INT64_MAX: the size queries call it with any shape a caller passes.
  const int64_t tm = m / block_m + (m % block_m != 0), tn = n / block_n + (n % block_n != 0);
  int64_t tiles = 0;
  return check::mul(tm, tn, &tiles) ? tiles : INT64_MAX;
}

// A candidate's estimate: the slowest of its terms, and which one binds.
static void settle(Candidate* c) {
  c->t_total_us = std::max({c->t_compute_us, c->t_memory_us, c->t_stream_us});
  c->bound = c->t_total_us == c->t_compute_us ? "tensor" : c->t_total_us == c->t_memory_us ? "memory" : "stream";
}

// The tiles the model does not score at this M (where they were measured to lose, or not
// measured), unsplit: the narrow 128-row tiles (80, 96, 112) at one tile row, at three 64-row rows,
// at three 128-row rows and past eight (M <= 192, 256 < M <= 384, M > 1024), and 64 x 112 outside
// two tile rows it fills 90-100% of a wave with. few_rows_order may still take them first at
// 128 < M <= 384.
static bool unscored_tile(int64_t m, int block_m, int block_n, int splits, int units, int sm_count) {
  // Narrow 128-row tiles:
  //  - at two tile rows whose second is more than half full (192 < M <= 256) each CTA streams its
  //    own B rows from DRAM, and N / 64 columns of them make one whole wave where the 128-wide tile
  //    leaves it 55-85% full or splits K into a second round: 1.04x over the changed picks at
  //    M = 224 and 256, up to 1.39x (docs/perf.md W1 v24);
  //  - at four to eight tile rows (384 < M <= 1024) they run about as fast per K block as the
  //    128-wide tile (tile_efficiency) and fill the waves at N where 128 leaves the last one
  //    part-empty: 1.028x over the 22 W7 pairs at M = 512, 1024 and 2048, up to 1.25x (W1 v27).
  //    Past eight rows they lost, held out: 0.81-1.04x at M = 2560 and 3000, mixed at 1280 and
  //    1536, where long K makes the GEMM compute-bound and their L2 bytes per FLOP tell.
  // At M <= 128 they are unmeasured as picks. At 128 < M <= 192 and 256 < M <= 384 few_rows_order
  // takes them, unsplit, where they make one wave (W1 v26, v28).
  if (block_m == 128 && block_n > 64 && block_n < 128 && (m <= 192 || (m > 256 && m <= 384) || m > 1024)) return true;
  // 64 x 112: e.g. N = 7168 (128 units where 128 x 64 tiles give 112). At 64 x 24576 x 1536 and
  // 64 x 7168 x 2048 it lost 2-7% (docs/perf.md W1, "what cuBLASLt runs, and a 64 x 112 tile").
  return block_m == 64 && block_n == 112 &&
         !(m > 64 && m <= 128 && splits == 1 && units <= sm_count && 10 * units >= 9 * sm_count);
}

// Three 64-row tile rows (128 < M <= 192; two 128-row rows, the second at most half full). Over 22
// N x K pairs of the W7 suites at M = 144, 176 and 192 (docs/perf.md W1 v26), unsplit tiles beat
// the model's picks, which split K or left half of the last 128-row tile row idle:
//  - where an unsplit tile's units fill 70-100% of one wave, each CTA's own stream binds, and the
//    tile with the fewest bytes per K block ((rows + columns) x 128) ran fastest at every pair
//    (64 x 112 at N = 4096 and 4608, 128 x 80 at 5120, 128 x 96 at 6144, 128 x 112 at 7168, 128 x 64
//    at 3584, 64 x 64 at 2112 (75% of the wave); 128 x 176 at 10240): up to 1.40x the model's pick
//    (x 5120 x 13824). Not the 256-wide tile, whose two column parts retire one by one: as the one
//    wave at N = 16384 it ran 3-5% slower than the model's two waves of 128 x 128 (held out);
//  - at four waves of 64 x 112 or more (N > 19600 at three rows), 64 x 112, whose three rows waste
//    at most a third of the MMAs where 128-row tiles waste up to half: 1.00-1.11x; held out
//    0.93-1.08x, 1.02x over 15 shapes.
// Two 128-row tile rows, the second more than half full (192 < M <= 256; W1 v29): the same
// one-wave order, 64-row tiles (four rows) included. At M = 224 and 256 over the 22 W7 pairs and at
// 240 over 25 pairs of models in no suite it took the fastest tile, or one within 2%, wherever a
// tile makes one wave, where the model's picks split K: 1.04-1.43x at N = 2048-5120 (128 x 64 at
// 4096, 64 x 64 at 2048 and 2112, 64 x 112 at 3072 and 3584, 128 x 80 at 4608 and 5120).
// Three 128-row tile rows (256 < M <= 384; W1 v28): the same one-wave order over the 128-row
// tiles. At M = 320 and 384 over the 22 W7 pairs it took the fastest tile, or one within 3%, at
// every pair that has a one-wave tile but two (128 x 192 at 8192, where 128 x 96 in two waves ran
// 6-7% faster): 128 x 96 at N = 3584 and 4096 (up to 1.37x), 128 x 112 at 4608, 128 x 128 at 5120,
// 128 x 176 at 7168. The 64-row tiles, five or six rows there, are not taken: at 300 and 352 x 2048
// x 10944 64 x 112 ran 1.2-1.4x slower than the fastest tile.
// Elsewhere the model's order stands. The tiles `unscored_tile` admits only for this rule (unsplit)
// are kept out of the model's sort, whose 3% ties are not transitive, so they cannot reorder it, and
// join the list only where the rule puts them first.
static void few_rows_order(std::vector<Candidate>& out, const std::vector<Candidate>& extras, int64_t m,
                           int sm_count) {
  const bool rows_of_128 = m > 256;
  auto plain_unsplit = [](const Candidate& c) {
    return c.config.splits == 1 && c.config.stream_k == 0 && c.config.head_cols == 0 && !c.config.uneven;
  };
  auto one_wave = [&](const Candidate& c) {
    return plain_unsplit(c) && c.config.block_n <= 192 && (!rows_of_128 || c.config.block_m == 128) &&
           c.units <= sm_count && 10 * c.units >= 7 * sm_count;
  };
  auto many_waves = [&](const Candidate& c) {
    return m <= 192 && plain_unsplit(c) && c.config.block_m == 64 && c.config.block_n == 112 && c.units >= 4 * sm_count;
  };
  // The model's candidates that fill one wave, and the extras that do, fewest bytes per CTA first;
  // failing those, 64 x 112 at four waves or more; then the model's order, as it sorted them.
  auto first_other = std::stable_partition(out.begin(), out.end(), one_wave);
  std::vector<Candidate> front(out.begin(), first_other);
  for (const auto& c : extras)
    if (one_wave(c)) front.push_back(c);
  if (!front.empty()) {
    std::stable_sort(front.begin(), front.end(), [](const Candidate& a, const Candidate& b) {
      return a.config.block_m + a.config.block_n < b.config.block_m + b.config.block_n;
    });
    out.erase(out.begin(), first_other);
  } else {
    for (const auto& c : extras)
      if (many_waves(c)) front.push_back(c);
  }
  out.insert(out.begin(), front.begin(), front.end());
}


// The model charges a split its fix-up on the DRAM term only and every K block at the tensor rate of
// a 64-row tile, so at M <= 128 it split K where the split's own latency costs more than the K
// blocks it saves: at K <= 4096 with 24-48 unsplit CTAs the unsplit tile ran 1.02-1.21x faster (1 x
// 2048 x 2048: 64 x 64 split in two 5.5 us, unsplit 4.66), at 1024 x 1024 1.5x faster than four
// splits, and a 128 x 128 tile split in two at M = 72-128 ran 1.07-1.25x slower than 128 x 64
// unsplit (docs/perf.md W1 v31). The rule takes splits back and never adds them (more splits than
// the model's ran 0.75-0.95x); it leaves unsplit picks, wider tiles, more waves, stream-K and heads.
void order_one_round_small_m(std::vector<Candidate>& cands, int64_t m, int64_t n, int64_t k,
                             const RoundLatency& latency) {
  auto in_scope = [](const Candidate& c) {
    const Fp8GemmConfig& g = c.config;
    return g.stream_k == 0 && g.head_cols == 0 && !g.uneven && g.promote_every == 1 && !g.overlap &&
           g.block_n <= 128 && c.waves <= 1.0 && g.splits <= 4;
  };
  if (m > 128 || (latency.max_k > 0 && k > latency.max_k) || cands.empty() || cands.front().config.splits == 1)
    return;
  // A first choice split past one round: the unsplit one-round candidates compete, by the estimate
  // alone (what the family measured; a split of one round in its place was not).
  const bool past_one_round = latency.past_one_round && cands.front().waves > 1.0;
  if (!in_scope(cands.front()) && !past_one_round) return;
  const int max_splits = past_one_round ? 1 : cands.front().config.splits;
  const double bytes = static_cast<double>(m) * k + static_cast<double>(n) * k + 2.0 * static_cast<double>(m) * n;
  const double dram_us = bytes / (latency.dram_tbs * 1e6);
  auto estimate = [&](const Candidate& c) {
    const int work_rows = m <= 64 ? 64 : c.config.block_m;
    const int unit_kb = (k_blocks(k) + c.config.splits - 1) / c.config.splits;
    const double stream_us =
        unit_kb * std::max((work_rows + c.config.block_n) * 128.0 / (latency.cta_stream_gbs * 1e3), latency.kb_floor_us);
    const double q = latency.norm;
    return latency.round_us + (c.config.splits > 1 ? latency.split_us : 0.0) +
           std::pow(std::pow(stream_us, q) + std::pow(dram_us, q), 1.0 / q);
  };
  size_t best = 0;
  double best_us = past_one_round ? std::numeric_limits<double>::infinity() : estimate(cands.front());
  for (size_t i = 1; i < cands.size(); ++i) {
    if (!in_scope(cands[i]) || cands[i].config.splits > max_splits) continue;
    const double us = estimate(cands[i]);
    if (us < best_us) {
      best = i;
      best_us = us;
    }
  }
  if (best == 0) return;
  char why[112];
  std::snprintf(why, sizeof(why), "; one round at M <= 128: latency est %.1f us (%s)", best_us,
                past_one_round ? "block-scaled, splits past one round" : "W1 v31");
  cands[best].config.reason += why;
  std::rotate(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(best),
              cands.begin() + static_cast<std::ptrdiff_t>(best) + 1);
}

std::vector<Candidate> score_candidates(int64_t m, int64_t n, int64_t k, int sm_count, const ScoreOptions& options) {
  const bool few_rows = options.few_rows && m > 128 && m <= 384;
  std::vector<Candidate> out;
  std::vector<Candidate> extras;  // unscored tiles, unsplit, for few_rows_order only
  const double short_tile_stream_gbs = options.short_tile_stream_gbs;
  // Every compiled tile, once per promotion interval it has.
  const TileSpec* tiles = options.tiles;
  const int num_tiles = options.tiles ? options.num_tiles : 0;
  std::vector<std::pair<const TileSpec*, int>> kernels;
  for (int i = 0; i < num_tiles; ++i) {
    kernels.emplace_back(&tiles[i], 1);
    if (tiles[i].promote2) kernels.emplace_back(&tiles[i], 2);
  }
  for (const auto& [vp, promote] : kernels) {
    const TileSpec& v = *vp;
    const int cluster_splits = options.cluster_splits ? options.cluster_splits[vp - tiles] : 0;
    // Capped so tiles x splits (at most 16) stays an int; no real shape comes near it.
    const int tiles = static_cast<int>(std::min<int64_t>(tile_count(m, n, v.block_m, v.block_n), INT_MAX / 32));
    const int groups = promotion_groups(k, promote);
    // This kernel's config at a split count (the raster band from the device's SMs).
    auto candidate = [&](int splits) {
      Candidate c;
      c.config.block_m = v.block_m;
      c.config.block_n = v.block_n;
      c.config.stages = v.stages;
      c.config.splits = splits;
      c.config.promote_every = promote;
      c.config.raster_group = raster_group_for(sm_count, v.block_m, v.block_n);
      return c;
    };
    for (int splits = 1; splits <= std::min(groups, 16); ++splits) {
      const int units = tiles * splits;
      // Splitting only helps while it fills idle SMs.
      if (splits > 1 && units > 2 * sm_count) break;
      // Tiles the model does not score here; unsplit at two to four tile rows, few_rows_order decides.
      const bool extra = unscored_tile(m, v.block_m, v.block_n, splits, units, sm_count);
      if (extra && !(few_rows && splits == 1)) continue;
      Candidate c = candidate(splits);
      c.units = units;
      // Split within a cluster: whole clusters a wave, as many as the GPCs hold.
      const bool in_cluster = splits > 1 && splits <= cluster_splits && promote == 1;
      const int wave_ctas = !in_cluster                         ? sm_count
                            : options.capacity.ctas[splits] > 0 ? options.capacity.ctas[splits]
                                                               : std::max(splits, sm_count / splits * splits);
      c.waves = static_cast<double>(units) / wave_ctas;
      const double rounds = std::ceil(c.waves);
      const int unit_kb = (groups + splits - 1) / splits * promote;  // an odd K-block count pads a pair
      // At M <= 64 a 128-row tile loads an A box of at most 64 rows and only one consumer
      // warpgroup works (KernelParams::a_box_rows): it does the 64-row tile's MMAs and streams
      // its bytes.
      const int work_rows = m <= 64 ? 64 : v.block_m;
      const double unit_flops = 2.0 * work_rows * v.block_n * 128.0 * unit_kb;
      const bool overlap = model::overlap_pays(v.block_m, v.block_n, promote, splits, m);
      const bool overlap_256 = overlap && v.block_n == 256;
      const auto tile_efficiency = options.tile_efficiency ? options.tile_efficiency : model::tile_efficiency;
      const double efficiency =
          overlap_256 ? model::kOverlapEfficiency : tile_efficiency(work_rows, v.block_n, promote);
      const double unit_us = unit_flops / (model::kFp8TflopsPerSm * efficiency * 1e6);
      c.t_compute_us =
          rounds * (unit_us + (overlap_256 ? model::kOverlapUnitOverheadUs : model::kUnitOverheadUs)) +
          (overlap_256 ? model::kOverlapLastUnitUs : 0.0);
      const double out_bytes = static_cast<double>(m) * n * 2.0;
      const double partial_bytes =
          splits > 1 && !in_cluster ? 2.0 * tiles * splits * v.block_m * v.block_n * 4.0 : 0.0;
      const double bytes = static_cast<double>(m) * k + static_cast<double>(n) * k + out_bytes + partial_bytes;
      // DRAM time round by round: SMs that have no unit pull no bytes, so a short last round
      // cannot reach full bandwidth either.
      c.t_memory_us = 0.0;
      for (int left = units; left > 0; left -= wave_ctas) {
        const int in_round = std::min(left, wave_ctas);
        const double active = static_cast<double>(in_round) / sm_count;
        const double share = std::min(1.0, active / model::kFullBandwidthShare);
        c.t_memory_us +=
            bytes * in_round / units / (model::kDramTBs * 1e6 * share * model::stream_efficiency(v.block_n));
      }
      // Each CTA's own stream: its tile's A and B rows for its K range, every round. It binds where
      // B comes from DRAM as it is read (one or two tile rows); with more, the raster's
      // neighbours find most of it in L2, at a fraction of the latency.
      const int tiles_m = static_cast<int>((m + v.block_m - 1) / v.block_m);
      // At M <= 64 a 128-row tile runs one consumer warpgroup over an A box of at most 64 rows: it
      // streams as the 64-row tile does (block-scaled v6: 128 x 64 split in two ran 11.7 us at 64 x
      // 2112 x 7168 where the model, at the plain rate, put it ahead of 64 x 64 split in three, 10.2).
      const double stream_gbs =
          work_rows == 64 && short_tile_stream_gbs > 0.0 ? short_tile_stream_gbs : model::kSmStreamGBs;
      c.t_stream_us =
          tiles_m > 2 ? 0.0 : rounds * (work_rows + v.block_n) * 128.0 * unit_kb / (stream_gbs * 1e3);
      if (splits > 1) c.t_memory_us += in_cluster ? options.cluster_fixup_us : model::kSplitFixupUs;
      settle(&c);
      char reason[160];
      std::snprintf(reason, sizeof(reason), "model: %d units on %d SMs (%.2f waves), %s-bound, est %.1f us",
                    units, sm_count, c.waves, c.bound, c.t_total_us);
      c.config.reason = reason;
      // (It replaced the staggered consumers, lead=1, removed in docs/perf.md W1 v11: at
      // 4096 x 32768 x 512 it ran 157.1 us against the lead's 167.2.)
      if (overlap) {
        c.config.overlap = true;
        c.config.reason += "; overlap=1 (the next unit's first MMAs run under the epilogue)";
      }
      // The 256-wide tile only: the 176-wide one ran 0.995 with it at 4096 x 2112 x 7168 (v12).
      if (const int g = v.block_n == 256 ? balanced_grid(units, sm_count, unit_kb) : 0; g > 0) {
        c.config.grid = g;
        c.config.reason += "; grid=" + std::to_string(g) + " (the same number of units on every CTA)";
      }
      (extra ? extras : out).push_back(c);
      // Its uneven-columns twin (Fp8GemmConfig::uneven): more, narrower tiles per row. Scored
      // with the tiles' mean width (a 240-column tile costs 15/16 of a 256-column one: the wgmma
      // rate is linear in N) and its own rounds.
      // Long units only (as the balanced grid): on short K the kernel streams its output and the
      // twin ran 2-3% slower (4096 x 24576 x 1536, 4096 x 32768 x 512; docs/perf.md W1 v13).
      const int uneven_tn = overlap_256 && splits == 1 && unit_kb >= 32
                                ? uneven_tiles_n(m, n, v.block_m, v.block_n, sm_count)
                                : 0;
      if (uneven_tn > 0 && static_cast<int64_t>(uneven_tn) * v.block_n != n) {
        Candidate u = c;
        u.config.uneven = true;
        u.units = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(tiles_m) * uneven_tn, INT_MAX / 32));
        u.waves = static_cast<double>(u.units) / sm_count;
        const double width = static_cast<double>(n) / uneven_tn;
        u.t_compute_us = std::ceil(u.waves) * (unit_us * width / v.block_n + model::kOverlapUnitOverheadUs) +
                         model::kOverlapLastUnitUs;
        // Whole waves: the balanced grid's case never arises (and the layout spreads the wide
        // tiles over one CTA per SM).
        settle(&u);
        char why[200];
        std::snprintf(why, sizeof(why),
                      "model: %d units on %d SMs (%.2f waves), %s-bound, est %.1f us; overlap=1; uneven=1 (%d tiles "
                      "of 240/256 columns a row)",
                      u.units, sm_count, u.waves, u.bound, u.t_total_us, uneven_tn);
        u.config.reason = why;
        u.config.grid = 0;
        (extra ? extras : out).push_back(u);
      }
    }
    // Split only the last wave (Fp8GemmConfig::head_cols): the whole waves' worth of tile columns
    // unsplit, the rest split in a second launch, which pays its start and one fix-up. 128-row
    // tiles over more than two tile rows (two rows stream B from DRAM: the stream term's regime).
    const int64_t tiles_m64 = (m + v.block_m - 1) / v.block_m, tiles_n64 = (n + v.block_n - 1) / v.block_n;
    const int64_t head = v.block_m == 128 && tiles_m64 > 2 && tiles_m64 * tiles_n64 < INT_MAX / 32
                             ? (tiles_m64 * tiles_n64 / sm_count) * sm_count / tiles_m64
                             : 0;
    if (options.heads && head >= 1 && head < tiles_n64) {
      const int head_tiles = static_cast<int>(tiles_m64 * head);
      const int tail_tiles = static_cast<int>(tiles_m64 * (tiles_n64 - head));
      const double efficiency =
          (options.tile_efficiency ? options.tile_efficiency : model::tile_efficiency)(128, v.block_n, promote);
      const double rate = model::kFp8TflopsPerSm * efficiency * 1e6;
      const double head_us = std::ceil(static_cast<double>(head_tiles) / sm_count) *
                             (2.0 * 128 * v.block_n * 128.0 * groups * promote / rate + model::kUnitOverheadUs);
      for (int splits = 2; splits <= std::min(groups, 8); ++splits) {
        const int tail_units = tail_tiles * splits;
        const int unit_kb = (groups + splits - 1) / splits * promote;
        Candidate c = candidate(splits);  // a 128-row tile (the head's condition)
        c.config.head_cols = static_cast<int>(head);
        c.units = head_tiles + tail_units;
        c.waves = static_cast<double>(c.units) / sm_count;
        c.t_compute_us = head_us +
                         std::ceil(static_cast<double>(tail_units) / sm_count) *
                             (2.0 * 128 * v.block_n * 128.0 * unit_kb / rate + model::kUnitOverheadUs) +
                         model::kSplitFixupUs + model::kSecondLaunchUs;
        // A is read by both launches; the tail's partials go through the workspace.
        const double bytes = 2.0 * m * k + static_cast<double>(n) * k + static_cast<double>(m) * n * 2.0 +
                             2.0 * tail_units * 128.0 * v.block_n * 4.0;
        c.t_memory_us = bytes / (model::kDramTBs * 1e6 * model::stream_efficiency(v.block_n));
        c.t_stream_us = 0.0;
        settle(&c);
        char reason[200];
        std::snprintf(reason, sizeof(reason),
                      "model: %d units on %d SMs (%.2f waves), %s-bound, est %.1f us; head=%d (the first %d tile "
                      "columns unsplit, the rest split in a second launch)",
                      c.units, sm_count, c.waves, c.bound, c.t_total_us, c.config.head_cols, c.config.head_cols);
        c.config.reason = reason;
        out.push_back(c);
      }
    }
    // Stream-K over the last tiles (Fp8GemmConfig::stream_k): the whole waves before them as whole
    // tiles, the rest's K blocks evenly over every SM (sk=2: the last whole wave's too).
    const bool streams_k = options.stream_k && options.stream_k(v.block_m, v.block_n, promote);
    const int64_t all_tiles = tile_count(m, n, v.block_m, v.block_n);
    int sk1_head = -1;
    for (int sk = 1; streams_k && sk <= 2 && all_tiles > 0 && all_tiles < INT_MAX / 32 && groups * promote < INT_MAX / 2;
         ++sk) {
      Candidate c = candidate(1);
      c.config.stream_k = sk;
      c.config.grid = sm_count;
      const StreamKWalk walk = stream_k_walk(m, n, k, c.config, sm_count);
      // Nothing to deal out, or the same schedule as sk=1. Stacks of four tile rows or more only:
      // at two rows, runs that cross a column part-way cost 13-16 us more than their K blocks, and
      // the tail lost to the unsplit or split pick everywhere (docs/perf.md W1 v23); single tiles
      // (several raster bands) are unmeasured.
      if (walk.tail_stacks == 0 || walk.head_stacks == sk1_head || walk.rows < 4) continue;
      // Where the tail is the whole walk (fewer tiles than a wave) it ran 15% slower than the
      // unsplit or split picks at four rows too (512 x 3584 x 14336 and x 18944, W1 v23): only the
      // last wave is dealt out.
      if (walk.head_stacks == 0) continue;
      sk1_head = walk.head_stacks;
      const int kb = walk.k_blocks * promote;
      const int work_rows = m <= 64 ? 64 : v.block_m;
      const double efficiency =
          (options.tile_efficiency ? options.tile_efficiency : model::tile_efficiency)(work_rows, v.block_n, promote);
      const double kb_us = 2.0 * work_rows * v.block_n * 128.0 / (model::kFp8TflopsPerSm * efficiency * 1e6);
      const double head_rounds = static_cast<double>(walk.head_stacks / walk.lanes);
      const double run_kb = static_cast<double>(walk.q + (walk.r > 0 ? 1 : 0)) * promote;
      const double pieces = std::ceil(run_kb / kb) + 1.0;  // a run's pieces, at most
      // A tile's pieces, at most: its finisher reads all but its own (short runs: many).
      const double parts = walk.q > 0 ? std::ceil(static_cast<double>(walk.k_blocks - 1) / walk.q) + 1.0 : walk.k_blocks;
      c.units = walk.head_stacks * walk.rows + walk.lanes * walk.rows * static_cast<int>(pieces);
      c.waves = static_cast<double>(all_tiles) / sm_count;
      c.t_compute_us = head_rounds * (kb * kb_us + model::kUnitOverheadUs) + run_kb * kb_us +
                       pieces * model::kUnitOverheadUs + model::kSplitFixupUs + model::kStreamKUs +
                       std::max(0.0, parts - 3.0) * model::kStreamKPartUs;
      const int ctas = walk.lanes * walk.rows;
      const double partial_bytes = 2.0 * ctas * 2.0 * v.block_m * v.block_n * 4.0;
      const double bytes = static_cast<double>(m) * k + static_cast<double>(n) * k + static_cast<double>(m) * n * 2.0 +
                           partial_bytes;
      c.t_memory_us = bytes / (model::kDramTBs * 1e6 * std::min(1.0, static_cast<double>(ctas) / sm_count) *
                               model::stream_efficiency(v.block_n));
      c.t_stream_us = 0.0;  // four tile rows or more: B comes from L2 (the stream term's regime is two)
      settle(&c);
      char reason[220];
      std::snprintf(reason, sizeof(reason),
                    "model: %d whole stacks of %d tiles, then %d stacks' K blocks over %d lanes (%.0f each), "
                    "%s-bound, est %.1f us; sk=%d (stream-K)",
                    walk.head_stacks, walk.rows, walk.tail_stacks, walk.lanes, run_kb, c.bound, c.t_total_us, sk);
      c.config.reason = reason;
      out.push_back(c);
    }
  }
  // Ties (within 3%) go to fewer splits, then to per-block promotion (cuBLASLt's error), then to
  // the lower estimate (beyond 1%), then to the wider tile (less L2 traffic per FLOP) -- but not
  // to 256 on memory-bound shapes, where it leaves SMs without a tile and is unmeasured.
  auto width_rank = [](const Candidate& c) {
    return c.bound[0] != 't' && c.config.block_n > 192 ? 0 : c.config.block_n;
  };
  std::stable_sort(out.begin(), out.end(), [&](const Candidate& a, const Candidate& b) {
    if (std::fabs(a.t_total_us - b.t_total_us) > 0.03 * std::min(a.t_total_us, b.t_total_us))
      return a.t_total_us < b.t_total_us;
    // Stream-K ties as a split: its tail splits tiles.
    const int a_splits = a.config.stream_k ? 2 : a.config.splits, b_splits = b.config.stream_k ? 2 : b.config.splits;
    if (a_splits != b_splits) return a_splits < b_splits;
    if (a.config.promote_every != b.config.promote_every) return a.config.promote_every < b.config.promote_every;
    // Same split and promotion: the estimate decides down to 1% (176 vs 256 at 8192^3 is 2.8%
    // in the model and 2.6% measured), then the wider tile.
    if (std::fabs(a.t_total_us - b.t_total_us) > 0.01 * std::min(a.t_total_us, b.t_total_us))
      return a.t_total_us < b.t_total_us;
    // Bandwidth-bound ties go to more units first (more SMs streaming): at 64 x 24576 x 1536 the
    // 64 x 112 tile (220 units) tied the 64 x 64 one (384) in the model and ran 2-3% slower
    // (docs/perf.md W1, the 64 x 112 tile; three interleaved rounds).
    if (a.bound[0] != 't' && b.bound[0] != 't' && a.units != b.units) return a.units > b.units;
    // The same width and units in another ring: at M <= 64 the 128-row tile (an A box of at most
    // 64 rows, 8 stages at bn = 64) and the 64-row tile (13 stages) do the same work. DRAM-bound, the
    // 128-row tile ran faster (64 x 7168 x 16384: 44.0 vs 45.3 us; 64 x 24576 x 1536: 16.9 vs
    // 17.1; 64 x 7168 x 2048: 8.3 vs 8.4); with few units, each CTA's own stream binding, the
    // deeper ring did (64 x 4096 x 7168: 13.7 vs 14.4), two interleaved rounds each
    // (docs/perf.md W1, "small-M tile ties by what binds"). Elsewhere (unmeasured) the deeper
    // ring, as before.
    if (a.config.block_n == b.config.block_n && a.units == b.units && a.config.block_m != b.config.block_m &&
        std::strcmp(a.bound, b.bound) == 0)
      return a.bound[0] == 'm' ? a.config.block_m > b.config.block_m : a.config.stages > b.config.stages;
    return width_rank(a) > width_rank(b);
  });
  if (few_rows) few_rows_order(out, extras, m, sm_count);
  if (options.small_m) order_one_round_small_m(out, m, n, k, *options.small_m);
  return out;
}

}  // namespace lowbit::gemm
