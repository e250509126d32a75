// The function each generated kernel translation unit defines (CMakeLists.txt,
// lowbit_variant_table): variant_launcher_<line>() in the family's namespace, returning the
// launcher of VariantOf<line> (the family's variant_launch.cuh defines VariantOf and VariantLauncher:
// launch, shared memory, and the CTAs resident in clusters of a given size).
#pragma once

#define LOWBIT_DEFINE_VARIANT(ns, line)                                                           \
  namespace ns {                                                                                  \
  const VariantLauncher& variant_launcher_##line() {                                              \
    static constexpr VariantLauncher l{&VariantOf<line>::launch, VariantOf<line>::T::kSmemBytes,   \
                                       &VariantOf<line>::resident};                                \
    return l;                                                                                     \
  }                                                                                               \
  }
