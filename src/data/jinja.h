// A Jinja interpreter for Hugging Face chat templates, with no Python: the language subset that
// real chat templates use, run as transformers runs them (jinja2's ImmutableSandboxedEnvironment
// with trim_blocks and lstrip_blocks, the loopcontrols extension, transformers' own tojson,
// raise_exception, strftime_now, dict and namespace, and the {% generation %} block of its
// AssistantTracker). docs/prepare-data.md lists the subset.
//
// A construct outside the subset is an InputError when the template is parsed, naming it and its
// line and column ("chat template <name>:12:5: the 'include' tag is not supported ..."): a
// template either runs as transformers runs it or is refused before any data is read. Errors at
// render time (an undefined value used, a type error, raise_exception) name the template line.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/jinja_value.h"

namespace seqpar::jinja {

struct Node;

struct RenderOptions {
  // strftime_now() formats this time (the local time when prepare-data starts, or the fixed date
  // the user gave, so every document of a run and every test render the same text).
  std::tm now{};
};

struct RenderResult {
  std::string text;
  // The byte spans [begin, end) of `text` that {% generation %} blocks rendered, in order.
  std::vector<std::pair<size_t, size_t>> generation;
};

class Template {
 public:
  // Parses `source` (the template text). `name` names the template in messages (a file path).
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;

  // Renders with the template's variables (messages, add_generation_prompt, bos_token, ...).
  // Thread-safe: rendering does not change the template.
  RenderResult render(const Dict& variables, const RenderOptions& options) const;

  bool has_generation_blocks() const { return has_generation_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const Node> root_;
  bool has_generation_ = false;
};

}  // namespace seqpar::jinja
