// The MPI world (Open MPI 4.1 from Debian; any MPI-3 library will do).
//
// Every wait goes through one loop with a deadline (SHAMN_COMM_TIMEOUT seconds,
// default 600): a rank that died or stopped answering makes its partners fail
// with an error naming it instead of hanging. mpirun then ends the job.
// The C API only: mpi.h would otherwise pull in the removed MPI-2 C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/parallel.h"
#include "train/mpi_world.h"

namespace shamn {

namespace {

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

double comm_timeout_seconds() {
  const char* text = std::getenv("SHAMN_COMM_TIMEOUT");
  if (text == nullptr || *text == '\0') return 600;
  char* end = nullptr;
  const double s = std::strtod(text, &end);
  SHAMN_INPUT_CHECK(*end == '\0' && s > 0, "SHAMN_COMM_TIMEOUT='", text,
                    "' is not a positive number of seconds");
  return s;
}

void check_mpi(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  SHAMN_CHECK(false, what, " failed: ", std::string(text, static_cast<size_t>(length)));
}

// Messages larger than INT_MAX elements go in pieces.
constexpr size_t kMaxPiece = size_t{1} << 30;
// Tags: 1 and 2 for the small collectives through rank 0, from 16 up for sums.
constexpr int kSumTagBase = 16;

class MpiWorld;

// Recursive halving (reduce-scatter) then recursive doubling (all-gather), as in
// Rabenseifner's allreduce, as a state machine that progress() moves on without
// blocking. Round `bit` of the halving pairs rank r with r ^ bit and adds their
// halves, so the ranks are combined lowest bit first: (r0 + r1) + (r2 + r3). Each
// addition is a + b of two partial sums, and a + b == b + a in IEEE arithmetic,
// so it does not matter which partner does it.
class TreeSum final : public PendingSum {
 public:
  TreeSum(MpiWorld& world, float* data, size_t n, int tag);
  ~TreeSum() override;
  bool progress() override;
  void wait() override;

 private:
  struct Segment {
    size_t lo, hi;
  };
  void post_round();
  // Sends give[0, n_give) to `partner` while receiving n_take floats from it.
  void post_exchange(const float* give, size_t n_give, float* take, size_t n_take);

  MpiWorld& world_;
  float* data_;
  int tag_;
  int rank_, size_;
  int bit_ = 1;          // the current round's partner is rank ^ bit
  bool halving_ = true;  // else doubling
  bool done_ = false;
  size_t lo_ = 0, hi_;         // the segment this rank holds
  std::vector<Segment> path_;  // the segment held before each halving
  std::vector<float> incoming_;
  std::vector<MPI_Request> requests_;
};

class MpiWorld final : public Communicator {
 public:
  MpiWorld() : timeout_s_(comm_timeout_seconds()) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<PendingSum> start_sum_tree(float* data, size_t n, int tag) override {
    SHAMN_CHECK(tag >= 0 && tag < 4096, "start_sum_tree: tag ", tag, " outside 0..4095");
    return std::make_unique<TreeSum>(*this, data, n, kSumTagBase + tag);
  }

  // A rendezvous: returns once every rank has called it.
  void check_in(const char* what) override { exchange_via_root(std::vector<uint8_t>(1, 1), what); }

  std::vector<double> all_gather(const std::vector<double>& mine) override {
    std::vector<uint8_t> bytes(mine.size() * sizeof(double));
    std::memcpy(bytes.data(), mine.data(), bytes.size());
    const std::vector<uint8_t> all = exchange_via_root(bytes, "an all-gather");
    std::vector<double> out(all.size() / sizeof(double));
    std::memcpy(out.data(), all.data(), all.size());
    return out;
  }

  std::vector<uint8_t> all_gather_bytes(const std::vector<uint8_t>& mine) override {
    return exchange_via_root(mine, "an all-gather");
  }

  void max_flags(std::vector<uint8_t>& flags) override {
    const std::vector<uint8_t> all = exchange_via_root(flags, "a flag reduction");
    for (size_t r = 1; r < static_cast<size_t>(size_); ++r)
      for (size_t i = 0; i < flags.size(); ++i) flags[i] = std::max(flags[i], all[r * flags.size() + i]);
  }

  void broadcast(std::vector<uint8_t>& data) override {
    uint64_t length = data.size();
    broadcast(&length, sizeof(length));
    data.resize(length);
    broadcast(data.data(), data.size());
  }

  void broadcast(void* data, size_t bytes) override {
    auto* p = static_cast<uint8_t*>(data);
    for (size_t at = 0; at < bytes; at += kMaxPiece)
      broadcast_raw(p + at, static_cast<int>(std::min(kMaxPiece, bytes - at)), MPI_BYTE);
  }

  [[noreturn]] void abort(int status) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 private:
  void broadcast_raw(void* data, int count, MPI_Datatype type) {
    MPI_Request request;
    check_mpi(MPI_Ibcast(data, count, type, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast");
    wait(&request, "a broadcast", 0);
  }

  // Every rank's `mine` (equal sizes) to rank 0 and the concatenation back to every
  // rank. The small collectives go this way, not through MPI's, so that each wait
  // names the rank it waits for: rank 0 names exactly the ranks that never came.
  std::vector<uint8_t> exchange_via_root(const std::vector<uint8_t>& mine, const char* what) {
    constexpr int kUp = 1, kDown = 2;
    const size_t n = mine.size();
    std::vector<uint8_t> all(n * static_cast<size_t>(size_));
    const int count = static_cast<int>(n), total = static_cast<int>(all.size());
    if (rank_ != 0) {
      std::vector<MPI_Request> requests(2);
      check_mpi(MPI_Irecv(all.data(), total, MPI_BYTE, 0, kDown, MPI_COMM_WORLD, &requests[0]), "MPI_Irecv");
      check_mpi(MPI_Isend(mine.data(), count, MPI_BYTE, 0, kUp, MPI_COMM_WORLD, &requests[1]), "MPI_Isend");
      wait_all(requests, what, {0, 0});
      return all;
    }
    std::memcpy(all.data(), mine.data(), n);
    std::vector<MPI_Request> requests;
    std::vector<int> from;
    for (int r = 1; r < size_; ++r) {
      requests.emplace_back();
      from.push_back(r);
      check_mpi(MPI_Irecv(all.data() + static_cast<size_t>(r) * n, count, MPI_BYTE, r, kUp, MPI_COMM_WORLD,
                          &requests.back()),
                "MPI_Irecv");
    }
    wait_all(requests, what, from);
    for (int r = 1; r < size_; ++r)
      check_mpi(MPI_Isend(all.data(), total, MPI_BYTE, r, kDown, MPI_COMM_WORLD,
                          &requests[static_cast<size_t>(r - 1)]),
                "MPI_Isend");
    wait_all(requests, what, from);
    return all;
  }

  // Polls until the request completes or the deadline passes. `partner` < 0 means
  // a collective over all ranks.
  void wait(MPI_Request* request, const char* what, int partner) {
    std::vector<MPI_Request> one{*request};
    wait_all(one, what, {partner});
    *request = one[0];
  }

  // The same for several requests, request i answered by rank from[i].
  void wait_all(std::vector<MPI_Request>& requests, const char* what, const std::vector<int>& from) {
    std::vector<uint8_t> done(requests.size(), 0);
    poll_until(
        [&] {
          bool all = true;
          for (size_t i = 0; i < requests.size(); ++i) {
            if (done[i]) continue;
            int finished = 0;
            check_mpi(MPI_Test(&requests[i], &finished, MPI_STATUS_IGNORE), "MPI_Test");
            done[i] = finished ? 1 : 0;
            all = all && finished;
          }
          return all;
        },
        [&] {
          std::string who;
          for (size_t i = 0; i < requests.size(); ++i) {
            if (done[i]) continue;
            if (!who.empty()) who += ", ";
            who += from[i] >= 0 ? "rank " + std::to_string(from[i]) : std::string("at least one other rank");
          }
          return std::string(what) + " from " + who;
        });
  }

 public:
  // Calls `done` until it returns true; past the deadline, fails naming
  // `waiting_for()` ("gradients from rank 3").
  template <class Done, class Describe>
  void poll_until(Done done, Describe waiting_for) {
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      if (done()) return;
      // Yield at first (a partner on another core answers within microseconds),
      // then sleep briefly so an oversubscribed rank leaves its core to the others.
      if (polls < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        SHAMN_CHECK(waited <= timeout_s_, "rank ", rank_, " waited ", timeout_s_, " s for ", waiting_for(),
                    ", which died or stalled (SHAMN_COMM_TIMEOUT sets the limit)");
      }
    }
  }

 private:
  int rank_ = 0, size_ = 1;
  double timeout_s_;
};

TreeSum::TreeSum(MpiWorld& world, float* data, size_t n, int tag)
    : world_(world), data_(data), tag_(tag), rank_(world.rank()), size_(world.size()), hi_(n) {
  done_ = size_ == 1;
  if (!done_) post_round();
}

TreeSum::~TreeSum() {
  // An abandoned sum (an error elsewhere) must not leave MPI writing into freed memory.
  for (MPI_Request& r : requests_)
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
}

void TreeSum::post_round() {
  requests_.clear();
  if (halving_) {
    path_.push_back({lo_, hi_});
    const size_t mid = lo_ + (hi_ - lo_) / 2;
    const bool lower = (rank_ & bit_) == 0;
    const size_t keep_lo = lower ? lo_ : mid, keep_hi = lower ? mid : hi_;
    const size_t give_lo = lower ? mid : lo_, give_hi = lower ? hi_ : mid;
    incoming_.resize(keep_hi - keep_lo);
    post_exchange(data_ + give_lo, give_hi - give_lo, incoming_.data(), incoming_.size());
    lo_ = keep_lo;
    hi_ = keep_hi;
  } else {
    const Segment parent = path_.back();
    const bool lower = (rank_ & bit_) == 0;  // held the lower half of parent
    const size_t other_lo = lower ? hi_ : parent.lo;
    const size_t other_hi = lower ? parent.hi : lo_;
    post_exchange(data_ + lo_, hi_ - lo_, data_ + other_lo, other_hi - other_lo);
  }
}

void TreeSum::post_exchange(const float* give, size_t n_give, float* take, size_t n_take) {
  const int partner = rank_ ^ bit_;
  for (size_t at = 0; at < std::max(n_give, n_take); at += kMaxPiece) {
    const int g = static_cast<int>(n_give > at ? std::min(kMaxPiece, n_give - at) : 0);
    const int t = static_cast<int>(n_take > at ? std::min(kMaxPiece, n_take - at) : 0);
    requests_.emplace_back();
    check_mpi(MPI_Irecv(take + at, t, MPI_FLOAT, partner, tag_, MPI_COMM_WORLD, &requests_.back()),
              "MPI_Irecv");
    requests_.emplace_back();
    check_mpi(MPI_Isend(give + at, g, MPI_FLOAT, partner, tag_, MPI_COMM_WORLD, &requests_.back()),
              "MPI_Isend");
  }
}

bool TreeSum::progress() {
  while (!done_) {
    int finished = 0;
    check_mpi(
        MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &finished, MPI_STATUSES_IGNORE),
        "MPI_Testall");
    if (!finished) return false;
    if (halving_) {
      float* mine = data_ + lo_;
      const float* in = incoming_.data();
      parallel_for(0, static_cast<int64_t>(incoming_.size()), 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) mine[i] += in[i];
      });
      bit_ <<= 1;
      if (bit_ >= size_) {
        halving_ = false;
        bit_ = size_ >> 1;
        incoming_ = {};
      }
    } else {
      lo_ = path_.back().lo;
      hi_ = path_.back().hi;
      path_.pop_back();
      bit_ >>= 1;
      if (bit_ == 0) {
        done_ = true;
        requests_.clear();
        return true;
      }
    }
    post_round();
  }
  return true;
}

void TreeSum::wait() {
  world_.poll_until([this] { return progress(); },
                    [this] { return "gradients from rank " + std::to_string(rank_ ^ bit_); });
}

MpiWorld* g_world = nullptr;

}  // namespace

bool mpi_available() { return true; }

Communicator* mpi_world_if_launched() {
  if (g_world == nullptr && launched_by_mpi()) g_world = new MpiWorld();  // lives until exit
  return g_world;
}

Communicator* mpi_world_if_started() { return g_world; }

}  // namespace shamn
