// The chooser's answers, memoized per call signature: a cost model that scores ~100 candidates
// took 42-72 us of host time per call, as long as the GEMM itself at decode sizes. A key holds
// everything the choice depends on (device, shape, epilogue, types, the caller's workspace);
// the value is the config the call runs. Thread-safe (readers share a lock); at kCapacity
// entries the cache starts over, so a server that sees every M keeps a bounded table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "lowbit/status.h"

namespace lowbit {

// A trivially copyable key of int64 fields, hashed and compared bytewise.
template <int kFields>
struct ChoiceKey {
  int64_t f[kFields];
  bool operator==(const ChoiceKey& o) const { return std::memcmp(f, o.f, sizeof(f)) == 0; }
};

template <int kFields>
struct ChoiceKeyHash {
  size_t operator()(const ChoiceKey<kFields>& k) const {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < kFields; ++i) {
      h ^= static_cast<uint64_t>(k.f[i]) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

template <int kFields, class Value>
class ChoiceCache {
 public:
  static constexpr size_t kCapacity = 4096;
  bool find(const ChoiceKey<kFields>& key, Value* out) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    const auto it = map_.find(key);
    if (it == map_.end()) return false;
    *out = it->second;
    return true;
  }
  // The cached choice, or the first of `candidates` (best first) that `fits` -- then kept, its
  // reason text dropped (the cache copies the value on every call; the chooser's own entry point
  // gives the reason). `none` is the error when no candidate fits.
  template <class Candidates, class Fits>
  Status pick(const ChoiceKey<kFields>& key, Value* out, const Candidates& candidates, const Fits& fits,
              const char* none) {
    if (find(key, out)) return Status::Ok();
    for (auto c : candidates()) {
      Value v = c.config;
      if (!fits(&v)) continue;
      v.reason.clear();
      insert(key, v);
      *out = v;
      return Status::Ok();
    }
    return Status::Invalid(none);
  }
  void insert(const ChoiceKey<kFields>& key, const Value& value) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    if (map_.size() >= kCapacity) map_.clear();
    map_[key] = value;
  }

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<ChoiceKey<kFields>, Value, ChoiceKeyHash<kFields>> map_;
};

}  // namespace lowbit
