#pragma once
// The processes of one training run and the few collective operations the
// trainer needs. One process is a world of one (no MPI at all); under mpirun or
// srun the world is MPI_COMM_WORLD (train/mpi_communicator.cpp).
//
// Every floating-point reduction here has a fixed association that does not
// depend on MPI's choice of algorithm, so a run's bits depend only on the data
// and the rank count's place in that association (see sum_tree).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shamn {

// A Communicator::sum_tree in flight.
class PendingSum {
 public:
  virtual ~PendingSum() = default;
  // Moves the transfers on and does the additions whose halves have arrived,
  // without waiting. True once the sum is complete.
  virtual bool progress() = 0;
  // Returns when the sum is complete; a partner that does not answer within the
  // communicator's deadline is named in the error.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool is_root() const { return rank() == 0; }

  // Returns once every rank has called it (rank 0 waits for each by name, so a rank
  // that died or stalled is named in the error).
  virtual void check_in(const char* what) = 0;
  // Element-wise sum over ranks, left in `data` on every rank. The sum is a
  // balanced binary tree over the ranks in rank order: for 4 ranks
  // (r0 + r1) + (r2 + r3), for 8 ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)).
  // Rank counts that are powers of two only (checked by the trainer).
  void sum_tree(float* data, size_t n) { start_sum_tree(data, n, 0)->wait(); }
  // The same sum, started and left in flight: `data` stays the caller's, untouched
  // until the sum completes. Sums in flight at once need distinct tags (0 to 4095);
  // every rank starts the same sums with the same tags, in any order.
  virtual std::unique_ptr<PendingSum> start_sum_tree(float* data, size_t n, int tag) = 0;
  // Every rank's `mine` (the same length on every rank), concatenated in rank order.
  virtual std::vector<double> all_gather(const std::vector<double>& mine) = 0;
  virtual std::vector<uint8_t> all_gather_bytes(const std::vector<uint8_t>& mine) = 0;
  // Element-wise maximum of small integer flags (exact, so order-free).
  virtual void max_flags(std::vector<uint8_t>& flags) = 0;
  // Rank 0's bytes to every rank (the others' `data` is resized to match).
  virtual void broadcast(std::vector<uint8_t>& data) = 0;
  virtual void broadcast(void* data, size_t bytes) = 0;
  // Ends every rank's process at once (MPI_Abort); a world of one just exits.
  [[noreturn]] virtual void abort(int status) = 0;
};

// The world this process belongs to: MPI's when a launcher started it (mpirun,
// srun), else a world of one. MPI is initialised on the first call and finalised
// at exit. Never null.
Communicator& world();

// Whether this build can train across processes (built with MPI).
bool mpi_available();

// After an error on this rank: ends every rank of a run of several at once (so
// none waits for this one until the timeout); a world of one returns.
void abort_all_ranks_on_error(int status);

// Each rank's `text` (any length), gathered on every rank in rank order.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& text);

}  // namespace shamn
