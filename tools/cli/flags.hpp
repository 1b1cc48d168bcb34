// One vocabulary for the CLI (issue 25, docs/cli.md): helpers every subcommand uses to spell the
// same thing the same way, take sizes in the same units, and keep old spellings working with a
// one-line deprecation note.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace pipewright::cli {

// "80000000000", "80e9", "16GiB", "512MB", "1.5 GiB" -> bytes (decimal kB/MB/GB/TB, binary
// KiB/MiB/GiB/TiB, case-insensitive, optional "B"). Throws ConfigError naming `flag` for text
// that does not parse or a size below `min_bytes`.
[[nodiscard]] std::int64_t parse_size(const std::string& text, const std::string& flag,
                                      std::int64_t min_bytes = 1);

// printf into a string: the text reports that go to stdout or to -o FILE.
void appendf(std::string& out, const char* format, ...) __attribute__((format(printf, 2, 3)));

// The one-line note printed (spdlog warn, stderr) when a deprecated spelling is used:
// "--ranks is deprecated; use --pp (the old spelling will be removed in a later version)".
void warn_deprecated(const std::string& old_name, const std::string& new_name);

// Adds `old_name` (e.g. "--ranks" or "-s") as a hidden option that takes one value, warns with
// warn_deprecated and hands the value to `set`. Hidden options have an empty group: they are not
// in --help, and `run`'s --config file format does not list them (check_config_covers).
CLI::Option* add_deprecated_option(CLI::App* cmd, const std::string& old_name,
                                   const std::string& new_name,
                                   std::function<void(const std::string&)> set);
// The same for a flag that takes no value.
CLI::Option* add_deprecated_flag(CLI::App* cmd, const std::string& old_name,
                                 const std::string& new_name, std::function<void()> set);

// Adds `old_name`, a flag whose effect is now always on (or gone), as a hidden flag that prints
// "--reduce-grad is deprecated and does nothing: <why> (the old spelling will be removed in a
// later version)" and lets the command go on; scripts that pass it keep working for a release
// (docs/cli.md, "Old spellings").
CLI::Option* add_removed_flag(CLI::App* cmd, const std::string& old_name, const std::string& why);

// --recv posted|blocking (receive semantics of the simulated plan) into `recv`, whose value is
// the command's default, with the deprecated flags --blocking-recv and --posted-recv.
void add_recv_flags(CLI::App* cmd, std::string& recv, const std::string& group,
                    const std::string& description);

// An integer value of a deprecated option ("--ranks 4"), checked as CLI11 checks --pp's.
[[nodiscard]] int parse_int_flag(const std::string& text, const std::string& flag);

}  // namespace pipewright::cli
