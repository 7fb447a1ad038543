// The SVG plot of the metrics: well-formed XML (checked by a small tag matcher), one polyline per
// series with one point per record, markers on the eval series, and the file the trainer writes
// next to its metrics.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "train/plot.h"
#include "train/trainer.h"

namespace seqpar {
namespace {

using json = nlohmann::json;

// Checks the document is well-formed as far as this SVG goes: one root <svg>, every tag closed in
// order, attribute quotes paired, no bare '&' or '<' in text. Returns "" or the problem.
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> open;
  size_t i = 0;
  int roots = 0;
  while (i < doc.size()) {
    if (doc[i] != '<') {
      if (doc[i] == '&') {
        const size_t semi = doc.find(';', i);
        const std::string entity = doc.substr(i, semi == std::string::npos ? 8 : semi - i + 1);
        if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;")
          return "bare & at " + std::to_string(i);
      }
      if (doc[i] == '>') return "bare > at " + std::to_string(i);
      ++i;
      continue;
    }
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return "unclosed tag at " + std::to_string(i);
    const std::string tag = doc.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.find('<') != std::string::npos) return "'<' inside tag " + tag;
    if (std::count(tag.begin(), tag.end(), '"') % 2) return "unpaired quote in " + tag;
    if (tag.front() == '?') continue;  // <?xml ...?>
    if (tag.front() == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name)
        return "</" + name + "> closes " + (open.empty() ? "nothing" : open.back());
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (open.empty()) {
      if (name != "svg") return "root element " + name;
      ++roots;
    }
    if (tag.back() != '/') open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> not closed";
  if (roots != 1) return std::to_string(roots) + " root elements";
  return "";
}

// The polylines of one series: each one's point count.
std::vector<size_t> polyline_points(const std::string& svg, const std::string& series) {
  std::vector<size_t> out;
  const std::regex re("<polyline[^>]*data-series=\"" + series + "\"[^>]*points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) {
    std::istringstream pts((*it)[1].str());
    std::string p;
    size_t n = 0;
    while (pts >> p) {
      EXPECT_TRUE(std::regex_match(p, std::regex("-?[0-9.]+,-?[0-9.]+"))) << p;
      ++n;
    }
    out.push_back(n);
  }
  return out;
}

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

TEST(Plot, TrainingWritesThePlotNextToTheMetrics) {
  EXPECT_EQ(metrics_plot_path("out/metrics.jsonl"), "out/metrics.svg");
  EXPECT_EQ(metrics_plot_path("metrics"), "metrics.svg");
  EXPECT_EQ(metrics_plot_path("m.svg"), "m.svg.svg");

  TrainConfig c;
  c.model = demo_model_config();
  c.task.seq_len = 32;
  c.task.num_pairs = 4;  // 4 pair tokens + 4 queries of 3 tokens + filler fit in 32
  c.task.num_queries = 4;
  c.micro_batch = 2;
  c.steps = 6;
  c.sp = 1;
  c.eval_every = 3;
  c.eval_batches = 1;
  c.log_every = 2;
  c.quiet = true;
  c.metrics_out = testing::temp_dir() + "/metrics.jsonl";
  run_training(c);
  const std::vector<json> recs = read_metrics_jsonl(c.metrics_out);
  size_t logged = 0, evals = 0;
  for (const json& r : recs) (r.contains("loss") ? logged : evals) += 1;
  EXPECT_EQ(logged, 4u);  // steps 1, 2, 4, 6
  EXPECT_EQ(evals, 2u);   // steps 3, 6
  std::ifstream in(metrics_plot_path(c.metrics_out));
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string svg = ss.str();
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polyline_points(svg, "loss"), std::vector<size_t>{logged});
  EXPECT_EQ(polyline_points(svg, "tokens_per_s"), std::vector<size_t>{logged});
  EXPECT_EQ(polyline_points(svg, "eval_accuracy"), std::vector<size_t>{evals});

  std::ofstream(c.metrics_out, std::ios::app) << "{not json\n";
  EXPECT_THROW(read_metrics_jsonl(c.metrics_out), InputError);
}

}  // namespace
}  // namespace seqpar
