// prepare-data's thread count from the command line: bounded by name (--threads 100000 used to
// end in std::terminate when a thread failed to start and left the started ones joinable), and a
// thread that cannot start is a clear error after the started ones are joined.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "core/error.h"
#include "data/prepare_data.h"
#include "test_util.h"

namespace seqpar {
namespace {

PrepareDataOptions small_job(const std::string& dir, int threads) {
  { std::ofstream(dir + "/a.txt") << "one paragraph\n\nanother paragraph\n"; }
  PrepareDataOptions o;
  o.tokenizer = testing::source_path("tests/fixtures/tokenizer/gpt2/tokenizer.json");
  o.inputs = {dir + "/a.txt"};
  o.output = dir + "/tokens.bin";
  o.format = DataFormat::kText;
  o.threads = threads;
  o.progress = false;
  return o;
}

std::string error_of(const PrepareDataOptions& o) {
  try {
    prepare_data(o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(PrepareDataLimits, ThreadsAreBoundedByName) {
  const std::string dir = testing::temp_dir();
  EXPECT_EQ(error_of(small_job(dir, 100000)),
            "--threads=100000 must be in [0, 256] (0 = all hardware threads, at most 16)");
  EXPECT_EQ(error_of(small_job(dir, -1)), "--threads=-1 must be in [0, 256] (0 = all hardware threads, at most 16)");
  EXPECT_NO_THROW(prepare_data(small_job(dir, kMaxPrepareThreads)));
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
TEST(PrepareDataLimits, ThreadStartFailureIsAnErrorNotTerminate) {
  GTEST_SKIP() << "RLIMIT_AS cannot be lowered under a sanitizer's shadow memory";
}
#else
TEST(PrepareDataLimits, ThreadStartFailureIsAnErrorNotTerminate) {
  // In a child with an address-space limit that leaves room for a few thread stacks only, 256
  // threads cannot all start: the run must end with the InputError (exit 0 here), not
  // std::terminate (SIGABRT).
  const std::string dir = testing::temp_dir();
  const PrepareDataOptions o = small_job(dir, kMaxPrepareThreads);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t now = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
    const rlimit lim{now + (rlim_t{96} << 20), now + (rlim_t{96} << 20)};  // ~10 default 8 MiB stacks
    if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
    const std::string msg = error_of(o);
    const bool ok = msg.find("--threads=256: could not start tokenizer thread") != std::string::npos &&
                    msg.find("use fewer threads") != std::string::npos;
    ::_exit(ok ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: setrlimit failed, 4: not the expected InputError";
}
#endif

}  // namespace
}  // namespace seqpar
