// The function each generated kernel translation unit defines (CMakeLists.txt,
// lowbit_variant_table): variant_launcher_<line>() in the family's namespace, returning the
// launcher of VariantOf<line> (the family's variant_launch.cuh defines VariantOf and VariantLauncher).
#pragma once

#define LOWBIT_DEFINE_VARIANT(ns, line)                                                           \
  namespace ns {                                                                                  \
  const VariantLauncher& variant_launcher_##line() {                                              \
    static constexpr VariantLauncher l{&VariantOf<line>::launch, VariantOf<line>::T::kSmemBytes}; \
    return l;                                                                                     \
  }                                                                                               \
  }
