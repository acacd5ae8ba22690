// The spread of active-block norms of every block-sparse matrix, per layer and kind.
#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include "train/model_analysis.h"

namespace shamn {

std::vector<BlockNormStats> block_norm_stats(const Shamn& model) {
  // Every expert's up (or down) of a layer pools into one row: experts.*.up.
  const std::regex expert(R"(experts\.[0-9]+\.)");
  std::map<std::string, std::vector<double>> norms;
  std::vector<std::string> order;
  for (const NamedVar& p : model.named_parameters()) {
    const std::string suffix = ".values";
    if (p.name.size() <= suffix.size() ||
        p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const Tensor& v = p.var.value();
    if (v.dim() != 4) continue;  // [nob, a, b, b]: block-sparse values (memory.values is 2-D)
    const std::string name =
        std::regex_replace(p.name.substr(0, p.name.size() - suffix.size()), expert, "experts.*.");
    if (!norms.count(name)) order.push_back(name);
    std::vector<double>& out = norms[name];
    const int64_t blocks = v.shape()[0] * v.shape()[1], size = v.shape()[2] * v.shape()[3];
    const float* x = v.data<float>();
    for (int64_t i = 0; i < blocks; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < size; ++j) ss += static_cast<double>(x[i * size + j]) * x[i * size + j];
      out.push_back(std::sqrt(ss));
    }
  }
  std::vector<std::pair<std::string, std::vector<double>>> named;
  for (const std::string& name : order) named.emplace_back(name, std::move(norms[name]));
  return block_norm_stats(named);
}

std::vector<BlockNormStats> block_norm_stats(
    const std::vector<std::pair<std::string, std::vector<double>>>& norms) {
  std::vector<BlockNormStats> stats;
  for (const auto& [name, values] : norms) {
    std::vector<double> n = values;
    std::sort(n.begin(), n.end());
    BlockNormStats s;
    s.name = name;
    s.blocks = static_cast<int64_t>(n.size());
    s.min = n.front();
    s.max = n.back();
    s.median = n.size() % 2 ? n[n.size() / 2] : 0.5 * (n[n.size() / 2 - 1] + n[n.size() / 2]);
    double mean = 0, var = 0;
    for (double x : n) mean += x;
    mean /= static_cast<double>(n.size());
    for (double x : n) var += (x - mean) * (x - mean);
    var /= static_cast<double>(n.size());
    s.cv = mean > 0 ? std::sqrt(var) / mean : 0;
    stats.push_back(s);
  }
  return stats;
}

}  // namespace shamn
