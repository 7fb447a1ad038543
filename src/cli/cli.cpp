#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/kernel_env.h"
#include "comm/dist_env.h"
#include "core/error.h"
#include "core/log.h"

namespace seqpar {

namespace {

// --log-level / SEQPAR_LOG_LEVEL: debug | info | warn | error.
LogLevel parse_log_level(const std::string& v, const char* setting) {
  if (v == "debug") return LogLevel::kDebug;
  if (v == "info") return LogLevel::kInfo;
  if (v == "warn") return LogLevel::kWarn;
  if (v == "error") return LogLevel::kError;
  SEQPAR_INPUT_CHECK(false, "{}={} must be one of debug, info, warn, error", setting, v);
  return LogLevel::kInfo;
}

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The command line's first word from argv[from] on that is not an option (nor
// --log-level's value): its index, or argc.
int next_word(int argc, char** argv, int from) {
  for (int i = from; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--log-level") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    return i;
  }
  return argc;
}

// What seqpar says for a missing or unknown command (or `bench` subcommand):
// the commands there, and the nearest one; "" when the words name commands
// (CLI11 then reports anything else).
std::string command_problem(const CLI::App& app, const std::string& path, int argc, char** argv, int from) {
  const std::vector<const CLI::App*> subs = app.get_subcommands([](const CLI::App*) { return true; });
  if (subs.empty()) return "";
  const int at = next_word(argc, argv, from);
  const std::string word = at < argc ? argv[at] : "";
  std::string names, nearest;
  size_t best = 3;  // suggest only within two edits (or a prefix)
  for (const CLI::App* sub : subs) {
    const std::string& n = sub->get_name();
    if (n == word) return command_problem(*sub, path + " " + n, argc, argv, at + 1);
    names += (names.empty() ? "" : ", ") + n;
    if (word.empty()) continue;
    const size_t d = n.rfind(word, 0) == 0 ? 1 : edit_distance(word, n);
    if (d < best) best = d, nearest = n;
  }
  if (word.empty()) return fmt::format("'{}' needs a command: {} (see {} --help)", path, names, path);
  return fmt::format("unknown command '{}' for '{}'{}; its commands: {} (see {} --help)", word, path,
                     nearest.empty() ? "" : fmt::format(" (did you mean '{}'?)", nearest), names, path);
}

}  // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{"seqpar: long-sequence transformer training with sequence parallelism (Ulysses, Ring, hybrid)"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level also after the subcommand
  app.add_option_function<std::string>(
      "--log-level", [](const std::string& v) { set_log_level(parse_log_level(v, "--log-level")); },
      "debug | info | warn | error (default info, or $SEQPAR_LOG_LEVEL); debug also shows each GEMM's autotune");
  app.add_subcommand("version", "print the version")->callback([] { std::printf("seqpar 0.1.0\n"); });
  // A file-size limit makes the write that crosses it fail with EFBIG, which every writer reports
  // naming the file, instead of the kernel's SIGXFSZ ending the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  int rc = 0;
  add_fwdbwd_command(app, rc);
  add_train_command(app, rc);
  add_bench_command(app, rc);
  add_prepare_data_command(app, rc);
  add_launch_command(app, rc);
  add_export_command(app, rc);
  add_plan_command(app, rc);
  try {
    if (const char* env = std::getenv("SEQPAR_LOG_LEVEL"); env != nullptr && *env != '\0')
      set_log_level(parse_log_level(env, "SEQPAR_LOG_LEVEL"));
    // Every SEQPAR_* kernel override, read once here; the commands get it from process_kernel_policy().
    init_process_kernel_policy(process_env());
    const bool wants_help = [&] {
      for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
      return false;
    }();
    if (const std::string problem = command_problem(app, "seqpar", argc, argv, 1); !problem.empty() && !wants_help) {
      std::fprintf(stderr, "seqpar: error: %s\n", problem.c_str());
      return 2;
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const Error& e) {
    std::fprintf(stderr, "seqpar: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seqpar: error: %s\n", e.what());
    return 1;
  }
  return rc;
}

}  // namespace seqpar
