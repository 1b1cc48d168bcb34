// Replays the fuzzing corpus, and deterministic mutations of every file in it, through every
// loader (fuzz_loaders.hpp). CI runs it on every build (ctest fuzz.replay; under PRESET=asan with
// ASan+UBSan); tools/fuzz runs the same entry point under libFuzzer for coverage-guided search.
//
//   fuzz_replay CORPUS_DIR [--mutations N] [--seed S]
//
// Exit 0 when every input was loaded or rejected with a pipewright::Error; 1 naming the file and
// the mutation that raised anything else (a sanitizer aborts by itself); 2 on bad usage.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_loaders.hpp"

namespace {

namespace fs = std::filesystem;

// xorshift64*: the same mutations on every machine and run.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ULL;
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
};

// Mutations that reach the loaders' limits and error paths: byte flips, digits and structural
// characters inserted, huge numbers, truncation, a duplicated chunk (repeated keys and actions).
std::string mutate(std::string text, Rng& rng) {
  static const char* kTokens[] = {"9",  "-1", "1e400", "2147483647", "99999999999999999999",
                                  "{",  "}",  "[",     "]",          ",",
                                  "\"", ":",  "null",  "\x1b[31m",   "0F10000000"};
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int e = 0; e < edits && !text.empty(); ++e) {
    const std::size_t at = 1 + rng.below(text.size() - 1 + 1);  // keep byte 0 (the loader)
    switch (rng.below(5)) {
      case 0:
        if (at < text.size()) text[at] = static_cast<char>(rng.next());
        break;
      case 1:
        text.insert(std::min(at, text.size()), kTokens[rng.below(std::size(kTokens))]);
        break;
      case 2:
        text.resize(std::min(at, text.size()));
        break;
      case 3: {
        const std::size_t from = rng.below(text.size());
        const std::size_t len = std::min<std::size_t>(1 + rng.below(64), text.size() - from);
        text.insert(std::min(at, text.size()), text.substr(from, len));
        break;
      }
      default:
        if (at < text.size()) text.erase(at, 1 + rng.below(8));
        break;
    }
  }
  return text;
}

bool run(const std::string& input, const std::string& what) {
  try {
    pipewright::fuzz::run_one(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
    return true;
  } catch (const std::exception& e) {
    std::cerr << "fuzz_replay: " << what << ": not a pipewright::Error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "fuzz_replay: " << what << ": a non-standard exception\n";
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fuzz_replay CORPUS_DIR [--mutations N] [--seed S]\n";
    return 2;
  }
  long mutations = 100;
  std::uint64_t seed = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mutations") {
      mutations = std::strtol(argv[i + 1], nullptr, 10);
    } else if (flag == "--seed") {
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      std::cerr << "fuzz_replay: unknown flag " << flag << "\n";
      return 2;
    }
  }
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(argv[1], ec)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  if (ec || files.empty()) {
    std::cerr << "fuzz_replay: " << argv[1] << ": no corpus files\n";
    return 2;
  }
  std::sort(files.begin(), files.end());
  long inputs = 0;
  int failures = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    Rng rng{seed * 0x9E3779B97F4A7C15ULL + std::hash<std::string>{}(f.filename().string()) + 1};
    failures += run(text, f.string()) ? 0 : 1;
    ++inputs;
    for (long m = 0; m < mutations; ++m, ++inputs) {
      const std::string input = mutate(text, rng);
      failures += run(input, f.string() + " mutation " + std::to_string(m)) ? 0 : 1;
    }
  }
  std::cout << "fuzz_replay: " << inputs << " inputs from " << files.size() << " corpus files, "
            << failures << " failures\n";
  return failures == 0 ? 0 : 1;
}
