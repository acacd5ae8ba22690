// The server's bound on what concurrent requests hold (cli/shared_budget.h):
// a share is given back when its last handle goes, and threads taking at once
// never hold more than the limit together.
#include <catch2/catch.hpp>

#include <atomic>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "cli/shared_budget.h"

using shamn::cli::SharedBudget;

TEST_CASE("a budget refuses what would pass its limit and takes back a share with its last handle",
          "[serve]") {
  SharedBudget budget(10);
  std::shared_ptr<const void> a = budget.take(6);
  REQUIRE(a != nullptr);
  CHECK(budget.held() == 6);
  CHECK(budget.take(5) == nullptr);
  CHECK(budget.held() == 6);
  CHECK(budget.take(0) != nullptr);  // nothing asked: never refused
  std::shared_ptr<const void> b = budget.take(4);
  REQUIRE(b != nullptr);
  CHECK(budget.held() == 10);
  std::shared_ptr<const void> copy = a;
  a.reset();
  CHECK(budget.held() == 10);  // a copy still holds the share
  CHECK(budget.take(1) == nullptr);
  copy.reset();
  CHECK(budget.held() == 4);
  b.reset();
  CHECK(budget.held() == 0);
}

TEST_CASE("a budget's share outlives the budget", "[serve]") {
  std::shared_ptr<const void> share;
  {
    SharedBudget budget(3);
    share = budget.take(3);
  }
  share.reset();  // gives back to a count the budget no longer owns: no use after free (ASan)
  SUCCEED();
}

TEST_CASE("threads taking at once get no more than the limit lets them hold", "[serve]") {
  // Four threads each take 7 against a limit of 20, all before any gives its
  // share back (a barrier between): exactly two get one, every round.
  SharedBudget budget(20);
  constexpr int kThreads = 4, kRounds = 500;
  std::atomic<int> granted{0};
  std::vector<int> granted_by_round;
  int phase = 0;
  // Runs once all threads arrive, before any goes on: after each round's
  // takes it records how many were granted.
  const auto between_phases = [&]() noexcept {
    if (phase++ % 2 == 0) granted_by_round.push_back(granted.exchange(0));
  };
  std::barrier sync(kThreads, between_phases);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&budget, &granted, &sync] {
      for (int round = 0; round < kRounds; ++round) {
        std::shared_ptr<const void> share = budget.take(7);
        if (share) granted.fetch_add(1);
        sync.arrive_and_wait();  // every thread has taken or been refused
        share.reset();
        sync.arrive_and_wait();  // every share given back
      }
    });
  for (std::thread& t : threads) t.join();
  REQUIRE(granted_by_round.size() == static_cast<size_t>(kRounds));
  for (const int g : granted_by_round) CHECK(g == 2);
  CHECK(budget.held() == 0);
}
