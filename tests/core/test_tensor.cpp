#include <catch2/catch.hpp>

#include <cstdint>

#include "core/aligned.h"
#include "core/tensor.h"

using namespace shamn;

namespace {
bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignment == 0; }
}  // namespace

TEST_CASE("every tensor buffer is 64-byte aligned", "[core][tensor]") {
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i8, DType::u8})
    for (int64_t n : {0, 1, 3, 17, 63, 64, 65, 1000, 4097}) {
      Tensor t = Tensor::empty({n}, dt);
      CHECK(aligned64(t.raw_data()));
      CHECK(aligned64(t.clone().raw_data()));
      CHECK(aligned64(Tensor::zeros({n, 3}, dt).raw_data()));
    }
}

TEST_CASE("shape, numel and errors", "[core][tensor]") {
  Tensor t = Tensor::zeros({2, 3, 5});
  CHECK(t.numel() == 30);
  CHECK(t.dim() == 3);
  CHECK(t.size(-1) == 5);
  CHECK(t.str() == "f32[2, 3, 5]");
  CHECK_THROWS_AS(t.size(3), Error);
  CHECK_THROWS_WITH(t.data<double>(), Catch::Contains("accessed as f64"));
  CHECK_THROWS_AS(Tensor::empty({2, -1}), Error);
  // 2^62 floats are 2^64 bytes: the byte count must not wrap to a tiny buffer.
  CHECK_THROWS_WITH(Tensor::empty({int64_t{1} << 62}), Catch::Contains("too many bytes"));
  CHECK_THROWS_WITH(Tensor::empty({int64_t{1} << 31, int64_t{1} << 30}, DType::f64),
                    Catch::Contains("too many bytes"));
  CHECK(Tensor::empty({}).numel() == 1);
  CHECK_FALSE(Tensor().defined());
  CHECK_THROWS_WITH(Tensor().raw_data(), Catch::Contains("undefined"));
}

TEST_CASE("reshape and slices are views sharing storage", "[core][tensor]") {
  Tensor t = Tensor::from_data<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor r = t.reshape({3, -1});
  CHECK(r.shape() == Shape{3, 2});
  CHECK(r.shares_storage_with(t));
  r.data<float>()[5] = 50;
  CHECK(t.data<float>()[5] == 50);

  Tensor row = t.select(1);
  CHECK(row.shape() == Shape{3});
  CHECK(row.data<float>()[0] == 3);
  Tensor rows = t.slice(1, 2);
  CHECK(rows.shape() == Shape{1, 3});
  rows.data<float>()[1] = 40;
  CHECK(t.data<float>()[4] == 40);
  CHECK(t.slice(0, 0).numel() == 0);

  CHECK_THROWS_WITH(t.reshape({4, 2}), Catch::Contains("element counts differ"));
  CHECK_THROWS_AS(t.reshape({-1, -1}), Error);
  CHECK_THROWS_WITH(t.slice(1, 3), Catch::Contains("out of range"));

  Tensor c = t.clone();
  CHECK_FALSE(c.shares_storage_with(t));
  CHECK(bitwise_equal(c, t));
}

TEST_CASE("conversion, fill, Eigen maps", "[core][tensor]") {
  Tensor t = Tensor::from_data<float>({2, 2}, {1.5f, -2.0f, 3.25f, 4.0f});
  Tensor d = t.to(DType::f64);
  CHECK(d.dtype() == DType::f64);
  CHECK(d.item(2) == 3.25);
  Tensor i = t.to(DType::i32);
  CHECK(i.to_vector<int32_t>() == std::vector<int32_t>{1, -2, 3, 4});

  auto m = t.matrix<float>();
  CHECK(m.rows() == 2);
  CHECK(m(1, 0) == 3.25f);
  m(0, 1) = 7;
  CHECK(t.item(1) == 7);

  Tensor f = Tensor::full({3}, 2.5, DType::f32);
  CHECK(f.vector<float>().sum() == 7.5f);
  f.zero();
  CHECK(f.vector<float>().sum() == 0);
  Tensor g = Tensor::zeros({3});
  g.copy_from(Tensor::full({3}, 1.0));
  CHECK(g.item(2) == 1.0);
  CHECK_THROWS_AS(g.copy_from(Tensor::zeros({4})), Error);
}
