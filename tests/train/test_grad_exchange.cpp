#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/grad_exchange.h"

namespace shamn {

TEST_CASE("gradient buckets stay within the exchange's 4,096 tags for any mix of sizes", "[train][mpi]") {
  // Sizes 1 and 1,000 in turn: with buckets of at most ~1,000 floats, each small
  // parameter would close a bucket of its own, one bucket a parameter.
  for (size_t bucket_floats : {size_t{1}, size_t{500}, size_t{1000}, size_t{1} << 20}) {
    std::vector<NamedVar> params;
    for (int i = 0; i < 10000; ++i)
      params.push_back({std::to_string(i), Var(Tensor::zeros({i % 2 == 0 ? 1 : 1000}), true)});
    const GradientExchange exchange(params, bucket_floats);
    INFO("bucket_floats " << bucket_floats);
    CHECK(exchange.bucket_count() <= 4096);
    CHECK(exchange.bucket_count() >= (bucket_floats == 1 ? 2000u : 1u));
  }
}

}  // namespace shamn
