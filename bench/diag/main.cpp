// seqpar-diag: diagnostic benchmarks of the kernels, for the people tuning them (tools/gpu_check.sh,
// bench/peers/gemm_interleaved.py, bench/NOTES.md), kept out of the user-facing `seqpar` commands.
//   seqpar-diag gemm ...   cuBLASLt GEMMs and the memory-bound ops (diag/bench_gemm.h), with the
//                          autotune diagnostics --sweep / --tune-repeats and the --serve mode
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "diag/bench_gemm.h"

namespace {

// --log-level / SEQPAR_LOG_LEVEL, as in `seqpar` (debug shows each GEMM's autotune).
seqpar::LogLevel parse_log_level(const std::string& v, const char* setting) {
  if (v == "debug") return seqpar::LogLevel::kDebug;
  if (v == "info") return seqpar::LogLevel::kInfo;
  if (v == "warn") return seqpar::LogLevel::kWarn;
  if (v == "error") return seqpar::LogLevel::kError;
  SEQPAR_INPUT_CHECK(false, "{}={} must be one of debug, info, warn, error", setting, v);
  return seqpar::LogLevel::kInfo;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"seqpar-diag: diagnostic benchmarks of seqpar's kernels (JSON lines)"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level also after the subcommand
  app.add_option_function<std::string>(
      "--log-level", [](const std::string& v) { seqpar::set_log_level(parse_log_level(v, "--log-level")); },
      "debug | info | warn | error (default info, or $SEQPAR_LOG_LEVEL); debug also shows each GEMM's autotune");
  int rc = 0;
  auto gemm = std::make_shared<seqpar::BenchGemmOptions>();
  CLI::App* g = app.add_subcommand("gemm", "cuBLASLt GEMMs: 8192^3 and the Llama-3.2-1B/3B projection shapes");
  seqpar::add_bench_gemm_options(*g, *gemm);
  g->callback([gemm, &rc] { rc = seqpar::run_bench_gemm(*gemm); });
  try {
    if (const char* env = std::getenv("SEQPAR_LOG_LEVEL"); env != nullptr && *env != '\0')
      seqpar::set_log_level(parse_log_level(env, "SEQPAR_LOG_LEVEL"));
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seqpar-diag: error: %s\n", e.what());
    return 1;
  }
  return rc;
}
