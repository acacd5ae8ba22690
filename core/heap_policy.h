#pragma once
// How the C library's allocator hands memory back to the kernel, set by a
// program's main and, for a server, its command (the library itself never
// changes it).

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

// For a long-running server whose threads allocate in bursts (a scored
// prompt's response, tens of MiB, in whichever of glibc's 8 arenas a core the
// HTTP thread has): an arena keeps at most `bytes` of freed memory at its top
// rather than 256 MiB, which up to 16 arenas on 2 cores had each kept of their
// own bursts. Blocks stay in the heap (the mmap threshold is unchanged), so a
// burst faults its pages in again, once. The same exceptions as above.
void keep_at_most_freed_per_arena(int bytes);

}  // namespace shamn
