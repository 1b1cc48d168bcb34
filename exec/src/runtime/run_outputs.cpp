// Forward-only outputs (run_outputs.hpp).
#include "runtime/run_outputs.hpp"

#include <map>
#include <utility>

#include "data/npy.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

constexpr std::int64_t kTagMeta = 111;
constexpr std::int64_t kTagData = 112;

BufferView i64_view(std::int64_t* data, std::size_t count) {
  return BufferView{data, count, DType::kInt64, {}};
}

}  // namespace

void PredictionGather::add(std::int64_t step, const std::vector<torch::Tensor>& per_microbatch) {
  for (std::size_t mb = 0; mb < per_microbatch.size(); ++mb) {
    const auto& t = per_microbatch[mb];
    if (!t.defined()) continue;
    keys_.emplace_back(step, static_cast<std::int64_t>(mb));
    values_.push_back(t.detach().to(torch::kCPU, torch::kFloat).contiguous());
  }
}

void PredictionGather::write(Communicator& world, int world_rank, int world_size,
                             std::int64_t steps, int m, const std::string& path,
                             std::chrono::milliseconds timeout) {
  const OpContext ctx{-1, -1, -1, "gather --outputs"};
  if (world_rank != 0) {
    // [count, then per tensor: step, microbatch, ndim, dims...]
    std::vector<std::int64_t> meta{static_cast<std::int64_t>(values_.size())};
    for (std::size_t i = 0; i < values_.size(); ++i) {
      meta.push_back(keys_[i].first);
      meta.push_back(keys_[i].second);
      meta.push_back(values_[i].dim());
      for (auto d : values_[i].sizes()) meta.push_back(d);
    }
    std::int64_t n = static_cast<std::int64_t>(meta.size());
    world.send(i64_view(&n, 1), 0, kTagMeta, ctx)->wait(timeout);
    world.send(i64_view(meta.data(), meta.size()), 0, kTagMeta + 2, ctx)->wait(timeout);
    for (auto& v : values_) {
      if (v.numel() == 0) continue;
      world
          .send(BufferView{v.data_ptr(), static_cast<std::size_t>(v.numel()), DType::kFloat32, {}},
                0, kTagData, ctx)
          ->wait(timeout);
    }
    return;
  }
  std::map<std::pair<std::int64_t, std::int64_t>, torch::Tensor> all;
  for (std::size_t i = 0; i < values_.size(); ++i) all[keys_[i]] = values_[i];
  for (int src = 1; src < world_size; ++src) {
    std::int64_t n = 0;
    world.recv(i64_view(&n, 1), src, kTagMeta, ctx)->wait(timeout);
    PW_ASSERT(n >= 1 && n < (std::int64_t{1} << 30), "bad --outputs message size " << n);
    std::vector<std::int64_t> meta(static_cast<std::size_t>(n));
    world.recv(i64_view(meta.data(), meta.size()), src, kTagMeta + 2, ctx)->wait(timeout);
    std::size_t i = 0;
    const std::int64_t count = meta.at(i++);
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t step = meta.at(i++);
      const std::int64_t mb = meta.at(i++);
      const std::int64_t dims = meta.at(i++);
      std::vector<std::int64_t> shape;
      for (std::int64_t d = 0; d < dims; ++d) shape.push_back(meta.at(i++));
      auto t = torch::empty(shape, torch::kFloat);
      if (t.numel() > 0) {
        world
            .recv(
                BufferView{t.data_ptr(), static_cast<std::size_t>(t.numel()), DType::kFloat32, {}},
                src, kTagData, ctx)
            ->wait(timeout);
      }
      all[{step, mb}] = t;
    }
  }
  std::vector<torch::Tensor> ordered;
  for (std::int64_t s = 0; s < steps; ++s) {
    for (int mb = 0; mb < m; ++mb) {
      const auto it = all.find({s, mb});
      PW_ASSERT(it != all.end(), "--outputs: no prediction of step " << s << " microbatch " << mb);
      ordered.push_back(it->second);
    }
  }
  const auto out = torch::cat(ordered).contiguous();
  NpyArray array;
  array.type = NpyType::kFloat32;
  array.shape = out.sizes().vec();
  array.f32.assign(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  save_npy(path, array);
}

}  // namespace pipewright::exec
