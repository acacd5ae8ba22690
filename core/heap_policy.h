#pragma once
// How the C library's allocator hands memory back to the kernel, set once by
// a program's main (the library itself never changes it).

namespace shamn {

// glibc returns freed memory to the kernel eagerly: a block at or above its
// mmap threshold (which it raises as blocks are freed, up to 32 MiB) is
// unmapped when freed, and an arena whose free top passes the trim threshold
// shrinks. The next step's or prefill's buffers are then fresh pages, one
// page fault each; worker threads allocate from their own arenas, which
// shrink on every free of their top block, so a 2-thread prefill took 7x the
// page faults of a 1-thread one. This keeps blocks below 32 MiB in the heap
// and freed memory in the process up to 256 MiB, so the same buffers are
// reused. Does nothing where the user set the allocator's own variables
// (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_,
// GLIBC_TUNABLES) or the C library is not glibc.
void keep_freed_memory_in_process();

}  // namespace shamn
