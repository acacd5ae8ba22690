#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/dispatch.h"
#include "core/rng.h"

namespace shamn {
namespace {

double weighted_sum(const Tensor& y, const Tensor& w) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += y.item(i) * w.item(i);
  return s;
}

void add_scaled(Tensor& x, const Tensor& d, double alpha) {
  dispatch_floating(x.dtype(), "gradcheck", [&](auto zero) {
    using T = decltype(zero);
    T* px = x.data<T>();
    const T* pd = d.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) px[i] = static_cast<T>(px[i] + alpha * pd[i]);
  });
}

// Sets x[e] = value (rounded to x's dtype) and returns the value stored.
double set_element(Tensor& x, int64_t e, double value) {
  dispatch_floating(x.dtype(), "gradcheck", [&](auto zero) {
    using T = decltype(zero);
    x.data<T>()[e] = static_cast<T>(value);
  });
  return x.item(e);
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  std::vector<Var> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool check = is_floating(inputs[i].dtype()) && !(i < options.skip.size() && options.skip[i]);
    leaves.emplace_back(inputs[i].clone(), check);
  }
  return gradcheck_leaves([&] { return f(leaves); }, leaves, options);
}

GradcheckResult gradcheck_leaves(const std::function<Var()>& f, const std::vector<Var>& leaves,
                                 const GradcheckOptions& options) {
  for (const Var& leaf : leaves) {
    SHAMN_CHECK(leaf.is_leaf(), "gradcheck_leaves: every input must be a leaf");
    if (leaf.requires_grad()) leaf.zero_grad();
  }
  Rng rng(options.seed, 7);
  Var y = f();
  Tensor w = Tensor::empty(y.shape(), y.dtype());
  rng.fill_uniform(w, -1.0, 1.0);
  y.backward(w);

  auto loss_at = [&]() {
    NoGradGuard no_grad;
    return weighted_sum(f().value(), w);
  };

  GradcheckResult result;
  struct Pair {
    double analytic, numeric;
    std::string where;
  };
  // One input's (analytic, numeric) pairs, compared once all are known (the
  // input's atol may depend on its largest numeric gradient).
  auto compare = [&](const std::vector<Pair>& pairs, size_t input) {
    double atol = options.atol;
    if (options.atol_fraction > 0) {
      double largest = 0;
      for (const Pair& p : pairs) largest = std::max(largest, std::abs(p.numeric));
      atol = std::clamp(options.atol_fraction * largest, options.atol_floor, options.atol);
    }
    for (const Pair& p : pairs) {
      const double err = std::abs(p.analytic - p.numeric);
      const double rel = err / std::max(std::abs(p.numeric), 1e-12);
      const bool bad = !(err <= atol + options.rtol * std::abs(p.numeric));  // NaN fails
      if (err > result.max_abs_error) result.max_abs_error = err;
      if (err > atol && rel > result.max_rel_error) result.max_rel_error = rel;
      if (bad && result.ok) {
        std::ostringstream out;
        out << "input " << input << " " << leaves[input].value().str() << " " << p.where << ": analytic "
            << p.analytic << " vs numeric " << p.numeric << " (abs err " << err << ", atol " << atol << ")";
        result.report = out.str();
        result.ok = false;
      }
    }
  };

  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].requires_grad()) continue;
    Tensor x = leaves[i].value();
    const Tensor grad = leaves[i].grad().defined() ? leaves[i].grad() : Tensor::zeros(x.shape(), x.dtype());
    const Tensor original = x.clone();
    std::vector<Pair> pairs;
    if (options.directions > 0) {
      for (int k = 0; k < options.directions; ++k) {
        Tensor d = Tensor::empty(x.shape(), x.dtype());
        rng.fill_uniform(d, -1.0, 1.0);
        const double analytic = weighted_sum(grad, d);
        add_scaled(x, d, options.eps);
        const double plus = loss_at();
        x.copy_from(original);
        add_scaled(x, d, -options.eps);
        const double minus = loss_at();
        x.copy_from(original);
        pairs.push_back({analytic, (plus - minus) / (2 * options.eps), "direction " + std::to_string(k)});
      }
      compare(pairs, i);
      continue;
    }
    for (int64_t e = 0; e < x.numel(); ++e) {
      // Divide by the step actually stored: in f32, x +- eps is rounded.
      const double x_plus = set_element(x, e, original.item(e) + options.eps);
      const double plus = loss_at();
      const double x_minus = set_element(x, e, original.item(e) - options.eps);
      const double minus = loss_at();
      x.copy_from(original);
      pairs.push_back({grad.item(e), (plus - minus) / (x_plus - x_minus), "element " + std::to_string(e)});
    }
    compare(pairs, i);
  }
  return result;
}

}  // namespace shamn
