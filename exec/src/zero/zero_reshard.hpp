// Re-sharding a ZeRO optimizer's state on load at another dp (issue 43; docs/data-parallel.md
// "Resuming at another --dp").
//
// Note [ZeRO re-sharding]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A ZeRO rank's checkpoint holds its shard's optimizer state (one optimizer tensor per bucket
// piece, Note [ZeRO flat buffers]) and its layout `dp.layout.stage<S>` = [d, r, B, then n_b,
// p_b, q_b per bucket]. The buckets depend on the parameters and the bucket caps only, not on d,
// so a loader at d' has the same B buckets of the same n_b elements; only the padding and the
// pieces differ. Like torch's distributed checkpoint (a planned read of every saved piece that
// overlaps what a rank needs), the loader of a pipeline stage reads every saved replica's file
// of that stage, puts each bucket's d saved pieces back in order (the whole bucket, padded to
// p_b), drops the padding (n_b elements) and cuts its own piece of its own layout (padded with
// zeros to p'_b = ceil(n_b / d') d', piece r' = [r' q'_b, (r'+1) q'_b)). The optimizers the
// executor makes (AdamW, Adam, SGD) keep element-wise state (moments, momentum) and one step
// count per tensor, equal on every piece: elements move bit for bit, the step is copied.
// ZeRO-3 also saves the parameter shard (`dp.param_shard.stage<S>`: piece r of every bucket, in
// bucket order, S = sum q_b floats), which re-shards the same way, bucket by bucket.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pipewright::exec {

// dp.layout.stage<S> (Zero::state()).
struct ShardLayout {
  std::int64_t dp = 0;
  std::int64_t rank = 0;
  std::vector<std::int64_t> elements;  // n_b
  std::vector<std::int64_t> padded;    // p_b
  std::vector<std::int64_t> piece;     // q_b
};

// Parses a layout tensor; throws ConfigError naming `where` when it is malformed.
[[nodiscard]] ShardLayout parse_shard_layout(const torch::Tensor& t, const std::string& where);

// One optimizer tensor's state: its element-wise fields ("exp_avg", "exp_avg_sq",
// "max_exp_avg_sq", "momentum_buffer"; only the defined ones) and its step count.
struct PieceState {
  bool present = false;  // false: the optimizer holds no state for the tensor (never stepped)
  std::int64_t step = 0;
  std::map<std::string, torch::Tensor> fields;
};

// The state of every tensor of `opt`'s first parameter group, in order (AdamW, Adam or SGD;
// throws ConfigError for another optimizer).
[[nodiscard]] std::vector<PieceState> optimizer_piece_states(torch::optim::Optimizer& opt);
// Sets the state of every tensor of `opt`'s first parameter group from `states` (same order),
// replacing what it held.
void set_optimizer_piece_states(torch::optim::Optimizer& opt,
                                const std::vector<PieceState>& states);

// Note [ZeRO re-sharding]: the pieces of `live` (this replica's layout at the new dp) from every
// saved replica's pieces: saved[r] are replica r's piece states (one per bucket), layouts[r] its
// layout. Throws ConfigError naming `where` when the saved layouts do not cover the same buckets
// as `live`, or their pieces disagree on the step or the fields.
[[nodiscard]] std::vector<PieceState> reshard_piece_states(
    const std::vector<std::vector<PieceState>>& saved, const std::vector<ShardLayout>& layouts,
    const ShardLayout& live, const std::string& where);

// Note [ZeRO re-sharding] for ZeRO-3's parameter shards: this replica's shard under `live` from
// every saved replica's shard (saved[r] in layouts[r]). Throws ConfigError naming `where` when a
// saved shard is not its layout's size or the layouts do not cover the same buckets as `live`.
[[nodiscard]] torch::Tensor reshard_flat_shard(const std::vector<torch::Tensor>& saved,
                                               const std::vector<ShardLayout>& layouts,
                                               const ShardLayout& live, const std::string& where);

}  // namespace pipewright::exec
