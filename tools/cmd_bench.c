/* seqkv bench (placeholder until implemented). */
#include "cli.h"

int cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("'bench' is not implemented yet");
    return CLI_FAIL;
}
