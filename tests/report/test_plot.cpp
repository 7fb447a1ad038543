// The SVG plot of the metrics: well-formed XML (checked by a small tag matcher, svg_check.h), one
// polyline per series with one point per record, markers on the eval series. The file the trainer
// writes next to its metrics: tests/train/test_plot_training.cpp.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "report/plot.h"
#include "svg_check.h"
#include "test_util.h"

namespace seqpar {
namespace {

using json = nlohmann::json;
using testing::polyline_points;
using testing::xml_problem;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::vector<json> records(int steps, int eval_every, const char* eval_key) {
  std::vector<json> out;
  for (int s = 1; s <= steps; ++s) {
    out.push_back({{"step", s}, {"loss", 5.0 / s}, {"tokens_per_s", 1000.0 + s}, {"lr", 1e-3}, {"grad_norm", 1.0}});
    if (eval_key && s % eval_every == 0) out.push_back({{"step", s}, {eval_key, 0.1 * s}});
  }
  return out;
}

TEST(Plot, OnePolylinePerSeriesWithOnePointPerRecord) {
  const std::string svg = metrics_svg(records(20, 5, "eval_accuracy"), "run <a & b>");
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_EQ(count(svg, "<polyline"), 3u);
  EXPECT_EQ(polyline_points(svg, "loss"), std::vector<size_t>{20});
  EXPECT_EQ(polyline_points(svg, "tokens_per_s"), std::vector<size_t>{20});
  EXPECT_EQ(polyline_points(svg, "eval_accuracy"), std::vector<size_t>{4});
  EXPECT_EQ(count(svg, "<circle"), 4u);  // the eval points
  EXPECT_EQ(count(svg, "class=\"panel\""), 3u);
  EXPECT_NE(svg.find("run &lt;a &amp; b&gt;"), std::string::npos);

  // Eval loss shares the loss panel; no accuracy panel.
  const std::string with_loss = metrics_svg(records(10, 2, "eval_loss"), "t");
  EXPECT_EQ(xml_problem(with_loss), "");
  EXPECT_EQ(count(with_loss, "class=\"panel\""), 2u);
  EXPECT_EQ(polyline_points(with_loss, "eval_loss"), std::vector<size_t>{5});
  EXPECT_EQ(polyline_points(with_loss, "eval_accuracy"), std::vector<size_t>{});
}

TEST(Plot, MissingAndNonFiniteValuesAreSkipped) {
  std::vector<json> r = records(6, 0, nullptr);
  r[2]["loss"] = nullptr;  // how nlohmann writes a NaN
  r[3]["loss"] = std::numeric_limits<double>::infinity();
  r.push_back({{"note", "no step"}, {"loss", 1.0}});
  const std::string svg = metrics_svg(r, "t");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polyline_points(svg, "loss"), std::vector<size_t>{4});
  EXPECT_EQ(polyline_points(svg, "tokens_per_s"), std::vector<size_t>{6});
  // One record: a single point, still a valid document; none: a note instead of panels.
  EXPECT_EQ(polyline_points(metrics_svg(records(1, 0, nullptr), "t"), "loss"), std::vector<size_t>{1});
  const std::string empty = metrics_svg({}, "t");
  EXPECT_EQ(xml_problem(empty), "");
  EXPECT_EQ(count(empty, "<polyline"), 0u);
  EXPECT_NE(empty.find("no metrics to plot"), std::string::npos);
}

TEST(Plot, TheMatcherCatchesBrokenDocuments) {
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(xml_problem("<svg x=\"1></svg>"), "");
  EXPECT_NE(xml_problem("<svg/><svg/>"), "");
  EXPECT_EQ(xml_problem("<svg><g><line/></g></svg>"), "");
}

}  // namespace
}  // namespace seqpar
