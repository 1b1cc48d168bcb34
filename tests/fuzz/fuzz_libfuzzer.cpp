// libFuzzer's entry point (clang -fsanitize=fuzzer; tools/fuzz builds and runs it).
#include <cstddef>
#include <cstdint>

#include "fuzz_loaders.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pipewright::fuzz::run_one(data, size);
  return 0;
}
