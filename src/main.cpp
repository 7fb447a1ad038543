#include "cli/cli.h"

int main(int argc, char** argv) { return seqpar::cli_main(argc, argv); }
