// The command-line options of the declared settings (train/config.h): one registration for
// every command that takes them.
#include <string>

#include "cli/commands.h"

namespace seqpar {

namespace {

// Each alias of a setting (another tool's flag) as its own option, so the given name is known.
void add_aliases(CLI::App& cmd, const SettingDecl& d, TrainConfig& values) {
  for (const FlagAlias& a : d.aliases) {
    const SettingDecl* decl = &d;
    const FlagAlias* alias = &a;
    TrainConfig* out = &values;
    const std::string help = fmt::format("({}) = {}{}", a.tool, d.flag(), a.note.empty() ? "" : ": " + a.note);
    if (a.is_switch) {
      cmd.add_flag_callback(
             a.flag, [decl, alias, out] { decl->set(*out, alias->switch_value, alias->flag); }, help)
          ->group("Other tools' flags");
      continue;
    }
    cmd.add_option_function<std::string>(
           a.flag,
           [decl, alias, out](const std::string& v) {
             decl->set(*out, alias->translate ? alias->translate(v) : v, alias->flag);
           },
           help)
        ->type_name(d.type_name)
        ->group("Other tools' flags");
  }
}

}  // namespace

void add_setting_options(CLI::App& cmd, TrainConfig& values, unsigned command) {
  for (const SettingDecl& d : train_settings()) {
    if (!(d.commands & command) || !d.has_flag()) continue;
    std::string names;
    for (const std::string& f : d.flags) names += (names.empty() ? "" : ",") + f;
    std::string help = d.help;
    if (!d.choices.empty()) {
      std::string set;
      for (const std::string& c : d.choices) set += (set.empty() ? "" : " | ") + c;
      help += " {" + set + "}";
    }
    const SettingDecl* decl = &d;
    TrainConfig* out = &values;
    if (d.is_switch) {
      cmd.add_flag_callback(
          names, [decl, out] { decl->set(*out, decl->switch_value, decl->flag()); }, help);
      add_aliases(cmd, d, values);
      continue;
    }
    CLI::Option* o = cmd.add_option_function<std::string>(
        names, [decl, out](const std::string& v) { decl->set(*out, v, decl->flag()); }, help);
    o->type_name(d.type_name);
    const std::string def = d.get(values);
    if (!def.empty()) o->default_str(def);
    if (d.name == "resume") o->expected(0, 1);  // `--resume` alone: the newest checkpoint (latest)
    add_aliases(cmd, d, values);
  }
  if (!(command & kTrainCommand)) return;
  // Other tools' flags without a setting: recorded, and refused or noted by config_resolve.
  TrainConfig* out = &values;
  for (const ForeignFlag& f : foreign_flags()) {
    const std::string help = fmt::format("({}) {}{}", f.tool,
                                         f.checked   ? "accepted when it equals the run's length"
                                         : f.refused ? "refused"
                                                     : "accepted without effect",
                                         f.accepted.empty() ? "" : " (" + f.accepted + " is accepted)");
    const std::string flag = f.flag;
    if (f.takes_value) {
      cmd.add_option_function<std::string>(
             flag, [out, flag](const std::string& v) { out->foreign_given.emplace_back(flag, v); }, help)
          ->type_name("VALUE")
          ->group("Other tools' flags");
    } else {
      cmd.add_flag_callback(
             flag, [out, flag] { out->foreign_given.emplace_back(flag, ""); }, help)
          ->group("Other tools' flags");
    }
  }
}

}  // namespace seqpar
