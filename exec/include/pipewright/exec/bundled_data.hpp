// The datasets compiled into pipewright, without libtorch (docs/data.md).
//
// "sonnets" is a public-domain text (examples/data/sonnets.txt) for character-level language
// modelling: the vocabulary is the sorted set of its distinct bytes, sample i is the window of
// seq + 1 characters starting at i (x = the first seq ids, y = the next-character targets). The
// executor's CharLmDataset (exec/src/data/dataset.hpp) trains on it with `pipewright run
// --dataset`; these functions let the CLI describe it, size a matching GPT, and export it as .npy
// files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipewright::exec {

[[nodiscard]] std::vector<std::string> bundled_dataset_names();
// The text of a bundled dataset. Throws ConfigError naming the known datasets for another name.
[[nodiscard]] std::string bundled_dataset_text(const std::string& name);
// The sorted distinct bytes of `text`; character c has id vocabulary.find(c).
[[nodiscard]] std::string char_vocabulary(std::string_view text);

// Writes windows [first, first + count) of `name` for sequence length `seq` as int64 .npy files
// x [count, seq] and y [count, seq] (atomically). count == 0 means every window from `first`.
// Throws ConfigError for seq < 1, a range outside [0, windows), or an unwritable path.
// Returns the number of windows written.
std::int64_t export_char_windows(const std::string& name, std::int64_t seq, std::int64_t first,
                                 std::int64_t count, const std::string& x_path,
                                 const std::string& y_path);

}  // namespace pipewright::exec
