// run_in_bounded_child: a parse that may loop runs first in a child process stopped at a wall-time
// and a memory bound; the Accelerate YAML reader uses it as the backstop behind its pre-scan.
#include "io/bounded_child.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "io/accelerate_config.h"
#include "test_util.h"

namespace seqpar {
namespace {

TEST(BoundedChild, AChildThatEndsIsFinished) {
  EXPECT_TRUE(run_in_bounded_child([] {}).finished);
  // An exception is an end too: the caller's own parse in the process meets it again.
  EXPECT_TRUE(run_in_bounded_child([] { throw std::runtime_error("bad input"); }).finished);
}

TEST(BoundedChild, ALoopIsStoppedAtTheWallTime) {
  ChildLimits limits;
  limits.wall_ms = 200;
  const ChildOutcome o = run_in_bounded_child(
      [] {
        volatile bool forever = true;
        while (forever) {
        }
      },
      limits);
  EXPECT_FALSE(o.finished);
  EXPECT_EQ(o.stopped, "ran past 200 ms");
}

TEST(BoundedChild, GrowingMemoryIsStoppedAtTheBound) {
  ChildLimits limits;
  limits.resident_bytes = int64_t{64} << 20;
  limits.wall_ms = 20000;
  const ChildOutcome o = run_in_bounded_child(
      [] {
        std::vector<char*> blocks;
        for (;;) {  // 1 MiB at a time, touched, as yaml-cpp's loops allocate
          char* b = static_cast<char*>(std::malloc(1 << 20));
          std::memset(b, 1, 1 << 20);
          blocks.push_back(b);
        }
      },
      limits);
  EXPECT_FALSE(o.finished);
  EXPECT_EQ(o.stopped, "used more than 64 MiB");
}

TEST(BoundedChild, ADeathBySignalIsNamed) {
  const ChildOutcome o = run_in_bounded_child([] { std::abort(); });
  EXPECT_FALSE(o.finished);
  EXPECT_EQ(o.stopped, "died by signal 6");
}

// The ninth input fuzz_accelerate_config found (2026-12-04): a quote after a ',' inside a plain word
// that the pre-scan took for a quoted scalar running to the end of the file; yaml-cpp 0.7 loops on
// it, allocating. The pre-scan now refuses it by its line; and yaml-cpp on its own, in the bounded
// child, is stopped (the backstop for loops the pre-scan does not know).
TEST(BoundedChild, AnAccelerateYamlThatYamlCppLoopsOnIsRefused) {
  const std::string text = testing::read_file(
      testing::source_path("tests/fuzz/corpus/fuzz_accelerate_config/regression-quote-runs-loop.yaml"));
  try {
    parse_accelerate_config(text, "a.yaml", ".");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a.yaml: line 5 has a ',' outside a [ ] or { } list"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace seqpar
