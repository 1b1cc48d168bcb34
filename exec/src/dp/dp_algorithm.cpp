#include "dp/dp_algorithm.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "dp/ddp.hpp"
#include "dp/diloco.hpp"
#include "dp/sgp.hpp"
#include "dp/slowmo.hpp"
#include "pipewright/sched/buckets.hpp"

namespace pipewright::exec {

std::unique_ptr<DataParallelAlgorithm> make_data_parallel(const DataParallelSpec& config,
                                                          const DataParallelContext& context) {
  PW_ASSERT(context.dp_comm != nullptr, "data parallelism needs a data-parallel communicator");
  if (config.algorithm == DpAlgorithm::kDdp) {
    DdpOptions o;
    o.bucket_cap_bytes = sched::bucket_cap_bytes_from_mb(config.bucket_cap_mb);
    o.num_microbatches = context.num_microbatches;
    o.overlap = config.ddp_overlap;
    o.check_replicas = context.check_replicas;
    o.timeout = context.timeout;
    o.first_step = context.first_step;
    o.bf16_reduce = context.bf16_reduce;
    return std::make_unique<Ddp>(context.dp_comm, o);
  }
  if (config.algorithm == DpAlgorithm::kDiLoCo) {
    DiLoCoOptions o;
    o.sync_every = config.sync_every_or_default();
    o.outer_lr = config.outer_lr_or_default();
    o.outer_momentum = config.outer_momentum_or_default();
    o.nesterov = config.outer_nesterov_or_default();
    o.fragments = config.fragments_or_default();
    o.sync_delay = config.sync_delay_or_default();
    o.bf16 =
        config.outer_dtype ? *config.outer_dtype == sched::OuterDtype::kBf16 : context.bf16_reduce;
    o.check_replicas = context.check_replicas;
    o.timeout = context.timeout;
    return std::make_unique<DiLoCo>(context.dp_comm, o);
  }
  if (config.algorithm == DpAlgorithm::kSgp) {
    return std::make_unique<Sgp>(context.dp_comm, context.timeout, context.check_replicas);
  }
  SlowMoOptions o;
  o.sgp_base = config.slowmo_base_or_default() == DpAlgorithm::kSgp;
  o.localsgd_frequency = config.localsgd_frequency_or_default();
  o.slowmo_frequency = config.slowmo_frequency_or_default();
  o.momentum = config.slowmo_momentum_or_default();
  o.slowmo_lr = config.slowmo_lr_or_default();
  o.memory_efficient = config.slowmo_memory_efficient_or_default();
  o.num_shards = config.slowmo_num_shards_or_default(context.dp_comm->size());
  o.replicas_per_node = replicas_per_node(config.procs_per_node_or_default(), context.pp);
  o.learning_rate = context.learning_rate;
  o.check_replicas = context.check_replicas;
  o.timeout = context.timeout;
  o.first_step = context.first_step;
  return std::make_unique<SlowMo>(context.dp_comm, o);
}

namespace detail {
namespace {

double wire_factor_all_reduce(int n) { return n <= 1 ? 0.0 : 2.0 * (n - 1) / n; }
double wire_factor_rooted(int n) { return n <= 1 ? 0.0 : static_cast<double>(n - 1) / n; }

// `element_bytes`: what the transport moves per element (Gloo's TCP widens 16-bit buffers).
void count(DataParallelStats& stats, const BufferView& buf, double factor,
           std::size_t element_bytes) {
  ++stats.collectives;
  stats.payload_bytes += buf.bytes();
  stats.wire_bytes += factor * static_cast<double>(buf.count * element_bytes);
}
void count(DataParallelStats& stats, const BufferView& buf, double factor) {
  count(stats, buf, factor, dtype_size(buf.dtype));
}

}  // namespace

WorkPtr counted_all_reduce(Communicator& comm, const BufferView& buf, ReduceOp op,
                           const OpContext& ctx, DataParallelStats& stats) {
  count(stats, buf, wire_factor_all_reduce(comm.size()), comm.all_reduce_element_bytes(buf));
  return comm.all_reduce(buf, op, ctx);
}

WorkPtr counted_reduce(Communicator& comm, const BufferView& buf, int root, const OpContext& ctx,
                       DataParallelStats& stats) {
  count(stats, buf, wire_factor_rooted(comm.size()));
  return comm.reduce(buf, root, ReduceOp::kSum, ctx);
}

WorkPtr counted_broadcast(Communicator& comm, const BufferView& buf, int root, const OpContext& ctx,
                          DataParallelStats& stats) {
  count(stats, buf, wire_factor_rooted(comm.size()));
  return comm.broadcast(buf, root, ctx);
}

BufferView view_of(const torch::Tensor& t) {
  PW_ASSERT(t.is_contiguous(), "communication buffers are contiguous");
  BufferView v;
  if (t.is_cuda()) {  // --backend nccl: parameters and buckets live on the rank's GPU
    v.device.kind = Device::Kind::kCuda;
    v.device.index = t.device().index();
  }
  v.data = t.data_ptr();
  v.count = static_cast<std::size_t>(t.numel());
  switch (t.scalar_type()) {
    case torch::kFloat:
      v.dtype = DType::kFloat32;
      break;
    case torch::kDouble:
      v.dtype = DType::kFloat64;
      break;
    case torch::kLong:
      v.dtype = DType::kInt64;
      break;
    case torch::kInt:
      v.dtype = DType::kInt32;
      break;
    case torch::kByte:
    case torch::kBool:
      v.dtype = DType::kUInt8;
      break;
    case torch::kHalf:
      v.dtype = DType::kFloat16;
      break;
    case torch::kBFloat16:
      v.dtype = DType::kBFloat16;
      break;
    default:
      PW_CHECK(false, ConfigError,
               "tensors of type " << t.scalar_type()
                                  << " cannot be communicated (between stages or replicas)");
  }
  return v;
}

void timed_wait(const WorkPtr& work, std::chrono::milliseconds timeout, DataParallelStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  work->wait(timeout);
  stats.exposed_wait_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
}

void broadcast_from_replica0(Communicator& comm, std::vector<StageParams>& stages,
                             std::chrono::milliseconds timeout, DataParallelStats& stats) {
  torch::NoGradGuard no_grad;
  const std::uint64_t payload0 = stats.payload_bytes;
  const double wire0 = stats.wire_bytes;
  for (auto& sp : stages) {
    OpContext ctx;
    ctx.stage = sp.stage;
    ctx.what = "broadcast of the initial parameters from replica 0";
    std::vector<torch::Tensor> floats;
    std::vector<torch::Tensor> others;
    for (const auto& group : {&sp.params, &sp.buffers}) {
      for (const auto& t : *group) {
        if (!t.defined() || t.numel() == 0) continue;
        (t.scalar_type() == torch::kFloat ? floats : others).push_back(t);
      }
    }
    if (!floats.empty()) {
      std::vector<torch::Tensor> flat_parts;
      for (const auto& t : floats) flat_parts.push_back(t.detach().reshape({-1}));
      torch::Tensor flat = torch::cat(flat_parts).contiguous();
      timed_wait(counted_broadcast(comm, view_of(flat), 0, ctx, stats), timeout, stats);
      std::int64_t off = 0;
      for (auto& t : floats) {
        t.detach().copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    }
    for (auto& t : others) {
      torch::Tensor c = t.detach().contiguous().clone();
      timed_wait(counted_broadcast(comm, view_of(c), 0, ctx, stats), timeout, stats);
      t.detach().copy_(c);
    }
  }
  stats.setup_payload_bytes += stats.payload_bytes - payload0;
  stats.setup_wire_bytes += stats.wire_bytes - wire0;
  stats.payload_bytes = payload0;
  stats.wire_bytes = wire0;
}

std::uint64_t hash_tensors(const std::vector<torch::Tensor>& tensors) {
  // FNV-1a over 64-bit words with a final avalanche; portable and fast enough for a periodic
  // check (one pass over the parameters).
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& t0 : tensors) {
    if (!t0.defined()) continue;
    const torch::Tensor t = t0.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    const std::size_t n = static_cast<std::size_t>(t.numel()) * t.element_size();
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, bytes + i, 8);
      h = (h ^ w) * 0x100000001b3ULL;
      h ^= h >> 29;
    }
    for (; i < n; ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
    h = (h ^ n) * 0x9e3779b97f4a7c15ULL;  // tensor boundary
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

void check_replicas_identical(Communicator& comm, const std::vector<StageParams>& stages,
                              std::int64_t step, std::chrono::milliseconds timeout,
                              DataParallelStats& stats) {
  const int dp = comm.size();
  const int me = comm.rank();
  const auto ns = static_cast<std::int64_t>(stages.size());
  // Gather by all-reduce: each replica writes its hashes into its own slots, zeros elsewhere.
  torch::Tensor table = torch::zeros({ns, dp}, torch::kLong);
  auto* cells = table.data_ptr<std::int64_t>();
  for (std::int64_t s = 0; s < ns; ++s) {
    std::uint64_t h = hash_tensors(stages[static_cast<std::size_t>(s)].params);
    std::int64_t v;
    std::memcpy(&v, &h, 8);
    cells[s * dp + me] = v;
  }
  OpContext ctx;
  ctx.step = step;
  ctx.what = "--check-replicas hash exchange";
  timed_wait(counted_all_reduce(comm, view_of(table), ReduceOp::kSum, ctx, stats), timeout, stats);
  ++stats.replica_checks;
  for (std::int64_t s = 0; s < ns; ++s) {
    const std::int64_t* row = cells + s * dp;
    // The majority hash (replica 0's on a tie) is the reference.
    std::int64_t ref = row[0];
    int best = 0;
    for (int r = 0; r < dp; ++r) {
      const int votes = static_cast<int>(std::count(row, row + dp, row[r]));
      if (votes > best) {
        best = votes;
        ref = row[r];
      }
    }
    std::ostringstream bad;
    int nbad = 0;
    for (int r = 0; r < dp; ++r) {
      if (row[r] == ref) continue;
      bad << (nbad++ ? ", " : "") << "replica " << r << " (rank " << comm.global_rank(r) << ")";
    }
    if (nbad > 0) {
      std::ostringstream os;
      os << "--check-replicas: after step " << step << ", the parameters of stage "
         << stages[static_cast<std::size_t>(s)].stage << " diverged on " << bad.str() << ": "
         << best << " of " << dp << " replicas agree on hash " << std::hex
         << static_cast<std::uint64_t>(ref);
      throw ReplicaDivergenceError(os.str());
    }
  }
}

}  // namespace detail
}  // namespace pipewright::exec
