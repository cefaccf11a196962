/* trtlade: the small per-layer ops of the engine's Llama-family forward, fused so that a decode step
 * pays a few calls per layer instead of some twenty torch ops (each a few microseconds of dispatch on
 * the hosts of this project; docs/results/step-profile.md, "Where a step's time goes").
 *
 *   trtlade_add_rms_norm   h += a (optional), out = weight * rms_norm(h)       (RMSNorm, residual)
 *   trtlade_silu_mul       out = silu(gate) * up                                (the MLP's activation)
 *   trtlade_qkv_prepare    q/k norms (Qwen3), rotary embedding, K/V into the slot cache, q out in float32
 *   trtlade_argmax_rows    the greedy token of each row of logits
 *
 * Each row is computed on its own by one sequence of instructions (rows never share a reduction), so
 * the result of a row does not depend on the rows beside it. dtype 0 is float32, 1 is bfloat16: values
 * are computed in float32 and rounded to bfloat16 (to nearest even) where transformers' bf16 modules
 * round: after the normalisation, after the weight, after each op of the rotary embedding and the
 * activation.
 *
 * Worked example (RMSNorm of one row h = [3, 4], weight [1, 2], eps 0): mean(h^2) = 12.5,
 * h / sqrt(12.5) = [0.8485, 1.1314], times the weight = [0.8485, 2.2627].
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "det_math.h"
#include "kernels.h"

static inline float bf16_to_f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                            /* to nearest even */
    return (uint16_t)(u >> 16);
}

static inline __attribute__((always_inline)) float load(const void *p, int64_t i, int bf16) {
    return bf16 ? bf16_to_f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline __attribute__((always_inline)) void store(void *p, int64_t i, float x, int bf16) {
    if (bf16) ((uint16_t *)p)[i] = f_to_bf16(x);
    else ((float *)p)[i] = x;
}

/* Rounded to the model's dtype (a no-op in float32). */
static inline __attribute__((always_inline)) float rnd(float x, int bf16) { return bf16 ? bf16_to_f(f_to_bf16(x)) : x; }

/* Sum of squares of one row, 8 partial sums in a fixed order (the same for every row): partial sum l
 * adds x[l]^2, x[l+8]^2, ... in turn, then ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), then the tail. Written
 * with one 8-lane vector (each lane one float operation, the same chain): as eight scalars, GCC
 * vectorised the loop across k with shuffles (about 150 ns of a 576-wide row), and the RMSNorm of 8 bf16
 * rows took 4.3 us instead of 3.5 (a C harness, hot, best of 2,000 calls; 2-core AMD EPYC Zen 4). Where the
 * registers hold 4 floats (SSE2, aarch64's NEON) the 8 lanes are two 4-lane vectors: one 8-lane generic vector
 * there was stored to the stack and read back at every step of the loop (GCC 12's aarch64 output: an stp/ldp
 * pair per iteration on the accumulator's chain). Lanes 0-3 and 4-7 are the same partial sums either way. */
#if defined(__AVX__)
typedef float f32x8 __attribute__((vector_size(32)));

static float sum_squares(const float *x, int64_t n) {
    f32x8 acc = {0, 0, 0, 0, 0, 0, 0, 0}, v;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&v, x + i, sizeof v);
        acc = acc + v * v;
    }
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}
#else
typedef float f32x4 __attribute__((vector_size(16)));

static float sum_squares(const float *x, int64_t n) {
    f32x4 lo = {0, 0, 0, 0}, hi = lo, a, b;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&a, x + i, sizeof a);
        memcpy(&b, x + i + 4, sizeof b);
        lo = lo + a * a;
        hi = hi + b * b;
    }
    float s = ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}
#endif

#define MAX_HIDDEN 16384

/* One row: out = weight * rnd(x / sqrt(mean(x^2) + eps)), x in float32 already. */
static inline __attribute__((always_inline)) void norm_row(const float *x, int64_t dim, const void *weight, float eps, void *out, int64_t at, int bf16) {
    const float inv = 1.0f / sqrtf(sum_squares(x, dim) / (float)dim + eps);
    for (int64_t i = 0; i < dim; i++) store(out, at + i, load(weight, i, bf16) * rnd(x[i] * inv, bf16), bf16);
}

/* One row of trtlade_add_rms_norm; bf16 is a constant in each caller, so each dtype gets its own loops. */
static inline __attribute__((always_inline)) void add_norm_row(void *h, const void *a, int64_t r, int64_t dim,
                                                               const void *weight, float eps, void *out,
                                                               const int bf16) {
    float x[MAX_HIDDEN];
    const int64_t at = r * dim;
    for (int64_t i = 0; i < dim; i++) {
        float v = load(h, at + i, bf16);
        if (a) {
            v = rnd(v + load(a, at + i, bf16), bf16);
            store(h, at + i, v, bf16);
        }
        x[i] = v;
    }
    norm_row(x, dim, weight, eps, out, at, bf16);
}

/* h [rows, dim] (updated in place to h + a when a is given), out [rows, dim] = weight * rms_norm(h). */
int trtlade_add_rms_norm(void *h, const void *a, int64_t rows, int64_t dim, const void *weight, float eps,
                         void *out, int dtype) {
    if (dim > MAX_HIDDEN || dtype < 0 || dtype > 1) return 1;
    if (dtype == 1) {
#pragma omp parallel for schedule(static) if (rows >= 64)
        for (int64_t r = 0; r < rows; r++) add_norm_row(h, a, r, dim, weight, eps, out, 1);
    } else {
#pragma omp parallel for schedule(static) if (rows >= 64)
        for (int64_t r = 0; r < rows; r++) add_norm_row(h, a, r, dim, weight, eps, out, 0);
    }
    return 0;
}

static inline __attribute__((always_inline)) void silu_row(const void *gu, int64_t r, int64_t inter, void *out,
                                                           const int bf16) {
    const int64_t g0 = r * 2 * inter, u0 = g0 + inter;
    for (int64_t i = 0; i < inter; i++) {
        const float g = load(gu, g0 + i, bf16);
        const float act = rnd(g / (1.0f + exp_det(-g)), bf16);
        store(out, r * inter + i, act * load(gu, u0 + i, bf16), bf16);
    }
}

/* gu [rows, 2 * inter] (gate then up, as the fused GEMM writes them), out [rows, inter].
 * Threads: the activation and trtlade_qkv_prepare split their rows between the threads from 4 rows on (a
 * lookahead step or a batch: 8 bf16 rows of SmolLM2, 11.9 -> 6.6 us and 5.8 -> 3.3 us on 2 Zen 4 cores);
 * the norms stay on one thread below 64 rows (split, 8 rows took 7.0 us instead of 4.6). A row is still
 * computed by one thread alone: its bits do not change. */
int trtlade_silu_mul(const void *gu, int64_t rows, int64_t inter, void *out, int dtype) {
    if (dtype < 0 || dtype > 1) return 1;
    if (dtype == 1) {
#pragma omp parallel for schedule(static) if (rows >= 4)
        for (int64_t r = 0; r < rows; r++) silu_row(gu, r, inter, out, 1);
    } else {
#pragma omp parallel for schedule(static) if (rows >= 4)
        for (int64_t r = 0; r < rows; r++) silu_row(gu, r, inter, out, 0);
    }
    return 0;
}

/* The greedy token of each row of logits x [rows, n] (float32): the index of the largest value, the first
 * of equal ones, the first NaN where a row has one; torch.argmax's answer. AM lanes each keep the first
 * maximum of their columns, then the lanes are merged (equal values: the smaller index), so the answer is the
 * same at any width: 16 lanes with AVX-512, 8 with AVX2, 4 elsewhere (SSE2, NEON). A vector wider than the
 * target's is split by GCC lane by lane through memory: 16 lanes on AVX2 took 266 us a row of SmolLM2's 49152
 * tokens, 19 us with 8 (torch's one-value-at-a-time loop: 66 us; a 2-core AMD EPYC Zen 3). On a 2-core AMD
 * EPYC Zen 4 (AVX-512) torch's loop takes about 1 ns a logit, 45 us a row.
 * Worked example: [1, 3, -inf, 3] -> 1. */
#if defined(__AVX512F__)
#define AM 16
#elif defined(__AVX__)
#define AM 8
#else
#define AM 4
#endif
typedef float f32am __attribute__((vector_size(4 * AM)));
typedef int32_t i32am __attribute__((vector_size(4 * AM)));

static int64_t argmax_row(const float *x, int64_t n) {
    int64_t i = 0, best = 0;
    float top = n ? x[0] : 0.0f;
    if (n >= 2 * AM) {
        f32am m, v;
        i32am at, idx, nan;
        memcpy(&m, x, sizeof m);
        nan = m != m;
        for (int l = 0; l < AM; l++) { at[l] = l; idx[l] = l; }
        for (i = AM; i + AM <= n; i += AM) {
            memcpy(&v, x + i, sizeof v);
            idx += AM;
            const i32am gt = v > m;
            nan |= v != v;
            m = (f32am)(((i32am)v & gt) | ((i32am)m & ~gt));
            at = (idx & gt) | (at & ~gt);
        }
        int any_nan = 0;
        for (int l = 0; l < AM; l++) any_nan |= nan[l] != 0;
        if (any_nan)
            for (int64_t j = 0; j < n; j++) if (x[j] != x[j]) return j;
        top = m[0], best = at[0];
        for (int l = 1; l < AM; l++)
            if (m[l] > top || (m[l] == top && at[l] < best)) { top = m[l]; best = at[l]; }
    } else {
        i = 1;
        if (top != top) return 0;
    }
    for (; i < n; i++) {
        if (x[i] != x[i]) return i;
        if (x[i] > top) { top = x[i]; best = i; }
    }
    return best;
}

/* From 4 rows (a step's greedy tokens for several sequences at once) the rows are split between the
 * threads; each row is still one thread's scan, so the answer is the same. */
int trtlade_argmax_rows(const float *x, int64_t rows, int64_t n, int64_t *out) {
    if (n < 1 || n > INT32_MAX) return 1;
#pragma omp parallel for schedule(static) if (rows >= 4)
    for (int64_t r = 0; r < rows; r++) out[r] = argmax_row(x + r * n, n);
    return 0;
}

/* One head of one row: optional RMSNorm (weight w), then the rotary embedding, into dst (float32).
 * transformers: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]. */
static inline __attribute__((always_inline)) void head_prepare(const void *src, int64_t at, int64_t d, const void *norm_w, float eps, const float *cos,
                         const float *sin, int bf16, float *dst) {
    float x[1024];
    for (int64_t i = 0; i < d; i++) x[i] = load(src, at + i, bf16);
    if (norm_w) {
        float y[1024];
        const float inv = 1.0f / sqrtf(sum_squares(x, d) / (float)d + eps);
        for (int64_t i = 0; i < d; i++) y[i] = rnd(load(norm_w, i, bf16) * rnd(x[i] * inv, bf16), bf16);
        memcpy(x, y, sizeof(float) * d);
    }
    const int64_t half = d / 2;
    for (int64_t i = 0; i < d; i++) {
        const float other = i < half ? -x[i + half] : x[i - half];
        const float a = rnd(x[i] * rnd(cos[i], bf16), bf16), b = rnd(other * rnd(sin[i], bf16), bf16);
        dst[i] = rnd(a + b, bf16);
    }
}

static inline __attribute__((always_inline)) void qkv_row(const void *qkv, int64_t r, int64_t heads, int64_t kv_heads,
                                                          int64_t d, const float *cos, const float *sin,
                                                          const void *q_norm_w, const void *k_norm_w, float eps,
                                                          void *kc, void *vc, int64_t capacity, const int64_t *slot,
                                                          const int64_t *index, float *q_out, const int bf16,
                                                          const int kv_bf16) {
    const float *c = cos + r * d, *s = sin + r * d;
    const int64_t base = r * (heads + 2 * kv_heads) * d;
    for (int64_t h = 0; h < heads; h++)
        head_prepare(qkv, base + h * d, d, q_norm_w, eps, c, s, bf16, q_out + (r * heads + h) * d);
    for (int64_t g = 0; g < kv_heads; g++) {
        const int64_t cell = ((slot[r] * kv_heads + g) * capacity + index[r]) * d;
        if (kv_bf16) {  /* a bf16 model's K (rounded to bf16 above) and V (bf16 already): stored as they are */
            float key[1024];
            head_prepare(qkv, base + (heads + g) * d, d, k_norm_w, eps, c, s, bf16, key);
            for (int64_t i = 0; i < d; i++) ((uint16_t *)kc)[cell + i] = f_to_bf16(key[i]);
            const uint16_t *v = (const uint16_t *)qkv + base + (heads + kv_heads + g) * d;
            memcpy((uint16_t *)vc + cell, v, sizeof(uint16_t) * d);
        } else {
            head_prepare(qkv, base + (heads + g) * d, d, k_norm_w, eps, c, s, bf16, (float *)kc + cell);
            for (int64_t i = 0; i < d; i++)
                ((float *)vc)[cell + i] = load(qkv, base + (heads + kv_heads + g) * d + i, bf16);
        }
    }
}

/* qkv [rows, (heads + 2 kv_heads) * d] in the model's dtype; cos/sin [rows, d] float32; q_norm_w/k_norm_w
 * [d] or NULL. Writes q_out [rows, heads, d] (float32) and, per row r, its K and V into the cache kc/vc
 * [slots, kv_heads, capacity, d] at slot[r], index[r]: float32, or with kv_bf16 (a bf16 model only) bf16,
 * which holds a bf16 model's K and V exactly. */
int trtlade_qkv_prepare(const void *qkv, int64_t rows, int64_t heads, int64_t kv_heads, int64_t d, const float *cos,
                        const float *sin, const void *q_norm_w, const void *k_norm_w, float eps, void *kc, void *vc,
                        int64_t capacity, const int64_t *slot, const int64_t *index, float *q_out, int dtype,
                        int kv_bf16) {
    if (d > 1024 || d % 2 || dtype < 0 || dtype > 1 || (kv_bf16 && dtype != 1)) return 1;
    if (dtype == 1) {
#pragma omp parallel for schedule(static) if (rows >= 4)
        for (int64_t r = 0; r < rows; r++)
            qkv_row(qkv, r, heads, kv_heads, d, cos, sin, q_norm_w, k_norm_w, eps, kc, vc, capacity, slot, index, q_out, 1,
                    kv_bf16);
    } else {
#pragma omp parallel for schedule(static) if (rows >= 4)
        for (int64_t r = 0; r < rows; r++)
            qkv_row(qkv, r, heads, kv_heads, d, cos, sin, q_norm_w, k_norm_w, eps, kc, vc, capacity, slot, index, q_out, 0,
                    0);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------
 * The whole decoder body of a Llama-family model in one call (the engine's own forward, see
 * trtlade/reference/fast_forward.py): per layer, seven steps of the kernels above and in linear.c and
 * row_attention.c, with no Python between them. Every step computes each row on its own, so the body
 * keeps the row invariance of its parts. */

/* The model: sizes, and per layer (arrays of `layers` pointers) its packed weights, float32 biases (or
 * NULL), norm weights (model dtype), attention scale and sliding window (0: none). */
typedef struct {
    int64_t layers, hidden, heads, kv_heads, head_dim, inter;
    int32_t dtype, threads;
    float eps;
    const void *const *attn_in, *const *attn_out, *const *mlp_in, *const *mlp_out;
    const float *const *attn_in_bias, *const *attn_out_bias, *const *mlp_in_bias, *const *mlp_out_bias;
    const void *const *in_norm, *const *post_norm, *const *q_norm, *const *k_norm;
    const void *final_norm;
    const float *scaling;
    const int64_t *window;
} TrtladeModel;

/* One step: `rows` packed rows; h [rows, hidden] the embedded tokens (model dtype; the residual stream,
 * overwritten); cos/sin [rows, head_dim] float32; the rows' keys (see row_attention.c) and where each
 * row's K/V go (slot, index); the caches per layer (float32, or bf16 with kv_bf16); out [rows, hidden]
 * the final norm's output; scratch: trtlade_forward_scratch(model, rows) bytes. */
typedef struct {
    int64_t rows, capacity;
    void *h, *out, *scratch;
    const float *cos, *sin;
    const int64_t *slot, *index, *committed, *pos, *path_ptr, *path_idx, *path_pos;
    void *const *keys, *const *values;
    double *timing; /* NULL, or seconds added per part: [0] linear layers, [1] attention, [2] the rest */
    int64_t kv_bf16; /* the caches hold bf16 (a bf16 model's K/V, exactly), else float32 */
} TrtladeStep;

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Run `expr` and, when the step is timed, add its seconds to timing[part]. */
#define TIMED(part, expr)                                                                                     \
    do {                                                                                                      \
        const double t0_ = s->timing ? now_s() : 0.0;                                                         \
        expr;                                                                                                 \
        if (s->timing) s->timing[part] += now_s() - t0_;                                                      \
    } while (0)

static int64_t round_up(int64_t n) { return (n + 63) / 64 * 64; }

int64_t trtlade_forward_scratch(const TrtladeModel *m, int64_t rows) {
    const int64_t el = m->dtype == 1 ? 2 : 4, qd = m->heads * m->head_dim;
    const int64_t width = (m->heads + 2 * m->kv_heads) * m->head_dim;
    return round_up(rows * m->hidden * el) * 2 + round_up(rows * width * el) + round_up(rows * qd * 4) * 2
           + round_up(rows * qd * el) + round_up(rows * 2 * m->inter * el) + round_up(rows * m->inter * el);
}

static int linear(const TrtladeModel *m, const void *x, int64_t rows, int64_t k, const void *w, const float *b,
                  int64_t n, void *y) {
    return m->dtype == 1 ? trtlade_linear_bf16(x, rows, k, w, b, n, y, m->threads)
                         : trtlade_linear_f32(x, rows, k, w, b, n, y, m->threads);
}

int trtlade_forward(const TrtladeModel *m, const TrtladeStep *s) {
    const int64_t R = s->rows, el = m->dtype == 1 ? 2 : 4, d = m->head_dim, qd = m->heads * d;
    const int64_t width = (m->heads + 2 * m->kv_heads) * d;
    char *p = s->scratch;
    void *x = p;        p += round_up(R * m->hidden * el);
    void *o = p;        p += round_up(R * m->hidden * el);
    void *qkv = p;      p += round_up(R * width * el);
    float *q = (float *)p;   p += round_up(R * qd * 4);
    float *att = (float *)p; p += round_up(R * qd * 4);
    void *attc = p;     p += round_up(R * qd * el);
    void *gu = p;       p += round_up(R * 2 * m->inter * el);
    void *y = p;
    int code = 0;
    TIMED(2, code |= trtlade_add_rms_norm(s->h, NULL, R, m->hidden, m->in_norm[0], m->eps, x, m->dtype));
    for (int64_t l = 0; l < m->layers && !code; l++) {
        TIMED(0, code |= linear(m, x, R, m->hidden, m->attn_in[l], m->attn_in_bias[l], width, qkv));
        TIMED(2, code |= trtlade_qkv_prepare(qkv, R, m->heads, m->kv_heads, d, s->cos, s->sin, m->q_norm[l],
                                             m->k_norm[l], m->eps, s->keys[l], s->values[l], s->capacity, s->slot,
                                             s->index, q, m->dtype, (int)s->kv_bf16));
        TIMED(1, code |= trtlade_row_attention(q, R, m->heads, d, s->keys[l], s->values[l], m->kv_heads, s->capacity,
                                               s->slot, s->committed, s->pos, s->path_ptr, s->path_idx, s->path_pos,
                                               m->window[l], m->scaling[l], 0.0f, att, (int)s->kv_bf16));
        if (m->dtype == 1)
            TIMED(2, for (int64_t i = 0; i < R * qd; i++) ((uint16_t *)attc)[i] = f_to_bf16(att[i]));
        TIMED(0, code |= linear(m, m->dtype == 1 ? attc : (void *)att, R, qd, m->attn_out[l], m->attn_out_bias[l],
                                m->hidden, o));
        TIMED(2, code |= trtlade_add_rms_norm(s->h, o, R, m->hidden, m->post_norm[l], m->eps, x, m->dtype));
        TIMED(0, code |= linear(m, x, R, m->hidden, m->mlp_in[l], m->mlp_in_bias[l], 2 * m->inter, gu));
        TIMED(2, code |= trtlade_silu_mul(gu, R, m->inter, y, m->dtype));
        TIMED(0, code |= linear(m, y, R, m->inter, m->mlp_out[l], m->mlp_out_bias[l], m->hidden, o));
        TIMED(2, code |= trtlade_add_rms_norm(s->h, o, R, m->hidden,
                                              l + 1 < m->layers ? m->in_norm[l + 1] : m->final_norm, m->eps,
                                              l + 1 < m->layers ? x : s->out, m->dtype));
    }
    return code;
}
