// One fuzzing entry point over every loader of untrusted input (issue 20): models, partitions,
// plans (CSV and JSON), cost profiles, jobs, traces and clusters.
//
// The first byte of the input picks the loader (Note [Fuzz input layout] in fuzz_loaders.cpp); the
// rest is the file's text. A loader may reject its input only with a pipewright::Error (the CLI
// turns those into exit 2 with the file and field); any other exception, a crash, a leak or a
// sanitizer report is a bug. Used by libFuzzer (fuzz_libfuzzer.cpp, clang only: tools/fuzz) and
// by the corpus replay that every CI run executes (fuzz_replay.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pipewright::fuzz {

// Runs one input through its loader and, when it loads, through the checks a command would run
// next (validation, a topological order). Returns normally for accepted and rejected inputs;
// lets any exception that is not a pipewright::Error escape.
void run_one(const std::uint8_t* data, std::size_t size);

}  // namespace pipewright::fuzz
