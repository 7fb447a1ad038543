// The SVG plot the trainer writes next to its metrics (report/plot.h; the plot itself is tested in
// tests/report/test_plot.cpp).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "report/plot.h"
#include "report/svg_check.h"
#include "test_util.h"
#include "train/trainer.h"
#include "train/train_test_util.h"

namespace seqpar {
namespace {

using json = nlohmann::json;
using testing::polyline_points;
using testing::xml_problem;

TEST(Plot, TrainingWritesThePlotNextToTheMetrics) {
  EXPECT_EQ(metrics_plot_path("out/metrics.jsonl"), "out/metrics.svg");
  EXPECT_EQ(metrics_plot_path("metrics"), "metrics.svg");
  EXPECT_EQ(metrics_plot_path("m.svg"), "m.svg.svg");

  TrainConfig c = testing::tiny_recall_config();
  c.schedule.steps = 6;
  c.parallel.sp = 1;
  c.logging.eval_every = 3;
  c.data.eval_batches = 1;
  c.logging.log_every = 2;
  c.logging.quiet = true;
  c.logging.metrics_out = testing::temp_dir() + "/metrics.jsonl";
  run_training(c);
  const std::vector<json> recs = read_metrics_jsonl(c.logging.metrics_out);
  size_t logged = 0, evals = 0;
  for (const json& r : recs) (r.contains("loss") ? logged : evals) += 1;
  EXPECT_EQ(logged, 4u);  // steps 1, 2, 4, 6
  EXPECT_EQ(evals, 2u);   // steps 3, 6
  std::ifstream in(metrics_plot_path(c.logging.metrics_out));
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string svg = ss.str();
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polyline_points(svg, "loss"), std::vector<size_t>{logged});
  EXPECT_EQ(polyline_points(svg, "tokens_per_s"), std::vector<size_t>{logged});
  EXPECT_EQ(polyline_points(svg, "eval_accuracy"), std::vector<size_t>{evals});

  std::ofstream(c.logging.metrics_out, std::ios::app) << "{not json\n";
  EXPECT_THROW(read_metrics_jsonl(c.logging.metrics_out), InputError);
}

}  // namespace
}  // namespace seqpar
