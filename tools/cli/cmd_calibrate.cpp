// `pipewright calibrate --backend gloo|mpi --nproc N [-o cluster.json]` (default: stdout): measures
// point-to-point, all-reduce, reduce-scatter and all-gather times between N local ranks through
// pipewright's own communicators (exec/calibrate.hpp), fits the simulator's communication model
// (sim/calibration.hpp) and writes a cluster description that `pipewright
// simulate/compare/search --cluster` read: the point-to-point fit as its links, the all-reduce
// fit as its collective_links, and the reduce-scatter and all-gather fits (registered and
// private buffers) as its sharded_collective_links.
//
// The command re-executes itself: without --worker it replaces itself with
// `pipewright launch --nproc N -- pipewright calibrate --worker ...` (Gloo) or
// `mpirun -np N pipewright calibrate --worker ...` (MPI); every rank then runs the worker, and
// world rank 0 fits and writes the output. On several hosts, start the workers with your own
// launcher (`mpirun -np 16 -H a:8,b:8 pipewright calibrate --worker --backend mpi -o c.json`).
//
// --network (with --worker, under a multi-node launch): ping-pong between every pair of nodes
// and within every node too, and write a cluster whose intra_node / inter_node links are fitted
// from those (the median over nodes and over node pairs), with every pair's timings and fit in
// "calibration". Ranks are placed replica-major, as the executor places them.
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "exec_commands.hpp"
#include "pipewright/exec/calibrate.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/render.hpp"
#include "pipewright/sim/calibration.hpp"
#include "pipewright/sim/cluster.hpp"

namespace pipewright::cli {
namespace {

struct CalibrateArgs {
  std::string backend = "gloo";
  int nproc = 2;
  bool worker = false;
  std::string output = "-";
  std::string name;
  int iterations = 40;
  double max_mib = 16;
  double timeout_s = 120;
  bool network = false;
};

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  PW_CHECK(n > 0, InternalError, "calibrate: cannot resolve /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Runs `argv` (posix_spawnp: no fork of this process) with its stdout on our stderr, so that the
// JSON is the only thing this command writes to stdout; returns its exit status.
int spawn_and_wait(std::vector<char*>& argv) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  PW_CHECK(rc == 0, ConfigError,
           "calibrate: cannot start '" << argv[0] << "' (" << std::strerror(rc) << ")");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Without --worker: start the ranks. With -o FILE the launcher replaces this process; with the
// default -o - (stdout) rank 0 writes a temporary file that this process prints and removes.
[[noreturn]] void exec_ranks(const CalibrateArgs& a) {
  PW_CHECK(a.backend == "gloo" || a.backend == "mpi", ConfigError,
           "calibrate: --backend must be gloo or mpi, got '" << a.backend << "'");
  PW_CHECK(a.nproc >= 2, ConfigError, "calibrate: --nproc must be >= 2, got " << a.nproc);
  std::string output = a.output;
  if (a.output == "-") {
    char tmpl[] = "/tmp/pw_calibrate_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    PW_CHECK(fd >= 0, InputError, "calibrate: cannot create a temporary file in /tmp");
    ::close(fd);
    output = tmpl;
  }
  const std::string self = self_exe();
  std::vector<std::string> args;
  if (a.backend == "mpi") {
    args = {"mpirun",
            "-np",
            std::to_string(a.nproc),
            "--oversubscribe",
            "--bind-to",
            "none",
            "--mca",
            "btl_tcp_if_include",
            "lo",
            "--mca",
            "oob_tcp_if_include",
            "lo"};
    if (::geteuid() == 0) args.emplace_back("--allow-run-as-root");
  } else {
    args = {self, "launch", "--nproc", std::to_string(a.nproc), "--"};
  }
  // spdlog's names ("warning", "critical") are not all --log-level values.
  static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "error", "off"};
  const std::string level = kLevels[static_cast<int>(spdlog::get_level())];
  for (const std::string& s :
       {self, std::string("--log-level"), level, std::string("calibrate"), std::string("--worker"),
        std::string("--backend"), a.backend, std::string("-o"), output, std::string("--iterations"),
        std::to_string(a.iterations), std::string("--max-mib"), fmt(a.max_mib),
        std::string("--timeout"), fmt(a.timeout_s)}) {
    args.push_back(s);
  }
  if (!a.name.empty()) {
    args.emplace_back("--name");
    args.push_back(a.name);
  }
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  if (a.output == "-") {
    int code = 1;
    try {
      code = spawn_and_wait(argv);
    } catch (...) {
      ::unlink(output.c_str());
      throw;
    }
    std::ifstream in(output);
    std::stringstream content;
    content << in.rdbuf();
    ::unlink(output.c_str());
    if (code != 0) throw ExitStatus{code};  // the ranks named what failed on stderr
    write_output("-", content.str());
    throw ExitStatus{0};
  }
  ::execvp(argv[0], argv.data());
  throw ConfigError("calibrate: cannot start '" + args[0] + "' (" + std::strerror(errno) + ")" +
                    (a.backend == "mpi" ? "; is Open MPI's mpirun installed?" : ""));
}

std::int64_t host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024;
  }
  return 0;
}

nlohmann::json timings_json(const std::vector<exec::SizeTiming>& ts) {
  auto arr = nlohmann::json::array();
  for (const auto& t : ts) {
    arr.push_back({{"bytes", t.bytes},
                   {"median_ms", t.median_ms},
                   {"p10_ms", t.p10_ms},
                   {"p90_ms", t.p90_ms},
                   {"samples", t.samples}});
  }
  return arr;
}

std::vector<sim::TimingPoint> points(const std::vector<exec::SizeTiming>& ts) {
  std::vector<sim::TimingPoint> p;
  for (const auto& t : ts) p.push_back({t.bytes, t.median_ms});
  return p;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Note [Pair fit]: one pair's link: latency = the median one-way time of the messages up to
// 4 KiB, bandwidth = the slope between the two largest sizes. A least-squares fit over every size
// (sim::fit_p2p) weighs the many small, noisy messages of a shared machine as much as the large
// ones that show the link's rate, and on a shaped 100 Mbit/s link gave 90-250 Mbit/s from run to
// run; the slope gives the shaped rate within a few percent.
sim::Link pair_link(const std::vector<exec::SizeTiming>& t) {
  std::vector<double> small;
  for (const auto& x : t) {
    if (x.bytes <= 4096) small.push_back(x.median_ms);
  }
  sim::Link l;
  l.latency_ms = small.empty() ? t.front().median_ms : median(small);
  if (t.size() >= 2) {
    const auto& a = t[t.size() - 2];
    const auto& b = t.back();
    const double dt_ms = b.median_ms - a.median_ms;
    // Noise can make the larger message the faster one (a fast link on a busy host): then the
    // largest message's own rate.
    l.bandwidth_gb_per_s = dt_ms > 0 ? static_cast<double>(b.bytes - a.bytes) / dt_ms * 1e-6
                                     : static_cast<double>(b.bytes) / b.median_ms * 1e-6;
  }
  return l;
}

// --network: the cluster's links from the node pairs (median of each pair's fitted latency and
// bandwidth), the pairs recorded in `record`.
void network_links(const exec::CommunicationMeasurements& m, sim::Cluster& c,
                   nlohmann::json& record) {
  std::vector<double> intra_lat, intra_bw, inter_lat, inter_bw, loads;
  auto pairs = nlohmann::json::array();
  for (const auto& p : m.pairs) {
    sim::LinkFit fit;
    fit.link = pair_link(p.p2p);
    const bool intra = p.node_a == p.node_b;
    (intra ? intra_lat : inter_lat).push_back(fit.link.latency_ms);
    (intra ? intra_bw : inter_bw).push_back(fit.link.bandwidth_gb_per_s);
    spdlog::info("{} node {} <-> node {} (ranks {}, {}): latency {:.4f} ms, bandwidth {:.4f} GB/s",
                 intra ? "within" : "between", p.node_a, p.node_b, p.rank_a, p.rank_b,
                 fit.link.latency_ms, fit.link.bandwidth_gb_per_s);
    pairs.push_back({{"node_a", p.node_a},
                     {"node_b", p.node_b},
                     {"rank_a", p.rank_a},
                     {"rank_b", p.rank_b},
                     {"latency_ms", fit.link.latency_ms},
                     {"bandwidth_gb_per_s", fit.link.bandwidth_gb_per_s},
                     {"p2p", timings_json(p.p2p)}});
    // Note [Compute beside a send, measured] (exec/calibrate.hpp): >= 5 probes beside the message.
    const auto& bs = p.beside_send;
    if (!intra && bs.samples >= 5 && bs.idle_ms > 0) {
      const double load = std::max(0.0, bs.busy_ms / bs.idle_ms - 1);
      loads.push_back(load);
      pairs.back()["beside_send"] = {{"bytes", bs.bytes},
                                     {"idle_ms", bs.idle_ms},
                                     {"busy_ms", bs.busy_ms},
                                     {"samples", bs.samples},
                                     {"cpu_load", load}};
      spdlog::info(
          "between node {} and node {}: a probe took {:.3f} ms alone and {:.3f} ms beside "
          "a {} message (median of {}): send_cpu_load {:.3f}",
          p.node_a, p.node_b, bs.idle_ms, bs.busy_ms, graph::human_bytes(bs.bytes), bs.samples,
          load);
    }
  }
  if (!loads.empty()) c.send_cpu_load = median(loads);
  c.nodes = m.nodes;
  c.ranks_per_node = std::max(1, m.local_world_size);
  c.placement =
      sim::Placement::kReplicaMajor;  // rank = replica * pp + stage (exec/src/dp/mesh.cpp)
  if (!inter_lat.empty()) c.inter_node = {median(inter_lat), median(inter_bw)};
  if (!intra_lat.empty()) c.intra_node = {median(intra_lat), median(intra_bw)};
  // The all-reduce over every rank spans the nodes: it is the inter-node collective; within a
  // node, the point-to-point link. So are the sharded collectives: their fits are inter-node
  // links, and within a node the collective link prices them.
  c.collective_intra_node.reset();
  for (sim::CollectiveLinks* l :
       {&c.sharded_links.reduce_scatter, &c.sharded_links.all_gather,
        &c.sharded_links.reduce_scatter_unregistered, &c.sharded_links.all_gather_unregistered}) {
    if (m.nodes > 1) {
      l->inter_node = l->intra_node;
      l->intra_node.reset();
    }
  }
  if (m.nodes > 1 && intra_lat.empty()) c.intra_node = c.inter_node;  // not measured: 1 rank/node
  record["nodes"] = m.nodes;
  record["pairs"] = pairs;
}

void run_worker(const CalibrateArgs& a) {
  PW_CHECK(a.max_mib > 0 && a.max_mib <= 1024, ConfigError,
           "calibrate: --max-mib must be in (0, 1024], got " << a.max_mib);
  exec::CalibrationConfig cfg;
  cfg.backend = a.backend;
  cfg.iterations = a.iterations;
  cfg.network = a.network;
  cfg.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000));
  const auto max_bytes = static_cast<std::int64_t>(a.max_mib * 1024 * 1024);
  for (std::int64_t b = 4; b <= max_bytes; b *= 4) cfg.sizes.push_back(b);
  const exec::CommunicationMeasurements m = exec::measure_communication(cfg);
  if (m.world_rank != 0) return;

  const sim::LinkFit p2p = sim::fit_p2p(points(m.p2p));
  // Across nodes the collectives ran over one rank per node (Note [Sharded calibration across
  // nodes] in exec/calibrate.hpp) and are fitted as links (Note [Link fit of sharded
  // collectives]).
  const int group = m.group_size > 0 ? m.group_size : m.world_size;
  const sim::LinkFit ar = m.nodes > 1 ? sim::fit_ring_allreduce_link(points(m.allreduce), group)
                                      : sim::fit_ring_allreduce(points(m.allreduce), group);
  spdlog::info("calibrate: {} ranks over {} (collectives over {})", m.world_size, m.backend, group);
  spdlog::info("{:>10} {:>12} {:>12} {:>14} {:>12}", "message", "p2p_ms", "p2p_fit_ms",
               "allreduce_ms", "ar_fit_ms");
  for (std::size_t i = 0; i < m.p2p.size(); ++i) {
    const double b = static_cast<double>(m.p2p[i].bytes);
    const double p2p_fit =
        p2p.link.latency_ms +
        (p2p.link.bandwidth_gb_per_s > 0 ? b / p2p.link.bandwidth_gb_per_s * 1e-6 : 0);
    const double n = group;
    const double ar_fit =
        2 * (n - 1) * ar.link.latency_ms +
        (ar.link.bandwidth_gb_per_s > 0 ? 2 * (n - 1) / n * b / ar.link.bandwidth_gb_per_s * 1e-6
                                        : 0);
    spdlog::info("{:>10} {:>12.4f} {:>12.4f} {:>14.4f} {:>12.4f}",
                 graph::human_bytes(m.p2p[i].bytes), m.p2p[i].median_ms, p2p_fit,
                 m.allreduce[i].median_ms, ar_fit);
  }
  spdlog::info(
      "p2p: latency {:.4f} ms, bandwidth {:.3f} GB/s (fit error mean {:.1f}%, max {:.1f}%); "
      "ring all-reduce: latency {:.4f} ms, bandwidth {:.3f} GB/s (mean {:.1f}%, max {:.1f}%)",
      p2p.link.latency_ms, p2p.link.bandwidth_gb_per_s, 100 * p2p.mean_abs_relative_error,
      100 * p2p.max_abs_relative_error, ar.link.latency_ms, ar.link.bandwidth_gb_per_s,
      100 * ar.mean_abs_relative_error, 100 * ar.max_abs_relative_error);

  // ZeRO's collectives (Note [Unregistered collectives] in sim/src/network/network_model.cpp):
  // each fitted to the ring's one pass, at the sizes rounded to equal pieces.
  struct Sharded {
    const char* name;
    const std::vector<exec::SizeTiming>* timings;
    sim::CollectiveLinks sim::ShardedCollectiveLinks::*links;
    sim::LinkFit fit;
  };
  Sharded sharded[] = {
      {"reduce_scatter", &m.reduce_scatter, &sim::ShardedCollectiveLinks::reduce_scatter, {}},
      {"all_gather", &m.all_gather, &sim::ShardedCollectiveLinks::all_gather, {}},
      {"reduce_scatter_unregistered",
       &m.reduce_scatter_unregistered,
       &sim::ShardedCollectiveLinks::reduce_scatter_unregistered,
       {}},
      {"all_gather_unregistered",
       &m.all_gather_unregistered,
       &sim::ShardedCollectiveLinks::all_gather_unregistered,
       {}}};
  spdlog::info(
      "{:>10} {:>14} {:>14} {:>14} {:>14}  (ms over {} ranks; sizes rounded to {} equal "
      "pieces)",
      "buffer", "reduce_scatter", "all_gather", "rs_private", "ag_private", group, group);
  for (std::size_t i = 0; i < m.reduce_scatter.size(); ++i) {
    spdlog::info("{:>10} {:>14.4f} {:>14.4f} {:>14.4f} {:>14.4f}",
                 graph::human_bytes(m.reduce_scatter[i].bytes), m.reduce_scatter[i].median_ms,
                 m.all_gather[i].median_ms, m.reduce_scatter_unregistered[i].median_ms,
                 m.all_gather_unregistered[i].median_ms);
  }
  for (auto& x : sharded) {
    x.fit = m.nodes > 1 ? sim::fit_ring_one_pass_link(points(*x.timings), group)
                        : sim::fit_ring_one_pass(points(*x.timings), group);
    spdlog::info(
        "{}: latency {:.4f} ms, bandwidth {:.3f} GB/s (fit error mean {:.1f}%, max {:.1f}%)",
        x.name, x.fit.link.latency_ms, x.fit.link.bandwidth_gb_per_s,
        100 * x.fit.mean_abs_relative_error, 100 * x.fit.max_abs_relative_error);
  }

  sim::Cluster c;
  const int per_node = std::max(1, m.local_world_size);
  c.name = a.name.empty() ? "calibrated-" + m.backend + "-" + std::to_string(m.world_size) + "ranks"
                          : a.name;
  c.nodes = (m.world_size + per_node - 1) / per_node;
  // One host: any number of ranks may share it (ranks_per_node 0), so the cluster also serves
  // runs with more ranks than were calibrated (p = 4 from a 2-rank calibration).
  c.ranks_per_node = c.nodes == 1 ? 0 : per_node;
  // A CPU rank's "device" memory: its share of the host's memory.
  c.device_memory_bytes = host_memory_bytes() / per_node;
  // CPU backends compute on the host's cores, which its ranks share (Note [Shared cores]).
  c.cores_per_node = m.backend == "nccl" ? 0 : m.cpus;
  c.intra_node = p2p.link;
  c.inter_node = p2p.link;  // measured between ranks 0 and 1 (one node when launched locally)
  c.collective_intra_node = ar.link;
  c.collective_inter_node = ar.link;
  // Measured within this node: the intra-node links; across nodes the collective link stays
  // (network_links moves them to inter_node when --network measured across nodes).
  auto sharded_record = nlohmann::json::object();
  for (const auto& x : sharded) {
    (c.sharded_links.*x.links).intra_node = x.fit.link;
    sharded_record[x.name] = {
        {"timings", timings_json(*x.timings)},
        {"ranks", group},
        {"fit_error",
         {{"mean", x.fit.mean_abs_relative_error}, {"max", x.fit.max_abs_relative_error}}}};
  }
  const nlohmann::json record{
      {"tool", "pipewright calibrate"},
      {"backend", m.backend},
      {"ranks", m.world_size},
      {"ranks_per_node", per_node},
      {"p2p", timings_json(m.p2p)},
      {"allreduce", timings_json(m.allreduce)},
      {"allreduce_ranks", group},
      {"p2p_fit_error",
       {{"mean", p2p.mean_abs_relative_error}, {"max", p2p.max_abs_relative_error}}},
      {"allreduce_fit_error",
       {{"mean", ar.mean_abs_relative_error}, {"max", ar.max_abs_relative_error}}},
      {"sharded_collectives", sharded_record}};
  if (a.network) {
    nlohmann::json rec = record;
    network_links(m, c, rec);
    c.calibration_json = rec.dump();
  } else {
    c.calibration_json = record.dump();
  }
  write_output(a.output, sim::to_json(c));
  if (a.output != "-") spdlog::info("wrote {}", a.output);
}

void setup_calibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand("calibrate", std::string(exec_command_description("calibrate")));
  cmd->add_option("--backend", a->backend, "gloo|mpi")->capture_default_str();
  cmd->add_option("--nproc-per-node,--nproc", a->nproc, "local ranks to start (>= 2)")
      ->capture_default_str();
  cmd->add_option("-o,--output", a->output, "cluster JSON to write (default: stdout)");
  cmd->add_option("--name", a->name, "cluster name (default calibrated-<backend>-<N>ranks)");
  cmd->add_option("--iterations", a->iterations, "timed repetitions per message size")
      ->capture_default_str();
  cmd->add_option("--max-mib", a->max_mib, "largest message, MiB (sizes are powers of 4 from 4 B)")
      ->capture_default_str();
  cmd->add_option("--timeout", a->timeout_s, "deadline of every wait, seconds")
      ->capture_default_str();
  cmd->add_flag("--worker", a->worker,
                "run as one rank of an already launched job (used by calibrate itself, or under "
                "your own mpirun/torchrun on several hosts)");
  cmd->add_flag("--network", a->network,
                "also measure every pair of nodes and within every node, and fit the cluster's "
                "intra_node / inter_node links from them; ZeRO's collectives over one rank per "
                "node, as a job's data-parallel groups; send_cpu_load, how much slower rank 0 "
                "computes while its message crosses to node 1 (with --worker under a multi-node "
                "launch)");
  cmd->callback([a] {
    PW_CHECK(!a->network || a->worker, ConfigError,
             "calibrate --network measures between nodes: start it on every node, e.g. "
             "`pipewright launch --nnodes N --node-rank K --nproc-per-node P --master-addr A -- "
             "pipewright calibrate --worker --network -o cluster.json`");
    if (a->worker) {
      run_worker(*a);
    } else {
      exec_ranks(*a);
    }
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_calibrate);

}  // namespace pipewright::cli
