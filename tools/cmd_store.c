/* seqkv store (placeholder until implemented). */
#include "cli.h"

int cmd_store(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("'store' is not implemented yet");
    return CLI_FAIL;
}
