// The pipewright CLI: git-style subcommands (CLI11). This file is the one place that maps
// pipewright errors to exit codes (0 ok, 2 bad input/config, 3 peer failure, 4 timeout,
// 1 internal) and prints the one-line message. Logs go to stderr (spdlog); results go to files
// or stdout.
//
// Built twice (docs/architecture.md, "Two binaries, one command"): as `pipewright`, the front end
// with every offline subcommand, linked without libtorch/MPI/Gloo/NCCL/CUDA; and, with
// PIPEWRIGHT_EXECUTOR_BINARY defined, as `pipewright-exec`, with the subcommands that need the
// executor (exec_commands.hpp) plus `launch`. The front end execs pipewright-exec, with the same
// arguments, when one of those subcommands is named.
#include <limits.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "exec_commands.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/version.hpp"
#include "run_only_flags.hpp"

namespace {

std::string valid_subcommands(const CLI::App& app) {
  std::string out;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!out.empty()) out += ", ";
    out += sub->get_name();
  }
  return out;
}

bool has_subcommand(const CLI::App& app, const std::string& name) {
  auto subs = app.get_subcommands([&name](const CLI::App* sub) { return sub->check_name(name); });
  return !subs.empty();
}

// Global options (--log-level) are accepted after the subcommand (and its subcommands) too.
void set_fallthrough(CLI::App& app) {
  for (auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    sub->fallthrough();
    set_fallthrough(*sub);
  }
}

// The one-line error, written with one write(2): a message written in pieces (std::cerr is
// unbuffered) could be cut after its prefix when the launcher stops this rank mid-way, leaving
// a bare "pipewright: error: " (issue 20, item 6).
// Control characters that came from input (a terminal escape in a plan cell, a key, a path) are
// written as \xHH, so an error message cannot drive the terminal (issue 20, item 7); newlines
// separate the lines of multi-line messages and stay.
void print_error(const char* prefix, const std::string& what) {
  std::string line = prefix;
  for (const char ch : what) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      line += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    } else {
      line += ch;
    }
  }
  line += "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

#ifndef PIPEWRIGHT_EXECUTOR_BINARY
// Index in argv of the subcommand: the first argument that is not a global option or its value
// (0 if there is none).
int subcommand_index(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--log-level") {
      ++i;
    } else if (a.empty() || a[0] != '-') {
      return i;
    }
  }
  return 0;
}

bool is_executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

// The executor binary: $PIPEWRIGHT_EXEC_BINARY, else beside this program, else in an installed
// prefix's libexec/pipewright/. Empty if none is found.
std::string find_exec_binary() {
  if (const char* env = std::getenv("PIPEWRIGHT_EXEC_BINARY"); env != nullptr && *env != '\0') {
    return env;  // checked by the caller, which names the variable
  }
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  std::string dir(buf, static_cast<std::size_t>(n));
  dir.erase(dir.rfind('/') + 1);
  const std::string name(pipewright::cli::kExecBinaryName);
  for (const std::string& candidate : {dir + name, dir + "../libexec/pipewright/" + name}) {
    if (is_executable(candidate)) return candidate;
  }
  return {};
}

// `pipewright run|calibrate|dataset ...`: becomes pipewright-exec with the same arguments (argv[0]
// kept, so its messages still say "pipewright"). Returns only on failure, with the exit code.
int forward_to_exec_binary(const std::string& subcommand, char** argv) {
  const std::string path = find_exec_binary();
  if (const char* env = std::getenv("PIPEWRIGHT_EXEC_BINARY");
      env != nullptr && *env != '\0' && !is_executable(path)) {
    std::cerr << "pipewright: error: PIPEWRIGHT_EXEC_BINARY='" << path
              << "' is not an executable file (it names the executor binary, "
              << pipewright::cli::kExecBinaryName << ")\n";
    return 2;
  }
  if (path.empty()) {
    std::cerr << "pipewright: error: '" << subcommand << "' needs the executor, "
              << pipewright::cli::kExecBinaryName
#ifdef PIPEWRIGHT_WITH_EXEC
              << ", which is not beside this program nor in ../libexec/pipewright/ (set "
                 "PIPEWRIGHT_EXEC_BINARY to its path)\n";
#else
              << ", and this build has none (configured with PIPEWRIGHT_WITH_EXEC=OFF: libtorch "
                 "was not found)\n";
#endif
    return 2;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(path.c_str(), argv);
  std::cerr << "pipewright: error: cannot start the executor '" << path
            << "': " << std::strerror(errno) << "\n";
  return 1;
}

// The front end lists the executor's subcommands in its --help; they are never parsed here.
void add_exec_placeholders(CLI::App& app) {
  for (const auto& c : pipewright::cli::kExecCommands) {
    app.add_subcommand(std::string(c.name), std::string(c.description))
        ->prefix_command()
        ->allow_extras();
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("pipewright");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_level(spdlog::level::info);

  CLI::App app{
      "pipewright: partition models, generate and simulate pipeline schedules, and run them"};
  app.set_version_flag("--version", std::string("pipewright ") + pipewright::version());
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.parse_complete_callback(
      [&log_level] { spdlog::set_level(spdlog::level::from_str(log_level)); });
  app.require_subcommand(1, 1);

  for (auto setup : pipewright::cli::registered_commands()) setup(app);
#ifdef PIPEWRIGHT_EXECUTOR_BINARY
  app.name("pipewright");
#else
  // Offline commands name a run-only flag as such (run_only_flags.hpp); `launch` runs a command,
  // whose flags come after `--`, and the executor's commands are parsed by pipewright-exec.
  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() != "launch") pipewright::cli::add_run_only_guards(*sub);
  }
  add_exec_placeholders(app);
  if (const int sub = subcommand_index(argc, argv); sub > 0) {
    // `calibrate gemm` fits the device model offline (cmd_calibrate_gemm.cpp): no executor.
    static char calibrate_gemm[] = "calibrate-gemm";
    if (std::string_view(argv[sub]) == "calibrate" && sub + 1 < argc &&
        std::string_view(argv[sub + 1]) == "gemm") {
      argv[sub] = calibrate_gemm;
      for (int k = sub + 1; k + 1 < argc; ++k) argv[k] = argv[k + 1];
      argv[--argc] = nullptr;
    }
    for (const auto& c : pipewright::cli::kExecCommands) {
      if (c.name == argv[sub]) return forward_to_exec_binary(argv[sub], argv);
    }
  }
#endif

  // An unknown subcommand is bad input: name the valid ones.
  if (argc > 1 && argv[1][0] != '-' && !has_subcommand(app, argv[1])) {
    std::cerr << "pipewright: unknown subcommand '" << argv[1]
              << "'; valid subcommands: " << valid_subcommands(app) << "\n";
    return 2;
  }

  // Subcommands that run another command take it verbatim (commands.hpp).
  argc = pipewright::cli::split_command_tail(
      argc, argv, "launch",
      {"--nproc", "--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
       "--agent-port", "--grace", "--node-timeout", "--join-timeout"},
      pipewright::cli::command_tail());
  set_fallthrough(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const pipewright::cli::ExitStatus& e) {
    std::fflush(stdout);
    return e.code;
  } catch (const CLI::RequiredError& e) {
    if (app.get_subcommands().empty()) {
      std::cerr << "pipewright: a subcommand is required; valid subcommands: "
                << valid_subcommands(app) << "\n";
      return 2;
    }
    app.exit(e);
    return 2;
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const pipewright::Error& e) {
    std::fflush(stdout);
    print_error("pipewright: error: ", e.what());
    return pipewright::exit_code_for(e);
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    print_error("pipewright: error: ",
                "out of memory (an input implies more memory than this host has; see "
                "docs/reliability.md, \"Input limits\")");
    return 1;
  } catch (const std::exception& e) {
    // libtorch's errors carry a stack trace after their first line ("frame #0: ...").
    std::fflush(stdout);
    const std::string what = e.what();
    print_error("pipewright: internal error: ", what.substr(0, what.find("\nframe #")));
    return 1;
  }
  return 0;
}
