#pragma once
// Whether the test binary runs under ThreadSanitizer.

namespace shamn::test {

// ThreadSanitizer instruments every load and store (the threaded tests run about
// 20x slower under it). Tests that call a serial naive oracle beside a threaded
// kernel skip the oracle there: the plain and ASan + UBSan runs of the same test
// check the numbers, the TSan run checks the threads (.ci/sanitize). The TSan
// build is GCC's, detected as core/thread_sanitizer.h does.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderThreadSanitizer = true;
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif

}  // namespace shamn::test
