// pw_compare_weights A.safetensors B.safetensors [tolerance]: exits 0 when both files hold the
// same tensor names and shapes and every element differs by at most `tolerance` (default 1e-5),
// 1 otherwise; prints the largest difference and where it is. Used by the multi-process
// equivalence tests (pipelined training == single-process training). Two .npy files (float32, as
// `run --forward-only --outputs` writes) are compared as one tensor each.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>

#include "data/safetensors.hpp"

namespace {

bool is_npy(const std::string& path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
}

// A float32 .npy of any rank, as one flat tensor under its header text (the shape is in the
// header, so two files of different shapes get different names).
std::map<std::string, torch::Tensor> load(const std::string& path) {
  if (!is_npy(path)) return pipewright::exec::load_safetensors(path);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    throw std::runtime_error(path + ": not an npy file");
  }
  const bool v1 = bytes[6] == 1;
  const std::size_t len_bytes = v1 ? 2 : 4;
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  const std::size_t start = 8 + len_bytes + header_len;
  const std::string header = bytes.substr(8 + len_bytes, header_len);
  if (header.find("'<f4'") == std::string::npos || start > bytes.size()) {
    throw std::runtime_error(path + ": not a float32 npy file");
  }
  const auto n = static_cast<std::int64_t>((bytes.size() - start) / 4);
  auto t = torch::empty({n}, torch::kFloat);
  std::memcpy(t.data_ptr<float>(), bytes.data() + start, static_cast<std::size_t>(n) * 4);
  return {{header, t}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s A.safetensors B.safetensors [tolerance]\n", argv[0]);
    return 2;
  }
  try {
    const double tol = argc == 4 ? std::strtod(argv[3], nullptr) : 1e-5;
    const auto a = load(argv[1]);
    const auto b = load(argv[2]);
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
