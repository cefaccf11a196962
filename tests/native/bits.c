/* A C-level check of the native kernels' bits, built for any architecture (tests/test_native_arch.py builds
 * it for x86-64 and for aarch64 with Debian's cross compiler and runs it under qemu-user).
 *
 * Deterministic inputs (xorshift), then for float32 and bfloat16 linear layers (and W's rows read back from
 * their packed copies), the greedy argmax, the residual add and RMSNorm, and attention:
 *   - row invariance: each row computed alone equals the same row among 2 to 17, every count (each count
 *     splits the rows into other tiles: 3 rows, 6 + 1, 6 + 5 + 2, 16 + 1 ...; else exit 1);
 *   - one line per kernel: "<name> <FNV-1a hash of the output bytes>", so that two builds (another
 *     variant, another architecture) can be compared for identical bits.
 * Linked with the kernel sources compiled without renaming (the plain trtlade_* names). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h" /* trtlade/reference/native/, on the include path */

/* Four widths, 4 to 7 panels of 16 outputs (the last partial): the schedules group panels by 2, 3 or 4, so every
 * tile meets full groups and the groups of 1, 2 and 3 panels left at the end. */
enum { M = 17, K = 130, NMAX = 110, NP = 112 /* NMAX padded to panels of 16 */ };

static uint32_t state = 2463534242u;
static float next_float(void) { /* uniform in [-1, 1) */
    state ^= state << 13; state ^= state >> 17; state ^= state << 5;
    return (float)(state >> 8) / 8388608.0f - 1.0f;
}
static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); } /* truncate: exact input */
static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* y, yb, ym, ybm: M rows of N outputs each, row i at i * N (the kernels' layout) */
static float w[NMAX][K], x[M][K], bias[NMAX], wp[NP / 16][K][16], y[M * NMAX], y1[NMAX], ym[M * NMAX];
static uint16_t xb[M][K], wpb[NP / 16][K / 2][16][2], yb[M * NMAX], yb1[NMAX], ybm[M * NMAX];

/* The linear layers of N outputs: each row alone equals the same row among 2 to M; the outputs' hashes into h. */
static int linear_width(int N, uint64_t h[2]) {
    for (int n = 0; n < N; n++) { bias[n] = next_float(); for (int k = 0; k < K; k++) w[n][k] = next_float(); }
    for (int i = 0; i < M; i++) for (int k = 0; k < K; k++) { x[i][k] = next_float(); xb[i][k] = to_bf16(x[i][k]); }
    memset(wp, 0, sizeof wp); memset(wpb, 0, sizeof wpb);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            wp[n / 16][k][n % 16] = w[n][k];
            wpb[n / 16][k / 2][n % 16][k % 2] = to_bf16(w[n][k]);
        }
    const size_t row = sizeof(float) * (size_t)N, rowb = sizeof(uint16_t) * (size_t)N;
    if (trtlade_linear_f32(&x[0][0], M, K, &wp[0][0][0], bias, N, y, 2)) return 2;
    if (trtlade_linear_bf16(&xb[0][0], M, K, &wpb[0][0][0][0], bias, N, yb, 2)) return 2;
    for (int i = 0; i < M; i++) {
        trtlade_linear_f32(x[i], 1, K, &wp[0][0][0], bias, N, y1, 1);
        trtlade_linear_bf16(xb[i], 1, K, &wpb[0][0][0][0], bias, N, yb1, 1);
        if (memcmp(y1, y + i * N, row) || memcmp(yb1, yb + i * N, rowb)) {
            printf("row %d of %d outputs differs alone\n", i, N);
            return 1;
        }
    }
    for (int m = 2; m < M; m++) { /* the first m rows: every row as alone */
        if (trtlade_linear_f32(&x[0][0], m, K, &wp[0][0][0], bias, N, ym, 2)) return 2;
        if (trtlade_linear_bf16(&xb[0][0], m, K, &wpb[0][0][0][0], bias, N, ybm, 2)) return 2;
        for (int i = 0; i < m; i++)
            if (memcmp(ym + i * N, y + i * N, row) || memcmp(ybm + i * N, yb + i * N, rowb)) {
                printf("row %d of %d differs from the same row of %d (%d outputs)\n", i, m, (int)M, N);
                return 1;
            }
    }
    h[0] ^= fnv(y, row * M);
    h[1] ^= fnv(yb, rowb * M);
    return 0;
}

static int linear_checks(void) {
    uint64_t h[2] = {0, 0};
    const int widths[4] = {50, 75, 90, NMAX};
    for (int t = 0; t < 4; t++) {
        h[0] *= 31, h[1] *= 31;
        const int code = linear_width(widths[t], h);
        if (code) return code;
    }
    printf("linear_f32 %016llx\n", (unsigned long long)h[0]);
    printf("linear_bf16 %016llx\n", (unsigned long long)h[1]);
    return 0;
}

/* Attention for head sizes 16 (the scalar fold everywhere), 64 and 128 (with AVX, the vector fold and
 * its horizontal-add tree; the scalar fold on the portable variant and aarch64): the same bits. */
enum { HEADS = 4, KVH = 2, MAXD = 128, CAP = 80 };
static float kc[KVH * CAP * MAXD], vc[KVH * CAP * MAXD], q[3 * HEADS * MAXD], out[3 * HEADS * MAXD],
    out1[HEADS * MAXD];

/* A bf16 cache (a bf16 model's K/V) gives the bits of a float32 cache holding the same bf16 numbers. */
static float kr[KVH * CAP * MAXD], vr[KVH * CAP * MAXD];
static uint16_t kb[KVH * CAP * MAXD], vb[KVH * CAP * MAXD];

static int bf16_cache_check(int D, const int64_t *slot, const int64_t *committed, const int64_t *pos,
                            const int64_t *ptr, const int64_t *idx, const int64_t *at) {
    for (int i = 0; i < KVH * CAP * D; i++) {
        uint32_t bits;
        memcpy(&bits, &kc[i], 4); kb[i] = (uint16_t)(bits >> 16); bits &= 0xFFFF0000u; memcpy(&kr[i], &bits, 4);
        memcpy(&bits, &vc[i], 4); vb[i] = (uint16_t)(bits >> 16); bits &= 0xFFFF0000u; memcpy(&vr[i], &bits, 4);
    }
    trtlade_row_attention(q, 3, HEADS, D, kr, vr, KVH, CAP, slot, committed, pos, ptr, idx, at, 0, 0.25f, 0.0f, out, 0);
    static float outb[3 * HEADS * MAXD];
    trtlade_row_attention(q, 3, HEADS, D, kb, vb, KVH, CAP, slot, committed, pos, ptr, idx, at, 0, 0.25f, 0.0f, outb, 1);
    if (memcmp(outb, out, sizeof(float) * 3 * HEADS * D)) {
        printf("attention over a bf16 cache differs from its float32 copy (head size %d)\n", D);
        return 1;
    }
    return 0;
}

static int attention_checks(int D) {
    for (int i = 0; i < KVH * CAP * D; i++) { kc[i] = next_float(); vc[i] = next_float(); }
    for (int i = 0; i < 3 * HEADS * D; i++) q[i] = next_float();
    /* three rows of slot 0 with 70 committed keys: a chain at positions 70, 71, 72 (cache 70, 71, 72) */
    int64_t slot[3] = {0, 0, 0}, committed[3] = {70, 70, 70}, pos[3] = {70, 71, 72};
    int64_t ptr[4] = {0, 1, 3, 6}, idx[6] = {70, 70, 71, 70, 71, 72}, at[6] = {70, 70, 71, 70, 71, 72};
    trtlade_row_attention(q, 3, HEADS, D, kc, vc, KVH, CAP, slot, committed, pos, ptr, idx, at, 0, 0.25f, 0.0f, out, 0);
    int64_t ptr1[2] = {0, 3};
    trtlade_row_attention(q + 2 * HEADS * D, 1, HEADS, D, kc, vc, KVH, CAP, slot, committed, pos + 2, ptr1, idx + 3,
                          at + 3, 0, 0.25f, 0.0f, out1, 0);
    if (memcmp(out1, out + 2 * HEADS * D, sizeof(float) * HEADS * D)) {
        printf("attention row differs alone (head size %d)\n", D);
        return 1;
    }
    const char *name = D == 16 ? "row_attention" : D == 64 ? "row_attention_64" : "row_attention_128";
    printf("%s %016llx\n", name, (unsigned long long)fnv(out, sizeof(float) * 3 * HEADS * D));
    return bf16_cache_check(D, slot, committed, pos, ptr, idx, at);
}

/* The greedy token of rows with ties across the lanes and the tail, -inf and a NaN: every build answers alike. */
static int argmax_checks(void) {
    enum { R = 4, V = 1000 };
    static float x[R][V];
    int64_t best[R];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) x[r][v] = next_float();
    x[1][17] = x[1][990] = 5.0f;  /* a tie: the first */
    for (int v = 0; v < V; v++) x[2][v] = -1.0f / 0.0f;
    x[3][400] = 0.0f / 0.0f;      /* a NaN wins */
    if (trtlade_argmax_rows(&x[0][0], R, V, best)) return 1;
    if (best[1] != 17 || best[2] != 0 || best[3] != 400) {
        printf("argmax %lld %lld %lld\n", (long long)best[1], (long long)best[2], (long long)best[3]);
        return 1;
    }
    printf("argmax %016llx\n", (unsigned long long)fnv(best, sizeof best));
    return 0;
}

/* Rows of W read back from both packed layouts (the tied embedding's rows): W's values exactly; an id
 * outside [0, NMAX) is refused. Runs after linear_checks, which fills w, wp and wpb (NMAX outputs last). */
static int packed_rows_checks(void) {
    const int64_t ids[3] = {NMAX - 1, 0, 17}, outside[1] = {NMAX};
    static float rows[3][K];
    static uint16_t rowsb[3][K];
    if (trtlade_packed_rows(wp, K, NMAX, 0, ids, 3, rows) || trtlade_packed_rows(wpb, K, NMAX, 1, ids, 3, rowsb)) return 1;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < K; k++)
            if (rows[i][k] != w[ids[i]][k] || rowsb[i][k] != to_bf16(w[ids[i]][k])) {
                printf("packed_rows: row %d, k %d differs\n", i, k);
                return 1;
            }
    if (!trtlade_packed_rows(wp, K, NMAX, 0, outside, 1, rows)) {
        printf("packed_rows: id %d not refused\n", NMAX);
        return 1;
    }
    printf("packed_rows %016llx\n", (unsigned long long)(fnv(rows, sizeof rows) ^ fnv(rowsb, sizeof rowsb)));
    return 0;
}

/* The residual add and RMSNorm of 16 rows of 130 (16 groups of 8 and a tail of 2: the sum of squares' 8 partial
 * sums and its tree, the partial sums of one size, so that another order of them shows in the bits), float32 and
 * bfloat16: each row alone equals the same row among 16. */
static int norm_checks(void) {
    enum { R = 16, D = 130 };
    static float h[R][D], a[R][D], wt[D], o[R][D], h1[D], o1[D];
    static uint16_t hb[R][D], ab[R][D], wtb[D], ob[R][D], hb1[D], ob1[D];
    for (int d = 0; d < D; d++) wt[d] = next_float(), wtb[d] = to_bf16(wt[d]);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) {
            h[r][d] = (float)(1 + d % 3) * next_float(), a[r][d] = next_float();
            hb[r][d] = to_bf16(h[r][d]), ab[r][d] = to_bf16(a[r][d]);
        }
    memcpy(h1, h[1], sizeof h1), memcpy(hb1, hb[1], sizeof hb1);
    if (trtlade_add_rms_norm(h, a, R, D, wt, 1e-5f, o, 0) || trtlade_add_rms_norm(hb, ab, R, D, wtb, 1e-5f, ob, 1))
        return 1;
    if (trtlade_add_rms_norm(h1, a[1], 1, D, wt, 1e-5f, o1, 0) || trtlade_add_rms_norm(hb1, ab[1], 1, D, wtb, 1e-5f, ob1, 1))
        return 1;
    if (memcmp(o1, o[1], sizeof o1) || memcmp(ob1, ob[1], sizeof ob1) || memcmp(h1, h[1], sizeof h1)) {
        printf("a norm row differs alone\n");
        return 1;
    }
    printf("rms_norm %016llx\n", (unsigned long long)(fnv(o, sizeof o) ^ fnv(h, sizeof h)));
    printf("rms_norm_bf16 %016llx\n", (unsigned long long)(fnv(ob, sizeof ob) ^ fnv(hb, sizeof hb)));
    return 0;
}

int main(void) {
    int code = linear_checks();
    if (!code) code = packed_rows_checks();
    if (!code) code = argmax_checks();
    if (!code) code = norm_checks();
    const int sizes[3] = {16, 64, 128};
    for (int i = 0; !code && i < 3; i++) code = attention_checks(sizes[i]);
    return code;
}
