// Hand-written SVG line charts of the metrics records (plot.h).
#include "report/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "io/input_file.h"
#include "io/safetensors.h"  // write_file_atomic

namespace seqpar {

namespace {

using json = nlohmann::json;

constexpr double kWidth = 900;
constexpr double kPanelHeight = 230;
constexpr double kLeft = 80, kRight = 24, kTop = 34, kBottom = 36;  // plot area margins inside a panel
constexpr double kTitleHeight = 36;

struct Series {
  std::string key;    // the record field
  std::string label;  // the legend
  std::string color;
  bool markers = false;
  std::vector<std::pair<double, double>> points;  // (step, value)
};

struct Panel {
  std::string title;
  std::vector<Series> series;
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Series collect(const std::vector<json>& records, const std::string& key, const std::string& label,
               const std::string& color, bool markers) {
  Series s{key, label, color, markers, {}};
  for (const json& r : records) {
    if (!r.is_object() || !r.contains("step") || !r["step"].is_number() || !r.contains(key) || !r[key].is_number())
      continue;
    const double v = r[key].get<double>();
    if (std::isfinite(v)) s.points.emplace_back(r["step"].get<double>(), v);
  }
  return s;
}

// A "nice" tick spacing near range / n: 1, 2 or 5 times a power of ten.
double tick_step(double range, int n) {
  const double raw = range / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string number(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e3 && a < 1e9 && v == std::round(v)) return fmt::format("{:.0f}", v);  // steps, tokens/s
  if (a >= 1e5 || a < 1e-3) return fmt::format("{:.2e}", v);
  return fmt::format("{:.4g}", v);
}

}  // namespace

std::string metrics_svg(const std::vector<json>& records, const std::string& title) {
  std::vector<Panel> panels;
  {
    Panel loss{"loss",
               {collect(records, "loss", "train loss", "#1f77b4", false),
                collect(records, "eval_loss", "eval loss", "#ff7f0e", true)}};
    Panel tps{"tokens/s", {collect(records, "tokens_per_s", "tokens/s", "#2ca02c", false)}};
    Panel acc{"eval accuracy", {collect(records, "eval_accuracy", "eval accuracy", "#d62728", true)}};
    for (Panel* p : {&loss, &tps, &acc}) {
      std::erase_if(p->series, [](const Series& s) { return s.points.empty(); });
      if (!p->series.empty()) panels.push_back(std::move(*p));
    }
  }
  // The step axis, shared by every panel.
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  for (const Panel& p : panels)
    for (const Series& s : p.series)
      for (auto [x, y] : s.points) {
        x_min = std::min(x_min, x);
        x_max = std::max(x_max, x);
      }
  if (x_min == x_max) {  // one step: centre it
    x_min -= 1;
    x_max += 1;
  }

  const double height = kTitleHeight + std::max<size_t>(panels.size(), 1) * kPanelHeight;
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{3}</text>\n",
      kWidth, height, kLeft, escape(title));
  if (panels.empty()) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\">no metrics to plot</text>\n", kLeft, kTitleHeight + 40);
    return svg + "</svg>\n";
  }

  const double plot_w = kWidth - kLeft - kRight, plot_h = kPanelHeight - kTop - kBottom;
  for (size_t pi = 0; pi < panels.size(); ++pi) {
    const Panel& panel = panels[pi];
    const double top = kTitleHeight + static_cast<double>(pi) * kPanelHeight;  // panel origin
    const double y0 = top + kTop;                                              // plot area
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const Series& s : panel.series)
      for (auto [x, y] : s.points) {
        lo = std::min(lo, y);
        hi = std::max(hi, y);
      }
    if (lo == hi) {
      const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
      lo -= pad;
      hi += pad;
    } else {
      const double pad = (hi - lo) * 0.05;
      lo -= pad;
      hi += pad;
    }
    auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * plot_w; };
    auto py = [&](double y) { return y0 + (hi - y) / (hi - lo) * plot_h; };

    svg += fmt::format("<g class=\"panel\" data-panel=\"{}\">\n", escape(panel.title));
    svg +=
        fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n", kLeft, top + 20, escape(panel.title));
    // Grid and y ticks.
    const double ys = tick_step(hi - lo, 5);
    for (double t = std::ceil(lo / ys) * ys; t <= hi; t += ys) {
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e0e0e0\"/>"
          "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
          kLeft, py(t), kLeft + plot_w, kLeft - 6, py(t) + 4, number(std::fabs(t) < ys * 1e-9 ? 0 : t));
    }
    // x ticks (steps).
    const double xs = std::max(1.0, tick_step(x_max - x_min, 6));
    for (double t = std::ceil(x_min / xs) * xs; t <= x_max; t += xs) {
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e0e0e0\"/>"
          "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
          px(t), y0, y0 + plot_h, y0 + plot_h + 16, number(t));
    }
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888888\"/>\n", kLeft,
                       y0, plot_w, plot_h);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">step</text>\n", kLeft + plot_w / 2,
                       y0 + plot_h + 30);
    // The series, and their legend at the panel's top right.
    double legend_x = kLeft + plot_w;
    for (auto it = panel.series.rbegin(); it != panel.series.rend(); ++it) {
      legend_x -= 12 + 7.0 * static_cast<double>(it->label.size()) + 24;
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>"
          "<text x=\"{4:.1f}\" y=\"{5:.1f}\">{6}</text>\n",
          legend_x, top + 16, legend_x + 18, it->color, legend_x + 22, top + 20, escape(it->label));
    }
    for (const Series& s : panel.series) {
      std::string points;
      for (auto [x, y] : s.points) points += fmt::format("{}{:.2f},{:.2f}", points.empty() ? "" : " ", px(x), py(y));
      svg += fmt::format(
          "<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
          "points=\"{}\"/>\n",
          s.key, s.color, points);
      if (s.markers)
        for (auto [x, y] : s.points)
          svg += fmt::format("<circle data-series=\"{}\" cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3\" fill=\"{}\"/>\n", s.key,
                             px(x), py(y), s.color);
    }
    svg += "</g>\n";
  }
  return svg + "</svg>\n";
}

void write_metrics_svg(const std::string& path, const std::vector<json>& records, const std::string& title) {
  write_file_atomic(path, metrics_svg(records, title));
}

std::vector<json> read_metrics_jsonl(const std::string& path) {
  // A regular file of sane size (a record per step: a million steps are a few hundred MB).
  static constexpr InputKind kMetricsInput{"metrics file", uint64_t{4} << 30};
  check_input_file(path, kMetricsInput);
  std::ifstream in(path);
  SEQPAR_INPUT_CHECK(in.is_open(), "metrics file {}: cannot open", path);
  std::vector<json> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    check_json_depth(line, fmt::format("metrics file {}: line {}", path, n));
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception& e) {
      throw InputError(fmt::format("metrics file {}: line {} is not JSON: {}", path, n, e.what()));
    }
  }
  return out;
}

}  // namespace seqpar
