#include "lowbit/version.h"

namespace lowbit {

#define LOWBIT_STR2(x) #x
#define LOWBIT_STR(x) LOWBIT_STR2(x)

const char* version() {
  return LOWBIT_STR(LOWBIT_VERSION_MAJOR) "." LOWBIT_STR(LOWBIT_VERSION_MINOR) "." LOWBIT_STR(LOWBIT_VERSION_PATCH);
}

}  // namespace lowbit
