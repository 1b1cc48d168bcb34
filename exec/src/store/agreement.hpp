// Cross-rank agreement on the job (issue 20, item 4; Note [Job agreement] in agreement.cpp):
// every rank of a run must train the same job on the same model and data. Ranks started with
// different flags, model files, plans or data would otherwise hang to the timeout or silently
// train different things; with agreement every rank fails with the same ConfigError (exit 2)
// naming each field that differs and which ranks have which value.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/exec/run.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::exec {

class Communicator;

// One compared fact of a rank's job: a name ("microbatches", "model", "seed") and its value as
// text (a file as its content digest: "fnv1a64 0123456789abcdef, 812 bytes").
struct JobField {
  std::string name;
  std::string value;
  friend bool operator==(const JobField& a, const JobField& b) {
    return a.name == b.name && a.value == b.value;
  }
};
using JobFingerprint = std::vector<JobField>;

// The fields of this rank's resolved job: every field of sched::to_json(config) but the paths
// (model, partition, plan), which are compared by content instead (model and partition files,
// the lowered plan's bytes), then the executor settings that change what is trained or which
// collective calls happen (loss as resolved, seed, shuffle, init weights, data files by content,
// bundled dataset, resume, checkpoint cadence, replica checks, which outputs are written).
// Throws ConfigError when a file cannot be read.
[[nodiscard]] JobFingerprint job_fingerprint(const RunConfig& config,
                                             const sched::LoweredPlan& plan,
                                             std::string_view resolved_loss);

// "fnv1a64 <16 hex digits>, <N> bytes" of the file's content. Throws ConfigError naming `flag`
// and the path when it cannot be read.
[[nodiscard]] std::string file_digest(const std::string& path, std::string_view flag);

// The disagreements between the ranks' fingerprints (index = rank), one line per differing
// field in the order of rank 0's fields (then fields only other ranks have):
//   "microbatches: ranks 0,1 have 4, rank 2 has 8"
// A field a rank lacks counts as the value "(absent)". Empty when every rank agrees. Pure.
[[nodiscard]] std::vector<std::string> describe_disagreements(
    const std::vector<JobFingerprint>& per_rank);

// A short digest of the whole fingerprint (16 hex digits), presented at the rendezvous store
// (Note [Store protocol] in tcp_store_server.cpp).
[[nodiscard]] std::string fingerprint_digest(const JobFingerprint& fingerprint);

// Text form exchanged between ranks ("name=value\n" per field, newlines in values escaped) and
// back. decode(encode(f)) == f.
[[nodiscard]] std::string encode_fingerprint(const JobFingerprint& fingerprint);
[[nodiscard]] JobFingerprint decode_fingerprint(std::string_view text);

// Collective over `world` (every rank calls it once, right after the world communicator exists
// and before any other collective): exchanges a digest of `mine`, and only when the digests
// differ every rank's full field list. Returns when every rank agrees; otherwise throws the same
// ConfigError on every rank: "ranks disagree on the job: microbatches: ranks 0,1 have 4, rank 2
// has 8; ...". Communication failures propagate (TimeoutError, PeerError).
void agree_on_job(Communicator& world, const JobFingerprint& mine,
                  std::chrono::milliseconds timeout);

}  // namespace pipewright::exec
