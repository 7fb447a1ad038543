// The command-line options of the declared settings (train/config.h): one registration for
// every command that takes them.
#include <string>

#include "cli/commands.h"

namespace seqpar {

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
      continue;
    }
    CLI::Option* o = cmd.add_option_function<std::string>(
        names, [decl, out](const std::string& v) { decl->set(*out, v, decl->flag()); }, help);
    o->type_name(d.type_name);
    const std::string def = d.get(values);
    if (!def.empty()) o->default_str(def);
    if (d.name == "resume") o->expected(0, 1);  // `--resume` alone: the newest checkpoint (latest)
  }
}

}  // namespace seqpar
