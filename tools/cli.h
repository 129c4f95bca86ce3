/* cli.h: what the CLI's commands share: fatal errors, strict number and list parsing, the
 * options every command takes, the file reader (regular files and stdin only, size-limited),
 * model loading, output that fails loudly when a write fails. Library access goes through
 * veloxquant.h alone. */
#ifndef VQ_TOOLS_CLI_H
#define VQ_TOOLS_CLI_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "veloxquant.h"
#include "lab/vqlab.h"

#define DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define DEFAULT_TEXT "../shared/data/wikitext-2-raw-test.txt"
#define CLI_MAX_TEXT_BYTES ((size_t)256 << 20)   /* prompt and text files: a larger one is refused */
#define CLI_MAX_ARMS 32

/* "veloxquant: error: ..." (or "veloxquant <prefix>: error: ..." after cli_set_prefix) and exit 1. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void cli_set_prefix(const char *command);

long   parse_long(const char *flag, const char *s, long lo, long hi);
double parse_double(const char *flag, const char *s, double lo, double hi);
/* "a,b,c", every item strictly parsed; at most cap items. Returns the count (>= 1). */
int parse_int_list(const char *flag, const char *s, int *out, int cap, long lo, long hi);

/* Options the commands share. */
typedef struct opts {
    const char *model, *tokenizer, *prompt, *file, *kv;
    const char *kv_list[CLI_MAX_ARMS]; int n_kv;   /* the arms' labels: each --kv as given; after
                                                     * parse_specs with --kv-layers, the spec it made */
    const char *kv_raw[CLI_MAX_ARMS]; int n_kv_raw; /* --kv as given */
    const char *kv_layers[CLI_MAX_ARMS]; int n_kv_layers;   /* every --kv-layers value, as given */
    char kv_label[CLI_MAX_ARMS][VQ_KV_SPEC_MAX_LEN + 1];   /* storage of kv_list after parse_specs */
    int batch, threads, json;
    const char *weights;                  /* --weights: re-code the weights at load */
    int copy_weights;                     /* --copy-weights: read the file instead of mapping it */
    const char *device;                   /* --device / -dev: cpu, cuda, cuda:N (NULL: cpu) */
    uint64_t seed;
    const char *command;                  /* argv[1] */
} opts;
void opts_init(opts *o, const char *command);
/* Returns 1 when argv[*i] was a shared option (its value consumed). */
int common_opt(opts *o, int argc, char **argv, int *i);
/* Parse every arm of o (die naming the bad one): its --kv with every --kv-layers override added
 * (vq_kv_spec_with_layers), the f16 arm when --kv-layers comes without --kv; with --device, an arm
 * the device's KV store cannot hold dies naming it (vq_kv_spec_check_device, before any load).
 * specs[o->n_kv]; free with free_specs. The arms' labels (kv_list, kv) then name the specs made. */
void parse_specs(opts *o, vq_kv_spec **specs);
void free_specs(vq_kv_spec **specs, int n);

/* Load -m (with --tokenizer, -t, --weights, --device); the library's message when it fails (a
 * device the build or the machine lacks: the reason, never a run on the CPU instead). */
vq_model *load_model(const opts *o);
/* A file's bytes, NUL-terminated ("-": stdin). Only regular files (a FIFO or a device is refused
 * without blocking on it) of at most CLI_MAX_TEXT_BYTES; a NUL byte in the text is refused with
 * its offset, since everything downstream would stop at it. what names the file in messages. */
char *read_text(const char *path, const char *what, size_t *len);
/* Checks that path names a regular file that can be opened, without blocking on a FIFO. */
void check_regular_file(const char *path, const char *what);
int *tokenize_all(const vq_model *m, const char *text, size_t len, int add_bos, int special, int *n_out);

/* The --device lines of a command's --help. */
#define CLI_DEVICE_HELP \
    "      --device DEV      where the model runs: cpu (default), cuda or cuda:N (also -dev DEV,\n" \
    "                        and llama.cpp's CUDA0). On the GPU a prompt runs as decode steps (one\n" \
    "                        token per pass: no batched prefill yet) and the KV cache is f16 only\n" \
    "                        (another --kv is refused); refused with the reason, never run on the\n" \
    "                        CPU instead, when the build or the machine has no CUDA GPU (docs/cuda.md)\n"

/* Progress bar on stderr when it is a terminal. */
void progress(long done, long total, void *user);

/* stdout: flush and die when anything written to it failed ("veloxquant: error: writing the
 * output failed: No space left on device"). Every command calls this before it exits 0. */
void finish_stdout(void);
/* fwrite + fflush to stdout; 0 or -1 (errno set) on the first failure. */
int write_stdout(const char *s, size_t n);

/* An output file written whole or not at all: opened (a temp file beside path) before the long
 * run, so a path that cannot be written fails first; out_commit renames it over path after a
 * complete write. A path naming an existing non-regular file (/dev/stdout, a pipe) is written in
 * place. An uncommitted temp file is removed at exit. */
typedef struct out_file out_file;
out_file *out_open(const char *path);
FILE *out_stream(out_file *o);
void out_commit(out_file *o);   /* dies when a write failed (path then is untouched) */

/* The command line as one string, arguments with spaces or quotes quoted (JSON reports). */
void command_line(int argc, char **argv, char *buf, size_t n);
#endif
