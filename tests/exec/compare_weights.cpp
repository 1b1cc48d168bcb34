// pw_compare_weights A.safetensors B.safetensors [tolerance]: exits 0 when both files hold the
// same tensor names and shapes and every element differs by at most `tolerance` (default 1e-5),
// 1 otherwise; prints the largest difference and where it is. Used by the multi-process
// equivalence tests (pipelined training == single-process training).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "safetensors.hpp"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s A.safetensors B.safetensors [tolerance]\n", argv[0]);
    return 2;
  }
  try {
    const double tol = argc == 4 ? std::strtod(argv[3], nullptr) : 1e-5;
    const auto a = pipewright::exec::load_safetensors(argv[1]);
    const auto b = pipewright::exec::load_safetensors(argv[2]);
    if (a.size() != b.size()) {
      std::printf("different tensor counts: %zu vs %zu\n", a.size(), b.size());
      return 1;
    }
    double worst = 0;
    std::string where;
    for (const auto& [name, ta] : a) {
      auto it = b.find(name);
      if (it == b.end()) {
        std::printf("tensor '%s' is missing from %s\n", name.c_str(), argv[2]);
        return 1;
      }
      if (ta.sizes() != it->second.sizes()) {
        std::printf("tensor '%s' has different shapes\n", name.c_str());
        return 1;
      }
      const double d =
          (ta.to(torch::kDouble) - it->second.to(torch::kDouble)).abs().max().item<double>();
      if (!(d <= worst)) {
        worst = d;
        where = name;
      }
    }
    std::printf("%zu tensors, max abs diff %.3g (%s), tolerance %.3g\n", a.size(), worst,
                where.c_str(), tol);
    return worst <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pw_compare_weights: %s\n", e.what());
    return 2;
  }
}
