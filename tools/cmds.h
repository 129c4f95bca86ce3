/* cmds.h: the commands, one per tools/cmd_<command>.c; each gets main's argc/argv (argv[1] is
 * the command) and returns the exit status. */
#ifndef VQ_TOOLS_CMDS_H
#define VQ_TOOLS_CMDS_H
int cmd_generate(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench_kernels(int argc, char **argv);
int cmd_kv_fidelity(int argc, char **argv);
int cmd_needle(int argc, char **argv);
int cmd_tasks(int argc, char **argv);
int cmd_serve(int argc, char **argv);     /* cmd_serve.c, on server/ */
int cmd_evict_corr(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_calib_layers(int argc, char **argv);   /* cmd_calibrate.c */
int cmd_quantize(int argc, char **argv);
int cmd_bench_share(int argc, char **argv);
#endif
