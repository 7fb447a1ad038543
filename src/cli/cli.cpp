#include "cli/cli.h"

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

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
