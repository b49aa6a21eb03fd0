//===- HeapRetention.cpp - keep freed heap memory in the process ----------===//

#include "HeapRetention.h"

#include <cstdlib>
#include <mutex>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace moe_rt::cpu {

void retainFreedHeapMemory() {
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef __GLIBC__
    if (std::getenv("MALLOC_TRIM_THRESHOLD_") ||
        std::getenv("MALLOC_MMAP_THRESHOLD_"))
      return;
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
  });
}

} // namespace moe_rt::cpu
