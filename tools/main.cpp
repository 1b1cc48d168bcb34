// The pipewright CLI: git-style subcommands (CLI11). This file is the one place that maps
// pipewright errors to exit codes (0 ok, 2 bad input/config, 3 peer failure, 4 timeout,
// 1 internal) and prints the one-line message. Logs go to stderr (spdlog); results go to files
// or stdout.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "commands.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/version.hpp"

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

  // An unknown subcommand is bad input: name the valid ones.
  if (argc > 1 && argv[1][0] != '-' && !has_subcommand(app, argv[1])) {
    std::cerr << "pipewright: unknown subcommand '" << argv[1]
              << "'; valid subcommands: " << valid_subcommands(app) << "\n";
    return 2;
  }

  // Subcommands that run another command take it verbatim (commands.hpp).
  argc = pipewright::cli::split_command_tail(argc, argv, "launch",
                                             {"--nproc", "--master-port", "--grace"},
                                             pipewright::cli::command_tail());
  set_fallthrough(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
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
    std::cerr << "pipewright: error: " << e.what() << "\n";
    return pipewright::exit_code_for(e);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "pipewright: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
