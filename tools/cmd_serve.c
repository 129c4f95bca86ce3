/* cmd_serve.c: `veloxquant serve`: parses the flags, loads the model and runs the OpenAI-compatible
 * server (server/: the scheduler, the HTTP side). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cmds.h"
#include "server/server.h"

static const char *serve_help =
    "usage: veloxquant serve [options]\n"
    "An OpenAI-compatible HTTP server: N slots, each a session with its own compressed KV cache,\n"
    "decoded together (one batched forward pass per step). Stops on SIGTERM or SIGINT after\n"
    "finishing the requests in flight (exit 0). docs/serve.md describes every endpoint.\n"
    "  POST /v1/chat/completions, POST /v1/completions   (stream true/false; field \"kv\": a KV spec)\n"
    "  GET /v1/models, GET /health, GET /metrics (Prometheus), GET /slots,\n"
    "  POST /slots/ID?action=save|restore|erase  (body {\"filename\": NAME} in --slot-save-path)\n"
    "options:\n"
    "  -m, --model FILE      GGUF or llama2.c model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer FILE  tokenizer for llama2.c checkpoints (tok512.bin)\n"
    "      --alias NAME      the model id /v1/models reports (default: the file's name)\n"
    "      --kv SPEC         KV cache of requests that name none (default f16); docs/kv-spec.md\n"
    "      --host ADDR       IPv4 address to listen on (default 127.0.0.1)\n"
    "      --port N          TCP port (default 8080; 0: any free port, printed on stdout)\n"
    "  -np, --parallel N     slots: conversations decoded at once (default 4)\n"
    "  -c, --ctx N           positions per slot, prompt + generated (default 2048)\n"
    "      --kv-budget MB    KV memory of all slots together, in MiB (default 1024): a request\n"
    "                        reserves its cache's exact bytes at prompt + max_tokens; one that does\n"
    "                        not fit waits; idle slots' caches are dropped when room is needed\n"
    "      --queue N         requests that may wait for a slot or budget (default 64); beyond: 503\n"
    "      --max-conns N     concurrent HTTP connections (default 128)\n"
    "      --max-body BYTES  largest request body (default 1048576); larger: 413\n"
    "      --idle-timeout S  close a connection silent for S seconds (default 60)\n"
    "      --header-timeout S  a request's headers and body must arrive within S seconds of its\n"
    "                        first byte's chance (default 30); a slower one is closed\n"
    "      --max-conns-per-client N  concurrent connections from one IP address (default 32)\n"
    "      --slot-save-path DIR  directory of slot files (default: slot files off)\n"
    "      --calib-dir DIR   calibration files a request's kv may name as calib=NAME (default:\n"
    "                        none: a request's calib= is refused; --kv itself may name any file)\n"
    "  -b, --batch N         prefill chunk in tokens (default 64)\n"
    "  -t, --threads N       threads for the model (default: OpenMP's)\n"
    "      --device DEV      cpu (default), cuda or cuda:N: the model and every slot's KV cache on\n"
    "                        that GPU (docs/cuda.md: what its caches hold; slots decode one after\n"
    "                        another there, not batched; a request's kv the GPU cannot hold fails)\n"
    "      --kv-seed N       seed of the caches' rotations (default 24301 = 0x5eed, as generate)\n"
    "      --verbose         a line per request on stderr\n";

int cmd_serve(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    o.kv = "f16";
    srv_config c = { .host = "127.0.0.1", .port = 8080, .n_slots = 4, .n_ctx = 2048, .queue_cap = 64,
                     .max_conns = 128, .kv_budget_bytes = (size_t)1024 << 20, .kv_seed = 0x5eed,
                     .max_body = 1 << 20, .idle_timeout_s = 60, .header_timeout_s = 30,
                     .max_conns_per_client = 32 };
    const char *alias = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json") || !strcmp(a, "-s") || !strcmp(a, "--seed") || !strcmp(a, "--kv-layers"))
            die("serve: unknown option '%s' (see veloxquant serve --help)", a);
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(serve_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "--host")) { if (!v) die("--host needs an address"); c.host = v; i++; }
        else if (!strcmp(a, "--port")) { c.port = (int)parse_long(a, v, 0, 65535); i++; }
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) { c.n_slots = (int)parse_long(a, v, 1, 256); i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size")) { c.n_ctx = (int)parse_long(a, v, 16, 1 << 20); i++; }
        else if (!strcmp(a, "--kv-budget")) { c.kv_budget_bytes = (size_t)parse_long(a, v, 1, 1 << 24) << 20; i++; }
        else if (!strcmp(a, "--queue")) { c.queue_cap = (int)parse_long(a, v, 1, 1 << 16); i++; }
        else if (!strcmp(a, "--max-conns")) { c.max_conns = (int)parse_long(a, v, 2, 4096); i++; }
        else if (!strcmp(a, "--max-body")) { c.max_body = (size_t)parse_long(a, v, 1024, 1L << 30); i++; }
        else if (!strcmp(a, "--idle-timeout")) { c.idle_timeout_s = (int)parse_long(a, v, 1, 86400); i++; }
        else if (!strcmp(a, "--header-timeout")) { c.header_timeout_s = (int)parse_long(a, v, 1, 86400); i++; }
        else if (!strcmp(a, "--max-conns-per-client")) { c.max_conns_per_client = (int)parse_long(a, v, 1, 4096); i++; }
        else if (!strcmp(a, "--slot-save-path")) { if (!v) die("--slot-save-path needs a directory"); c.slot_dir = v; i++; }
        else if (!strcmp(a, "--calib-dir")) { if (!v) die("--calib-dir needs a directory"); c.calib_dir = v; i++; }
        else if (!strcmp(a, "--alias")) { if (!v || !*v) die("--alias needs a name"); alias = v; i++; }
        else if (!strcmp(a, "--kv-seed")) { c.kv_seed = (uint64_t)parse_long(a, v, 0, 1L << 62); i++; }
        else if (!strcmp(a, "--verbose")) c.verbose = 1;
        else die("serve: unknown option '%s' (see veloxquant serve --help)", a);
    }
    if (o.n_kv_raw > 1) die("serve: --kv given %d times: it names the one default spec (a request names its own in \"kv\")", o.n_kv_raw);
    if (c.slot_dir) {
        struct stat st;
        if (stat(c.slot_dir, &st) || !S_ISDIR(st.st_mode)) die("--slot-save-path '%s' is not a directory", c.slot_dir);
    }
    if (c.calib_dir) {
        struct stat st;
        if (stat(c.calib_dir, &st) || !S_ISDIR(st.st_mode)) die("--calib-dir '%s' is not a directory", c.calib_dir);
    }
    vq_err err;
    vq_kv_spec *spec = vq_kv_spec_parse(o.kv, &err);   /* a bad --kv fails before the model loads */
    if (!spec) die("--kv: %s", err.msg);
    if (o.device && vq_kv_spec_check_device(spec, o.device, &err)) die("--kv %s: %s", o.kv, err.msg);
    vq_kv_spec_free(spec);
    vq_model *m = load_model(&o);
    const char *base = strrchr(o.model, '/');
    c.model = m;
    c.model_name = alias ? alias : base ? base + 1 : o.model;
    c.n_batch = o.batch;
    c.n_threads = o.threads;
    c.kv_default = o.kv;
    char msg[768];
    int rc = srv_run(&c, msg, sizeof msg);
    vq_model_free(m);
    if (rc) die("%s", msg);
    return 0;
}
