// The training curves as a hand-written SVG (no dependencies): from the metrics records of a run
// (the JSONL lines of --metrics-out), one panel per quantity, sharing the step axis:
//   loss       the training loss of the logged steps, and the eval loss when there is one
//   tokens/s   throughput of the logged steps
//   accuracy   the recall task's eval accuracy, when there is one
// Each series is one <polyline> (points "x,y" in step order; records whose value is missing or
// not finite are skipped); eval series also get one <circle> per point, since they are sparse.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace seqpar {

// The SVG document. Records without "step" are ignored; with no plottable record at all the
// document says so in a text element.
std::string metrics_svg(const std::vector<nlohmann::json>& records, const std::string& title);

// Writes metrics_svg(...) to `path` atomically.
void write_metrics_svg(const std::string& path, const std::vector<nlohmann::json>& records, const std::string& title);

// Reads a JSONL metrics file (InputError naming the file and line for a line that is not JSON).
std::vector<nlohmann::json> read_metrics_jsonl(const std::string& path);

}  // namespace seqpar
