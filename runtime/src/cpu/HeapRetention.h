//===- HeapRetention.h - keep freed heap memory in the process --*- C++ -*-===//
//
// The CPU kernels and ops allocate their temporaries per call (scratch
// rows, packed tokens, attention intermediates: 64 KiB to a few MiB). With
// glibc's defaults a freed block at the top of the heap above 128 KiB goes
// back to the kernel (trim) and blocks above the dynamic mmap threshold
// are mmapped, so the next step faults the same pages in again, zeroed: a
// training step paid ~10 % of its time in page faults and clearing
// (perf, issue 12). The first CPU stream therefore raises the trim
// threshold to 1 GiB and fixes the mmap threshold at 32 MiB: freed memory
// stays in the process (its RSS stays at its peak, which a training loop
// reaches again every step anyway). A user who sets MALLOC_TRIM_THRESHOLD_
// or MALLOC_MMAP_THRESHOLD_ keeps their values. No effect off glibc.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RT_SRC_CPU_HEAPRETENTION_H
#define MOE_RT_SRC_CPU_HEAPRETENTION_H

namespace moe_rt::cpu {

/// Once per process; later calls do nothing.
void retainFreedHeapMemory();

} // namespace moe_rt::cpu

#endif // MOE_RT_SRC_CPU_HEAPRETENTION_H
