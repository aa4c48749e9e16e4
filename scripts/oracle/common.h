/* Pieces both oracle programs share (scripts/oracle/quantize.c, eval.c). */
#ifndef SKV_ORACLE_COMMON_H
#define SKV_ORACLE_COMMON_H

/* Routes llama.cpp's log to stderr, warnings and errors only. Call first. */
void oracle_quiet_log(void);

/* Loads one CPU backend variant before llama_backend_init (which then loads no
 * other): the AVX2 "haswell" build, never the AMX one (its matmul crashed on
 * quantized models on our Xeon). $SKV_ORACLE_CPU_LIB overrides the path.
 * -> 0, or -1 after printing why. */
int oracle_load_cpu_backend(void);

#endif
