/* vq_test.h: the few macros our tests share. Each test file is one executable run by CTest;
 * it prints one line per failed check, and ends with "N passed, N failed".
 * A test that needs ../shared or a downloaded model calls VQ_SKIP (exit 77: CTest's skip). */
#ifndef VQ_TEST_H
#define VQ_TEST_H
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int vq_t_pass, vq_t_fail;

#define CHECK(cond) do { if (cond) vq_t_pass++; else { vq_t_fail++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { if (cond) vq_t_pass++; else { vq_t_fail++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double _a = (a), _b = (b); \
    CHECKF(fabs(_a - _b) <= (tol), "%s = %.9g, %s = %.9g, tol %.3g", #a, _a, #b, _b, (double)(tol)); } while (0)

#define VQ_SKIP(...) do { fprintf(stderr, "SKIP: "); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); exit(77); } while (0)

static inline int vq_t_done(void) {
    printf("%d passed, %d failed\n", vq_t_pass, vq_t_fail);
    return vq_t_fail ? 1 : 0;
}

/* The seed of a randomized test: def, unless the environment variable VQ_TEST_SEED gives another
 * (decimal, or 0x hex). Printed first thing, so any failure can be repeated exactly; a seed from
 * the clock would make a failure unrepeatable and a pass mean less. A malformed VQ_TEST_SEED is
 * an error (exit 2), not silently the default. */
static inline uint64_t vq_t_seed(uint64_t def) {
    uint64_t seed = def;
    const char *e = getenv("VQ_TEST_SEED");
    if (e && *e) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(e, &end, 0);
        if (errno || *end || *e == '-') {
            fprintf(stderr, "VQ_TEST_SEED=\"%s\": not an unsigned 64-bit number\n", e);
            exit(2);
        }
        seed = v;
    }
    printf("seed %llu (VQ_TEST_SEED overrides)\n", (unsigned long long)seed);
    fflush(stdout);
    return seed;
}

/* A fresh, empty file /tmp/STEM_XXXXXX (mkstemp: unique per process and call, so tests running in
 * parallel never share one); its path in buf. The caller unlinks it. */
static inline const char *vq_t_tmpfile(const char *stem, char *buf, size_t n) {
    snprintf(buf, n, "/tmp/%s_XXXXXX", stem);
    int fd = mkstemp(buf);
    if (fd < 0) VQ_SKIP("cannot make a temp file %s: %s", buf, strerror(errno));
    close(fd);
    return buf;
}
/* Path of a file in ../shared/data, or skip the whole test when it is absent. */
static inline const char *vq_t_shared(const char *rel, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", VQ_SHARED_DIR, rel);
    if (access(buf, R_OK) != 0) VQ_SKIP("%s not found: ../shared is absent (tests that need it skip)", buf);
    return buf;
}
/* Path of the default SmolLM2 model, or skip when it was not fetched (scripts/fetch_model.sh). */
static inline const char *vq_t_model(char *buf, size_t n) {
    snprintf(buf, n, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", VQ_MODELS_DIR);
    if (access(buf, R_OK) != 0) VQ_SKIP("%s not found: run scripts/fetch_model.sh", buf);
    return buf;
}
/* Path of the Gemma 3 270M model, or skip when it was not fetched (scripts/fetch_gemma.sh). */
static inline const char *vq_t_gemma(char *buf, size_t n) {
    snprintf(buf, n, "%s/gemma-3-270m-q4_k_m.gguf", VQ_MODELS_DIR);
    if (access(buf, R_OK) != 0) VQ_SKIP("%s not found: run scripts/fetch_gemma.sh", buf);
    return buf;
}
#endif
