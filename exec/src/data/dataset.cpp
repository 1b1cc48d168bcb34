#include "data/dataset.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <sstream>

#include "data/npy.hpp"
#include "data/npy_file.hpp"
#include "model/model_check.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

std::optional<IntRange> int_range(const at::Tensor& t) {
  if (t.scalar_type() != at::kLong || t.numel() == 0) return std::nullopt;
  return IntRange{t.min().item<std::int64_t>(), t.max().item<std::int64_t>()};
}

at::Tensor index_tensor(const std::vector<std::int64_t>& indices, std::int64_t size,
                        const std::string& source) {
  PW_CHECK(!indices.empty(), ConfigError, source << ": a batch needs at least one sample");
  for (const auto i : indices) {
    PW_CHECK(i >= 0 && i < size, ConfigError,
             source << ": sample index " << i << " is out of range [0, " << size << ")");
  }
  return at::tensor(at::ArrayRef<std::int64_t>(indices), at::kLong);
}

std::optional<IntRange> file_range(const NpyFile& f) {
  const auto r = f.int_range();
  if (!r) return std::nullopt;
  return IntRange{r->first, r->second};
}

}  // namespace

ArrayDataset::ArrayDataset(at::Tensor x, at::Tensor y, std::string x_source, std::string y_source)
    : x_(std::move(x)),
      y_(std::move(y)),
      x_source_(std::move(x_source)),
      y_source_(std::move(y_source)) {
  for (const auto* t : {&x_, &y_}) {
    const std::string& src = t == &x_ ? x_source_ : y_source_;
    PW_CHECK(t->defined() && t->dim() >= 1, ConfigError, src << ": data must have a row dimension");
    PW_CHECK(t->scalar_type() == at::kFloat || t->scalar_type() == at::kLong, ConfigError,
             src << ": data must be float32 or int64");
  }
  if (x_.dim() == 1) x_ = x_.unsqueeze(1);  // one feature per sample
  x_ = x_.contiguous();
  y_ = y_.contiguous();
  PW_CHECK(x_.size(0) > 0, ConfigError, x_source_ << ": has no rows");
  PW_CHECK(x_.size(0) == y_.size(0), ConfigError,
           "data x " << x_source_ << " has " << x_.size(0) << " rows but data y " << y_source_
                     << " has " << y_.size(0));
  x_range_ = int_range(x_);
  y_range_ = int_range(y_);
}

ValueType ArrayDataset::x_type() const {
  return ValueType{x_.scalar_type() == at::kLong, x_.sizes().slice(1).vec()};
}

ValueType ArrayDataset::y_type() const {
  return ValueType{y_.scalar_type() == at::kLong, y_.sizes().slice(1).vec()};
}

std::pair<at::Tensor, at::Tensor> ArrayDataset::batch(
    const std::vector<std::int64_t>& indices) const {
  const at::Tensor idx = index_tensor(indices, size(), x_source_);
  return {x_.index_select(0, idx), y_.index_select(0, idx)};
}

NpyFileDataset::NpyFileDataset(const std::string& x_path, const std::string& y_path)
    : x_(std::make_unique<NpyFile>(x_path)), y_(std::make_unique<NpyFile>(y_path)) {
  PW_CHECK(x_->rows() > 0, ConfigError, x_source() << ": has no rows");
  PW_CHECK(x_->rows() == y_->rows(), ConfigError,
           "data x " << x_source() << " has " << x_->rows() << " rows but data y " << y_source()
                     << " has " << y_->rows());
  x_range_ = file_range(*x_);
  y_range_ = file_range(*y_);
}

NpyFileDataset::~NpyFileDataset() = default;

std::int64_t NpyFileDataset::size() const { return x_->rows(); }

// A 1-D X gives one feature per sample ([1]), a 1-D Y a scalar target ([]), as ArrayDataset.
ValueType NpyFileDataset::x_type() const {
  return ValueType{x_->type() == NpyType::kInt64, {x_->row_elems()}};
}

ValueType NpyFileDataset::y_type() const {
  std::vector<std::int64_t> shape;
  if (y_->shape().size() == 2) shape.push_back(y_->shape()[1]);
  return ValueType{y_->type() == NpyType::kInt64, shape};
}

std::string NpyFileDataset::x_source() const { return "'" + x_->path() + "'"; }
std::string NpyFileDataset::y_source() const { return "'" + y_->path() + "'"; }

std::pair<at::Tensor, at::Tensor> NpyFileDataset::batch(
    const std::vector<std::int64_t>& indices) const {
  static_cast<void>(index_tensor(indices, size(), x_source()));  // range checks, same messages
  const auto rows = static_cast<std::int64_t>(indices.size());
  auto read = [&](const NpyFile& f, std::vector<std::int64_t> shape) {
    shape.insert(shape.begin(), rows);
    at::Tensor t = at::empty(shape, f.type() == NpyType::kInt64 ? at::kLong : at::kFloat);
    f.read_rows(indices, t.data_ptr());
    return t;
  };
  return {read(*x_, x_type().shape), read(*y_, y_type().shape)};
}

std::uint64_t NpyFileDataset::bytes_read() const { return x_->bytes_read() + y_->bytes_read(); }

std::unique_ptr<NpyFileDataset> load_npy_dataset(const std::string& x_path,
                                                 const std::string& y_path) {
  return std::make_unique<NpyFileDataset>(x_path, y_path);
}

CharLmDataset::CharLmDataset(std::string text, std::int64_t seq, std::string name)
    : text_(std::move(text)), seq_(seq), name_(std::move(name)) {
  PW_CHECK(seq_ >= 1, ConfigError,
           "dataset '" << name_ << "': sequence length must be >= 1, got " << seq_);
  PW_CHECK(static_cast<std::int64_t>(text_.size()) >= seq_ + 1, ConfigError,
           "dataset '" << name_ << "' has " << text_.size()
                       << " characters, too few for windows of seq + 1 = " << seq_ + 1);
  vocab_ = char_vocabulary(text_);
  std::array<std::int64_t, 256> id{};
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    id[static_cast<unsigned char>(vocab_[i])] = static_cast<std::int64_t>(i);
  }
  ids_ = at::empty({static_cast<std::int64_t>(text_.size())}, at::kLong);
  auto* out = ids_.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < text_.size(); ++i) {
    out[i] = id[static_cast<unsigned char>(text_[i])];
  }
}

std::int64_t CharLmDataset::size() const { return static_cast<std::int64_t>(text_.size()) - seq_; }

std::optional<IntRange> CharLmDataset::x_range() const { return IntRange{0, vocab_size() - 1}; }

std::pair<at::Tensor, at::Tensor> CharLmDataset::batch(
    const std::vector<std::int64_t>& indices) const {
  const at::Tensor starts = index_tensor(indices, size(), x_source());
  // Window w of sample i is ids[i + w] for w in [0, seq]: gather all at once.
  const at::Tensor offsets = at::arange(seq_ + 1, at::kLong);
  const at::Tensor windows = ids_.index_select(0, (starts.unsqueeze(1) + offsets).reshape({-1}))
                                 .reshape({starts.size(0), seq_ + 1});
  return {windows.slice(1, 0, seq_).contiguous(), windows.slice(1, 1, seq_ + 1).contiguous()};
}

std::vector<std::int64_t> CharLmDataset::encode(const std::string& text) const {
  std::vector<std::int64_t> out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto pos = vocab_.find(c);
    PW_CHECK(pos != std::string::npos, ConfigError,
             "dataset '" << name_ << "': character '" << c << "' is not in the vocabulary");
    out.push_back(static_cast<std::int64_t>(pos));
  }
  return out;
}

std::string CharLmDataset::decode(const std::vector<std::int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (const auto id : ids) {
    PW_CHECK(id >= 0 && id < vocab_size(), ConfigError,
             "dataset '" << name_ << "': id " << id << " is not in [0, " << vocab_size() << ")");
    out.push_back(vocab_[static_cast<std::size_t>(id)]);
  }
  return out;
}

std::unique_ptr<CharLmDataset> load_bundled_dataset(const std::string& name, std::int64_t seq) {
  return std::make_unique<CharLmDataset>(bundled_dataset_text(name), seq, name);
}

std::pair<at::Tensor, at::Tensor> make_batch(const Dataset& dataset,
                                             const std::vector<std::int64_t>& indices) {
  return dataset.batch(indices);
}

std::vector<std::pair<at::Tensor, at::Tensor>> split_microbatches(const at::Tensor& x,
                                                                  const at::Tensor& y,
                                                                  std::int64_t microbatches) {
  PW_CHECK(microbatches >= 1, ConfigError, "--microbatches must be >= 1, got " << microbatches);
  PW_CHECK(x.dim() >= 1 && y.dim() >= 1 && x.size(0) == y.size(0), ConfigError,
           "batch x " << shape_text(x.sizes().vec()) << " and y " << shape_text(y.sizes().vec())
                      << " must have the same number of rows");
  const std::int64_t batch = x.size(0);
  PW_CHECK(batch % microbatches == 0, ConfigError,
           "batch size " << batch << " is not divisible by " << microbatches
                         << " microbatches (microbatches must be equal)");
  const std::int64_t step = batch / microbatches;
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  out.reserve(static_cast<std::size_t>(microbatches));
  for (std::int64_t i = 0; i < microbatches; ++i) {
    out.emplace_back(x.slice(0, i * step, (i + 1) * step), y.slice(0, i * step, (i + 1) * step));
  }
  return out;
}

void check_dataset_matches_model(const Dataset& dataset, const graph::Model& model, LossKind loss) {
  check_data_matches_model(dataset.x_type(), dataset.y_type(), model, loss, dataset.x_source(),
                           dataset.y_source());
  if (const auto r = dataset.x_range()) {
    for (int i = 0; i < static_cast<int>(model.nodes.size()); ++i) {
      const graph::Node& node = model.nodes[static_cast<std::size_t>(i)];
      if (node.kind != graph::NodeKind::kEmbedding || !model.in_edges(i).empty()) continue;
      const std::int64_t num = node.params.at("num_embeddings");
      PW_CHECK(r->lo >= 0 && r->hi < num, ConfigError,
               "data x " << dataset.x_source() << " has token ids in [" << r->lo << ", " << r->hi
                         << "] but model '" << model.name << "' node '" << node.name << "' (index "
                         << i << ", embedding) has num_embeddings " << num);
    }
  }
  if (loss == LossKind::kCrossEntropy) {
    const auto types = infer_value_types(model);
    const int last = final_node(model);
    const std::int64_t classes = types[static_cast<std::size_t>(last)].shape.back();
    if (const auto r = dataset.y_range()) {
      PW_CHECK(r->lo >= 0 && r->hi < classes, ConfigError,
               "data y " << dataset.y_source() << " has class ids in [" << r->lo << ", " << r->hi
                         << "] but model '" << model.name << "' predicts " << classes
                         << " classes (node '" << model.nodes[static_cast<std::size_t>(last)].name
                         << "')");
    }
  }
}

}  // namespace pipewright::exec
