/* Row-invariant attention for the reference engine (CPU, float32).
 *
 * Each (row, head) is computed on its own, by one thread, by the same instructions: its keys are visited
 * in position order (the slot's committed positions, then the row's path in the step), in chunks of
 * CHUNK keys, with an online softmax. Nothing in a row's arithmetic depends on which other rows are in
 * the call, how many there are, or which thread runs it, so a verification row and a greedy decode row
 * at the same position, with the same tokens before them, get the same bits.
 *
 * Layout (all contiguous):
 *   q     [rows, heads, dim]                   float32
 *   k, v  [slots, kv_heads, capacity, dim]     float32, or bfloat16 with kv_bf16 (the engine's slot cache; a
 *                                              bf16 model's K/V are bf16 values, so both hold the same numbers)
 *   out   [rows, heads, dim]                   float32
 *   slot[r], committed[r], pos[r]: the row's cache slot, the slot's committed length, the row's position
 *   path_ptr[r]..path_ptr[r+1]: the row's keys in the step, in depth order: cache index (path_idx) and
 *   position (path_pos); the row itself is the last.
 *   window > 0: keys at positions <= pos - window are skipped (sliding-window layers).
 *   softcap > 0: scores become softcap * tanh(score / softcap).
 *
 * Built by trtlade/reference/native/build.py with the system C compiler, strict IEEE arithmetic
 * (-ffp-contract=off, no -ffast-math) and exp/tanh from det_math.h: a row gets the same bits on every
 * CPU variant and architecture, not only beside any rows (the dot products keep 8 partial sums in a
 * fixed order, which the compiler vectorises without regrouping them).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "det_math.h"
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define CHUNK 32
#define MAX_DIM 512
#define MAX_REP 16

static inline float dot(const float *a, const float *b, int dim) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < dim; i++) s += a[i] * b[i];
    return s;
}

/* The committed keys a task will fold, in the order it folds them (a few contiguous runs of a head's
 * cache rows, K and V), asked from memory a little at a time while the keys before them are folded: a
 * fold asks for lines of K and of V AHEAD times as fast as it reads them (spread over its keys and over its
 * passes through them: the scores' from the first, so the next chunk is on its way while this one is scored, and
 * the values'), never more than one chunk beyond the keys folded so far. Keys are read once per step, from memory;
 * without this the cores computed, then waited for the next chunk, in turn (docs/guides/reference-engine.md,
 * "Attention's keys fetched ahead"). A prefetch changes no value. Keys of more than AHEAD_KEY_BYTES are
 * left to the hardware: float32 keys of 128 dimensions streamed 3-13% slower with it (measured on an AMD
 * EPYC Zen 4; 64 dimensions, or 128 in bf16, 7-35% faster).
 *
 * Worked example (float32, head size 64: a key is 256 bytes, 4 lines; CHUNK 32): a task of one row with
 * 100 committed keys streams 100 x 4 lines of K and of V; before its first fold it may ask for
 * 2 chunks (256 lines), and the fold of that chunk, 32 keys x 3 heads in three passes (AVX-512: the scores of
 * heads 0 and 1, of head 2, then the values of all three), asks for up to ceil(2 x 4 / 3) = 3 lines each time a
 * pass is done with a key. Asking in the values' pass alone (after every score of the chunk) left the next chunk
 * too little time: 8 decode rows after 1,000 keys ran 0.89x as fast on a Zen 5 (benchmarks/attention_ab.py). */
#define AHEAD 2
#define AHEAD_KEY_BYTES 256
#define TILE 4     /* rows a task holds (below) */
#define SEGMENTS (2 * TILE) /* per run of rows: its shared chunks, then the rest of its rows' keys */
#define LINE 64

typedef struct {
    const char *k[SEGMENTS], *v[SEGMENTS]; /* where each segment starts in K and in V */
    int64_t bytes[SEGMENTS];
    int count, seg;
    int64_t at, room; /* bytes into segment seg; bytes that may be asked for before the folds catch up */
    int64_t key_bytes; /* a key's size in the cache (K and V alike) */
} Ahead;

/* Keys [from, to) of a head's cache rows k and v, next in the stream (a is NULL: no stream). */
static void ahead_add(Ahead *a, const char *k, const char *v, int64_t from, int64_t to) {
    if (!a || to <= from || a->count == SEGMENTS) return;
    const int64_t at = from * a->key_bytes;
    a->k[a->count] = k + at, a->v[a->count] = v + at, a->bytes[a->count++] = (to - from) * a->key_bytes;
}

/* The fold of `keys` more of the stream's keys begins: asking may go one chunk beyond them. */
static inline void ahead_allow(Ahead *a, int64_t keys) {
    if (a) a->room += keys * a->key_bytes;
}

/* A fold's share of the stream, in registers: the next lines of the current segment it may ask for. */
typedef struct {
    const char *k, *v;
    int64_t left;
    int lines; /* a step's lines of K and of V */
} Ask;

/* `steps`: how many times the fold calls ask_step per key (once per head, or once). */
static inline __attribute__((always_inline)) Ask ask_open(const Ahead *a, int steps) {
    Ask p = {NULL, NULL, 0, 0};
    if (!a || a->seg == a->count || a->room <= 0) return p;
    p.lines = (int)((AHEAD * a->key_bytes + steps * LINE - 1) / (steps * LINE));
    const int64_t rest = a->bytes[a->seg] - a->at;
    p.k = a->k[a->seg] + a->at, p.v = a->v[a->seg] + a->at, p.left = rest < a->room ? rest : a->room;
    return p;
}

/* A fold's step through a key: p.lines lines of K and of V, while the share lasts. */
static inline __attribute__((always_inline)) Ask ask_step(Ask p) {
    for (int i = 0; i < p.lines && p.left > 0; i++) {
        __builtin_prefetch(p.k, 0, 2);
        __builtin_prefetch(p.v, 0, 2);
        p.k += LINE, p.v += LINE, p.left -= LINE;
    }
    return p;
}

/* The fold is done: what it asked for is counted (a segment asked to its end gives way to the next). */
static inline __attribute__((always_inline)) void ask_close(Ahead *a, Ask opened, Ask p) {
    if (!a || opened.left <= 0) return;
    const int64_t asked = p.k - opened.k;
    a->room -= asked, a->at += asked;
    if (a->at >= a->bytes[a->seg]) a->seg++, a->at = 0;
}

/* One chunk of keys (pointers into the cache) folded into the running (m, l, acc) of each of the
 * group's query heads: every head's arithmetic is the same sequence as if it were alone. */
static void fold_scalar(const float *qg, int rep, const float **keys, const float **vals, int n, int dim,
                        float scale, float softcap, float *m, float *l, float *acc, Ahead *ahead) {
    float s[MAX_REP][CHUNK];
    for (int h = 0; h < rep; h++) {
        const float *qh = qg + h * dim;
        float cmax = -FLT_MAX;
        for (int j = 0; j < n; j++) {
            float x = dot(qh, keys[j], dim) * scale;
            if (softcap > 0.0f) x = softcap * tanh_det(x / softcap);
            s[h][j] = x;
            cmax = x > cmax ? x : cmax;
        }
        float mnew = cmax > m[h] ? cmax : m[h];
        float corr = l[h] > 0.0f ? exp_det(m[h] - mnew) : 0.0f;
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
            s[h][j] = exp_det(s[h][j] - mnew);
            sum += s[h][j];
        }
        float *ah = acc + h * dim;
        for (int d = 0; d < dim; d++) ah[d] *= corr;
        l[h] = l[h] * corr + sum;
        m[h] = mnew;
    }
    const Ask opened = ask_open(ahead, 1);
    Ask ask = opened;
    for (int j = 0; j < n; j++) {
        const float *vj = vals[j];
        ask = ask_step(ask);
        for (int h = 0; h < rep; h++) {
            const float w = s[h][j];
            float *ah = acc + h * dim;
            for (int d = 0; d < dim; d++) ah[d] += w * vj[d];
        }
    }
    ask_close(ahead, opened, ask);
}

/* The same fold for head sizes 64 and 128 (fold_heads, below), written with explicit vectors (GCC/Clang vector
 * extensions and intrinsics: on every target each lane is one float operation, so the bits are those of
 * fold_scalar): dot() is one 8-lane vector of partial sums, then the same tree; the maximum by lanes; the
 * exponentials in a loop of their own (it vectorises; each sum stays a left-to-right chain); a head's D outputs
 * in registers over the chunk (acc = acc * corr, then += w_j * v_j in key order). Several heads (of a KV group,
 * and of the rows that share the chunk) go together, so that their independent chains keep the core busy. */
typedef float v8f __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The lanes of the weighted sum of the values (a head's D outputs, each lane its own chain: acc = acc * corr,
 * then acc + w_j * v_j in key order, the same bits at any width): 16 with AVX-512, a key's step in half the
 * vector ops of 8; 8 elsewhere (GCC splits a wider generic vector through memory on AVX2: 5x slower). */
#if defined(__AVX512F__)
#define VW 16
#else
#define VW 8
#endif
typedef float vw __attribute__((vector_size(4 * VW)));

static inline __attribute__((always_inline)) vw loadw(const float *p) {
    vw v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) float dot8(const v8f *q, const float *k, const int D) {
    v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int b = 0; b < D / 8; b++) acc = acc + q[b] * load8(k + 8 * b);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* s[j] = dot8(q, keys[j]) * scale for j < n. With AVX, four keys at a time (eight with AVX-512's 32
 * registers): their partial-sum vectors go through the same tree with horizontal adds (each lane of
 * _mm256_hadd_ps is one float add of two neighbours: hadd(hadd(A0, A1), hadd(A2, A3)) holds
 * (a0+a1)+(a2+a3) of four keys in its low half and (a4+a5)+(a6+a7) in its high half; one add of the
 * halves ends each key's tree). */
#if defined(__AVX512F__)
#define KEYS_AT_ONCE 8
#elif defined(__AVX__)
#define KEYS_AT_ONCE 4
#endif
#if defined(__AVX__)
static inline __attribute__((always_inline)) __m256 tree4(const __m256 *a) {
    return _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
}
#endif

static inline __attribute__((always_inline)) void dots8(const v8f *q, const float **keys, int n, const int D,
                                                       float scale, float *s, Ask *ask) {
    int j = 0;
#if defined(__AVX__)
    for (; j + KEYS_AT_ONCE <= n; j += KEYS_AT_ONCE) {
        __m256 a[KEYS_AT_ONCE];
        for (int t = 0; t < KEYS_AT_ONCE; t++) {
            *ask = ask_step(*ask);
            v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int b = 0; b < D / 8; b++) acc = acc + q[b] * load8(keys[j + t] + 8 * b);
            a[t] = (__m256)acc;
        }
        if (KEYS_AT_ONCE == 8) {
            const __m256 lo = tree4(a), hi = tree4(a + 4);
            const __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
            _mm256_storeu_ps(s + j, _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
        } else {
            const __m256 t = tree4(a);
            const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
            _mm_storeu_ps(s + j, _mm_mul_ps(sums, _mm_set1_ps(scale)));
        }
    }
#endif
    for (; j < n; j++) *ask = ask_step(*ask), s[j] = dot8(q, keys[j], D) * scale;
}

/* dots8 for two query heads at once (of a KV group, or of two rows), s0[j] and s1[j] (AVX-512): their q in one 16-lane
 * vector (head h0 in lanes 0-7, h1 in lanes 8-15), each key's block of 8 read into both halves, so one vector
 * multiply and add serve both heads' partial sums; the halves then go through dots8's tree. Each lane is the
 * float operation it is in dots8, in the same order: the bits of two dots8 calls, in half the vector ops. */
#if defined(__AVX512F__)
static inline __attribute__((always_inline)) __m512 both_halves(const float *p) {
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

static inline __attribute__((always_inline)) void dots8x2(const v8f *q0, const v8f *q1, const float **keys, int n,
                                                         const int D, float scale, float *s0, float *s1, Ask *ask) {
    __m512 qq[D / 8];
    for (int b = 0; b < D / 8; b++)
        qq[b] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd((__m256)q0[b])),
                                                    _mm256_castps_pd((__m256)q1[b]), 1));
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256 a0[4], a1[4];
        for (int t = 0; t < 4; t++) {
            *ask = ask_step(*ask);
            __m512 acc = _mm512_setzero_ps();
            for (int b = 0; b < D / 8; b++)
                acc = _mm512_add_ps(acc, _mm512_mul_ps(qq[b], both_halves(keys[j + t] + 8 * b)));
            a0[t] = _mm512_castps512_ps256(acc);
            a1[t] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
        }
        const __m256 t0 = tree4(a0), t1 = tree4(a1);
        const __m128 sums0 = _mm_add_ps(_mm256_castps256_ps128(t0), _mm256_extractf128_ps(t0, 1));
        const __m128 sums1 = _mm_add_ps(_mm256_castps256_ps128(t1), _mm256_extractf128_ps(t1, 1));
        _mm_storeu_ps(s0 + j, _mm_mul_ps(sums0, _mm_set1_ps(scale)));
        _mm_storeu_ps(s1 + j, _mm_mul_ps(sums1, _mm_set1_ps(scale)));
    }
    for (; j < n; j++) *ask = ask_step(*ask), s0[j] = dot8(q0, keys[j], D) * scale, s1[j] = dot8(q1, keys[j], D) * scale;
}
#endif

/* The largest of s[0..n) that is not NaN, -FLT_MAX if none (fold_scalar's running `s > cmax ? s : cmax`), taken
 * 8 or 16 lanes at a time: a maximum is exact in any order. Only the sign of a zero maximum can differ, and it
 * changes no value: the maximum is only ever subtracted inside exp_det, which gives 1 for -0 and +0 alike. */
static inline __attribute__((always_inline)) float max_score(const float *s, int n) {
    float cmax = -FLT_MAX;
    int j = 0;
#if defined(__AVX512F__)
    if (n >= 16) {
        __m512 v = _mm512_set1_ps(-FLT_MAX);
        for (; j + 16 <= n; j += 16) v = _mm512_max_ps(_mm512_loadu_ps(s + j), v); /* s > v ? s : v, by lane */
        cmax = _mm512_reduce_max_ps(v);
    }
#elif defined(__AVX__)
    if (n >= 8) {
        __m256 v = _mm256_set1_ps(-FLT_MAX);
        for (; j + 8 <= n; j += 8) v = _mm256_max_ps(_mm256_loadu_ps(s + j), v);
        float lanes[8];
        _mm256_storeu_ps(lanes, v);
        for (int i = 0; i < 8; i++) cmax = lanes[i] > cmax ? lanes[i] : cmax;
    }
#endif
    for (; j < n; j++) cmax = s[j] > cmax ? s[j] : cmax;
    return cmax;
}

/* The weighted sum of the values for H heads at once (H a constant: 1 to 4), each head's D outputs in vectors of
 * VW lanes: acc = acc * corr, then acc + w_j * v_j in key order, lane by lane as in fold_scalar. Interleaving the
 * heads gives the core H x D / VW independent chains instead of D / VW (one chain's add waits for the one before
 * it), and reads each value once for all H. */
static inline __attribute__((always_inline)) void weigh_values(const float **vals, int n, const int D, const int H,
                                                              float (*s)[CHUNK], const float *corr, float *const *acc,
                                                              Ask *ask) {
    vw a[H][D / VW];
    for (int g = 0; g < H; g++)
        for (int b = 0; b < D / VW; b++) a[g][b] = loadw(acc[g] + VW * b) * corr[g];
    for (int j = 0; j < n; j++) {
        *ask = ask_step(*ask);
        for (int b = 0; b < D / VW; b++) {
            const vw vj = loadw(vals[j] + VW * b);
            for (int g = 0; g < H; g++) a[g][b] = a[g][b] + s[g][j] * vj;
        }
    }
    for (int g = 0; g < H; g++) memcpy(acc[g], a[g], sizeof a[g]);
}

/* Heads per weigh_values call: enough chains to keep a core's FP units busy (8 or more) in at most half of
 * AVX-512's 32 registers; with 16 registers (AVX2) one head, D / 8 chains already. */
#if defined(__AVX512F__)
#define WEIGH_HEADS(D) ((D) == 64 ? 4 : 2)
#define SCORE_PASSES(count) (((count) + 1) / 2) /* passes through a chunk's keys for the scores: heads in pairs */
#else
#define WEIGH_HEADS(D) 1
#define SCORE_PASSES(count) (count)
#endif

/* One chunk of keys folded into `count` heads (of one row, or of the rows of a run, which share the keys):
 * head i's query qs[i], its running max, sum and outputs m[i], l[i], acc[i]. Each head's arithmetic is what it
 * would be alone (fold_scalar's sequence), whichever heads are folded beside it. */
#define MAX_HEADS (TILE * MAX_REP)
static inline __attribute__((always_inline)) void fold_heads(const float *const *qs, int count, const float **keys,
                                                            const float **vals, int n, const int D, float scale,
                                                            float softcap, float *const *m, float *const *l,
                                                            float *const *acc, Ahead *ahead) {
    const int groups = (count + WEIGH_HEADS(D) - 1) / WEIGH_HEADS(D);
    /* the next chunk asked for over every pass through this one's keys: the scores' and the values' */
    const Ask opened = ask_open(ahead, SCORE_PASSES(count) + groups);
    Ask ask = opened;
    float s[MAX_HEADS][CHUNK], corr[MAX_HEADS], sum[MAX_HEADS];
    for (int h = 0; h < count; h += 2) { /* the scores, two heads at a time where there are two */
        v8f q0[D / 8], q1[D / 8];
        for (int b = 0; b < D / 8; b++) q0[b] = load8(qs[h] + 8 * b);
        if (h + 1 < count) {
            for (int b = 0; b < D / 8; b++) q1[b] = load8(qs[h + 1] + 8 * b);
#if defined(__AVX512F__)
            dots8x2(q0, q1, keys, n, D, scale, s[h], s[h + 1], &ask);
#else
            dots8(q0, keys, n, D, scale, s[h], &ask);
            dots8(q1, keys, n, D, scale, s[h + 1], &ask);
#endif
        } else {
            dots8(q0, keys, n, D, scale, s[h], &ask);
        }
    }
    for (int h = 0; h < count; h++) { /* each head's online softmax, as fold_scalar's */
        if (softcap > 0.0f)
            for (int j = 0; j < n; j++) s[h][j] = softcap * tanh_det(s[h][j] / softcap);
        const float cmax = max_score(s[h], n);
        const float mnew = cmax > *m[h] ? cmax : *m[h];
        corr[h] = *l[h] > 0.0f ? exp_det(*m[h] - mnew) : 0.0f;
        for (int j = 0; j < n; j++) s[h][j] = exp_det(s[h][j] - mnew);
        *m[h] = mnew;
        sum[h] = 0.0f;
    }
    for (int j = 0; j < n; j++) /* each head's sum left to right, the heads' chains side by side */
        for (int h = 0; h < count; h++) sum[h] += s[h][j];
    for (int h = 0; h < count; h++) *l[h] = *l[h] * corr[h] + sum[h];
    for (int h = 0; h < count; h += WEIGH_HEADS(D)) {
        const int left = count - h;
        if (left >= WEIGH_HEADS(D)) weigh_values(vals, n, D, WEIGH_HEADS(D), s + h, corr + h, acc + h, &ask);
        else if (left == 3) weigh_values(vals, n, D, 3, s + h, corr + h, acc + h, &ask);
        else if (left == 2) weigh_values(vals, n, D, 2, s + h, corr + h, acc + h, &ask);
        else weigh_values(vals, n, D, 1, s + h, corr + h, acc + h, &ask);
    }
    ask_close(ahead, opened, ask);
}

/* A chunk folded into `rows` rows' heads: row x's group of rep query heads at qg[x] (rep x dim floats), its
 * running state m[x], l[x] (rep each) and acc[x] (rep x dim). The first row's fold drives `ahead`. */
static void fold_rows(const float *const *qg, int rows, int rep, const float **keys, const float **vals, int n,
                      int dim, float scale, float softcap, float *const *m, float *const *l, float *const *acc,
                      Ahead *ahead) {
#if defined(__AVX__)
    if (dim == 64 || dim == 128) {
        const float *qs[MAX_HEADS];
        float *ms[MAX_HEADS], *ls[MAX_HEADS], *accs[MAX_HEADS];
        int count = 0;
        for (int x = 0; x < rows; x++)
            for (int h = 0; h < rep; h++, count++)
                qs[count] = qg[x] + h * dim, ms[count] = m[x] + h, ls[count] = l[x] + h, accs[count] = acc[x] + h * dim;
        if (dim == 64) fold_heads(qs, count, keys, vals, n, 64, scale, softcap, ms, ls, accs, ahead);
        else fold_heads(qs, count, keys, vals, n, 128, scale, softcap, ms, ls, accs, ahead);
        return;
    }
#endif
    for (int x = 0; x < rows; x++)
        fold_scalar(qg[x], rep, keys, vals, n, dim, scale, softcap, m[x], l[x], acc[x], x == 0 ? ahead : NULL);
}

static void fold(const float *qg, int rep, const float **keys, const float **vals, int n, int dim, float scale,
                 float softcap, float *m, float *l, float *acc, Ahead *ahead) {
    fold_rows(&qg, 1, rep, keys, vals, n, dim, scale, softcap, &m, &l, &acc, ahead);
}


/* Key or value j of a head's cache rows: a pointer into a float32 cache, or the bf16 row widened into
 * `stage` (exact: a bf16 number is a float32 with 16 low zero bits), so a chunk's fold sees the same
 * floats either way and the bits do not depend on how the cache stores them; a bf16 cache halves what
 * attention reads. */
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

static inline const float *kv_at(const char *base, int64_t j, int dim, int kv_bf16, float *stage) {
    if (!kv_bf16) return (const float *)base + j * dim;
    const uint16_t *src = (const uint16_t *)base + j * dim;
    int d = 0;
    for (; d + 16 <= dim; d += 16) {  /* 16 at a time, as the target's vectors allow (the loop alone is not
                                       * vectorised by the compiler) */
        u16x16 h;
        memcpy(&h, src + d, sizeof h);
        const u32x16 w = __builtin_convertvector(h, u32x16) << 16;
        memcpy(stage + d, &w, sizeof w);
    }
    for (; d < dim; d++) {
        const uint32_t bits = (uint32_t)src[d] << 16;
        memcpy(stage + d, &bits, sizeof bits);
    }
    return stage;
}

static inline int64_t first_key(int64_t pos, int64_t window) {
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/* The rest of one row's keys, from its committed key `from` on (chunking continues from a chunk boundary). */
static void finish_row(const float *qg, int rep, const char *kbase, const char *vbase, int kv_bf16, int64_t from,
                       int64_t committed, int64_t first, const int64_t *idx, const int64_t *at, int64_t npath,
                       int dim, float scale, float softcap, float *m, float *l, float *acc, Ahead *ahead) {
    const float *keys[CHUNK];
    const float *vals[CHUNK];
    float kst[kv_bf16 ? CHUNK * dim : 1], vst[kv_bf16 ? CHUNK * dim : 1];
    int n = 0;
    for (int64_t j = from; j < committed; j++) {  /* committed keys, in position order */
        keys[n] = kv_at(kbase, j, dim, kv_bf16, kst + n * dim);
        vals[n] = kv_at(vbase, j, dim, kv_bf16, vst + n * dim);
        if (++n == CHUNK) {
            ahead_allow(ahead, CHUNK);
            fold(qg, rep, keys, vals, n, dim, scale, softcap, m, l, acc, ahead);
            n = 0;
        }
    }
    ahead_allow(ahead, n); /* the last committed keys, folded with the path's */
    for (int64_t e = 0; e < npath; e++) {  /* then the row's path, by depth */
        if (at[e] < first) continue;
        keys[n] = kv_at(kbase, idx[e], dim, kv_bf16, kst + n * dim);
        vals[n] = kv_at(vbase, idx[e], dim, kv_bf16, vst + n * dim);
        if (++n == CHUNK) { fold(qg, rep, keys, vals, n, dim, scale, softcap, m, l, acc, ahead); n = 0; }
    }
    if (n) fold(qg, rep, keys, vals, n, dim, scale, softcap, m, l, acc, ahead);
}

/* A run of a task's rows [start, end): consecutive rows of one slot with the same first key. Their full
 * chunks of committed keys [first, first + chunks * CHUNK) are shared; k and v are the slot's cache rows
 * of the task's KV head. */
typedef struct {
    int64_t start, end, first, chunks;
    const char *k, *v;
} Run;

static Run run_from(int64_t r, int64_t t1, int64_t g, const void *k, const void *v, int64_t kv_heads,
                    int64_t capacity, int64_t dim, int64_t es, const int64_t *slot, const int64_t *committed,
                    const int64_t *pos, int64_t window) {
    Run run = {r, r + 1, first_key(pos[r], window), 0, NULL, NULL};
    int64_t shared = committed[r];
    while (run.end < t1 && slot[run.end] == slot[r] && first_key(pos[run.end], window) == run.first) {
        shared = committed[run.end] < shared ? committed[run.end] : shared;
        run.end++;
    }
    run.chunks = shared > run.first ? (shared - run.first) / CHUNK : 0;
    const int64_t cell = (slot[r] * kv_heads + g) * capacity * dim * es;
    run.k = (const char *)k + cell, run.v = (const char *)v + cell;
    return run;
}

int trtlade_row_attention(const float *q, int64_t rows, int64_t heads, int64_t dim, const void *k,
                          const void *v, int64_t kv_heads, int64_t capacity, const int64_t *slot,
                          const int64_t *committed, const int64_t *pos, const int64_t *path_ptr,
                          const int64_t *path_idx, const int64_t *path_pos, int64_t window, float scale,
                          float softcap, float *out, int kv_bf16) {
    if (dim > MAX_DIM || heads % kv_heads != 0 || heads / kv_heads > MAX_REP) return 1;
    const int rep = (int)(heads / kv_heads);
    const int64_t es = kv_bf16 ? 2 : 4, key_bytes = dim * es;
    const int64_t tiles = (rows + TILE - 1) / TILE;
    /* A tile: up to TILE consecutive rows. Rows of one slot with the same first key share their full chunks
     * of committed keys: those chunks are folded for each of them while the keys are in cache; every row
     * still sees exactly the chunk sequence it would alone. */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < tiles * kv_heads; task++) {
        const int64_t t0 = (task / kv_heads) * TILE, g = task % kv_heads;
        const int64_t t1 = t0 + TILE < rows ? t0 + TILE : rows;
        float acc[TILE][MAX_REP * MAX_DIM];
        float m[TILE][MAX_REP], l[TILE][MAX_REP];
        Ahead ahead = {.room = CHUNK * key_bytes, .key_bytes = key_bytes};
        Ahead *const drive = key_bytes <= AHEAD_KEY_BYTES ? &ahead : NULL; /* the run's first row drives it */
        for (int64_t r = t0; r < t1; r++) {
            for (int h = 0; h < rep; h++) { m[r - t0][h] = -FLT_MAX; l[r - t0][h] = 0.0f; }
            memset(acc[r - t0], 0, sizeof(float) * rep * dim);
        }
        Run runs[TILE];
        int count = 0;
        for (int64_t r = t0; r < t1; r = runs[count - 1].end) {  /* the runs, and the stream of what they fold */
            const Run run = run_from(r, t1, g, k, v, kv_heads, capacity, dim, es, slot, committed, pos, window);
            runs[count++] = run;
            const int64_t rest = run.first + run.chunks * CHUNK;
            int64_t last = rest; /* the run's rows share a slot: their rests overlap, from `rest` on */
            for (int64_t x = r; x < run.end; x++) last = committed[x] > last ? committed[x] : last;
            ahead_add(drive, run.k, run.v, run.first, rest);
            ahead_add(drive, run.k, run.v, rest, last);
        }
        for (int u = 0; u < count; u++) {
            const Run run = runs[u];
            const int64_t r = run.start;
            const float *keys[CHUNK];
            const float *vals[CHUNK];
            float kst[kv_bf16 ? CHUNK * dim : 1], vst[kv_bf16 ? CHUNK * dim : 1];
            const float *qg[TILE]; /* the run's rows, folded together over their shared chunks */
            float *ms[TILE], *ls[TILE], *accs[TILE];
            for (int64_t x = r; x < run.end; x++)
                qg[x - r] = q + (x * heads + g * rep) * dim, ms[x - r] = m[x - t0], ls[x - r] = l[x - t0],
                accs[x - r] = acc[x - t0];
            for (int64_t c = 0; c < run.chunks; c++) {
                for (int j = 0; j < CHUNK; j++) {
                    keys[j] = kv_at(run.k, run.first + c * CHUNK + j, (int)dim, kv_bf16, kst + j * dim);
                    vals[j] = kv_at(run.v, run.first + c * CHUNK + j, (int)dim, kv_bf16, vst + j * dim);
                }
                ahead_allow(drive, CHUNK);
                fold_rows(qg, (int)(run.end - r), rep, keys, vals, CHUNK, (int)dim, scale, softcap, ms, ls, accs,
                          drive);
            }
            for (int64_t x = r; x < run.end; x++)
                finish_row(q + (x * heads + g * rep) * dim, rep, run.k, run.v, kv_bf16, run.first + run.chunks * CHUNK,
                           committed[x], run.first, path_idx + path_ptr[x], path_pos + path_ptr[x],
                           path_ptr[x + 1] - path_ptr[x], dim, scale, softcap, m[x - t0], l[x - t0], acc[x - t0],
                           x == r ? drive : NULL);
        }
        for (int64_t x = t0; x < t1; x++)
            for (int h = 0; h < rep; h++) {
                float *o = out + (x * heads + g * rep + h) * dim;
                const float inv = 1.0f / l[x - t0][h];
                for (int64_t d = 0; d < dim; d++) o[d] = acc[x - t0][h * dim + d] * inv;
            }
    }
    return 0;
}
