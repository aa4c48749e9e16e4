/* See common.h. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

#include "ggml-backend.h"
#include "llama.h"

#ifndef SKV_ORACLE_CPU_LIB
#define SKV_ORACLE_CPU_LIB "libggml-cpu-haswell.so"
#endif

static void log_quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN)
        fputs(text, stderr);
}

void oracle_quiet_log(void)
{
    llama_log_set(log_quiet, NULL);
}

int oracle_load_cpu_backend(void)
{
#ifdef SKV_ORACLE_STATIC
    return 0; /* linked against a static ggml (its CPU backend is built in): nothing to load */
#else
    const char *path = getenv("SKV_ORACLE_CPU_LIB");
    if (!path || !*path)
        path = SKV_ORACLE_CPU_LIB;
    if (!ggml_backend_load(path)) {
        fprintf(stderr, "cannot load the CPU backend %s\n", path);
        return -1;
    }
    return 0;
#endif
}
