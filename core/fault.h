#pragma once
// Faults on purpose, for crash tests that do not depend on timing. The
// environment variable SHAMN_FAULT names where the process fails:
//
//   SHAMN_FAULT=<site>:<n>[:<action>][,<site>:<n>[:<action>]...]
//
// At the n-th pass (counting from 1) through <site>, <action> happens: `kill`
// (the default) sends the process SIGKILL, so nothing after it runs, as after a
// power cut or the OOM killer; `enospc` or `eio` makes the operation at the site
// fail with that errno, through the same error path a real full disk or I/O
// error takes; `stall` stops the process (SIGSTOP) as a hung machine would. For
// a `.bytes` site n is a byte offset instead: the fault strikes
// once n bytes of that file have been written (the first n bytes reach the disk).
//
// Sites are <kind>.<stage> for every file written atomically (core/atomic_file.h):
//   <kind>.bytes    n bytes written (files written through AtomicFile::write)
//   <kind>.tensor   the n-th dataset written (HDF5 files: checkpoint, model, grads;
//                   HDF5 writes their bytes itself, so they have no .bytes site)
//   <kind>.fsync    before the file's fsync
//   <kind>.rename   after the fsync, before the rename onto the real name
//   <kind>.dirsync  after the rename, before the directory's fsync
// kinds: checkpoint (training checkpoints), model (model-only checkpoints),
// grads (`shamn loss --grads`), tokens (token files), tokenizer, shq (exported
// models), result (a sweep point's result.json), text (other small files: a
// run's config.toml, sweep reports, traces), metrics (the metrics file rewritten
// on resume), best (a new best's step checkpoint where it is copied from best.h5,
// which is written first, not linked). And six more sites:
//   metrics.append  the n-th record appended to metrics.jsonl (kill: after half the line)
//   best.hardlink   before the step name of a new best.h5 is made a hard link to it
//                   (enospc, eio: as on a file system without hard links, the
//                   step checkpoint is then a copy)
//   best.link       the step name's temporary link made, before it is renamed into place
//   train.start     the n-th start of a training run in this process, before rank 0
//                   loads or initialises the weights (the other ranks wait for them)
//   train.exchange  the n-th step's gradient exchange, once every rank has sent its part
//                   (data-parallel runs only)
//   serve.step      the n-th batched step of `shamn serve` (eio, enospc: its forward
//                   fails as a model error would, ending the step's requests)
//
// Unset, each site costs a load and a branch on one global flag.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shamn::fault {

namespace detail {
extern bool g_armed;
}

inline bool armed() { return detail::g_armed; }

// Throws InputError naming SHAMN_FAULT if the variable is set but malformed or
// names an unknown site; the CLI calls it at start so a typo never goes unnoticed.
void check_environment();

// Replaces the faults (the SHAMN_FAULT syntax; "" disarms) and resets the pass
// counts, for tests inside one process.
void set_for_testing(const std::string& spec);

// One pass through `site`: returns 0 to carry on, or the errno the operation at
// the site must now fail with. Does not return when the action is kill.
int pass(std::string_view site);

// The same pass in two halves, for sites that do part of their work first (a
// torn write): due() counts the pass and says whether a fault strikes at it;
// strike() then acts as pass() would.
bool due(std::string_view site);
int strike(std::string_view site);

// For `.bytes` sites: a write of `bytes` bytes is about to go to a file that
// already holds `offset`. Returns how many of them may be written before the
// fault strikes (all of them when none falls inside), and whether it strikes
// after those: then the caller writes them and calls strike(site).
struct ByteFault {
  size_t allowed;
  bool strikes;
};
ByteFault bytes(std::string_view site, uint64_t offset, size_t bytes);

}  // namespace shamn::fault
