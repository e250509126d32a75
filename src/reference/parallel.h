// The CPU oracles' one threading helper.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace lowbit::reference {

// Runs row(r) for every r in [0, m) on up to 16 threads.
template <class Row>
void parallel_rows(int64_t m, const Row& row) {
  const int threads = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t r = t; r < m; r += threads) row(r);
    });
  for (auto& th : pool) th.join();
}

}  // namespace lowbit::reference
