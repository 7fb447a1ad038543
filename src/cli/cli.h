// The `seqpar` command line: parses, validates, dispatches to train/ and io/. Holds no logic a
// test would want; the commands' work lives in the parts below.
#pragma once

namespace seqpar {

int cli_main(int argc, char** argv);

}  // namespace seqpar
