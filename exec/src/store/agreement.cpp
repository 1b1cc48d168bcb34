// Cross-rank agreement on the job (see agreement.hpp).
//
// Note [Job agreement]
// What is compared: every field of the resolved job (sched::to_json, every default filled) except
// the three paths, which may legitimately differ between hosts; the model and partition files
// and the lowered plan are compared by content instead. Then the executor settings that change
// what is trained (loss as resolved from --loss or the model, seed, shuffle, initial weights and
// data files by content, the bundled dataset) or which collective calls a rank makes (resume,
// checkpoint cadence, replica checks, warm-up steps, which of --save/--trace/--profile/
// --checkpoint-dir are given, shared-memory collectives): a rank that differs in one of those
// would wait for a message no peer sends. Files are hashed whole (FNV-1a, 64 bits) with their
// size: contents are what matters, and paths and mtimes differ across hosts.
//
// How and when: over the world communicator, right after it is created and before the mesh (whose
// sub-communicators depend on --pp/--dp) or any other collective, so it works the same for Gloo,
// NCCL and MPI (MPI has no TCP store). Round 1 all-gathers (as an all-reduce sum of a
// world_size x 2 int64 table where each rank fills its own row) the digest of each rank's encoded
// field list and its length. If every digest is equal the run goes on: one small collective per
// run. Otherwise round 2 all-gathers every rank's encoded field list (packed into int64 words,
// padded to the longest) and every rank computes the same description and throws the same
// ConfigError, so all ranks exit 2 together, within the time of two collectives.
#include "store/agreement.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "pipewright/exec/communicator.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "pipewright/sched/plan_io.hpp"

namespace pipewright::exec {

namespace {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

std::uint64_t fnv1a(std::string_view bytes, std::uint64_t h = kFnvOffset) {
  for (unsigned char ch : bytes) h = (h ^ ch) * kFnvPrime;
  return h;
}

std::string hex64(std::uint64_t v) {
  std::ostringstream os;
  os << std::hex;
  os.width(16);
  os.fill('0');
  os << v;
  return os.str();
}

std::string text_digest(std::string_view text) {
  return "fnv1a64 " + hex64(fnv1a(text)) + ", " + std::to_string(text.size()) + " bytes";
}

std::string given(const std::string& path) { return path.empty() ? "no" : "yes"; }

// The job's canonical JSON as (key, value) pairs: one `"key": value,` per line.
std::vector<JobField> job_fields(const sched::JobSpec& job) {
  std::vector<JobField> out;
  std::istringstream in(sched::to_json(job));
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find("\": ");
    const auto quote = line.find('"');
    if (colon == std::string::npos || quote == std::string::npos || quote >= colon) continue;
    std::string value = line.substr(colon + 3);
    if (!value.empty() && value.back() == ',') value.pop_back();
    out.push_back({line.substr(quote + 1, colon - quote - 1), value});
  }
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

BufferView i64s(std::vector<std::int64_t>& v) {
  return BufferView{v.data(), v.size(), DType::kInt64, {}};
}

}  // namespace

std::string fingerprint_digest(const JobFingerprint& fingerprint) {
  return hex64(fnv1a(encode_fingerprint(fingerprint)));
}

std::string file_digest(const std::string& path, std::string_view flag) {
  // A FIFO or a device has no size and may never end (issue 20, item 7).
  try {
    (void)json::check_input_file(path,
                                 std::string(flag.substr(flag.find_first_not_of('-'))) + " file",
                                 std::numeric_limits<std::uint64_t>::max());
  } catch (const InputError& e) {
    throw ConfigError(std::string(flag) + " " + e.what());
  }
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in.good(), ConfigError, flag << " " << path << ": cannot be read");
  std::uint64_t h = kFnvOffset;
  std::uint64_t size = 0;
  std::vector<char> buf(std::size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    h = fnv1a(std::string_view(buf.data(), n), h);
    size += n;
  }
  PW_CHECK(in.eof(), ConfigError, flag << " " << path << ": read failed");
  return "fnv1a64 " + hex64(h) + ", " + std::to_string(size) + " bytes";
}

JobFingerprint job_fingerprint(const RunConfig& c, const sched::LoweredPlan& plan,
                               std::string_view resolved_loss) {
  JobFingerprint f;
  for (auto& field : job_fields(c)) {
    if (field.name == "model" || field.name == "partition" || field.name == "plan") continue;
    f.push_back(std::move(field));
  }
  f.push_back({"model", file_digest(c.model_path, "--model")});
  f.push_back({"partition",
               c.partition_path.empty() ? "(none)" : file_digest(c.partition_path, "--partition")});
  // JSON, which carries the whole plan: a CSV has no shape (stage_to_model_stage, the stage DAG)
  // and refuses plans it cannot carry (Note [What a CSV carries]), a one-rank plan among them.
  f.push_back({"plan (lowered)", text_digest(sched::to_json(plan))});
  f.push_back({"loss", std::string(resolved_loss)});
  f.push_back({"seed", std::to_string(c.seed)});
  f.push_back({"shuffle", c.shuffle ? "true" : "false"});
  f.push_back({"init", c.init_path.empty() ? "(none)" : file_digest(c.init_path, "--init")});
  f.push_back({"data_x", c.data_x.empty() ? "(none)" : file_digest(c.data_x, "--data-x")});
  f.push_back({"data_y", c.data_y.empty() ? "(none)" : file_digest(c.data_y, "--data-y")});
  f.push_back({"dataset", c.dataset.empty() ? "(none)" : c.dataset});
  f.push_back({"resume", c.resume ? "true" : "false"});
  f.push_back({"checkpoint_dir given", given(c.checkpoint_dir)});
  f.push_back({"checkpoint_every", std::to_string(c.checkpoint_every)});
  f.push_back({"check_replicas", std::to_string(c.check_replicas)});
  f.push_back({"warmup_steps", std::to_string(c.warmup_steps)});
  f.push_back({"save given", given(c.save_path)});
  f.push_back({"save_replicas", c.save_replicas ? "true" : "false"});
  f.push_back({"trace given", given(c.trace_path)});
  f.push_back({"profile given", given(c.profile_path)});
  f.push_back({"backend", std::string(to_string(c.backend))});
  f.push_back({"shm_collectives", c.shm_collectives ? "true" : "false"});
  f.push_back({"shm_p2p", c.shm_p2p ? "true" : "false"});
  return f;
}

std::vector<std::string> describe_disagreements(const std::vector<JobFingerprint>& per_rank) {
  // Field names in order of first appearance (rank 0's order first).
  std::vector<std::string> names;
  std::vector<std::map<std::string, std::string>> values(per_rank.size());
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (const auto& field : per_rank[r]) {
      if (std::find(names.begin(), names.end(), field.name) == names.end())
        names.push_back(field.name);
      values[r].emplace(field.name, field.value);
    }
  }
  std::vector<std::string> out;
  for (const auto& name : names) {
    // Distinct values in order of the lowest rank that has each, with their ranks.
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (std::size_t r = 0; r < per_rank.size(); ++r) {
      auto it = values[r].find(name);
      const std::string v = it == values[r].end() ? "(absent)" : it->second;
      auto g =
          std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == v; });
      if (g == groups.end()) {
        groups.push_back({v, {static_cast<int>(r)}});
      } else {
        g->second.push_back(static_cast<int>(r));
      }
    }
    if (groups.size() <= 1) continue;
    std::string line = name + ": ";
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const auto& [v, ranks] = groups[i];
      line += (i ? ", " : "") + rank_list(ranks) + (ranks.size() == 1 ? " has " : " have ") + v;
    }
    out.push_back(line);
  }
  return out;
}

std::string encode_fingerprint(const JobFingerprint& fingerprint) {
  std::string out;
  for (const auto& [name, value] : fingerprint) {
    out += name;
    out += '=';
    for (char ch : value) {
      if (ch == '\\') {
        out += "\\\\";
      } else if (ch == '\n') {
        out += "\\n";
      } else {
        out += ch;
      }
    }
    out += '\n';
  }
  return out;
}

JobFingerprint decode_fingerprint(std::string_view text) {
  JobFingerprint out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    JobField field{std::string(line.substr(0, eq)), {}};
    for (std::size_t i = eq + 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        field.value += line[i + 1] == 'n' ? '\n' : line[i + 1];
        ++i;
      } else {
        field.value += line[i];
      }
    }
    out.push_back(std::move(field));
  }
  return out;
}

void agree_on_job(Communicator& world, const JobFingerprint& mine,
                  std::chrono::milliseconds timeout) {
  const int n = world.size();
  const int me = world.rank();
  const std::string text = encode_fingerprint(mine);
  // Round 1: (digest, length) of every rank, all-gathered as a sum where only row `me` is set.
  std::vector<std::int64_t> table(static_cast<std::size_t>(2 * n), 0);
  const std::uint64_t digest = fnv1a(text);
  std::int64_t signed_digest = 0;
  std::memcpy(&signed_digest, &digest, sizeof digest);
  table[static_cast<std::size_t>(2 * me)] = signed_digest;
  table[static_cast<std::size_t>(2 * me + 1)] = static_cast<std::int64_t>(text.size());
  world.all_reduce(i64s(table), ReduceOp::kSum, OpContext{-1, -1, -1, "job agreement"})
      ->wait(timeout);
  bool agree = true;
  std::int64_t longest = 0;
  for (int r = 0; r < n; ++r) {
    agree = agree && table[static_cast<std::size_t>(2 * r)] == table[0] &&
            table[static_cast<std::size_t>(2 * r + 1)] == table[1];
    longest = std::max(longest, table[static_cast<std::size_t>(2 * r + 1)]);
  }
  if (agree) return;
  // Round 2: every rank's text, packed into int64 words, one padded row per rank.
  const auto words = static_cast<std::size_t>((longest + 7) / 8);
  std::vector<std::int64_t> rows(words * static_cast<std::size_t>(n), 0);
  std::memcpy(rows.data() + words * static_cast<std::size_t>(me), text.data(), text.size());
  world.all_reduce(i64s(rows), ReduceOp::kSum, OpContext{-1, -1, -1, "job agreement (fields)"})
      ->wait(timeout);
  std::vector<JobFingerprint> all;
  for (int r = 0; r < n; ++r) {
    const auto len = static_cast<std::size_t>(table[static_cast<std::size_t>(2 * r + 1)]);
    const char* row =
        reinterpret_cast<const char*>(rows.data() + words * static_cast<std::size_t>(r));
    all.push_back(decode_fingerprint(std::string_view(row, len)));
  }
  auto lines = describe_disagreements(all);
  // Equal field lists with different digests cannot happen (the digest is of the text); say so
  // rather than pass silently.
  if (lines.empty()) lines.push_back("the fingerprints differ but no field does (internal)");
  std::string msg =
      "ranks disagree on the job (start every rank with the same flags, model "
      "and data): ";
  for (std::size_t i = 0; i < lines.size(); ++i) msg += (i ? "; " : "") + lines[i];
  throw ConfigError(msg);
}

}  // namespace pipewright::exec
