// The subcommands, each registered on the app with its options (the option table is the help).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/device.h"
#include "train/config.h"

namespace seqpar {

// Registers on `cmd` every declared setting (train/config.h) that `command` takes (a
// SettingCommand bit): its flags, help, choices and default (the current value in `values`), each
// writing into `values` through the declaration as it is parsed.
void add_setting_options(CLI::App& cmd, TrainConfig& values, unsigned command);
// seqpar train's defaults: the demo's (its model, task, schedule) where no file or flag says.
TrainConfig train_command_defaults();

void add_fwdbwd_command(CLI::App& app, int& rc);
void add_train_command(CLI::App& app, int& rc);
void add_bench_command(CLI::App& app, int& rc);
void add_prepare_data_command(CLI::App& app, int& rc);
void add_launch_command(CLI::App& app, int& rc);
void add_export_command(CLI::App& app, int& rc);
void add_plan_command(CLI::App& app, int& rc);

}  // namespace seqpar
