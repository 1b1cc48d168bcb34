#include "flags.hpp"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "run_only_flags.hpp"

namespace pipewright::cli {

std::int64_t parse_size(const std::string& text, const std::string& flag, std::int64_t min_bytes) {
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit;
  for (char c : text.substr(used)) {
    if (c != ' ') unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  struct Unit {
    const char* name;
    double scale;
  };
  static constexpr Unit kUnits[] = {
      {"", 1.0},
      {"b", 1.0},
      {"k", 1e3},
      {"kb", 1e3},
      {"m", 1e6},
      {"mb", 1e6},
      {"g", 1e9},
      {"gb", 1e9},
      {"t", 1e12},
      {"tb", 1e12},
      {"kib", 1024.0},
      {"mib", 1048576.0},
      {"gib", 1073741824.0},
      {"tib", 1099511627776.0},
  };
  double scale = 0.0;
  for (const Unit& u : kUnits) {
    if (unit == u.name) scale = u.scale;
  }
  const double bytes = value * scale;
  PW_CHECK(used > 0 && scale > 0.0 && std::isfinite(bytes) && bytes < 9.0e18, ConfigError,
           flag << ": cannot parse '" << text
                << "'; expected a size such as 80000000000, 80e9, 80GB or 74.5GiB");
  PW_CHECK(bytes >= static_cast<double>(min_bytes), ConfigError,
           flag << ": '" << text << "' is below the minimum of " << min_bytes << " bytes");
  return static_cast<std::int64_t>(bytes);
}

void appendf(std::string& out, const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  if (n < 0) return;
  if (static_cast<std::size_t>(n) < sizeof buf) {
    out.append(buf, static_cast<std::size_t>(n));
    return;
  }
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  va_start(args, format);
  std::vsnprintf(big.data(), big.size(), format, args);
  va_end(args);
  big.resize(static_cast<std::size_t>(n));
  out += big;
}

void warn_deprecated(const std::string& old_name, const std::string& new_name) {
  spdlog::warn("{} is deprecated; use {} (the old spelling will be removed in a later version)",
               old_name, new_name);
}

CLI::Option* add_deprecated_option(CLI::App* cmd, const std::string& old_name,
                                   const std::string& new_name,
                                   std::function<void(const std::string&)> set) {
  return cmd
      ->add_option_function<std::string>(
          old_name,
          [old_name, new_name, set = std::move(set)](const std::string& v) {
            warn_deprecated(old_name, new_name);
            set(v);
          },
          "deprecated: " + new_name)
      ->group("");
}

CLI::Option* add_deprecated_flag(CLI::App* cmd, const std::string& old_name,
                                 const std::string& new_name, std::function<void()> set) {
  return cmd
      ->add_flag_function(
          old_name,
          [old_name, new_name, set = std::move(set)](std::int64_t) {
            warn_deprecated(old_name, new_name);
            set();
          },
          "deprecated: " + new_name)
      ->group("");
}

CLI::Option* add_removed_flag(CLI::App* cmd, const std::string& old_name, const std::string& why) {
  return cmd
      ->add_flag_function(
          old_name,
          [old_name, why](std::int64_t) {
            spdlog::warn(
                "{} is deprecated and does nothing: {} (the old spelling will be removed in a "
                "later version)",
                old_name, why);
          },
          "deprecated: " + why)
      ->group("");
}

void add_recv_flags(CLI::App* cmd, std::string& recv, const std::string& group,
                    const std::string& description) {
  cmd->add_option("--recv", recv, description)
      ->check(CLI::IsMember({"posted", "blocking"}))
      ->capture_default_str()
      ->group(group);
  add_deprecated_flag(cmd, "--blocking-recv", "--recv blocking", [&recv] { recv = "blocking"; });
  add_deprecated_flag(cmd, "--posted-recv", "--recv posted", [&recv] { recv = "posted"; });
}

namespace {

// "simulate", "model gpt": the subcommand as typed after `pipewright`.
std::string command_path(const CLI::App& cmd) {
  std::string path = cmd.get_name();
  for (const CLI::App* p = cmd.get_parent(); p != nullptr && p->get_parent() != nullptr;
       p = p->get_parent()) {
    path = p->get_name() + " " + path;
  }
  return path;
}

}  // namespace

void add_run_only_guards(CLI::App& cmd) {
  for (CLI::App* sub : cmd.get_subcommands([](const CLI::App*) { return true; })) {
    add_run_only_guards(*sub);
  }
  for (const RunOnlyFlag& flag : kRunOnlyFlags) {
    const std::string name(flag.name);
    if (cmd.get_option_no_throw(name) != nullptr) continue;
    const std::string message =
        name + " is a run flag; " + command_path(cmd) + " " + std::string(flag.why);
    // A value is optional, so `--resume` and `--dataset sonnets` alike reach the message (and
    // the value is not taken for the command's positional argument).
    cmd.add_option_function<std::string>(
           name, [message](const std::string&) { throw ConfigError(message); },
           "run only: " + message)
        ->expected(0, 1)
        ->group("");
  }
}

int parse_int_flag(const std::string& text, const std::string& flag) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  PW_CHECK(used > 0 && used == text.size() && v >= -2147483648LL && v <= 2147483647LL, ConfigError,
           flag << ": expected an integer, got '" << text << "'");
  return static_cast<int>(v);
}

}  // namespace pipewright::cli
