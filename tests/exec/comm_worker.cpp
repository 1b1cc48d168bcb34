// A multi-process test driver for the communicators: run under `pipewright launch` (Gloo) or
// `mpirun` (MPI, or Gloo with MASTER_PORT exported). Every rank resolves the world from its
// environment, rendezvouses and checks send/recv, all_reduce, reduce, broadcast, barrier and
// split against closed-form results. Exit codes follow pipewright's contract (3 peer failure,
// 4 timeout, 1 check failure).
//
//   comm_worker --backend gloo|mpi [--timeout-ms T] [--mode checks|fault|fault-shared|absent]
//               [--victim R] [--absent R]
//   checks: all operations, then "rank R: all checks passed"
//   fault:  training-like loop of all_reduce + ring exchange; rank --victim SIGKILLs itself at
//           step 20; the others must fail with PeerError/TimeoutError
//   absent: rank --absent exits 0 at once without joining; the others fail at the rendezvous
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"

namespace pw = pipewright;
namespace ex = pipewright::exec;
using std::chrono::milliseconds;

namespace {

struct Args {
  std::string backend = "gloo";
  std::string mode = "checks";
  long timeout_ms = 30000;
  int victim = 1;
  int absent = -1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw pw::ConfigError("comm_worker: " + k + " needs a value");
      return argv[++i];
    };
    if (k == "--backend") {
      a.backend = value();
    } else if (k == "--mode") {
      a.mode = value();
    } else if (k == "--timeout-ms") {
      a.timeout_ms = std::stol(value());
    } else if (k == "--victim") {
      a.victim = std::stoi(value());
    } else if (k == "--absent") {
      a.absent = std::stoi(value());
    } else {
      throw pw::ConfigError("comm_worker: unknown argument " + k);
    }
  }
  return a;
}

int g_failures = 0;

#define CHECK_EQ_MSG(a, b, what)                                       \
  do {                                                                 \
    if (!((a) == (b))) {                                               \
      std::ostringstream os_;                                          \
      os_ << "check failed: " << what << ": " << (a) << " != " << (b); \
      std::cerr << os_.str() << std::endl;                             \
      ++g_failures;                                                    \
    }                                                                  \
  } while (false)

void run_checks(ex::Communicator& comm, milliseconds t) {
  const int n = comm.size(), me = comm.rank();
  // Ring send/recv in both directions, several tags in flight.
  for (int tag = 0; tag < 3; ++tag) {
    std::vector<float> out(1000, float(me * 10 + tag)), in(1000, -1), in2(1000, -1);
    auto s1 = comm.send({out.data(), out.size(), ex::DType::kFloat32}, (me + 1) % n, tag, {});
    auto s2 =
        comm.send({out.data(), out.size(), ex::DType::kFloat32}, (me + n - 1) % n, 100 + tag, {});
    auto r1 = comm.recv({in.data(), in.size(), ex::DType::kFloat32}, (me + n - 1) % n, tag, {});
    auto r2 = comm.recv({in2.data(), in2.size(), ex::DType::kFloat32}, (me + 1) % n, 100 + tag, {});
    r2->wait(t);
    r1->wait(t);
    s1->wait(t);
    s2->wait(t);
    CHECK_EQ_MSG(in[999], float(((me + n - 1) % n) * 10 + tag), "ring recv from left");
    CHECK_EQ_MSG(in2[0], float(((me + 1) % n) * 10 + tag), "ring recv from right");
  }
  // all_reduce over dtypes and ops, 1 MB of floats.
  std::vector<float> f(1 << 18);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = float(me + 1) * float(i % 7);
  comm.all_reduce({f.data(), f.size(), ex::DType::kFloat32}, ex::ReduceOp::kSum, {})->wait(t);
  const float tri = float(n * (n + 1) / 2);
  CHECK_EQ_MSG(f[5], tri * 5, "all_reduce float32 sum");
  CHECK_EQ_MSG(f[f.size() - 1], tri * float((f.size() - 1) % 7), "all_reduce float32 sum tail");
  std::vector<double> d{double(me), -double(me)};
  comm.all_reduce({d.data(), 2, ex::DType::kFloat64}, ex::ReduceOp::kMax, {})->wait(t);
  CHECK_EQ_MSG(d[0], double(n - 1), "all_reduce float64 max");
  CHECK_EQ_MSG(d[1], 0.0, "all_reduce float64 max (negatives)");
  std::vector<std::int64_t> l{me + 5};
  comm.all_reduce({l.data(), 1, ex::DType::kInt64}, ex::ReduceOp::kMin, {})->wait(t);
  CHECK_EQ_MSG(l[0], 5, "all_reduce int64 min");
  // A buffer from allocate_collective_buffer (shared memory among Gloo ranks of one host), 1 MB.
  {
    const std::size_t count = 1 << 18;
    auto mem = comm.allocate_collective_buffer(count * sizeof(float));
    auto* g = static_cast<float*>(mem.get());
    for (int round = 0; round < 2; ++round) {
      for (std::size_t i = 0; i < count; ++i) g[i] = float(me + 1) * float((i + round) % 7);
      comm.all_reduce({g, count, ex::DType::kFloat32}, ex::ReduceOp::kSum, {})->wait(t);
      CHECK_EQ_MSG(g[5], tri * float((5 + round) % 7), "collective-buffer all_reduce");
      CHECK_EQ_MSG(g[count - 1], tri * float((count - 1 + round) % 7),
                   "collective-buffer all_reduce tail");
    }
  }
  // reduce and broadcast from every root.
  for (int root = 0; root < n; ++root) {
    std::vector<std::int32_t> v{me, 1};
    comm.reduce({v.data(), 2, ex::DType::kInt32}, root, ex::ReduceOp::kSum, {})->wait(t);
    if (me == root) {
      CHECK_EQ_MSG(v[0], n * (n - 1) / 2, "reduce int32 sum at root");
      CHECK_EQ_MSG(v[1], n, "reduce int32 count at root");
    }
    std::vector<double> b(3, me == root ? 3.25 + root : 0.0);
    comm.broadcast({b.data(), 3, ex::DType::kFloat64}, root, {})->wait(t);
    CHECK_EQ_MSG(b[2], 3.25 + root, "broadcast float64");
  }
  comm.barrier({})->wait(t);
  // Sub-groups, created eagerly by every rank in one order: neighbours (pairs) and parity.
  std::vector<std::unique_ptr<ex::Communicator>> pairs;
  for (int r = 0; r + 1 < n; ++r) pairs.push_back(comm.split({r, r + 1}));
  std::vector<int> even, odd;
  for (int r = 0; r < n; ++r) (r % 2 == 0 ? even : odd).push_back(r);
  auto even_comm = comm.split(even);
  auto odd_comm = odd.empty() ? nullptr : comm.split(odd);
  for (int r = 0; r + 1 < n; ++r) {
    auto& pc = pairs[static_cast<std::size_t>(r)];
    const bool member = me == r || me == r + 1;
    CHECK_EQ_MSG(pc != nullptr, member, "pair membership");
    if (!pc) continue;
    std::vector<float> v{float(me)};
    pc->all_reduce({v.data(), 1, ex::DType::kFloat32}, ex::ReduceOp::kSum, {})->wait(t);
    CHECK_EQ_MSG(v[0], float(2 * r + 1), "pair all_reduce");
    std::vector<float> p{float(me)};
    if (pc->rank() == 0) {
      pc->send({p.data(), 1, ex::DType::kFloat32}, 1, 7, {})->wait(t);
    } else {
      pc->recv({p.data(), 1, ex::DType::kFloat32}, 0, 7, {})->wait(t);
      CHECK_EQ_MSG(p[0], float(r), "pair recv");
    }
  }
  ex::Communicator* parity = me % 2 == 0 ? even_comm.get() : odd_comm.get();
  if (parity == nullptr) {
    ++g_failures;
    std::cerr << "check failed: no parity communicator" << std::endl;
  } else {
    std::int64_t expect = 0;
    for (int r = me % 2; r < n; r += 2) expect += r;
    std::vector<std::int64_t> v{me};
    parity->all_reduce({v.data(), 1, ex::DType::kInt64}, ex::ReduceOp::kSum, {})->wait(t);
    CHECK_EQ_MSG(v[0], expect, "parity all_reduce");
    CHECK_EQ_MSG(parity->global_rank(parity->rank()), me, "parity global rank");
  }
  comm.barrier({})->wait(t);
}

// `shared`: only all-reduces of a collective buffer (shared memory under Gloo), no p2p.
void run_fault(ex::Communicator& comm, milliseconds t, int victim, bool shared) {
  const int n = comm.size(), me = comm.rank();
  std::vector<float> act(1 << 12), in(1 << 12);
  const std::size_t count = 1 << 16;
  auto mem = comm.allocate_collective_buffer(count * sizeof(float));
  float* grad = static_cast<float*>(mem.get());
  std::fill(grad, grad + count, 1.0f);
  for (int step = 0; step < 100000; ++step) {
    if (me == victim && step == 20) {
      std::cerr << "rank " << me << ": killing myself with SIGKILL at step " << step << std::endl;
      ::kill(::getpid(), SIGKILL);
    }
    if (!shared) {
      ex::OpContext ctx{step, me, 0, "SEND_F"};
      auto s = comm.send({act.data(), act.size(), ex::DType::kFloat32}, (me + 1) % n, 1, ctx);
      ctx.what = "RECV_F";
      comm.recv({in.data(), in.size(), ex::DType::kFloat32}, (me + n - 1) % n, 1, ctx)->wait(t);
      s->wait(t);
    }
    comm.all_reduce({grad, count, ex::DType::kFloat32}, ex::ReduceOp::kSum,
                    ex::OpContext{step, me, -1, "allreduce bucket 0"})
        ->wait(t);
    std::fill(grad, grad + count, 1.0f);
    std::this_thread::sleep_for(milliseconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1;
  try {
    const Args args = parse(argc, argv);
    const milliseconds timeout(args.timeout_ms);
    const ex::WorldInfo world = ex::resolve_world({}, ex::current_environment());
    rank = world.rank;
    if (args.mode == "absent" && world.rank == args.absent) {
      std::cout << "rank " << rank << ": not joining (absent)" << std::endl;
      return 0;
    }
    const ex::Backend backend = ex::parse_backend(args.backend);
    std::unique_ptr<ex::Store> store;
    if (backend == ex::Backend::kGloo) {
      store = ex::make_tcp_store(world, timeout);
      ex::rendezvous(*store, world, timeout);
    }
    ex::CommOptions opts;
    opts.timeout = timeout;
    auto comm = ex::make_communicator(backend, world, store.get(), opts);
    if (args.mode == "checks") {
      run_checks(*comm, timeout);
      if (g_failures != 0) {
        std::cerr << "rank " << rank << ": " << g_failures << " check(s) failed" << std::endl;
        return 1;
      }
      std::cout << "rank " << rank << ": all checks passed (" << comm->backend_name() << ", "
                << comm->size() << " ranks)" << std::endl;
    } else if (args.mode == "fault" || args.mode == "fault-shared") {
      run_fault(*comm, timeout, args.victim, args.mode == "fault-shared");
    } else if (args.mode == "absent") {
      comm->barrier({})->wait(timeout);
    } else {
      throw pw::ConfigError("comm_worker: unknown --mode " + args.mode);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": error: " << e.what() << std::endl;
    return pw::exit_code_for(e);
  }
}
