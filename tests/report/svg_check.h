// Checks of the SVG documents of report/plot.h, shared by the plot tests (tests/report) and the
// trainer's (tests/train/test_plot_training.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace seqpar::testing {

// Checks the document is well-formed as far as this SVG goes: one root <svg>, every tag closed in
// order, attribute quotes paired, no bare '&' or '<' in text. Returns "" or the problem.
inline std::string xml_problem(const std::string& doc) {
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
inline std::vector<size_t> polyline_points(const std::string& svg, const std::string& series) {
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

}  // namespace seqpar::testing
