// The server's bound on what concurrent requests hold (cli/shared_budget.h):
// a share is given back when its last handle goes, and threads taking at once
// never hold more than the limit together.
#include <catch2/catch.hpp>

#include <atomic>
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

TEST_CASE("threads taking and giving back at once never hold more than the limit", "[serve]") {
  // Shares of 7 to 10 against a limit of 20: any three threads holding at
  // once would pass it, so a check that let them would show here.
  SharedBudget budget(20);
  std::atomic<int64_t> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&budget, &most, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::shared_ptr<const void> share = budget.take(7 + t);
        const int64_t held = budget.held();
        int64_t seen = most.load();
        while (held > seen && !most.compare_exchange_weak(seen, held)) {
        }
      }
    });
  for (std::thread& t : threads) t.join();
  CHECK(most.load() <= 20);
  CHECK(most.load() > 0);
  CHECK(budget.held() == 0);
}
