// Note [Calibration timing]: the ping-pong is timed on rank 0 from before its send until its
// receive of the echo completes, and halved: rank 1 posts its receive before rank 0 sends (a
// barrier orders them), so the one-way time includes the backend's matching and copying on both
// sides, as a pipeline transfer does. Collectives (all-reduce, reduce-scatter, all-gather) start
// from a barrier so that every rank enters together; rank 0's time to completion is the sample (a
// ring finishes on all ranks within one step of each other). Each rank fills its inputs before
// the barrier and checks the result after the clock stops, so neither is timed.
#include "pipewright/exec/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/communicator.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"
#include "report/run_report.hpp"

namespace pipewright::exec {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

SizeTiming summarise(std::int64_t bytes, std::vector<double> samples_ms) {
  SizeTiming t;
  t.bytes = bytes;
  t.samples = static_cast<std::int64_t>(samples_ms.size());
  if (samples_ms.empty()) return t;
  std::sort(samples_ms.begin(), samples_ms.end());
  auto at = [&samples_ms](double q) {
    const auto i = static_cast<std::size_t>(q * static_cast<double>(samples_ms.size() - 1) + 0.5);
    return samples_ms[std::min(i, samples_ms.size() - 1)];
  };
  const std::size_t n = samples_ms.size();
  t.median_ms = n % 2 ? samples_ms[n / 2] : (samples_ms[n / 2 - 1] + samples_ms[n / 2]) / 2;
  t.p10_ms = at(0.1);
  t.p90_ms = at(0.9);
  return t;
}

int repetitions(std::int64_t bytes, int iterations) {
  constexpr std::int64_t kBudget = std::int64_t{512} << 20;
  const std::int64_t by_volume = kBudget / std::max<std::int64_t>(bytes, 1);
  return static_cast<int>(std::max<std::int64_t>(5, std::min<std::int64_t>(iterations, by_volume)));
}

// Ranks `a` and `b` ping-pong every size (Note [Calibration timing]); every other rank of `comm`
// only passes the barriers. The timings are complete on rank `a`.
template <typename View>
std::vector<SizeTiming> ping_pong(Communicator& comm, int a, int b,
                                  const std::vector<std::int64_t>& sizes, int iterations,
                                  const View& view, std::chrono::milliseconds timeout) {
  const int me = comm.rank();
  std::vector<SizeTiming> out;
  for (const std::int64_t bytes : sizes) {
    const int reps = repetitions(bytes, iterations);
    std::vector<double> samples;
    for (int it = 0; it < reps + 2; ++it) {
      OpContext ctx{it, -1, -1,
                    "calibrate p2p " + std::to_string(a) + "<->" + std::to_string(b) + " " +
                        std::to_string(bytes) + " B"};
      if (me == b) {
        auto r = comm.recv(view(bytes), a, 2 * it, ctx);
        comm.barrier(ctx)->wait(timeout);
        r->wait(timeout);
        comm.send(view(bytes), a, 2 * it + 1, ctx)->wait(timeout);
      } else if (me == a) {
        comm.barrier(ctx)->wait(timeout);
        const auto t0 = Clock::now();
        auto s = comm.send(view(bytes), b, 2 * it, ctx);
        comm.recv(view(bytes), b, 2 * it + 1, ctx)->wait(timeout);
        const double rtt = ms_since(t0);
        s->wait(timeout);
        if (it >= 2) samples.push_back(rtt / 2);
      } else {
        comm.barrier(ctx)->wait(timeout);
      }
    }
    if (me == a) out.push_back(summarise(bytes, std::move(samples)));
  }
  return out;
}

// Note [Compute beside a send, measured] (calibrate.hpp): a fixed amount of arithmetic, its
// result kept so that it is not optimised away.
double probe(int n) {
  double acc = 0;
  for (int i = 1; i <= n; ++i) acc += std::sqrt(static_cast<double>(i)) * 1e-9;
  return acc;
}

// Rank a probes alone, then beside each of 20 `bytes` messages to rank b (each ~`one_way_ms` on
// the wire); every other rank passes the barriers. The result is complete on rank a.
template <typename View>
ComputeBesideSend compute_beside_send(Communicator& comm, int a, int b, std::int64_t bytes,
                                      double one_way_ms, const View& view,
                                      std::chrono::milliseconds timeout) {
  const int me = comm.rank();
  ComputeBesideSend out;
  out.bytes = bytes;
  const OpContext ctx{-1, -1, -1, "calibrate compute beside a send"};
  static volatile double sink = 0;
  int n = 20000;
  if (me == a) {  // ~0.5 ms a probe on this host
    const auto t0 = Clock::now();
    sink = sink + probe(n);
    n = std::max(1000, static_cast<int>(n * 0.5 / std::max(1e-3, ms_since(t0))));
  }
  comm.barrier(ctx)->wait(timeout);
  std::vector<double> idle, busy;
  if (me == a) {
    for (int i = 0; i < 40; ++i) {
      const auto t0 = Clock::now();
      sink = sink + probe(n);
      idle.push_back(ms_since(t0));
    }
  }
  // b posts every receive first; a's training thread then sends each message itself, as a
  // pipeline's SEND does (a message this size leaves the send call at once, into the socket),
  // and probes while it is on the wire.
  constexpr int kMessages = 20;
  std::vector<WorkPtr> recvs;
  if (me == b) {
    for (int i = 0; i < kMessages; ++i)
      recvs.push_back(comm.recv(view(bytes), a, (1 << 20) + i, ctx));
  }
  comm.barrier(ctx)->wait(timeout);
  if (me == a) {
    for (int i = 0; i < kMessages; ++i) {
      const auto t0 = Clock::now();
      auto s = comm.send(view(bytes), b, (1 << 20) + i, ctx);
      while (ms_since(t0) < 0.8 * one_way_ms) {
        const auto p0 = Clock::now();
        sink = sink + probe(n);
        if (ms_since(t0) < 0.8 * one_way_ms) busy.push_back(ms_since(p0));
      }
      s->wait(timeout);
    }
  }
  for (auto& r : recvs) r->wait(timeout);
  comm.barrier(ctx)->wait(timeout);
  out.samples = static_cast<int>(busy.size());
  out.idle_ms = summarise(0, std::move(idle)).median_ms;
  out.busy_ms = summarise(0, std::move(busy)).median_ms;
  return out;
}

// --network: within every node (its first two ranks), then between the first ranks of every pair
// of nodes. Each pair's timings go from its rank a to every rank by a sum all-reduce (only rank
// a contributes), so rank 0 has them all.
template <typename View>
void measure_pairs(Communicator& comm, const WorldInfo& world,
                   const std::vector<std::int64_t>& sizes, int iterations, const View& view,
                   std::chrono::milliseconds timeout, CommunicationMeasurements& out) {
  const int per_node = world.local_world_size;
  PW_CHECK(world.world_size % per_node == 0, ConfigError,
           "calibrate --network: world size "
               << world.world_size << " is not a multiple of the local world size " << per_node
               << " (the same ranks on every node)");
  out.nodes = world.world_size / per_node;
  std::vector<PairTimings> pairs;
  if (per_node >= 2) {
    for (int n = 0; n < out.nodes; ++n)
      pairs.push_back({n, n, n * per_node, n * per_node + 1, {}, {}});
  }
  for (int x = 0; x < out.nodes; ++x) {
    for (int y = x + 1; y < out.nodes; ++y)
      pairs.push_back({x, y, x * per_node, y * per_node, {}, {}});
  }
  const std::size_t n = sizes.size();
  for (auto& p : pairs) {
    const auto mine = ping_pong(comm, p.rank_a, p.rank_b, sizes, iterations, view, timeout);
    std::vector<float> flat(4 * n, 0.0f);
    if (comm.rank() == p.rank_a) {
      for (std::size_t i = 0; i < n; ++i) {
        flat[4 * i] = static_cast<float>(mine[i].median_ms);
        flat[4 * i + 1] = static_cast<float>(mine[i].p10_ms);
        flat[4 * i + 2] = static_cast<float>(mine[i].p90_ms);
        flat[4 * i + 3] = static_cast<float>(mine[i].samples);
      }
    }
    comm.all_reduce(BufferView{flat.data(), flat.size(), DType::kFloat32, {}}, ReduceOp::kSum,
                    {-1, -1, -1, "calibrate pair results"})
        ->wait(timeout);
    for (std::size_t i = 0; i < n; ++i) {
      p.p2p.push_back({sizes[i], flat[4 * i], flat[4 * i + 1], flat[4 * i + 2],
                       static_cast<std::int64_t>(flat[4 * i + 3])});
    }
    // Note [Compute beside a send, measured]: every rank has the pair's timings now and picks
    // the same size, the largest of 2-10 ms one way.
    const SizeTiming* pick = nullptr;
    for (const auto& t : p.p2p) {
      if (t.median_ms >= 2 && t.median_ms <= 10) pick = &t;
    }
    if (p.node_a != p.node_b && pick != nullptr) {
      const auto m = compute_beside_send(comm, p.rank_a, p.rank_b, pick->bytes, pick->median_ms,
                                         view, timeout);
      std::vector<float> res{static_cast<float>(m.idle_ms), static_cast<float>(m.busy_ms),
                             static_cast<float>(m.samples)};
      if (comm.rank() != p.rank_a) std::fill(res.begin(), res.end(), 0.0f);
      comm.all_reduce(BufferView{res.data(), res.size(), DType::kFloat32, {}}, ReduceOp::kSum,
                      {-1, -1, -1, "calibrate compute beside a send results"})
          ->wait(timeout);
      p.beside_send = {res[0], res[1], static_cast<int>(res[2]), pick->bytes};
    }
  }
  out.pairs = std::move(pairs);
}

// Times one collective at every size from a barrier (Note [Calibration timing]): `prepare(bytes)`
// fills this rank's inputs, `launch(bytes, ctx)` starts it, `check(bytes)` throws BackendError
// when the result is wrong. The collective runs on `comm`, the barrier before each repetition on
// `sync` (`comm` itself, or the world when `comm` is a subgroup: the world's other ranks, with
// `comm` null, only pass the barriers, so none waits longer than one collective). The timings
// are complete on rank 0 of `comm`.
template <typename Prepare, typename Launch, typename Check>
std::vector<SizeTiming> time_collective(Communicator& sync, Communicator* comm,
                                        const std::string& name,
                                        const std::vector<std::int64_t>& sizes, int iterations,
                                        std::chrono::milliseconds timeout, const Prepare& prepare,
                                        const Launch& launch, const Check& check) {
  std::vector<SizeTiming> out;
  for (const std::int64_t bytes : sizes) {
    const int reps = repetitions(bytes, iterations);
    std::vector<double> samples;
    for (int it = 0; it < reps + 2; ++it) {
      OpContext ctx{it, -1, -1, "calibrate " + name + " " + std::to_string(bytes) + " B"};
      if (comm) prepare(bytes);
      sync.barrier(ctx)->wait(timeout);
      if (!comm) continue;
      const auto t0 = Clock::now();
      launch(bytes, ctx)->wait(timeout);
      const double t = ms_since(t0);
      check(bytes);
      if (it >= 2) samples.push_back(t);
    }
    if (comm && comm->rank() == 0) out.push_back(summarise(bytes, std::move(samples)));
  }
  return out;
}

BufferView floats(float* data, std::int64_t bytes) {
  return BufferView{data, static_cast<std::size_t>(bytes / 4), DType::kFloat32, {}};
}

// Reduce-scatter and all-gather at every size over `comm` (null: this rank only passes `sync`'s
// barriers, time_collective), with `whole` (>= the largest size) as the whole buffer and `piece`
// (>= its 1 / comm->size()) as this rank's piece where the collective is not in place. Rank r's
// input holds r + 1 + q in piece q, so piece r of the sum is n (n + 1) / 2 + n r; an all-gather's
// output starts at -1 and must end with q + 1 in piece q. Checks the first and last element of each
// piece it reads.
void time_sharded(Communicator& sync, Communicator* comm, const std::vector<std::int64_t>& sizes,
                  int iterations, std::chrono::milliseconds timeout, float* whole, float* piece,
                  bool registered, std::vector<SizeTiming>& reduce_scatter,
                  std::vector<SizeTiming>& all_gather) {
  const int n = comm ? comm->size() : 1;
  const int r = comm ? comm->rank() : 0;
  const std::string kind = registered ? " (registered)" : " (private)";
  auto count = [n](std::int64_t bytes) { return bytes / 4 / n; };  // elements in a piece
  auto fail = [&](const std::string& what, std::int64_t bytes, std::int64_t at, float got,
                  float want) {
    throw BackendError("calibrate: " + what + kind + " of " + std::to_string(bytes) +
                       " B on rank " + std::to_string(r) + " returned " + std::to_string(got) +
                       " at element " + std::to_string(at) + " instead of " + std::to_string(want));
  };
  // ZeRO-1/2 reduce-scatter a registered bucket into a piece of its own; ZeRO-3 (private
  // buffers) in place, into piece r of the bucket.
  float* const rs_out = registered ? piece : nullptr;
  reduce_scatter = time_collective(
      sync, comm, "reduce_scatter" + kind, sizes, iterations, timeout,
      [&](std::int64_t bytes) {
        const std::int64_t c = count(bytes);
        for (int q = 0; q < n; ++q) std::fill_n(whole + q * c, c, static_cast<float>(r + 1 + q));
      },
      [&](std::int64_t bytes, const OpContext& ctx) {
        const std::int64_t c = count(bytes);
        float* out = rs_out ? rs_out : whole + r * c;
        return comm->reduce_scatter(floats(whole, bytes), floats(out, 4 * c), ReduceOp::kSum, ctx);
      },
      [&](std::int64_t bytes) {
        const std::int64_t c = count(bytes);
        const float* out = rs_out ? rs_out : whole + r * c;
        const auto want = static_cast<float>(n * (n + 1) / 2 + n * r);
        if (out[0] != want) fail("reduce_scatter", bytes, 0, out[0], want);
        if (out[c - 1] != want) fail("reduce_scatter", bytes, c - 1, out[c - 1], want);
      });
  // ZeRO-1/2 all-gather in place (this rank's piece already in the registered buffer); ZeRO-3
  // from its private shard into a private buffer.
  all_gather = time_collective(
      sync, comm, "all_gather" + kind, sizes, iterations, timeout,
      [&](std::int64_t bytes) {
        const std::int64_t c = count(bytes);
        std::fill_n(whole, bytes / 4, -1.0f);
        std::fill_n(registered ? whole + r * c : piece, c, static_cast<float>(r + 1));
      },
      [&](std::int64_t bytes, const OpContext& ctx) {
        const std::int64_t c = count(bytes);
        float* in = registered ? whole + r * c : piece;
        return comm->all_gather(floats(in, 4 * c), floats(whole, bytes), ctx);
      },
      [&](std::int64_t bytes) {
        const std::int64_t c = count(bytes);
        for (int q = 0; q < n; ++q) {
          const auto want = static_cast<float>(q + 1);
          if (whole[q * c] != want) fail("all_gather", bytes, q * c, whole[q * c], want);
          const std::int64_t last = (q + 1) * c - 1;
          if (whole[last] != want) fail("all_gather", bytes, last, whole[last], want);
        }
      });
}

}  // namespace

std::vector<std::int64_t> sharded_calibration_sizes(const std::vector<std::int64_t>& sizes,
                                                    int world_size) {
  const std::int64_t unit = 4 * std::int64_t{std::max(world_size, 1)};
  std::vector<std::int64_t> out;
  for (const std::int64_t b : sizes) {
    const std::int64_t padded = (b + unit - 1) / unit * unit;
    if (out.empty() || padded > out.back()) out.push_back(padded);
  }
  return out;
}

std::vector<std::int64_t> default_calibration_sizes() {
  std::vector<std::int64_t> sizes;
  for (std::int64_t b = 4; b <= (std::int64_t{16} << 20); b *= 4) sizes.push_back(b);
  return sizes;
}

CommunicationMeasurements measure_communication(const CalibrationConfig& config) {
  const std::vector<std::int64_t> sizes =
      config.sizes.empty() ? default_calibration_sizes() : config.sizes;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    PW_CHECK(sizes[i] >= 4 && sizes[i] % 4 == 0, ConfigError,
             "calibrate: message size " << sizes[i] << " is not a positive multiple of 4 bytes");
    PW_CHECK(i == 0 || sizes[i] > sizes[i - 1], ConfigError,
             "calibrate: message sizes must be ascending");
  }
  PW_CHECK(config.iterations >= 1, ConfigError,
           "calibrate: --iterations must be >= 1, got " << config.iterations);
  const WorldInfo world = resolve_world(config.world, current_environment());
  PW_CHECK(world.world_size >= 2, ConfigError,
           "calibrate needs at least 2 ranks, the world has "
               << world.world_size << " (from "
               << (world.sources.empty() ? std::string("defaults") : world.sources) << ")");
  const Backend backend = parse_backend(config.backend);
  const auto timeout = config.timeout;
  std::unique_ptr<Store> store;
  if (backend == Backend::kGloo || backend == Backend::kNccl) {
    store = make_tcp_store(world, timeout);
    rendezvous(*store, world, timeout);
  }
  CommOptions options;
  options.timeout = timeout;
  auto comm = make_communicator(backend, world, store.get(), options);

  CommunicationMeasurements out;
  out.world_rank = world.rank;
  out.world_size = world.world_size;
  out.local_world_size = world.local_world_size;
  out.cpus = static_cast<int>(usable_cpus());
  out.backend = to_string(backend);

  const std::int64_t max_bytes = sizes.back();
  std::vector<float> buffer(static_cast<std::size_t>(max_bytes / 4), 1.0f);
  auto view = [&buffer](std::int64_t bytes) {
    return BufferView{buffer.data(), static_cast<std::size_t>(bytes / 4), DType::kFloat32, {}};
  };

  // Point-to-point: ranks 0 and 1 ping-pong; the others wait at the barrier.
  out.p2p = ping_pong(*comm, 0, 1, sizes, config.iterations, view, timeout);
  if (config.network) measure_pairs(*comm, world, sizes, config.iterations, view, timeout, out);

  // The collectives run over every rank, or across nodes over one rank per node (Note [Sharded
  // calibration across nodes]); the world's other ranks only pass the barriers.
  Communicator* group = comm.get();
  std::unique_ptr<Communicator> node_group;
  out.group_size = world.world_size;
  if (config.network && out.nodes > 1 && world.local_world_size > 1) {
    std::vector<int> members;
    for (int k = 0; k < out.nodes; ++k) members.push_back(k * world.local_world_size);
    node_group = comm->split(members);
    group = node_group.get();  // null on the other ranks
    out.group_size = out.nodes;
  }

  // All-reduce, on the kind of buffer DDP's buckets use (shared memory among the ranks of one
  // host with Gloo: Note [Shared-memory all-reduce]). The same registered buffer serves the
  // sharded collectives below.
  const std::vector<std::int64_t> sharded = sharded_calibration_sizes(sizes, out.group_size);
  const std::int64_t coll_bytes = std::max(max_bytes, sharded.back());
  std::shared_ptr<void> coll_mem;
  if (group) coll_mem = group->allocate_collective_buffer(static_cast<std::size_t>(coll_bytes));
  float* coll = static_cast<float*>(coll_mem.get());  // null on the ranks outside the group
  const auto n = static_cast<float>(out.group_size);
  out.allreduce = time_collective(
      *comm, group, "allreduce", sizes, config.iterations, timeout,
      [&](std::int64_t bytes) { std::fill_n(coll, bytes / 4, 1.0f); },
      [&](std::int64_t bytes, const OpContext& ctx) {
        return group->all_reduce(floats(coll, bytes), ReduceOp::kSum, ctx);
      },
      [&](std::int64_t bytes) {
        PW_CHECK(coll[0] == n && coll[bytes / 4 - 1] == n, BackendError,
                 "calibrate: all-reduce of " << bytes << " B returned " << coll[0] << " instead of "
                                             << out.group_size);
      });

  // ZeRO's reduce-scatters and all-gathers, on the registered buffer (ZeRO-1/2) and on private
  // memory (ZeRO-3), which Gloo runs on different paths (Note [Unregistered collectives] in
  // sim/src/network/network_model.cpp).
  std::vector<float> piece(static_cast<std::size_t>(sharded.back() / 4 / out.group_size));
  time_sharded(*comm, group, sharded, config.iterations, timeout, coll, piece.data(), true,
               out.reduce_scatter, out.all_gather);
  std::vector<float> whole(static_cast<std::size_t>(sharded.back() / 4));
  time_sharded(*comm, group, sharded, config.iterations, timeout, whole.data(), piece.data(), false,
               out.reduce_scatter_unregistered, out.all_gather_unregistered);
  comm->barrier({-1, -1, -1, "calibrate end"})->wait(timeout);
  return out;
}

}  // namespace pipewright::exec
