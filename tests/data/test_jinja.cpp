// The Jinja interpreter (data/jinja.h) against transformers' own jinja2 environment: every small
// template of tests/fixtures/chat_template/language.json (tools/make_chat_template_fixtures.py)
// renders the same bytes, raises where jinja2 raises, and marks the same {% generation %} spans;
// constructs outside the subset are refused at parse time naming the construct and its place.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/jinja.h"
#include "test_util.h"

namespace seqpar {
namespace {

using nlohmann::ordered_json;
using testing::read_file;
using testing::source_path;

jinja::RenderOptions fixture_options(const ordered_json& fx) {
  jinja::RenderOptions o;
  o.now = parse_template_time(fx["now"].get<std::string>(), "now");
  return o;
}

jinja::Dict variables_of(const ordered_json& j) { return jinja::Value::from_json(j).dict(); }

std::string render(const std::string& tpl, const ordered_json& vars = ordered_json::object()) {
  jinja::RenderOptions o;
  o.now = parse_template_time("2025-01-15", "now");
  return jinja::Template(tpl, "t").render(variables_of(vars), o).text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

TEST(Jinja, LanguageMatchesTransformersJinja2) {
  const ordered_json fx = ordered_json::parse(read_file(source_path("tests/fixtures/chat_template/language.json")));
  const jinja::RenderOptions opt = fixture_options(fx);
  ASSERT_GE(fx["cases"].size(), 40u);
  for (const ordered_json& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string tpl = c["template"];
    if (c.contains("error")) {
      const std::string err = error_of([&] { jinja::Template(tpl, "t").render(variables_of(c["variables"]), opt); });
      EXPECT_NE(err, "(no error)") << "jinja2 raised " << c["error"];
      // raise_exception's message is the template's own: it reaches the user as it is.
      const std::string want = c["error"];
      if (want.rfind("TemplateError: ", 0) == 0) {
        EXPECT_HAS(err, "raise_exception: " + want.substr(15));
      }
      continue;
    }
    const jinja::Template t(tpl, "t");
    const jinja::RenderResult r = t.render(variables_of(c["variables"]), opt);
    EXPECT_EQ(r.text, c["text"].get<std::string>());
    if (c.contains("generation")) {
      std::vector<std::pair<size_t, size_t>> want;
      for (const auto& s : c["generation"]) want.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
      EXPECT_EQ(r.generation, want);
      EXPECT_TRUE(t.has_generation_blocks());
    }
  }
}

TEST(Jinja, UnsupportedConstructsAreRefusedAtParseTime) {
  auto parse_error = [](const std::string& tpl) { return error_of([&] { jinja::Template(tpl, "tpl.jinja"); }); };
  EXPECT_HAS(parse_error("a\n  {% include 'x.jinja' %}"),
             "chat template tpl.jinja:2:6: the 'include' tag is not supported by seqpar's chat template interpreter");
  EXPECT_HAS(parse_error("{% extends 'base' %}"), "the 'extends' tag is not supported");
  EXPECT_HAS(parse_error("{% call m() %}x{% endcall %}"), "the 'call' tag is not supported");
  EXPECT_HAS(parse_error("{% raw %}{{ x }}{% endraw %}"), "tpl.jinja:1:1: the 'raw' tag is not supported");
  EXPECT_HAS(parse_error("{% frobnicate %}"), "tpl.jinja:1:4: unknown tag 'frobnicate'");
  EXPECT_HAS(parse_error("{{ x | urlencode }}"),
             "tpl.jinja:1:8: the filter 'urlencode' is not supported by seqpar's chat template interpreter");
  EXPECT_HAS(parse_error("{% if x is escaped %}{% endif %}"), "tpl.jinja:1:12: the test 'escaped' is not supported");
  EXPECT_HAS(parse_error("{{ '{}'.format(1) }}"), "the method 'format()' is not supported");
  EXPECT_HAS(parse_error("{{ messages.append(1) }}"),
             "'append()' changes its object, which transformers' immutable "
             "sandbox refuses");
  EXPECT_HAS(parse_error("{{ x.__class__ }}"), "attribute names starting with '_' are not allowed");
  EXPECT_HAS(parse_error("{% for x in xs recursive %}{% endfor %}"), "recursive for loops are not supported");
  EXPECT_HAS(parse_error("{{ f(*args) }}"), "*args and **kwargs in calls are not supported");
  EXPECT_HAS(parse_error("{{ cycler('a') }}"), "'cycler' is not supported");
  EXPECT_HAS(parse_error("{% break %}"), "'break' outside of a for loop");
  EXPECT_HAS(parse_error("{% if x %}never closed"), "expected 'elif' or 'else' or 'endif' to close the block");
  EXPECT_HAS(parse_error("{{ 'unterminated }}"), "tpl.jinja:1:4: unterminated string literal");
  EXPECT_HAS(parse_error("{{ x "), "the tag is not closed with '}}'");
  EXPECT_HAS(parse_error("{# comment"), "missing end of comment tag");
  EXPECT_HAS(parse_error("{{ (1 }}"), "expected ')'");
  EXPECT_HAS(parse_error("{% endfor %}"), "unknown tag 'endfor'");
  EXPECT_HAS(parse_error("{% macro m() %}{% generation %}x{% endgeneration %}{% endmacro %}"),
             "a {% generation %} block inside a macro is not supported");
  EXPECT_HAS(parse_error("ok \xC3\x28"), "chat template tpl.jinja: invalid UTF-8");
}

TEST(Jinja, RenderErrorsNameTheLine) {
  const std::string undefined = error_of([] {
    render("line 1\n{{ message.tool_calls.function }}", {{"message", ordered_json::object()}});
  });
  EXPECT_HAS(undefined, "chat template t:2: 'dict object' has no attribute 'tool_calls'");
  EXPECT_HAS(error_of([] { render("\n\n{{ raise_exception('Only user and assistant roles') }}"); }),
             "chat template t:3: raise_exception: Only user and assistant roles");
  EXPECT_HAS(error_of([] { render("{{ 'a' + 1 }}"); }), "can only concatenate str (not \"int\") to str");
  EXPECT_HAS(error_of([] { render("{{ 'É'|upper }}"); }), "non-ASCII characters is not supported");
  EXPECT_HAS(error_of([] { render("{% set x %}{% generation %}a{% endgeneration %}{% endset %}"); }),
             "a {% generation %} block inside a {% set %} block is not supported");
  EXPECT_HAS(error_of([] { render("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"); }), "macro calls nest deeper");
  EXPECT_HAS(error_of([] { render("{{ range(100000000)|length }}"); }), "range() longer than");
  EXPECT_HAS(error_of([] { render("{{ 9223372036854775807 + 1 }}"); }), "integer overflow");
}

TEST(Jinja, ValuesFollowPython) {
  using jinja::float_repr;
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(0.00001), "1e-05");
  EXPECT_EQ(float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(float_repr(123456789012345678.0), "1.2345678901234568e+17");
  // Messages keep their key order through tojson, as Python dicts do.
  const ordered_json m = ordered_json::parse(R"({"z": 1, "a": {"y": [1, 2.0, null], "b": "é"}})");
  EXPECT_EQ(jinja::to_json(jinja::Value::from_json(m)), R"({"z": 1, "a": {"y": [1, 2.0, null], "b": "é"}})");
  EXPECT_EQ(render("{{ m|tojson }}", {{"m", m}}), R"({"z": 1, "a": {"y": [1, 2.0, null], "b": "é"}})");
  EXPECT_EQ(parse_template_time("2024-02-29T23:59:58", "--chat-template-now").tm_wday, 4);  // a Thursday
  EXPECT_HAS(error_of([] { parse_template_time("2023-02-29", "--chat-template-now"); }), "not a date of the calendar");
  EXPECT_HAS(error_of([] { parse_template_time("yesterday", "--chat-template-now"); }),
             "--chat-template-now=yesterday: expected a date YYYY-MM-DD");
}

}  // namespace
}  // namespace seqpar
