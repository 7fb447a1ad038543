// The one declaration of the training settings (train/config.h) reaches everything made from it:
// the commands' flags and help, the JSON round trip, --print-config and the docs table.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "test_util.h"
#include "train/config.h"
#include "train/config_resolve.h"

namespace seqpar {
namespace {

std::string help_of(const char* command) {
  CLI::App app;
  int rc = 0;
  add_train_command(app, rc);
  add_fwdbwd_command(app, rc);
  return app.get_subcommand(command)->help();
}

// A value of the setting's type that differs from `current` (and is valid for it).
std::string other_value(const SettingDecl& d, const std::string& current) {
  if (!d.choices.empty()) {
    for (const std::string& c : d.choices)
      if (c != current) return c;
  }
  if (d.is_switch) return current == "true" ? "false" : "true";
  if (d.type_name == "INT" || d.type_name == "FLOAT") return current == "7" ? "9" : "7";  // min_lr's unset is ""
  if (d.name == "device") return "cpu";  // the one device every build has; checked separately below
  if (d.name == "transport") return current == "local" ? "auto" : "local";
  if (current.find_first_not_of("0123456789.-e") == std::string::npos && !current.empty())
    return current == "7" ? "9" : "7";
  return current + "_x";
}

TEST(Settings, EveryDeclarationIsComplete) {
  std::set<std::string> names, flags;
  for (const SettingDecl& d : train_settings()) {
    EXPECT_TRUE(names.insert(d.name).second) << "two settings named " << d.name;
    EXPECT_FALSE(d.help.empty()) << d.name << " has no help";
    EXPECT_TRUE(d.get && d.set && d.to_json && d.from_json) << d.name;
    for (const std::string& f : d.flags) {
      EXPECT_EQ(f.rfind("--", 0), 0u) << d.name << ": flag " << f;
      EXPECT_TRUE(flags.insert(f).second) << "two settings take " << f;
    }
    EXPECT_NE(find_setting(d.name), nullptr) << d.name;
  }
  EXPECT_EQ(find_setting("no_such_setting"), nullptr);
}

TEST(Settings, EveryFlagIsInItsCommandsHelp) {
  const std::string train = help_of("train"), fwdbwd = help_of("fwdbwd");
  for (const SettingDecl& d : train_settings()) {
    if (!d.has_flag()) continue;
    for (const std::string& f : d.flags) {
      if (d.commands & kTrainCommand) {
        EXPECT_NE(train.find(f), std::string::npos) << f << " not in train --help";
      }
      if (d.commands & kFwdBwdCommand) {
        EXPECT_NE(fwdbwd.find(f), std::string::npos) << f << " not in fwdbwd --help";
      } else if (f != "--model") {  // (fwdbwd has a --model of its own: the checkpoint it checks)
        EXPECT_EQ(fwdbwd.find(f + " "), std::string::npos) << f << " in fwdbwd";
      }
    }
    if (d.commands & kTrainCommand) {
      EXPECT_NE(train.find(d.help.substr(0, 30)), std::string::npos) << d.name;
    }
  }
}

// Every setting set from the command line lands in its field: the declaration's flags, parsed
// as the commands register them, write the value that get() reads back (each alias too).
TEST(Settings, EveryFlagSetsItsSetting) {
  for (const SettingDecl& d : train_settings()) {
    if (!d.has_flag() || d.name == "device") continue;
    for (const std::string& flag : d.flags) {
      TrainConfig values = train_command_defaults();
      const std::string value = d.is_switch ? d.switch_value : other_value(d, d.get(values));
      CLI::App app;
      add_setting_options(app, values, d.commands);
      std::vector<std::string> argv = {"seqpar", flag};
      if (!d.is_switch) argv.push_back(value);
      std::vector<const char*> args;
      for (const std::string& a : argv) args.push_back(a.c_str());
      ASSERT_NO_THROW(app.parse(static_cast<int>(args.size()), args.data())) << flag << " " << value;
      EXPECT_EQ(d.get(values), value) << flag;
    }
  }
}

// Another tool's flag for a setting (Megatron-DeepSpeed's --clip-grad) is its own option that writes
// the setting, translated where the two spell values differently.
TEST(Settings, EveryAliasSetsItsSetting) {
  size_t aliases = 0;
  for (const SettingDecl& d : train_settings()) {
    for (const FlagAlias& a : d.aliases) {
      ++aliases;
      TrainConfig values = train_command_defaults();
      CLI::App app;
      add_setting_options(app, values, d.commands);
      std::string given = a.is_switch ? "" : other_value(d, d.get(values));
      if (a.translate) given = d.name == "lr_schedule" ? "constant" : d.name == "initial_scale_power" ? "4096" : given;
      std::vector<std::string> argv = {"seqpar", a.flag};
      if (!a.is_switch) argv.push_back(given);
      std::vector<const char*> args;
      for (const std::string& x : argv) args.push_back(x.c_str());
      ASSERT_NO_THROW(app.parse(static_cast<int>(args.size()), args.data())) << a.flag << " " << given;
      const std::string want = a.is_switch ? a.switch_value : a.translate ? a.translate(given) : given;
      EXPECT_EQ(d.get(values), want) << a.flag;
      EXPECT_EQ(a.flag.rfind("--", 0), 0u) << a.flag;
      EXPECT_FALSE(a.tool.empty()) << a.flag;
    }
  }
  EXPECT_GE(aliases, 20u);
}

TEST(Settings, JsonRoundTripOfEverySetting) {
  TrainConfig a = train_command_defaults();
  for (const SettingDecl& d : train_settings()) {
    if (d.name == "device") continue;
    d.set(a, other_value(d, d.get(a)), d.flag());
  }
  const nlohmann::json j = settings_to_json(a);
  EXPECT_EQ(j.size(), train_settings().size());
  TrainConfig b;
  settings_from_json(b, j);
  for (const SettingDecl& d : train_settings()) EXPECT_EQ(d.get(b), d.get(a)) << d.name;
  EXPECT_EQ(settings_to_json(b), j);
  // A bad value or an unknown name is an InputError naming it.
  nlohmann::json bad = j;
  bad["micro_batch"] = "many";
  EXPECT_THROW(settings_from_json(b, bad), InputError);
  bad = j;
  bad["no_such_setting"] = 1;
  try {
    settings_from_json(b, bad);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_setting"), std::string::npos) << e.what();
  }
}

TEST(Settings, BadCommandLineValuesNameTheFlag) {
  TrainConfig c;
  for (auto [name, value] : {std::pair{"micro_batch", "x"},
                             {"lr", "fast"},
                             {"sp_mode", "spiral"},
                             {"sp_layout", "random"},
                             {"transport", "carrier-pigeon"},
                             {"device", "tpu"},
                             {"steps", "1e3"},
                             {"activation_checkpointing", "maybe"}}) {
    const SettingDecl* d = find_setting(name);
    ASSERT_NE(d, nullptr) << name;
    try {
      d->set(c, value, d->flag());
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(d->flag()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << e.what();
    }
  }
}

TEST(Settings, EverySettingIsInPrintConfigWithItsSource) {
  CommandLine cli;
  cli.values = train_command_defaults();
  const ResolvedConfig r = resolve_train_config(cli, nullptr, nullptr);
  // The loss scaler's settings are printed with fp16 only (mixed_precision's default is bf16).
  CommandLine fp16 = cli;
  fp16.given.insert("--fp16");
  fp16.values.precision.mixed_precision = Precision::kFp16;
  const ResolvedConfig rf = resolve_train_config(fp16, nullptr, nullptr);
  for (const SettingDecl& d : train_settings()) {
    if (d.print_when_given) {  // a conversion (Megatron's tokens, min_lr): printed only when given
      EXPECT_TRUE(r.value_of(d.name).empty()) << d.name << " printed without its flag";
      continue;
    }
    if (d.group == SettingGroup::kPrecision && d.name != "mixed_precision") {
      EXPECT_TRUE(r.value_of(d.name).empty()) << d.name << " printed for a bf16 run";
      EXPECT_FALSE(rf.value_of(d.name).empty()) << d.name << " not printed for an fp16 run";
      EXPECT_EQ(rf.source_of(d.name), "seqpar default") << d.name;
      continue;
    }
    EXPECT_FALSE(r.value_of(d.name).empty()) << d.name << " not printed";
    // The demo: a setting with a demo default says so; the others are seqpar's own.
    EXPECT_EQ(r.source_of(d.name), d.demo_default ? "demo default" : "seqpar default") << d.name;
  }
  // A flag given is the source.
  cli.given.insert("--micro-batch");
  cli.values.data.micro_batch = 3;
  const ResolvedConfig g = resolve_train_config(cli, nullptr, nullptr);
  EXPECT_EQ(g.value_of("micro_batch"), "3");
  EXPECT_EQ(g.source_of("micro_batch"), "--micro-batch");
  const std::string text = format_resolved_config(rf);  // fp16: the loss scaler's lines too
  for (const SettingDecl& d : train_settings()) {
    if (!d.print_when_given) {
      EXPECT_NE(text.find("  " + d.name + " "), std::string::npos) << d.name;
    }
  }
}

// docs/configs.md carries the table `seqpar train --settings-table` prints, so the docs cannot
// drift from the declaration (regenerate it with that command).
TEST(Settings, DocsTableIsTheDeclaration) {
  std::ifstream f(testing::source_path("docs/configs.md"));
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string table = settings_markdown_table(train_command_defaults());
  EXPECT_NE(ss.str().find(table), std::string::npos)
      << "docs/configs.md does not hold the current settings table; regenerate it with `seqpar train "
         "--settings-table`:\n"
      << table;
  std::string out;
  ASSERT_EQ(testing::run_command(testing::binary_path() + " train --settings-table", &out), 0) << out;
  EXPECT_EQ(out, table);
}

}  // namespace
}  // namespace seqpar
