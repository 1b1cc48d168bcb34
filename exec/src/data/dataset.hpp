// Training data for the executor: samples addressed by index, assembled into batches and split
// into microbatches. Private to exec/: it names torch types.
//
// Two datasets:
//   NpyFileDataset rows of two .npy files (--data-x X.npy --data-y Y.npy), read on demand; the
//   ArrayDataset   same rows held in memory as tensors (tests). Row i of X is sample
//                  i's input, row i of Y its target. A 2-D X [N, F] gives per-sample inputs [F],
//                  a 1-D X [N] gives [1] (one feature); a 2-D Y [N, C] gives targets [C], a 1-D
//                  Y [N] gives scalar targets [] (class labels, or regression targets of a
//                  prediction [1]). float64 is read as float32 and int32 as int64 (npy.hpp).
//   CharLmDataset  character-level language modelling on a text: the vocabulary is the sorted set
//                  of distinct bytes of the text, sample i is the window text[i, i + seq + 1)
//                  encoded as ids, x = its first seq ids, y = the next-character targets (the
//                  window shifted by one). Size = text length - seq.
// Which indices a replica reads per step is decided by sharding.hpp; this file only assembles.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/model_check.hpp"
#include "pipewright/exec/bundled_data.hpp"
#include "pipewright/graph/model.hpp"

namespace pipewright::exec {

class NpyFile;

struct IntRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;  // inclusive
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  [[nodiscard]] virtual std::int64_t size() const = 0;
  // Per-sample types of x and y (for check_dataset_matches_model and receive buffers).
  [[nodiscard]] virtual ValueType x_type() const = 0;
  [[nodiscard]] virtual ValueType y_type() const = 0;
  // For int64 data, the smallest and largest value over the whole dataset.
  [[nodiscard]] virtual std::optional<IntRange> x_range() const = 0;
  [[nodiscard]] virtual std::optional<IntRange> y_range() const = 0;
  // Describes where x / y come from in messages ("'x.npy'", "dataset 'sonnets'").
  [[nodiscard]] virtual std::string x_source() const = 0;
  [[nodiscard]] virtual std::string y_source() const = 0;
  // Samples `indices` stacked along a new first dimension: x [B, x_type...], y [B, y_type...] on
  // the CPU. Indices must be in [0, size()) (ConfigError otherwise); repeats are allowed.
  [[nodiscard]] virtual std::pair<torch::Tensor, torch::Tensor> batch(
      const std::vector<std::int64_t>& indices) const = 0;
};

class ArrayDataset final : public Dataset {
 public:
  // x: [N, ...] and y: [N, ...] CPU tensors of float32 or int64 with equal N > 0.
  ArrayDataset(torch::Tensor x, torch::Tensor y, std::string x_source, std::string y_source);

  [[nodiscard]] std::int64_t size() const override { return x_.size(0); }
  [[nodiscard]] ValueType x_type() const override;
  [[nodiscard]] ValueType y_type() const override;
  [[nodiscard]] std::optional<IntRange> x_range() const override { return x_range_; }
  [[nodiscard]] std::optional<IntRange> y_range() const override { return y_range_; }
  [[nodiscard]] std::string x_source() const override { return x_source_; }
  [[nodiscard]] std::string y_source() const override { return y_source_; }
  [[nodiscard]] std::pair<torch::Tensor, torch::Tensor> batch(
      const std::vector<std::int64_t>& indices) const override;

 private:
  torch::Tensor x_;
  torch::Tensor y_;
  std::string x_source_;
  std::string y_source_;
  std::optional<IntRange> x_range_;
  std::optional<IntRange> y_range_;
};

// Rows of two .npy files read lazily (npy_file.hpp): opening checks the headers and sizes, and
// batch() reads only the rows it returns, so memory holds batches, not the dataset. int64 files
// are read through once at start-up for x_range / y_range (the embedding and class-id checks of
// check_dataset_matches_model); float files are not read until a batch needs them.
class NpyFileDataset final : public Dataset {
 public:
  // Throws ConfigError (missing file, row counts differ, no rows) or ParseError (not a supported
  // npy), naming the file.
  NpyFileDataset(const std::string& x_path, const std::string& y_path);
  ~NpyFileDataset() override;

  [[nodiscard]] std::int64_t size() const override;
  [[nodiscard]] ValueType x_type() const override;
  [[nodiscard]] ValueType y_type() const override;
  [[nodiscard]] std::optional<IntRange> x_range() const override { return x_range_; }
  [[nodiscard]] std::optional<IntRange> y_range() const override { return y_range_; }
  [[nodiscard]] std::string x_source() const override;
  [[nodiscard]] std::string y_source() const override;
  [[nodiscard]] std::pair<torch::Tensor, torch::Tensor> batch(
      const std::vector<std::int64_t>& indices) const override;

  // Data bytes read from X and Y by batch() so far (NpyFile::bytes_read).
  [[nodiscard]] std::uint64_t bytes_read() const;

 private:
  std::unique_ptr<NpyFile> x_;
  std::unique_ptr<NpyFile> y_;
  std::optional<IntRange> x_range_;
  std::optional<IntRange> y_range_;
};

// Opens X and Y .npy files as a NpyFileDataset (same errors).
[[nodiscard]] std::unique_ptr<NpyFileDataset> load_npy_dataset(const std::string& x_path,
                                                               const std::string& y_path);

class CharLmDataset final : public Dataset {
 public:
  // Throws ConfigError if seq < 1 or the text has fewer than seq + 1 characters.
  CharLmDataset(std::string text, std::int64_t seq, std::string name);

  [[nodiscard]] std::int64_t size() const override;
  [[nodiscard]] ValueType x_type() const override { return ValueType{true, {seq_}}; }
  [[nodiscard]] ValueType y_type() const override { return ValueType{true, {seq_}}; }
  [[nodiscard]] std::optional<IntRange> x_range() const override;
  [[nodiscard]] std::optional<IntRange> y_range() const override { return x_range(); }
  [[nodiscard]] std::string x_source() const override { return "dataset '" + name_ + "'"; }
  [[nodiscard]] std::string y_source() const override { return x_source(); }
  [[nodiscard]] std::pair<torch::Tensor, torch::Tensor> batch(
      const std::vector<std::int64_t>& indices) const override;

  [[nodiscard]] std::int64_t seq() const noexcept { return seq_; }
  // The sorted distinct characters; id i stands for vocab()[i].
  [[nodiscard]] const std::string& vocab() const noexcept { return vocab_; }
  [[nodiscard]] std::int64_t vocab_size() const noexcept {
    return static_cast<std::int64_t>(vocab_.size());
  }
  [[nodiscard]] const std::string& text() const noexcept { return text_; }
  // Text <-> ids. encode throws ConfigError for a character outside the vocabulary.
  [[nodiscard]] std::vector<std::int64_t> encode(const std::string& text) const;
  [[nodiscard]] std::string decode(const std::vector<std::int64_t>& ids) const;

 private:
  std::string text_;
  std::int64_t seq_;
  std::string name_;
  std::string vocab_;
  torch::Tensor ids_;  // int64 [text length]
};

// A CharLmDataset of a bundled text (pipewright/exec/bundled_data.hpp) with windows of `seq`
// characters.
[[nodiscard]] std::unique_ptr<CharLmDataset> load_bundled_dataset(const std::string& name,
                                                                  std::int64_t seq);

// dataset.batch(indices).
[[nodiscard]] std::pair<torch::Tensor, torch::Tensor> make_batch(
    const Dataset& dataset, const std::vector<std::int64_t>& indices);

// Splits a batch into `microbatches` equal consecutive parts (views). Throws ConfigError when
// microbatches < 1 or the batch size is not a multiple of it.
[[nodiscard]] std::vector<std::pair<torch::Tensor, torch::Tensor>> split_microbatches(
    const torch::Tensor& x, const torch::Tensor& y, std::int64_t microbatches);

// check_data_matches_model (model_check.hpp) on the dataset's types, plus value ranges: int64
// inputs read by an embedding must be < num_embeddings, cross_entropy targets < the number of
// classes. Throws ConfigError naming the data source and the model node.
void check_dataset_matches_model(const Dataset& dataset, const graph::Model& model, LossKind loss);

}  // namespace pipewright::exec
