// lowbit's version: the one place it is written (CMakeLists.txt and the Python package read it
// from here). Semantic versioning: MINOR grows with new API, PATCH with fixes.
#pragma once

#define LOWBIT_VERSION_MAJOR 0
#define LOWBIT_VERSION_MINOR 1
#define LOWBIT_VERSION_PATCH 0
// One number for comparisons: MAJOR * 10000 + MINOR * 100 + PATCH.
#define LOWBIT_VERSION (LOWBIT_VERSION_MAJOR * 10000 + LOWBIT_VERSION_MINOR * 100 + LOWBIT_VERSION_PATCH)

namespace lowbit {

// "MAJOR.MINOR.PATCH" of the library that was linked (which may differ from this header's).
const char* version();

}  // namespace lowbit
