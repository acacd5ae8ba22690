// Buffer (core/buffer.h): aligned scratch arrays; small blocks come back from a
// per-thread pool, large ones from aligned_alloc_bytes' cache.
#include <catch2/catch.hpp>

#include <cstdint>
#include <thread>

#include "core/aligned.h"
#include "core/buffer.h"

using namespace shamn;

TEST_CASE("Buffer blocks are aligned, and a freed small block serves the next request of its class",
          "[core][buffer]") {
  const void* first = nullptr;
  {
    Buffer<float> a(100);  // 400 bytes: the 512-byte class
    REQUIRE(a.size() == 100);
    CHECK(reinterpret_cast<uintptr_t>(a.data()) % kAlignment == 0);
    for (int64_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);  // the whole block is usable
    first = a.data();
  }
  Buffer<int32_t> b(120);  // 480 bytes: the same class, so the same block
  CHECK(static_cast<const void*>(b.data()) == first);
  Buffer<double> big(1 << 17);  // 1 MiB: past the pool, through aligned_alloc_bytes
  CHECK(reinterpret_cast<uintptr_t>(big.data()) % kAlignment == 0);
  big[(1 << 17) - 1] = 1.0;
  b.resize(0);
  CHECK(b.size() == 0);
  Buffer<double> moved(std::move(big));
  CHECK(moved.size() == (1 << 17));
}

TEST_CASE("Buffer blocks freed on another thread stay usable", "[core][buffer]") {
  Buffer<float> a(1000);
  std::thread([moved = std::move(a)]() mutable { moved[999] = 1.0f; }).join();  // freed there
  Buffer<float> b(1000);
  b[999] = 2.0f;
  CHECK(b[999] == 2.0f);
}

TEST_CASE("a Buffer of a negative count or of more bytes than size_t holds is an error", "[core][buffer]") {
  Buffer<float> b;
  CHECK_THROWS_WITH(b.resize(-1), Catch::Contains("Buffer of -1 values of 4 bytes"));
  // 2^62 floats are 2^64 bytes: the product wraps to 0.
  CHECK_THROWS_WITH(b.resize(int64_t{1} << 62), Catch::Contains("its bytes overflow"));
  CHECK(b.size() == 0);
  b.resize(3);
  CHECK(b.size() == 3);
}
