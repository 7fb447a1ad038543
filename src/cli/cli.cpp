#include "cli/cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

namespace seqpar {

int cli_main(int argc, char** argv) {
  CLI::App app{"seqpar: long-sequence transformer training with sequence parallelism (Ulysses, Ring, hybrid)"};
  app.require_subcommand(1);
  app.add_subcommand("version", "print the version")->callback([] { std::printf("seqpar 0.1.0\n"); });
  int rc = 0;
  add_fwdbwd_command(app, rc);
  add_train_command(app, rc);
  add_bench_command(app, rc);
  add_prepare_data_command(app, rc);
  add_launch_command(app, rc);
  add_export_command(app, rc);
  add_plan_command(app, rc);
  try {
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
