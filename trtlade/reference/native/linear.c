/* trtlade: the reference engine's linear layers, y = x W^T + b, streaming the weights at memory speed.
 *
 * Why its own: a decode step of a small batch reads every weight once and is bound by memory, and
 * oneDNN's packed GEMM reached about 2/3 of the bandwidth of a plain torch.sum on the hosts of this
 * project with one row (docs/results/step-profile.md, "Where a step's time goes"). This kernel streams a
 * pre-packed weight once per call, whatever the number of rows, on every OpenMP thread.
 *
 * Row-invariant by construction: output (i, n) is ONE chain of fused multiply-adds over k = 0, 1, ...,
 * K-1 in that order, then the bias. The tiling (how many rows and outputs a tile holds) and the threads
 * (which outputs each computes) never change that chain, so a row's result has the same bits alone,
 * among 63 others, or beside another sequence's rows.
 *
 * One file, three instruction sets: the build (trtlade/reference/native/build.py) compiles it once per
 * CPU variant with explicit target flags, and the engine picks the variant by probing the CPU
 * (cpu.c). Every path computes the SAME chain, so a float32 output has the same bits on each:
 *   - AVX-512F: 16 outputs per register;
 *   - AVX2 + FMA: 8 outputs per register, two registers a panel;
 *   - portable C: fmaf() in plain loops (the compiler vectorises them where the target has a vector
 *     FMA: aarch64's FMLA; elsewhere libm's fmaf, correct and slow).
 * bfloat16 (weights and inputs; the sums in float32): with AVX512-BF16, one VDPBF16PS per pair k, k+1 (or,
 * where this CPU's FMAs are the faster, the widened pairs below on 16 lanes: trtlade_linear_bf16_by_fma);
 * elsewhere both values are widened to float32 exactly (a bf16 value is the high half of a float32) and
 * the pair is two FMAs in the order Intel's pseudo-code gives VDPBF16PS: odd k first, then even k. The
 * product of two bf16 values is exact in float32, so each step rounds once like an FMA; the one
 * documented difference is that VDPBF16PS flushes subnormal inputs and results to zero
 * (docs/explanation/speed.md, "Across CPU classes").
 *
 * Packed layout (see trtlade/reference/native/linear.py, PanelLinear.pack): outputs in panels of 16,
 * float32 Wp[panel][k][16]; bfloat16 Wp[panel][k/2][16][2] (the pair of k's VDPBF16PS takes). N is
 * padded to a multiple of 16 with zero rows; the padded outputs are never stored.
 *
 * Worked example (K = 2, N = 16, one row x = [1, 2]): panel 0 holds W[0..15][0] then W[0..15][1];
 * acc = 0; acc = fma(Wp[0][0][:], 1, acc); acc = fma(Wp[0][1][:], 2, acc); y[n] = acc[n] + b[n].
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <stdatomic.h>
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define BF16_PATH "avx512-bf16 (VDPBF16PS)"
#elif defined(__AVX2__) && defined(__FMA__)
#define BF16_PATH "avx2-fma (widened to float32)"
#else
#define BF16_PATH "portable C (widened to float32)"
#endif
#if defined(__AVX512F__)
#define F32_PATH "avx512f"
#elif defined(__AVX2__) && defined(__FMA__)
#define F32_PATH "avx2-fma"
#else
#define F32_PATH "portable C"
#endif

#define MT 8 /* rows per tile */
#define PT 3 /* panels of 16 outputs per tile: MT * PT = 24 accumulators */

int trtlade_linear_bf16_by_fma(int want);
int trtlade_linear_bf16_amx(int want);
int trtlade_linear_lead(int want);
static int64_t peak_flops(int dpbf16, int64_t iters, int threads, float *sink);

/* Which instructions compute dtype 0 (float32) or 1 (bfloat16) in this variant, for /version. */
const char *trtlade_linear_path(int dtype) {
    if (dtype == 1 && trtlade_linear_bf16_amx(-1) == 1) return "amx-bf16 (TDPBF16PS tiles: bits of this class only)";
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (dtype == 1 && trtlade_linear_bf16_by_fma(-1) == 1) return "avx512f (widened pairs: VDPBF16PS slower here)";
#endif
    return dtype == 1 ? BF16_PATH : F32_PATH;
}

static inline float bf16_to_f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f_to_bf16(float f) { /* to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ------------------------------------------------------------------ AVX2 + FMA: 8 lanes, 2 registers a panel */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define AVX2_PATH 1
#endif
#if defined(__AVX2__) && defined(__FMA__) && !(defined(__AVX512BF16__) && defined(__AVX512BW__))
#define AVX2_BF16_PATH 1
#endif
#if defined(AVX2_PATH) || defined(AVX2_BF16_PATH) || defined(__AVX512F__)
#define STREAMS_PATH 1
#endif
#if defined(STREAMS_PATH)
/* The next weights a thread will read (the next group of its stream, FOR_STREAMS), fetched into its L2
 * cache while it computes the current ones: a tile of several rows reads each line of its panel for many
 * multiply-adds, and with more rows than a tile holds the group is read again from the L2 cache by the
 * next passes, so without it the memory would sit idle during that arithmetic (AVX-512, 16 rows: 1.57x
 * one row without it, linear layers alone, Zen 4). The next group's lines are spread evenly over every k
 * step of every tile of every pass over the current group (at most MAX_RATE lines a step), so the fetch
 * ends as the group does whatever the rows: a step fetches `lines` lines every `steps` steps, the credit
 * carried from tile to tile. Before, each step fetched a fixed number of lines and a group of 8 AVX2 rows
 * (a pass of 6, then one of 2) had fetched the next one by the end of its first pass, leaving the memory
 * idle during the second (docs/results/roofline.md, "The prefetch spread over the passes"). A prefetch
 * never changes a value. */
typedef struct {
    const char *at, *end;
    int lines, steps; /* `lines` lines every `steps` k steps */
    int credit;       /* carried from tile to tile within the group */
    int lead;         /* > 0: instead, each panel's own stream `lead` bytes ahead (PF_PANELS) */
} Prefetch;
#define PREFETCH_LINE(c)                                                                                      \
    if ((c) < pf_end) {                                                                                       \
        _mm_prefetch((c), _MM_HINT_T1);                                                                       \
        (c) += 64;                                                                                            \
    }
/* A tile's prefetch state in locals (PF_OPEN), one k step's share of lines (PF_STEP), handed back (PF_CLOSE). */
#define PF_OPEN(pf)                                                                                           \
    const char *pf_at = (pf)->at, *const pf_end = (pf)->end;                                                  \
    const int pf_lines = (pf)->lines, pf_steps = (pf)->steps;                                                 \
    int pf_credit = (pf)->credit;
#define PF_STEP()                                                                                             \
    for (pf_credit += pf_lines; pf_credit >= pf_steps; pf_credit -= pf_steps) { PREFETCH_LINE(pf_at) }
#define PF_CLOSE(pf)                                                                                          \
    (pf)->at = pf_at;                                                                                         \
    (pf)->credit = pf_credit;
/* One k step's prefetch in a tile of np panels whose panel p reads LINE(p) at this step: with a lead, the
 * line `lead` bytes further in each panel's stream (past a panel's end, the next panel's start: the next
 * group's, for the last panel); else the next group's share (PF_STEP). A prefetch past the weights' end
 * is dropped by the CPU, never a fault. */
#define PF_LEAD(np, LINE, LEAD)                                                                               \
    for (int p_ = 0; p_ < (np); p_++) _mm_prefetch((const char *)(LINE(p_)) + (LEAD), _MM_HINT_T1);
/* PF_LEAD into the L1 cache (tiles_f32's span tiles). */
#define PF_LEAD_L1(np, LINE, LEAD)                                                                            \
    for (int p_ = 0; p_ < (np); p_++) _mm_prefetch((const char *)(LINE(p_)) + (LEAD), _MM_HINT_T0);
#define PF_PANELS(np, LINE)                                                                                   \
    if (pf_lead) {                                                                                            \
        PF_LEAD(np, LINE, pf_lead)                                                                            \
    } else {                                                                                                  \
        PF_STEP()                                                                                             \
    }
#endif

#if defined(__AVX512F__)
/* Store one tile row's panels: the last panel may be partial (N not a multiple of 16). */
static inline __mmask16 tail_mask(int64_t n0, int64_t N) {
    int64_t left = N - n0;
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
/* m rows of one panel's accumulators (acc[i * stride]) plus the bias, rounded to bfloat16 (to nearest even)
 * and stored; the panel may be partial. */
static inline __attribute__((always_inline)) void store_bf16_panel(uint16_t *y, int64_t N, int64_t at,
                                                                  const float *bias, const __m512 *acc,
                                                                  const int stride, const int m) {
    const __mmask16 mask = tail_mask(at, N);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + at) : _mm512_setzero_ps();
    for (int i = 0; i < m; i++) {
        __m256bh out = _mm512_cvtneps_pbh(_mm512_add_ps(acc[(size_t)i * stride], b));
        _mm256_mask_storeu_epi16(y + (size_t)i * N + at, mask, (__m256i)out);
    }
}
#endif

/* m rows of one panel's accumulators (acc[i * stride]) plus the bias, stored; the panel may be partial. */
static inline __attribute__((always_inline)) void store_f32_panel(float *y, int64_t N, int64_t at, const float *bias,
                                                                 const __m512 *acc, const int stride, const int m) {
    const __mmask16 mask = tail_mask(at, N);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + at) : _mm512_setzero_ps();
    for (int i = 0; i < m; i++)
        _mm512_mask_storeu_ps(y + (size_t)i * N + at, mask, _mm512_add_ps(acc[(size_t)i * stride], b));
}

/* One k step of m rows x np panels: each panel's 16 weights at k times each row's x[k], added to its
 * accumulator (one FMA: the chain of every output is the same in every tile). */
static inline __attribute__((always_inline)) void step_f32(__m512 (*acc)[PT], const float *x, int64_t K,
                                                          const float *wp, int64_t k, const int m, const int np) {
    __m512 w[PT];
    for (int p = 0; p < np; p++) w[p] = _mm512_loadu_ps(wp + ((size_t)p * K + k) * 16);
    for (int i = 0; i < m; i++) {
        __m512 xb = _mm512_set1_ps(x[(size_t)i * K + k]);
        for (int p = 0; p < np; p++) acc[i][p] = _mm512_fmadd_ps(w[p], xb, acc[i][p]);
    }
}

/* m rows (<= MT) x np panels (<= PT): m and np are compile-time constants in each instantiation, so
 * the accumulators stay in registers; every instantiation runs the same chain per output. */
static inline __attribute__((always_inline)) void tile_f32(const float *x, int64_t K, const float *wp,
                                                          const float *bias, float *y, int64_t N, int64_t n0,
                                                          Prefetch *pf, const int m, const int np) {
    __m512 acc[MT][PT];
    PF_OPEN(pf)
    const int pf_lead = pf->lead;
    for (int i = 0; i < m; i++)
        for (int p = 0; p < np; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
#define F32_LINE(p) (wp + ((size_t)(p) * K + k) * 16)
        PF_PANELS(np, F32_LINE)
#undef F32_LINE
        step_f32(acc, x, K, wp, k, m, np);
    }
    PF_CLOSE(pf)
    for (int p = 0; p < np; p++) store_f32_panel(y, N, n0 + 16 * p, bias, &acc[0][p], PT, m);
}

/* Steps k0 to k1 of an m x np tile (m <= MT + 1: the tiles' last row folded into the tile before it, below) whose
 * accumulators wait in buf ([MT + 1][PT], k0 > 0) between spans; a lead > 0 prefetches each panel's stream that
 * many bytes ahead, into L1 (PF_LEAD_L1). */
static inline __attribute__((always_inline)) void span_f32(const float *x, int64_t K, const float *wp, int64_t k0,
                                                          int64_t k1, __m512 *buf, const int lead, const int m,
                                                          const int np) {
    __m512 acc[MT + 1][PT];
    for (int i = 0; i < m; i++)
        for (int p = 0; p < np; p++) acc[i][p] = k0 ? buf[i * PT + p] : _mm512_setzero_ps();
    for (int64_t k = k0; k < k1; k++) {
        if (lead) {
#define F32_LINE(p) (wp + ((size_t)(p) * K + k) * 16)
            PF_LEAD_L1(np, F32_LINE, lead)
#undef F32_LINE
        }
        step_f32(acc, x, K, wp, k, m, np);
    }
    for (int i = 0; i < m; i++)
        for (int p = 0; p < np; p++) buf[i * PT + p] = acc[i][p];
}

/* 9 to 16 rows of ONE panel (m a compile-time constant): every row's chain in one pass over the panel,
 * which a 16-row step would otherwise read twice (two passes of MT rows); 16 accumulators, the weight
 * and a broadcast. Same chain per output as tile_f32. x is the rows transposed (pack_rows: x[k][i], m
 * values a k step), so a step's 16 broadcasts are one pointer at constant offsets: with a pointer per
 * row the tile left too few general registers, reloaded them from the stack at every k, and an Intel
 * core ran out of load slots before FMA slots (16 rows, linear layers alone: 1.23x faster on a Xeon with
 * AMX, docs/results/roofline.md). */
static inline __attribute__((always_inline)) void tile16_f32(const float *x, int64_t K, const float *wp,
                                                            const float *bias, float *y, int64_t N, int64_t n0,
                                                            Prefetch *pf, const int m) {
    __m512 acc[16];
    PF_OPEN(pf)
    for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        PF_STEP()
        const __m512 w = _mm512_loadu_ps(wp + (size_t)k * 16);
        for (int i = 0; i < m; i++) acc[i] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[(size_t)k * m + i]), acc[i]);
    }
    PF_CLOSE(pf)
    const __mmask16 mask = tail_mask(n0, N);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + n0) : _mm512_setzero_ps();
    for (int i = 0; i < m; i++) _mm512_mask_storeu_ps(y + (size_t)i * N + n0, mask, _mm512_add_ps(acc[i], b));
}

#define TILE_CASES_16(FN, ...)                                                                                  \
    switch (m) {                                                                                              \
    case 9: FN(__VA_ARGS__, 9); break; case 10: FN(__VA_ARGS__, 10); break;                                   \
    case 11: FN(__VA_ARGS__, 11); break; case 12: FN(__VA_ARGS__, 12); break;                                 \
    case 13: FN(__VA_ARGS__, 13); break; case 14: FN(__VA_ARGS__, 14); break;                                 \
    case 15: FN(__VA_ARGS__, 15); break; default: FN(__VA_ARGS__, 16); break;                                 \
    }

#define TILE_CASES_512(FN, ...)                                                                                   \
    switch (m * 4 + np) {                                                                                     \
    case 1 * 4 + 1: FN(__VA_ARGS__, 1, 1); break; case 1 * 4 + 2: FN(__VA_ARGS__, 1, 2); break;              \
    case 1 * 4 + 3: FN(__VA_ARGS__, 1, 3); break; case 2 * 4 + 1: FN(__VA_ARGS__, 2, 1); break;              \
    case 2 * 4 + 2: FN(__VA_ARGS__, 2, 2); break; case 2 * 4 + 3: FN(__VA_ARGS__, 2, 3); break;              \
    case 3 * 4 + 1: FN(__VA_ARGS__, 3, 1); break; case 3 * 4 + 2: FN(__VA_ARGS__, 3, 2); break;              \
    case 3 * 4 + 3: FN(__VA_ARGS__, 3, 3); break; case 4 * 4 + 1: FN(__VA_ARGS__, 4, 1); break;              \
    case 4 * 4 + 2: FN(__VA_ARGS__, 4, 2); break; case 4 * 4 + 3: FN(__VA_ARGS__, 4, 3); break;              \
    case 5 * 4 + 1: FN(__VA_ARGS__, 5, 1); break; case 5 * 4 + 2: FN(__VA_ARGS__, 5, 2); break;              \
    case 5 * 4 + 3: FN(__VA_ARGS__, 5, 3); break; case 6 * 4 + 1: FN(__VA_ARGS__, 6, 1); break;              \
    case 6 * 4 + 2: FN(__VA_ARGS__, 6, 2); break; case 6 * 4 + 3: FN(__VA_ARGS__, 6, 3); break;              \
    case 7 * 4 + 1: FN(__VA_ARGS__, 7, 1); break; case 7 * 4 + 2: FN(__VA_ARGS__, 7, 2); break;              \
    case 7 * 4 + 3: FN(__VA_ARGS__, 7, 3); break; case 8 * 4 + 1: FN(__VA_ARGS__, 8, 1); break;              \
    case 8 * 4 + 2: FN(__VA_ARGS__, 8, 2); break; default: FN(__VA_ARGS__, 8, 3); break;                     \
    }

/* TILE_CASES_512 and the tiles of MT + 1 rows (tiles_f32). */
#define TILE_CASES_SPAN(FN, ...)                                                                                  \
    switch (m * 4 + np) {                                                                                     \
    case 9 * 4 + 1: FN(__VA_ARGS__, 9, 1); break; case 9 * 4 + 2: FN(__VA_ARGS__, 9, 2); break;              \
    case 9 * 4 + 3: FN(__VA_ARGS__, 9, 3); break;                                                             \
    default: TILE_CASES_512(FN, __VA_ARGS__);                                                                 \
    }

/* SPAN_FROM rows or more in ONE read of the panels (float32, with a prefetch lead: Intel): the rows'
 * tiles of MT take turns over spans of SPAN k steps, the first reading the span's weights from memory (its
 * prefetch half a lead ahead, into L1), the others from the L1 cache, each tile's accumulators kept in buf between
 * spans. Before, each tile read the whole group in its own pass and the memory sat idle during every pass
 * but the first. Storing and reloading an accumulator is exact and each output's chain still runs k = 0 to
 * K - 1 in order: the bits are those of the tiles (tests/test_fast_forward.py). Linear layers alone against
 * the passes, a 2-core Xeon with AMX (benchmarks/linear_ab.py, two runs of 11 interleaved repeats, medians):
 * 1.16-1.21x faster at 9 rows, 1.10-1.11x at 12, 1.05-1.07x at 16, 1.10x at 24, 1.03-1.04x at 32 and 48, 1.00x
 * at 1-8, which then ran the same code both ways (docs/results/roofline.md); spans of 16-128 k steps, and a prefetch
 * by the other tiles too, measured within noise of 32. The first tile fetches into L1 (PF_LEAD_L1), half the lead
 * ahead, so the tiles after it find the span there: against a fetch into L2 a whole lead ahead, 1.04-1.05x faster at
 * 12-48 rows (four runs of 11-15 interleaved repeats, benchmarks/linear_ab.py); into L1 a whole lead ahead 1.01-1.03x,
 * a quarter 1.01x. 3 to MT rows run here too, as one tile over spans: against that tile streaming its panels into L2 a
 * lead ahead, medians 1.06-1.07x faster at 8 rows and 1.02-1.06x at 3, 5, 6 and 7 (4 rows 0.99-1.04x) on a 2-core Xeon
 * model 207 without AMX (four runs of 11-15 interleaved repeats); on the Xeon with AMX the tile's prefetch into L1
 * alone measured 0.99-1.02x there, the spans at 3-8 rows not measured. 1 and 2 rows measured 0.97x and 0.99-1.00x and
 * keep the stream. */
#define SPAN 32
#define SPAN_FROM 3 /* with a lead, steps of this many float32 rows or more run over spans */
#define SPAN_TILES 4 /* up to SPAN_TILES x MT rows a read */
/* The tiles of `rows` rows: of MT rows each, the last one of what is left, except that a single row left after
 * full tiles joins the tile before it (MT + 1 rows, 27 accumulators of AVX-512's 32 registers): alone, its np
 * accumulators are np chains, each multiply-add waiting for the one before it, and with the weights in cache the
 * ninth row cost twice a row of a full tile. Linear layers alone, a 2-core Xeon with AMX (benchmarks/linear_ab.py,
 * 11 interleaved repeats): 9 rows 1.03x faster (1.01-1.09), as fast as 8; 17 rows within noise; the same bits.
 * Tile t starts at row t * MT. */
static inline int span_tiles(int rows) { return (rows + MT - 1) / MT - (rows > MT && rows % MT == 1); }
static inline int span_rows(int rows, int t, int tiles) { return t < tiles - 1 ? MT : rows - t * MT; }
static inline __attribute__((always_inline)) void tiles_f32(const float *x, int64_t K, const float *wp,
                                                           const float *bias, float *y, int64_t N, int64_t n0,
                                                           const Prefetch *pf, const int rows, const int np) {
    __m512 buf[SPAN_TILES][(MT + 1) * PT];
    const int tiles = span_tiles(rows);
    for (int64_t k0 = 0; k0 < K; k0 += SPAN) {
        const int64_t k1 = k0 + SPAN < K ? k0 + SPAN : K;
        for (int t = 0; t < tiles; t++) {
            const int m = span_rows(rows, t, tiles);
            TILE_CASES_SPAN(span_f32, x + (size_t)t * MT * K, K, wp, k0, k1, buf[t], t ? 0 : pf->lead / 2)
        }
    }
    for (int t = 0; t < tiles; t++)
        for (int p = 0; p < np; p++)
            store_f32_panel(y + (size_t)t * MT * N, N, n0 + 16 * p, bias, &buf[t][p], PT, span_rows(rows, t, tiles));
}
#endif

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
/* The bfloat16 pair step, k and k + 1, chosen at compile time (`fma` is a constant in every instantiation):
 * fma 0, one VDPBF16PS on the pair of x as read (x: bfloat16); fma 1, for a CPU whose VDPBF16PS computes fewer
 * multiply-adds a cycle than its float32 FMAs (a Xeon with AMX: half as many, trtlade_linear_bf16_by_fma), the
 * chain VDPBF16PS's pseudo-code gives on 16 lanes: two FMAs, odd k then even k, on the pair's weights widened
 * exactly (we, wo: the even k shifted up, the odd k masked, once per panel and k) and x widened once per
 * call (x: float32). xe, xo: the pair of x (fma 1); pair: the same as bfloat16 (fma 0). */
static inline __attribute__((always_inline)) __m512 even512(__m512i pairs) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
}
static inline __attribute__((always_inline)) __m512 odd512(__m512i pairs) {
    return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32((int)0xFFFF0000u)));
}
static inline __attribute__((always_inline)) __m512 pair_step(__m512 acc, __m512i w, __m512 we, __m512 wo,
                                                             const int fma, float xe, float xo, int32_t pair) {
    if (fma) return _mm512_fmadd_ps(we, _mm512_set1_ps(xe), _mm512_fmadd_ps(wo, _mm512_set1_ps(xo), acc));
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)_mm512_set1_epi32(pair));
}
/* 9 to 16 rows of one panel in bfloat16: as tile16_f32 (x transposed: by pairs for VDPBF16PS, by values for
 * the FMAs), one pair step per pair k, k + 1. */
static inline __attribute__((always_inline)) void tile16_bf16(const void *x, int64_t K, const uint16_t *wp,
                                                             const float *bias, uint16_t *y, int64_t N, int64_t n0,
                                                             Prefetch *pf, const int fma, const int m) {
    __m512 acc[16];
    const int64_t K2 = K / 2;
    PF_OPEN(pf)
    for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K2; k++) {
        PF_STEP()
        const __m512i w = _mm512_loadu_si512((const void *)(wp + (size_t)k * 32));
        const __m512 we = fma ? even512(w) : _mm512_setzero_ps(), wo = fma ? odd512(w) : _mm512_setzero_ps();
        for (int i = 0; i < m; i++) {
            float xe = 0.0f, xo = 0.0f;
            int32_t pair = 0;
            const float *xf = (const float *)x + (size_t)2 * k * m + i; /* x[2k][i], x[2k + 1][i] */
            if (fma) xe = xf[0], xo = xf[m];
            else memcpy(&pair, (const uint16_t *)x + 2 * ((size_t)k * m + i), sizeof pair);
            acc[i] = pair_step(acc[i], w, we, wo, fma, xe, xo, pair);
        }
    }
    PF_CLOSE(pf)
    store_bf16_panel(y, N, n0, bias, acc, 1, m);
}

static inline __attribute__((always_inline)) void tile_bf16(const void *x, int64_t K, const uint16_t *wp,
                                                           const float *bias, uint16_t *y, int64_t N, int64_t n0,
                                                           Prefetch *pf, const int fma, const int m, const int np) {
    __m512 acc[MT][PT];
    const int64_t K2 = K / 2;
    PF_OPEN(pf)
    const int pf_lead = pf->lead;
    for (int i = 0; i < m; i++)
        for (int p = 0; p < np; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K2; k++) {
#define BF16_LINE(p) (wp + ((size_t)(p) * K2 + k) * 32)
        PF_PANELS(np, BF16_LINE)
#undef BF16_LINE
        __m512i w[PT];
        __m512 we[PT], wo[PT];
        for (int p = 0; p < np; p++) {
            w[p] = _mm512_loadu_si512((const void *)(wp + ((size_t)p * K2 + k) * 32));
            we[p] = fma ? even512(w[p]) : _mm512_setzero_ps(), wo[p] = fma ? odd512(w[p]) : _mm512_setzero_ps();
        }
        for (int i = 0; i < m; i++) {
            float xe = 0.0f, xo = 0.0f;
            int32_t pair = 0;
            const float *xf = (const float *)x + (size_t)i * K + 2 * k;
            if (fma) xe = xf[0], xo = xf[1];
            else memcpy(&pair, (const uint16_t *)x + (size_t)i * K + 2 * k, sizeof pair);
            for (int p = 0; p < np; p++) acc[i][p] = pair_step(acc[i][p], w[p], we[p], wo[p], fma, xe, xo, pair);
        }
    }
    PF_CLOSE(pf)
    for (int p = 0; p < np; p++) store_bf16_panel(y, N, n0 + 16 * p, bias, &acc[0][p], PT, m);
}
#endif




#if defined(AVX2_PATH)
/* Store m rows of one panel's two registers, the last panel possibly partial. */
static inline __attribute__((always_inline)) void store_panel_avx2(float *y, int64_t N, int64_t at, const float *bias,
                                                                  __m256 lo, __m256 hi) {
    float out[16];
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
    const int64_t left = N - at < 16 ? N - at : 16;
    for (int64_t n = 0; n < left; n++) y[at + n] = out[n] + (bias ? bias[at + n] : 0.0f);
}
#endif

/* The accumulators of up to 4 rows as named registers (an array of them, indexed in the loop, made GCC 12
 * copy every accumulator to the stack at every k: a store per FMA). ROWS4(X) expands X(0) .. X(3); each
 * X(i) runs only where i < m, a compile-time constant in every instantiation. */
#define ROWS4(X) X(0) if (m > 1) { X(1) } if (m > 2) { X(2) } if (m > 3) { X(3) }
/* Up to 6 rows (AVX2: 12 accumulators, two weight registers and a broadcast: 15 of the 16 registers). */
#define ROWS6(X) ROWS4(X) if (m > 4) { X(4) } if (m > 5) { X(5) }

#if defined(AVX2_PATH)
/* m rows (<= 6) of one panel: 2m accumulators, every output one FMA chain over k. */
static inline __attribute__((always_inline)) void tile_f32_avx2(const float *x, int64_t K, const float *wp,
                                                               const float *bias, float *y, int64_t N, int64_t n0,
                                                               Prefetch *pf, const int m) {
    __m256 lo0 = _mm256_setzero_ps(), hi0 = lo0, lo1 = lo0, hi1 = lo0, lo2 = lo0, hi2 = lo0, lo3 = lo0, hi3 = lo0;
    __m256 lo4 = lo0, hi4 = lo0, lo5 = lo0, hi5 = lo0;
    PF_OPEN(pf)
    for (int64_t k = 0; k < K; k++) {
        PF_STEP()
        const __m256 w0 = _mm256_loadu_ps(wp + k * 16), w1 = _mm256_loadu_ps(wp + k * 16 + 8);
#define FMA_ROW(i)                                                                                            \
        {                                                                                                     \
            const __m256 xb = _mm256_broadcast_ss(x + (size_t)(i) * K + k);                                   \
            lo##i = _mm256_fmadd_ps(w0, xb, lo##i);                                                           \
            hi##i = _mm256_fmadd_ps(w1, xb, hi##i);                                                           \
        }
        ROWS6(FMA_ROW)
#undef FMA_ROW
    }
    PF_CLOSE(pf)
#define STORE_ROW(i) store_panel_avx2(y + (size_t)(i) * N, N, n0, bias, lo##i, hi##i);
    ROWS6(STORE_ROW)
#undef STORE_ROW
}
#endif

/* One row over np (<= 4) panels: 2 np independent chains, so that a lone row (a greedy step) is not held
 * to the latency of one FMA per k (with one panel, 2 chains: measured slower than two rows). */
#define PANELS4(X) X(0) if (np > 1) { X(1) } if (np > 2) { X(2) } if (np > 3) { X(3) }
#if defined(AVX2_PATH)
static inline __attribute__((always_inline)) void row_f32_avx2(const float *x, int64_t K, const float *wp,
                                                              const float *bias, float *y, int64_t N, int64_t n0,
                                                              Prefetch *pf, const int np) {
    __m256 lo0 = _mm256_setzero_ps(), hi0 = lo0, lo1 = lo0, hi1 = lo0, lo2 = lo0, hi2 = lo0, lo3 = lo0, hi3 = lo0;
    PF_OPEN(pf)
    for (int64_t k = 0; k < K; k++) {
        PF_STEP()
        const __m256 xb = _mm256_broadcast_ss(x + k);
#define FMA_PANEL(p)                                                                                          \
        {                                                                                                     \
            const float *w = wp + ((size_t)(p) * K + k) * 16;                                                 \
            lo##p = _mm256_fmadd_ps(_mm256_loadu_ps(w), xb, lo##p);                                           \
            hi##p = _mm256_fmadd_ps(_mm256_loadu_ps(w + 8), xb, hi##p);                                       \
        }
        PANELS4(FMA_PANEL)
#undef FMA_PANEL
    }
    PF_CLOSE(pf)
#define STORE_PANEL(p) store_panel_avx2(y, N, n0 + 16 * (p), bias, lo##p, hi##p);
    PANELS4(STORE_PANEL)
#undef STORE_PANEL
}
#endif

#if defined(AVX2_PATH)
/* Two rows over np (<= 3) panels: 4 np chains (one panel, 4 chains, was latency-bound like one row). */
static inline __attribute__((always_inline)) void pair_f32_avx2(const float *x, int64_t K, const float *wp,
                                                               const float *bias, float *y, int64_t N, int64_t n0,
                                                               Prefetch *pf, const int np) {
    __m256 a0 = _mm256_setzero_ps(), b0 = a0, c0 = a0, d0 = a0, a1 = a0, b1 = a0, c1 = a0, d1 = a0;
    __m256 a2 = a0, b2 = a0, c2 = a0, d2 = a0;
    PF_OPEN(pf)
    for (int64_t k = 0; k < K; k++) {
        PF_STEP()
        const __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(x + K + k);
#define FMA_PANEL(p)                                                                                          \
        {                                                                                                     \
            const float *w = wp + ((size_t)(p) * K + k) * 16;                                                 \
            const __m256 lo = _mm256_loadu_ps(w), hi = _mm256_loadu_ps(w + 8);                               \
            a##p = _mm256_fmadd_ps(lo, x0, a##p);                                                             \
            b##p = _mm256_fmadd_ps(hi, x0, b##p);                                                             \
            c##p = _mm256_fmadd_ps(lo, x1, c##p);                                                             \
            d##p = _mm256_fmadd_ps(hi, x1, d##p);                                                             \
        }
        FMA_PANEL(0)
        if (np > 1) { FMA_PANEL(1) }
        if (np > 2) { FMA_PANEL(2) }
#undef FMA_PANEL
    }
    PF_CLOSE(pf)
    store_panel_avx2(y, N, n0, bias, a0, b0);
    store_panel_avx2(y + N, N, n0, bias, c0, d0);
    if (np > 1) {
        store_panel_avx2(y, N, n0 + 16, bias, a1, b1);
        store_panel_avx2(y + N, N, n0 + 16, bias, c1, d1);
    }
    if (np > 2) {
        store_panel_avx2(y, N, n0 + 32, bias, a2, b2);
        store_panel_avx2(y + N, N, n0 + 32, bias, c2, d2);
    }
}
#endif

#if defined(AVX2_PATH)
/* Three rows over np (<= 2) panels: 6 np chains (a 3-row tile of one panel, 6 chains, was latency-bound); each
 * panel's weights loaded once a k step and each row's x broadcast per panel (15 of the 16 registers). */
static inline __attribute__((always_inline)) void trio_f32_avx2(const float *x, int64_t K, const float *wp,
                                                               const float *bias, float *y, int64_t N, int64_t n0,
                                                               Prefetch *pf, const int np) {
    __m256 a0 = _mm256_setzero_ps(), b0 = a0, c0 = a0, d0 = a0, e0 = a0, f0 = a0;
    __m256 a1 = a0, b1 = a0, c1 = a0, d1 = a0, e1 = a0, f1 = a0;
    PF_OPEN(pf)
    for (int64_t k = 0; k < K; k++) {
        PF_STEP()
#define FMA_PANEL(p)                                                                                          \
        {                                                                                                     \
            const float *w = wp + ((size_t)(p) * K + k) * 16;                                                 \
            const __m256 lo = _mm256_loadu_ps(w), hi = _mm256_loadu_ps(w + 8);                               \
            __m256 xb = _mm256_broadcast_ss(x + k);                                                           \
            a##p = _mm256_fmadd_ps(lo, xb, a##p);                                                             \
            b##p = _mm256_fmadd_ps(hi, xb, b##p);                                                             \
            xb = _mm256_broadcast_ss(x + K + k);                                                              \
            c##p = _mm256_fmadd_ps(lo, xb, c##p);                                                             \
            d##p = _mm256_fmadd_ps(hi, xb, d##p);                                                             \
            xb = _mm256_broadcast_ss(x + 2 * K + k);                                                          \
            e##p = _mm256_fmadd_ps(lo, xb, e##p);                                                             \
            f##p = _mm256_fmadd_ps(hi, xb, f##p);                                                             \
        }
        FMA_PANEL(0)
        if (np > 1) { FMA_PANEL(1) }
#undef FMA_PANEL
    }
    PF_CLOSE(pf)
    store_panel_avx2(y, N, n0, bias, a0, b0);
    store_panel_avx2(y + N, N, n0, bias, c0, d0);
    store_panel_avx2(y + 2 * N, N, n0, bias, e0, f0);
    if (np > 1) {
        store_panel_avx2(y, N, n0 + 16, bias, a1, b1);
        store_panel_avx2(y + N, N, n0 + 16, bias, c1, d1);
        store_panel_avx2(y + 2 * N, N, n0 + 16, bias, e1, f1);
    }
}
#endif

#if defined(AVX2_BF16_PATH)
static inline __attribute__((always_inline)) void store_bf16_avx2(uint16_t *y, int64_t N, int64_t n0,
                                                                 const float *bias, __m256 lo, __m256 hi) {
    float out[16];
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
    const int64_t left = N - n0 < 16 ? N - n0 : 16;
    for (int64_t n = 0; n < left; n++) y[n0 + n] = f_to_bf16(out[n] + (bias ? bias[n0 + n] : 0.0f));
}

/* A 256-bit load of packed bf16 pairs (k, k+1) for 8 outputs, widened exactly: the even k is the low half
 * of each 32-bit lane (shifted up), the odd k the high half (masked). */
static inline __attribute__((always_inline)) __m256 bf16_even(__m256i pairs) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
}
static inline __attribute__((always_inline)) __m256 bf16_odd(__m256i pairs) {
    return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32((int)0xFFFF0000u)));
}
/* One pair step of an output's chain, in the order Intel's pseudo-code gives VDPBF16PS: odd k, then even k. */
static inline __attribute__((always_inline)) __m256 pair_fma(__m256 acc, __m256 w_even, __m256 w_odd,
                                                           __m256 x_even, __m256 x_odd) {
    return _mm256_fmadd_ps(w_even, x_even, _mm256_fmadd_ps(w_odd, x_odd, acc));
}

/* m rows (<= 4) of one panel in bfloat16: per pair (k, k+1) two 256-bit loads hold the 16 outputs' pairs
 * (bf16_even/bf16_odd, pair_fma); the result rounded to bfloat16, to nearest even. */
static inline __attribute__((always_inline)) void tile_bf16_avx2(const float *x, int64_t K, const uint16_t *wp,
                                                                const float *bias, uint16_t *y, int64_t N,
                                                                int64_t n0, Prefetch *pf, const int m) {
    __m256 lo0 = _mm256_setzero_ps(), hi0 = lo0, lo1 = lo0, hi1 = lo0, lo2 = lo0, hi2 = lo0, lo3 = lo0, hi3 = lo0;
    const int64_t K2 = K / 2;
    PF_OPEN(pf)
    for (int64_t k = 0; k < K2; k++) {
        PF_STEP()
        const __m256i a = _mm256_loadu_si256((const __m256i *)(wp + k * 32));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(wp + k * 32 + 16));
        const __m256 a_even = bf16_even(a), a_odd = bf16_odd(a), b_even = bf16_even(b), b_odd = bf16_odd(b);
#define FMA_ROW(i)                                                                                            \
        {                                                                                                     \
            const __m256 x_even = _mm256_broadcast_ss(x + (size_t)(i) * K + 2 * k);                           \
            const __m256 x_odd = _mm256_broadcast_ss(x + (size_t)(i) * K + 2 * k + 1);                        \
            lo##i = pair_fma(lo##i, a_even, a_odd, x_even, x_odd);                                            \
            hi##i = pair_fma(hi##i, b_even, b_odd, x_even, x_odd);                                            \
        }
        ROWS4(FMA_ROW)
#undef FMA_ROW
    }
    PF_CLOSE(pf)
#define STORE_ROW(i) store_bf16_avx2(y + (size_t)(i) * N, N, n0, bias, lo##i, hi##i);
    ROWS4(STORE_ROW)
#undef STORE_ROW
}
#endif

#if defined(AVX2_BF16_PATH)
static inline __attribute__((always_inline)) void row_bf16_avx2(const float *x, int64_t K, const uint16_t *wp,
                                                               const float *bias, uint16_t *y, int64_t N,
                                                               int64_t n0, Prefetch *pf, const int np) {
    __m256 lo0 = _mm256_setzero_ps(), hi0 = lo0, lo1 = lo0, hi1 = lo0, lo2 = lo0, hi2 = lo0, lo3 = lo0, hi3 = lo0;
    const int64_t K2 = K / 2;
    PF_OPEN(pf)
    for (int64_t k = 0; k < K2; k++) {
        PF_STEP()
        const __m256 x_even = _mm256_broadcast_ss(x + 2 * k), x_odd = _mm256_broadcast_ss(x + 2 * k + 1);
#define FMA_PANEL(p)                                                                                          \
        {                                                                                                     \
            const uint16_t *w = wp + ((size_t)(p) * K2 + k) * 32;                                             \
            const __m256i a = _mm256_loadu_si256((const __m256i *)w);                                         \
            const __m256i b = _mm256_loadu_si256((const __m256i *)(w + 16));                                 \
            lo##p = pair_fma(lo##p, bf16_even(a), bf16_odd(a), x_even, x_odd);                                \
            hi##p = pair_fma(hi##p, bf16_even(b), bf16_odd(b), x_even, x_odd);                                \
        }
        PANELS4(FMA_PANEL)
#undef FMA_PANEL
    }
    PF_CLOSE(pf)
#define STORE_PANEL(p) store_bf16_avx2(y, N, n0 + 16 * (p), bias, lo##p, hi##p);
    PANELS4(STORE_PANEL)
#undef STORE_PANEL
}
#endif

#if defined(AVX2_BF16_PATH)
/* Two rows over np (<= 3) panels in bfloat16 (x widened already): 4 np chains, each two FMAs deep a pair step
 * (pair_fma), so that 2 panels' 8 chains waited on the FMAs' latency; 3 panels' 12 do not. Written to widen one
 * half panel at a time and to broadcast x where used, GCC 12 hoists the four broadcasts and keeps a few
 * accumulators on the stack (the 12, the x values and the widening mask exceed the 16 registers): still faster
 * than 8 chains. Every broadcast forced where used (a volatile asm, the accumulators then in registers) measured
 * slower: 0.81x in cache, 0.97x streamed. Two rows over 3 panels against 2, linear layers of SmolLM2 alone on a
 * 2-core Zen 3 (benchmarks/linear_ab.py, 9-11 repeats, medians): 1.27-1.41x faster with the weights held in cache,
 * 1.05-1.12x streamed from memory, the same bits (docs/results/2026-12-07-zen3-bf16-pairs.md). */
static inline __attribute__((always_inline)) void pair_bf16_avx2(const float *x, int64_t K, const uint16_t *wp,
                                                                const float *bias, uint16_t *y, int64_t N,
                                                                int64_t n0, Prefetch *pf, const int np) {
    __m256 a0 = _mm256_setzero_ps(), b0 = a0, c0 = a0, d0 = a0, a1 = a0, b1 = a0, c1 = a0, d1 = a0;
    __m256 a2 = a0, b2 = a0, c2 = a0, d2 = a0;
    const int64_t K2 = K / 2;
    PF_OPEN(pf)
    for (int64_t k = 0; k < K2; k++) {
        PF_STEP()
        const float *x0 = x + 2 * k, *x1 = x + K + 2 * k;
#define HALF(acc0, acc1, word)                                                                                \
        {                                                                                                     \
            const __m256i u_ = (word);                                                                        \
            const __m256 we = bf16_even(u_), wo = bf16_odd(u_);                                               \
            acc0 = pair_fma(acc0, we, wo, _mm256_broadcast_ss(x0), _mm256_broadcast_ss(x0 + 1));              \
            acc1 = pair_fma(acc1, we, wo, _mm256_broadcast_ss(x1), _mm256_broadcast_ss(x1 + 1));              \
        }
#define FMA_PANEL(p)                                                                                          \
        {                                                                                                     \
            const uint16_t *w = wp + ((size_t)(p) * K2 + k) * 32;                                             \
            HALF(a##p, c##p, _mm256_loadu_si256((const __m256i *)w))                                          \
            HALF(b##p, d##p, _mm256_loadu_si256((const __m256i *)(w + 16)))                                   \
        }
        FMA_PANEL(0)
        if (np > 1) { FMA_PANEL(1) }
        if (np > 2) { FMA_PANEL(2) }
#undef FMA_PANEL
#undef HALF
    }
    PF_CLOSE(pf)
#define STORE_PANEL(p)                                                                                        \
    store_bf16_avx2(y, N, n0 + 16 * (p), bias, a##p, b##p);                                                   \
    store_bf16_avx2(y + N, N, n0 + 16 * (p), bias, c##p, d##p);
    STORE_PANEL(0)
    if (np > 1) { STORE_PANEL(1) }
    if (np > 2) { STORE_PANEL(2) }
#undef STORE_PANEL
}
#endif

/* ------------------------------------------------------------------ portable C: fmaf in plain loops */
#if !defined(__AVX512F__) && !defined(AVX2_PATH)
#define PORTABLE_PATH 1
#endif
#if !defined(AVX2_BF16_PATH) && !(defined(__AVX512BF16__) && defined(__AVX512BW__))
#define PORTABLE_BF16_PATH 1
#endif
#if defined(PORTABLE_PATH)
static inline __attribute__((always_inline)) void tile_f32_portable(const float *x, int64_t K, const float *wp,
                                                                   const float *bias, float *y, int64_t N,
                                                                   int64_t n0, const int m) {
    float acc[4][16] = {{0}};
    for (int64_t k = 0; k < K; k++)
        for (int i = 0; i < m; i++) {
            const float xv = x[(size_t)i * K + k];
            for (int l = 0; l < 16; l++) acc[i][l] = fmaf(wp[k * 16 + l], xv, acc[i][l]);
        }
    const int64_t left = N - n0 < 16 ? N - n0 : 16;
    for (int i = 0; i < m; i++)
        for (int64_t n = 0; n < left; n++) y[(size_t)i * N + n0 + n] = acc[i][n] + (bias ? bias[n0 + n] : 0.0f);
}
#endif
#if defined(PORTABLE_BF16_PATH)
static inline __attribute__((always_inline)) void tile_bf16_portable(const float *x, int64_t K, const uint16_t *wp,
                                                                    const float *bias, uint16_t *y, int64_t N,
                                                                    int64_t n0, const int m) {
    float acc[4][16] = {{0}};
    for (int64_t k = 0; k < K / 2; k++)
        for (int i = 0; i < m; i++) {
            const float x_even = x[(size_t)i * K + 2 * k], x_odd = x[(size_t)i * K + 2 * k + 1];
            for (int l = 0; l < 16; l++) {
                const float odd = fmaf(bf16_to_f(wp[k * 32 + 2 * l + 1]), x_odd, acc[i][l]);
                acc[i][l] = fmaf(bf16_to_f(wp[k * 32 + 2 * l]), x_even, odd);
            }
        }
    const int64_t left = N - n0 < 16 ? N - n0 : 16;
    for (int i = 0; i < m; i++)
        for (int64_t n = 0; n < left; n++) y[(size_t)i * N + n0 + n] = f_to_bf16(acc[i][n] + (bias ? bias[n0 + n] : 0.0f));
}
#endif

/* The 8-lane and portable tiles: up to 4 rows of one panel (m a compile-time constant in each case). */
#define TILE_CASES_4(FN, ...)                                                                                 \
    switch (m) {                                                                                              \
    case 1: FN(__VA_ARGS__, 1); break; case 2: FN(__VA_ARGS__, 2); break;                                     \
    case 3: FN(__VA_ARGS__, 3); break; default: FN(__VA_ARGS__, 4); break;                                    \
    }
/* float32's AVX2 tiles of 4 to 6 rows (3 rows run over 2 panels: trio_f32_avx2). */
#define TILE_CASES_6(FN, ...)                                                                                 \
    switch (m) {                                                                                              \
    case 4: FN(__VA_ARGS__, 4); break; case 5: FN(__VA_ARGS__, 5); break;                                     \
    default: FN(__VA_ARGS__, 6); break;                                                                       \
    }
/* AVX2: one row over np <= 4 panels (ROW), two rows over np <= 3 panels (PAIR), or 3 up to 4 or 6 rows of
 * one panel (TILE; CASES: TILE_CASES_4 or TILE_CASES_6): at least 8 independent FMA chains but for a 3-row
 * tile (float32 runs 3 rows over 2 panels instead: trio_f32_avx2). float32 takes 6-row tiles (12 chains; a
 * model's linear layers streamed from memory 1.04-1.11x faster at 6-16 rows than with 4-row tiles, measured
 * in one process, same bits; docs/results/roofline.md);
 * bfloat16's tiles keep 4 rows (a k step's four widened weight registers leave no room for 12 accumulators: 6 rows
 * measured no faster, and slower when split in halves). */
#define TILE_CASES_AVX2(ROW, PAIR, TILE, CASES, ...)                                                          \
    if (m == 1) {                                                                                             \
        switch (np) {                                                                                         \
        case 1: ROW(__VA_ARGS__, 1); break; case 2: ROW(__VA_ARGS__, 2); break;                               \
        case 3: ROW(__VA_ARGS__, 3); break; default: ROW(__VA_ARGS__, 4); break;                              \
        }                                                                                                     \
    } else if (m == 2) {                                                                                      \
        switch (np) {                                                                                         \
        case 1: PAIR(__VA_ARGS__, 1); break; case 2: PAIR(__VA_ARGS__, 2); break;                             \
        default: PAIR(__VA_ARGS__, 3); break;                                                                 \
        }                                                                                                     \
    } else {                                                                                                  \
        CASES(TILE, __VA_ARGS__)                                                                              \
    }

/* The panels of an AVX2 stream's group: 4 for one row (its tiles span 4 panels, for 8 FMA chains; no caller asks it
 * for 2 rows), 2 for more (tiles of one panel; a remainder of 1 to 3 rows still spans 2); but float32's 2 and 4 rows
 * take groups of 3, one or two pairs over each (trtlade_linear_f32), and bfloat16's 2 rows groups of 3, one pair
 * over each (trtlade_linear_bf16): the group the passes re-read and the next one being prefetched stay small in L2.
 * Linear layers of SmolLM2 alone, `avx2` forced on a Zen 4, against groups of 4 (benchmarks/linear_ab.py, medians):
 * float32 1.05-1.09x faster at 7-16 rows, 1-3 rows unchanged; bfloat16 1.00-1.08x; the same bits
 * (docs/results/roofline.md). */
#define AVX2_GROUP(M) ((M) <= 2 ? 4 : 2)

/* The schedule of the AVX-512 tiles (float32 with AVX-512F, bfloat16 with AVX512-BF16) and of portable C:
 * the panels in groups of GP, handed out one group at a time to whichever thread is free (a thread that
 * the OS gives to another process for a while does not hold the others up); each group runs every tile of
 * MT rows x TP panels (TP may depend on m, the tile's rows) while its weights stay in the L2 cache. Which
 * thread computes a group never changes an output's chain, so the bits do not depend on the schedule. The
 * AVX2 and AVX-512 tiles stream and prefetch instead (FOR_STREAMS); portable C keeps this schedule. */
#define FOR_TILES(GP, MT, TP, BODY)                                                                     \
    const int64_t panels = (N + 15) / 16, groups = (panels + (GP) - 1) / (GP);                                \
    _Pragma("omp parallel for schedule(dynamic, 1) num_threads(threads)")                                     \
    for (int64_t g = 0; g < groups; g++) {                                                                    \
        const int64_t g1 = (g + 1) * (GP) < panels ? (g + 1) * (GP) : panels;                                 \
        for (int64_t i0 = 0; i0 < M; i0 += (MT)) {                                                            \
            const int m = (int)(M - i0 < (MT) ? M - i0 : (MT));                                               \
            for (int64_t p0 = g * (GP); p0 < g1; p0 += (TP)) {                                                \
                const int np = (int)(g1 - p0 < (TP) ? g1 - p0 : (TP));                                        \
                (void)np;                                                                                     \
                BODY                                                                                          \
            }                                                                                                 \
        }                                                                                                     \
    }

#if defined(STREAMS_PATH)
/* Claim a group of a thread's range, packed as lo | hi << 32: its owner takes the front (lo), a thread
 * whose own range is done takes the back (hi - 1). -1: the range is empty. *hi: its end when claimed. */
static int64_t claim_group(_Atomic uint64_t *range, int from_back, int64_t *hi) {
    uint64_t w = atomic_load_explicit(range, memory_order_relaxed);
    for (;;) {
        const uint64_t lo = w & 0xffffffffu, end = w >> 32;
        if (lo >= end) return -1;
        const uint64_t next = from_back ? (lo | (end - 1) << 32) : ((lo + 1) | end << 32);
        if (atomic_compare_exchange_weak_explicit(range, &w, next, memory_order_relaxed, memory_order_relaxed)) {
            *hi = (int64_t)end;
            return from_back ? (int64_t)end - 1 : (int64_t)lo;
        }
    }
}

/* The range with the most groups left (-1: none), for a thread whose own range is done. */
static int fullest_range(_Atomic uint64_t *ranges, int count) {
    int best = -1;
    int64_t most = 0;
    for (int t = 0; t < count; t++) {
        const uint64_t w = atomic_load_explicit(&ranges[t], memory_order_relaxed);
        const int64_t left = (int64_t)(w >> 32) - (int64_t)(w & 0xffffffffu);
        if (left > most) most = left, best = t;
    }
    return best;
}

/* The AVX2 and AVX-512 schedule: thread t owns the t-th contiguous range of panel groups and runs it front to back, so
 * each thread streams one run of memory, and while it computes a group (every tile of MT rows x TP panels,
 * the weights staying in its L2 cache) it prefetches the next group of its range (Prefetch, at most
 * MAX_RATE lines a k step: the AVX2 tiles 1, more measured slower at 1 and 2 rows; the AVX-512 tiles PT). A thread
 * whose range is done takes groups from the back of the fullest other range (without prefetch), so a
 * thread the OS gives to another process for a while does not hold the others up. Which thread computes
 * a group never changes an output's chain: the bits do not depend on the schedule. Measured against the
 * dynamic schedule without prefetch (FOR_TILES): docs/results/cpu-classes.md, "Memory and arithmetic overlapped". */
#define FOR_STREAMS(GP, MT, TP, MAX_RATE, LEAD, BODY)                                                         \
    const int64_t panels = (N + 15) / 16, groups = (panels + (GP) - 1) / (GP);                                \
    const int owners = threads > 0 ? threads : 1;                                                             \
    _Atomic uint64_t ranges[owners];                                                                          \
    for (int t = 0; t < owners; t++)                                                                          \
        atomic_init(&ranges[t], (uint64_t)(groups * t / owners) | (uint64_t)(groups * (t + 1) / owners) << 32); \
    _Pragma("omp parallel num_threads(owners)")                                                               \
    {                                                                                                         \
        int range = omp_get_thread_num() % owners, from_back = 0;                                             \
        for (;;) {                                                                                            \
            int64_t hi = 0, g = claim_group(&ranges[range], from_back, &hi);                                  \
            if (g < 0) {                                                                                      \
                range = fullest_range(ranges, owners);                                                        \
                if (range < 0) break;                                                                         \
                from_back = range != omp_get_thread_num();                                                    \
                continue;                                                                                     \
            }                                                                                                 \
            const int64_t p_lo = g * (GP), p_hi = p_lo + (GP) < panels ? p_lo + (GP) : panels;                \
            const int64_t p_next = !from_back && g + 1 < hi ? (p_hi + (GP) < panels ? p_hi + (GP) : panels) : p_hi; \
            int tiles = 0; /* the group's tiles, every pass: each runs K steps (bfloat16: K / 2), a line each */ \
            for (int64_t i0 = 0; i0 < M; i0 += (MT)) {                                                        \
                const int m = (int)(M - i0 < (MT) ? M - i0 : (MT)); /* TP may depend on it */                 \
                (void)m;                                                                                      \
                tiles += (int)((p_hi - p_lo + (TP) - 1) / (TP));                                              \
            }                                                                                                 \
            const int ahead = (int)(p_next - p_hi), most = (MAX_RATE) * tiles; /* a line per panel a step */  \
            Prefetch next = {(const char *)(wp + p_hi * K * 16), (const char *)(wp + p_next * K * 16),         \
                             (LEAD) ? 0 : ahead < most ? ahead : most, tiles, 0, (LEAD)};                     \
            Prefetch *pf = &next;                                                                             \
            for (int64_t i0 = 0; i0 < M; i0 += (MT)) {                                                        \
                const int m = (int)(M - i0 < (MT) ? M - i0 : (MT));                                           \
                for (int64_t p0 = p_lo; p0 < p_hi; p0 += (TP)) {                                              \
                    const int np = (int)(p_hi - p0 < (TP) ? p_hi - p0 : (TP));                                \
                    (void)np;                                                                                 \
                    BODY                                                                                      \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }
#endif

#if defined(__AVX512F__)
/* 9 to 16 rows take the 16-row single-panel tiles instead (tile16_f32, tile16_bf16): one pass, each panel
 * read once; the next group prefetched at a line per k step (its PT panels over the PT tiles of a group).
 * Linear layers alone, 16 rows, Zen 4 (benchmarks/linear_ab.py, medians): 1.07x faster in float32, 1.06x in
 * bfloat16, the same bits. Except float32 with a lead (trtlade_linear_lead: Intel), where 3 rows or more run in
 * tiles of MT rows over spans instead (tiles_f32); bfloat16 keeps the one pass there (0.90x at 16 rows in two passes
 * of MT: its widened weights serve 16 rows in one). */
#endif

/* How far ahead the AVX-512 tiles of up to MT rows prefetch, for every call of this process: 0, the next
 * group of the thread's range spread over the current one's k steps (FOR_STREAMS); > 0, each panel's own
 * stream that many bytes ahead (PF_PANELS). want >= 0 sets it; -1 returns it, chosen at the first call by
 * the CPU's maker: 2048 bytes (32 lines) on Intel, 0 elsewhere. On a 2-core Xeon with AMX the lead is the
 * faster (linear layers alone against the spread, benchmarks/linear_ab.py, 9 interleaved repeats, medians:
 * float32 1.11x at 1 row, 1.08x at 4, 1.13x at 8; bfloat16 1.06x, 1.15x, 1.08x; docs/results/roofline.md).
 * The one-pass 16-row tiles keep the spread (with a lead: float32 0.86-1.07x, bfloat16 within noise); with a
 * lead, float32 steps of 3 rows or more run in tiles of MT over spans instead (tiles_f32). AMD's cores keep the
 * spread: on a 2-core Zen 5 the lead ran as fast or slower (the lead forced, benchmarks/linear_ab.py, 9 repeats,
 * medians: float32 1.00x at 1 row, 0.98x at 4 and 8, 0.90x at 16; bfloat16 1.00x, 0.94x, 0.97x, 0.99x); on a
 * 2-core Zen 4, within noise or slower (9-15 repeats: float32 1.06-1.09x at 1 row, ranges 0.94-1.20, 0.99x at 4,
 * 1.02x at 8, 0.79x at 16 over spans; bfloat16 1.04x at 1 row, 1.03x at 8, ranges from 0.95). A prefetch never
 * changes a value and the float32 paths compute the same chains: the bits do not depend on this choice
 * (tests/test_fast_forward.py). Without AVX-512: 0 (the AVX2 tiles spread). */
int trtlade_linear_lead(int want) {
#if defined(__AVX512F__)
    static _Atomic int chosen = -1;
    if (want >= 0) atomic_store(&chosen, want);
    if (atomic_load(&chosen) < 0) {
        __builtin_cpu_init();
        int expected = -1;
        atomic_compare_exchange_strong(&chosen, &expected, __builtin_cpu_is("intel") ? 2048 : 0);
    }
    return atomic_load(&chosen);
#else
    (void)want;
    return 0;
#endif
}

#if defined(__AVX512F__)
/* The rows of x transposed for the 16-row tiles (tile16_f32, tile16_bf16): the M <= 16 rows
 * stored as [unit][M], a unit being a float32 (float32) or a pair k, k + 1 (bfloat16). A copy: the values and the
 * chains are unchanged. */
static uint32_t *pack_rows(const void *x, int64_t M, int64_t units) {
    uint32_t *xt = malloc(sizeof(uint32_t) * (size_t)(M * units));
    if (!xt) return NULL;
    const uint32_t *src = x;
    for (int64_t u = 0; u < units; u++)
        for (int64_t i = 0; i < M; i++) xt[u * M + i] = src[i * units + u];
    return xt;
}
#endif

#if defined(AVX2_PATH)
/* The AVX2 float32 schedule of M rows (trtlade_linear_f32): panels per group, rows per tile from row i0 on (tiles of 6,
 * but the last 7 rows as 5 + 2, and 2 or 4 rows as pairs: PAIRS), and panels per tile of m rows (one row over 4, the
 * pairs of 2 or 4 rows over a group of 3, 2 or 3 rows over 2 otherwise, more over 1). */
#define PAIRS(M) ((M) == 2 || (M) == 4)
static inline int64_t f32_avx2_group(int64_t M) { return PAIRS(M) ? 3 : AVX2_GROUP(M); }
static inline int f32_avx2_rows(int64_t M, int64_t i0) { return PAIRS(M) ? 2 : M - i0 == 7 ? 5 : 6; }
static inline int f32_avx2_panels(int64_t M, int m) { return m == 1 ? 4 : PAIRS(M) ? 3 : m <= 3 ? 2 : 1; }
#endif

#if defined(AVX2_BF16_PATH)
/* The AVX2 bfloat16 schedule of M rows (trtlade_linear_bf16), as f32_avx2_* for float32: panels per group (3 for 2
 * rows alone, one pair over each), rows per tile from row i0 on (tiles of 4, the last 6 rows as 3 + 3), and panels per
 * tile of m rows (one row over 4, 2 rows alone over 3, a remainder of 2 over 2, more over 1). */
#define BF16_AVX2_GROUP(M) ((M) == 2 ? 3 : AVX2_GROUP(M))
#define BF16_AVX2_ROWS(M, i0) ((M) - (i0) == 6 ? 3 : 4)
#define BF16_AVX2_PANELS(M, m) ((m) == 1 ? 4 : (M) == 2 ? 3 : (m) == 2 ? 2 : 1)
#endif

int trtlade_linear_f32(const float *x, int64_t M, int64_t K, const float *wp, const float *bias, int64_t N,
                       float *y, int threads) {
    if (M <= 0 || K <= 0 || N <= 0) return M < 0 || K <= 0 || N <= 0;
#if defined(__AVX512F__)
    const int lead = trtlade_linear_lead(-1);
    if (M > MT && M <= 16 && !lead) { /* one pass of up to 16 rows per panel */
        const float *xt = (const float *)pack_rows(x, M, K);
        if (!xt) return 3;
        FOR_STREAMS(PT, 16, 1, PT, 0, TILE_CASES_16(tile16_f32, xt, K, wp + p0 * K * 16, bias, y, N, p0 * 16, pf))
        free((void *)xt);
    } else if (M >= SPAN_FROM && lead) { /* tiles over spans (taking turns), one read per SPAN_TILES x MT rows */
        FOR_STREAMS(PT, SPAN_TILES * MT, PT, PT, lead,
                    tiles_f32(x + i0 * K, K, wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16, pf, m, np);)
    } else {
        FOR_STREAMS(PT, MT, PT, PT, lead,
                    TILE_CASES_512(tile_f32, x + i0 * K, K, wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16, pf))
    }
#elif defined(AVX2_PATH)
    /* Tiles of 6 rows, but 7 rows left take 5 + 2 (a lone seventh row over 2 panels, 4 chains, waited on its FMAs'
     * latency), 3 rows run over 2 panels (trio_f32_avx2, 12 chains) and 4 rows as two pairs over groups of 3
     * panels (12 chains each, where a 4-row tile of one panel holds 8): linear layers of SmolLM2 alone on a 2-core
     * Zen 3 (benchmarks/linear_ab.py, 9-21 repeats, medians) 1.10-1.20x faster at 3 rows, 1.03-1.12x at 4,
     * 1.04-1.14x at 7, the same bits (docs/results/2026-12-05-zen3-bfloat16.md). 2 rows take a pair over 3 panels
     * too (12 chains and 3 weight streams instead of 8 and 2): 1.08-1.11x faster there (11-21 repeats; pairs for 6
     * and 8 rows, trios for 6 and a trio and a pair for 5 measured 0.95-0.96x, the 2 rows' next group fetched at 2
     * or 3 lines a step 0.92x and 0.87x: not kept; docs/results/2026-12-06-zen3-two-rows.md). */
#define PAIR_F32(NP) pair_f32_avx2(x + i0 * K, K, wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16, pf, NP)
#define TRIO_F32(NP) trio_f32_avx2(x + i0 * K, K, wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16, pf, NP)
    FOR_STREAMS(f32_avx2_group(M), f32_avx2_rows(M, i0), f32_avx2_panels(M, m), 1, 0,
                if (PAIRS(M)) {
                    if (np > 2) PAIR_F32(3); else if (np > 1) PAIR_F32(2); else PAIR_F32(1);
                } else if (m == 3) {
                    if (np > 1) TRIO_F32(2); else TRIO_F32(1);
                } else {
                    TILE_CASES_AVX2(row_f32_avx2, pair_f32_avx2, tile_f32_avx2, TILE_CASES_6, x + i0 * K, K,
                                    wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16, pf)
                })
#undef PAIR_F32
#undef TRIO_F32
#undef PAIRS
#else
    FOR_TILES(4, 4, 1, TILE_CASES_4(tile_f32_portable, x + i0 * K, K, wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16))
#endif
    return 0;
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
/* The AVX-512 bfloat16 tiles over x (fma 0: bfloat16 as given; fma 1: widened to float32 by the caller), 9-16
 * rows in one pass over x transposed (pack_rows: by pairs, or by values), else tiles of MT rows. */
static inline __attribute__((always_inline)) int bf16_tiles(const void *x, int64_t M, int64_t K, const uint16_t *wp,
                                                            const float *bias, int64_t N, uint16_t *y, int threads,
                                                            const int fma) {
    const size_t row = fma ? sizeof(float) * (size_t)K : sizeof(uint16_t) * (size_t)K; /* bytes a row of x */
    const int lead = trtlade_linear_lead(-1);
    if (M > MT && M <= 16) { /* one pass of up to 16 rows per panel */
        void *xt = pack_rows(x, M, fma ? K : K / 2);
        if (!xt) return 3;
        FOR_STREAMS(PT, 16, 1, PT, 0, TILE_CASES_16(tile16_bf16, xt, K, wp + p0 * K * 16, bias, y, N, p0 * 16, pf, fma))
        free(xt);
    } else {
        FOR_STREAMS(PT, MT, PT, PT, lead,
                    TILE_CASES_512(tile_bf16, (const char *)x + i0 * row, K, wp + p0 * K * 16, bias, y + i0 * N, N,
                                   p0 * 16, pf, fma))
    }
    return 0;
}
#endif

/* Whether bfloat16 runs as widened pairs on float32 FMAs (1) or on VDPBF16PS (0), for every row count of
 * this process. want 0 or 1 sets it; -1 returns it, chosen at the first call: FMAs where this CPU's float32
 * FMAs compute more than 1.25x the multiply-adds a second of its VDPBF16PS (peak_flops, one thread; a Xeon
 * with AMX: 168 against 81 GFLOP/s; on Zen 4 VDPBF16PS computes twice as much as the FMAs). Both compute
 * the chain of VDPBF16PS's pseudo-code; measured bit-identical on random layers (tests/test_fast_forward.py),
 * VDPBF16PS flushing subnormals to zero besides. Without AVX512-BF16 always 1 (the widened tiles of the variant). */
int trtlade_linear_bf16_by_fma(int want) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    static _Atomic int chosen = -1;
    if (want == 0 || want == 1) atomic_store(&chosen, want);
    if (atomic_load(&chosen) < 0) {
        float sink;
        double rate[2] = {0.0, 0.0}; /* the best of 3 alternated samples each: a preempted one is slower */
        for (int sample = 0; sample < 6; sample++) {
            const int dpbf16 = sample % 2;
            const double t0 = omp_get_wtime(), flops = (double)peak_flops(dpbf16, 200000, 1, &sink);
            const double r = flops / (omp_get_wtime() - t0);
            if (r > rate[dpbf16]) rate[dpbf16] = r;
        }
        int expected = -1;
        atomic_compare_exchange_strong(&chosen, &expected, rate[0] > 1.25 * rate[1]);
    }
    return atomic_load(&chosen);
#else
    (void)want;
    return 1;
#endif
}

/* ------------------------------------------------------------------ bfloat16 on AMX tiles (Intel Xeon with AMX-BF16)
 * TDPBF16PS multiplies a tile of up to 16 rows x 32 values of x by 16 pairs of k x 16 outputs of W (one 1 KB
 * block of the packed layout as it is: Wp[panel][k/2][16][2] is the pairs' layout the instruction reads) and
 * adds the 32 products of each output to its float32 sum in one instruction, 16 rows at once (the library's
 * probe, a 2-core Xeon with AMX: about 15x the multiply-adds a second of its float32 FMAs). Each output's result still depends only on its own row of x and the
 * weights, summed over blocks of 32 k in order, so a row has the same bits alone, among 15 others or beside
 * another sequence's rows: row-invariant, so Lookahead stays lossless on it. But the instruction rounds its 32
 * products its own way (measured: 12% of outputs equal the VDPBF16PS chain the other paths compute,
 * benchmarks/amx_bits.py), so a bfloat16 model on AMX gives other bits than on any other CPU class;
 * trtlade_linear_bf16_amx(0) keeps the chain (TRTLADE_AMX=0, docs/explanation/speed.md). Used where K is a
 * multiple of 32 (every layer of the models served; a layer of another K keeps the chain, whatever the rows,
 * so the choice never depends on the row count). A tile holds the call's rows up to 16 (a tile of one row gives
 * that row the bits it has in a tile of 16: tests/test_amx.py); outputs of N not a multiple of 16 are the
 * packing's zero rows, never stored. Each panel's weights are prefetched AMX_LEAD bytes ahead, and the threads
 * share the panels as FOR_STREAMS does (a range each, the idle taking from the back of the fullest). */
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__x86_64__) && defined(__linux__) &&                    \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define AMX_PATH 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define AMX_ROWS 16
#define AMX_PANELS 3 /* 3 sums, the rows and 3 blocks of weights: 7 of the 8 tiles */
/* Bytes ahead: without a prefetch the tiles waited on memory (one row 1.5x slower than the chain); 1 KB and 2 KB
 * into L1 ran a row at 0.97-1.06x the chain's speed, 1 KB into L2 at 0.90-1.01x (medians of in-process runs,
 * docs/results/2026-12-02-amx.md). */
#define AMX_LEAD 1024
typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} AmxConfig;

/* Loads this thread's tile configuration: tiles 0-3 (the sums and the rows) of `rows` rows, 4-6 (the weights) of
 * 16, each row 64 bytes; palette 1. */
__attribute__((target("amx-tile"))) static void amx_configure(int rows) {
    AmxConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) cfg.rows[t] = t <= 3 ? (uint8_t)rows : AMX_ROWS, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
}

/* Whether this CPU has AMX-BF16 and the OS lets this process use the tiles (Linux: asked once, arch_prctl). */
static int amx_usable(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 22) & 1) || !((d >> 24) & 1)) return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000u) != 0x60000u) return 0; /* XTILECFG and XTILEDATA state enabled */
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}

/* The tile's rows of x (row stride K, as configured: up to 16) by np <= AMX_PANELS panels of the group at wp,
 * all K: tiles 0-2 the sums, 3 the rows, 4-6 the weights. The sums stored to acc[np][16 rows][16] (float32). */
__attribute__((target("amx-tile,amx-bf16"))) static void amx_block(const uint16_t *x, int64_t K, const uint16_t *wp,
                                                                   float *acc, const int np) {
    const size_t panel = (size_t)K * 16, xstride = (size_t)K * 2;
    _tile_zero(0);
    if (np > 1) _tile_zero(1);
    if (np > 2) _tile_zero(2);
    const char *w0 = (const char *)wp;
    for (int64_t k = 0; k < K; k += 32) {
        for (int p = 0; p < np; p++) /* each panel's stream AMX_LEAD bytes ahead (the next block), into L1 */
            for (int l = 0; l < 16; l++)
                _mm_prefetch(w0 + 2 * ((size_t)p * panel + (size_t)k * 16) + AMX_LEAD + 64 * l, _MM_HINT_T0);
        _tile_loadd(3, x + k, xstride);
        _tile_loadd(4, wp + (size_t)k * 16, 64);
        _tile_dpbf16ps(0, 3, 4);
        if (np > 1) {
            _tile_loadd(5, wp + panel + (size_t)k * 16, 64);
            _tile_dpbf16ps(1, 3, 5);
        }
        if (np > 2) {
            _tile_loadd(6, wp + 2 * panel + (size_t)k * 16, 64);
            _tile_dpbf16ps(2, 3, 6);
        }
    }
    _tile_stored(0, acc, 64);
    if (np > 1) _tile_stored(1, acc + 256, 64);
    if (np > 2) _tile_stored(2, acc + 512, 64);
}

__attribute__((target("amx-tile,amx-bf16"))) static void amx_tiles(const uint16_t *xp, int64_t M, int64_t K,
                                                                   const uint16_t *wp, const float *bias, int64_t N,
                                                                   uint16_t *y, int threads) {
    const int64_t panels = (N + 15) / 16, groups = (panels + AMX_PANELS - 1) / AMX_PANELS;
    const int owners = threads > 0 ? threads : 1, tile_rows = M < AMX_ROWS ? (int)M : AMX_ROWS;
    _Atomic uint64_t ranges[owners]; /* FOR_STREAMS's schedule: a range of groups each, the idle take from the back */
    for (int t = 0; t < owners; t++)
        atomic_init(&ranges[t], (uint64_t)(groups * t / owners) | (uint64_t)(groups * (t + 1) / owners) << 32);
#pragma omp parallel num_threads(owners)
    {
        amx_configure(tile_rows);
        float acc[AMX_PANELS][AMX_ROWS][16] __attribute__((aligned(64)));
        int range = omp_get_thread_num() % owners, from_back = 0;
        for (;;) {
            int64_t hi = 0, g = claim_group(&ranges[range], from_back, &hi);
            if (g < 0) {
                range = fullest_range(ranges, owners);
                if (range < 0) break;
                from_back = range != omp_get_thread_num();
                continue;
            }
            const int64_t p0 = g * AMX_PANELS, np = panels - p0 < AMX_PANELS ? panels - p0 : AMX_PANELS;
            for (int64_t i0 = 0; i0 < M; i0 += tile_rows) {
                const int m = (int)(M - i0 < tile_rows ? M - i0 : tile_rows);
                amx_block(xp + i0 * K, K, wp + p0 * K * 16, &acc[0][0][0], (int)np);
                for (int p = 0; p < np; p++)
                    store_bf16_panel(y + i0 * N, N, (p0 + p) * 16, bias, (const __m512 *)acc[p], 1, m);
            }
        }
        _tile_release();
    }
}
#endif

#if defined(AMX_PATH)
/* The tiles' rate for the roofline: `iters` rounds of AMX_PANELS independent TDPBF16PS of full tiles (16 rows x
 * 32 values x 16 outputs: 8192 multiply-adds each) on every thread, as amx_block runs them from registers. */
__attribute__((target("amx-tile,amx-bf16"))) static int64_t amx_peak_flops(int64_t iters, int threads, float *sink) {
    const int owners = threads > 0 ? threads : 1;
    float total = 0.0f;
#pragma omp parallel num_threads(owners) reduction(+ : total)
    {
        amx_configure(AMX_ROWS);
        float out[AMX_ROWS][16] __attribute__((aligned(64)));
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        _tile_zero(4);
        for (int64_t r = 0; r < iters; r++) {
            _tile_dpbf16ps(0, 3, 4);
            _tile_dpbf16ps(1, 3, 4);
            _tile_dpbf16ps(2, 3, 4);
        }
        _tile_stored(0, out, 64);
        total += out[0][0];
        _tile_release();
    }
    if (sink) *sink = total;
    return (int64_t)2 * 8192 * AMX_PANELS * iters * owners;
}
#endif

/* Whether bfloat16 runs on AMX tiles (1) or computes the chain of every other CPU class (0), for every call of
 * this process. want 0 or 1 sets it (1 only where amx_usable); -1 returns it, chosen at the first call: 1 where
 * this CPU has AMX-BF16 and the OS grants the tiles. Without AMX in the variant (or the compiler), always 0. */
int trtlade_linear_bf16_amx(int want) {
#if defined(AMX_PATH)
    static _Atomic int usable = -1, chosen = -1;
    if (atomic_load(&usable) < 0) atomic_store(&usable, amx_usable());
    if (want == 0 || want == 1) atomic_store(&chosen, want && atomic_load(&usable));
    if (atomic_load(&chosen) < 0) {
        int expected = -1;
        atomic_compare_exchange_strong(&chosen, &expected, atomic_load(&usable));
    }
    return atomic_load(&chosen);
#else
    (void)want;
    return 0;
#endif
}

#if defined(AMX_PATH)
/* The AMX path of trtlade_linear_bf16: up to 16 rows, or a multiple of 16, read as they are (tiles of M rows, or
 * of 16); other counts copied once, padded with zero rows to a multiple of 16 (the padded rows' outputs never
 * stored). */
static int linear_bf16_amx(const uint16_t *x, int64_t M, int64_t K, const uint16_t *wp, const float *bias, int64_t N,
                           uint16_t *y, int threads) {
    if (M <= AMX_ROWS || M % AMX_ROWS == 0) {
        amx_tiles(x, M, K, wp, bias, N, y, threads);
        return 0;
    }
    const int64_t padded = (M + AMX_ROWS - 1) / AMX_ROWS * AMX_ROWS;
    uint16_t *xp = calloc((size_t)(padded * K), sizeof(uint16_t));
    if (!xp) return 3;
    memcpy(xp, x, sizeof(uint16_t) * (size_t)(M * K));
    amx_tiles(xp, M, K, wp, bias, N, y, threads);
    free(xp);
    return 0;
}
#endif

/* bfloat16 x and packed W (as uint16), float32 bias, bfloat16 y; K even. Without AVX512-BF16 the rows of
 * x are widened to float32 once per call (exact), so a tile broadcasts each value with one load. */
int trtlade_linear_bf16(const uint16_t *x, int64_t M, int64_t K, const uint16_t *wp, const float *bias, int64_t N,
                        uint16_t *y, int threads) {
    if (M <= 0 || K <= 0 || N <= 0 || K % 2) return M < 0 || K <= 0 || N <= 0 || K % 2;
#if defined(AMX_PATH)
    if (K % 32 == 0 && trtlade_linear_bf16_amx(-1)) return linear_bf16_amx(x, M, K, wp, bias, N, y, threads);
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (trtlade_linear_bf16_by_fma(-1) == 0) return bf16_tiles(x, M, K, wp, bias, N, y, threads, 0);
    float *xw = malloc(sizeof(float) * (size_t)(M * K)); /* widened once per call (exact) */
    if (!xw) return 3;
    for (int64_t i = 0; i < M * K; i++) xw[i] = bf16_to_f(x[i]);
    const int failed = bf16_tiles(xw, M, K, wp, bias, N, y, threads, 1);
    free(xw);
    return failed;
#else
    float *xf = malloc(sizeof(float) * (size_t)(M * K));
    if (!xf) return 3;
    for (int64_t i = 0; i < M * K; i++) xf[i] = bf16_to_f(x[i]);
#if defined(AVX2_BF16_PATH)
    /* Tiles of 4 rows, but the last 6 rows as 3 + 3, not 4 + 2 (a tile, then a pair over 2 panels: 6 rows cost as
     * much as 8). Linear layers of SmolLM2 alone on a 2-core Zen 3 (benchmarks/linear_ab.py, 9-15
     * repeats, medians): 1.06-1.12x faster at 6 rows, 1.02x at 10 and 14, the same bits
     * (docs/results/2026-12-05-zen3-bfloat16.md). Two rows alone take a pair over groups of 3 panels
     * (pair_bf16_avx2: 12 chains): BF16_AVX2_GROUP, BF16_AVX2_PANELS. */
    FOR_STREAMS(BF16_AVX2_GROUP(M), BF16_AVX2_ROWS(M, i0), BF16_AVX2_PANELS(M, m), 1, 0,
                TILE_CASES_AVX2(row_bf16_avx2, pair_bf16_avx2, tile_bf16_avx2, TILE_CASES_4, xf + i0 * K, K,
                                wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16, pf))
#else
    FOR_TILES(4, 4, 1, TILE_CASES_4(tile_bf16_portable, xf + i0 * K, K, wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16))
#endif
    free(xf);
#endif
    return 0;
}

/* ------------------------------------------------------------------ rows of W, read back */
/* Rows ids[0..n) of W [N, K] from its packed copy into out [n, K] (a tied embedding reads the LM head's
 * weight: no second copy of the vocabulary matrix). dtype 0: float32 Wp[panel][k][16]; 1: bfloat16
 * Wp[panel][k/2][16][2]. A copy: the values are W's. Returns 1 for an id outside [0, N). */
int trtlade_packed_rows(const void *wp, int64_t K, int64_t N, int dtype, const int64_t *ids, int64_t n, void *out) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= N) return 1;
    for (int64_t i = 0; i < n; i++) {
        const int64_t panel = ids[i] / 16, lane = ids[i] % 16;
        if (dtype == 0) {
            const float *src = (const float *)wp + panel * K * 16 + lane;
            float *dst = (float *)out + i * K;
            for (int64_t k = 0; k < K; k++) dst[k] = src[k * 16];
        } else {
            const uint16_t *src = (const uint16_t *)wp + panel * K * 16 + lane * 2;
            uint16_t *dst = (uint16_t *)out + i * K;
            for (int64_t k = 0; k < K; k += 2) {
                dst[k] = src[k * 16];
                dst[k + 1] = src[k * 16 + 1];
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ the roofline's other side */
/* The multiply-add rate this variant's linear tiles can reach at best, for the roofline (trtlade/reference/
 * floor.py): `threads` threads each run `iters` rounds of CHAINS independent accumulator chains of the
 * instruction the variant's tiles use (float32: the widest FMA; bfloat16: VDPBF16PS with AVX512-BF16, else
 * the float32 FMA the widened pairs run, one per weight as well). Returns the flops done (2 per
 * multiply-add), to divide by the time the caller measured; the sum of the chains is stored in *sink so
 * that no chain can be dropped. */
#define CHAINS 12
static int64_t peak_flops(int dpbf16, int64_t iters, int threads, float *sink);

int64_t trtlade_peak_flops(int dtype, int64_t iters, int threads, float *sink) {
#if defined(AMX_PATH)
    if (dtype == 1 && trtlade_linear_bf16_amx(-1) == 1) return amx_peak_flops(iters, threads, sink);
#endif
    return peak_flops(dtype == 1 && trtlade_linear_bf16_by_fma(-1) == 0, iters, threads, sink);
}

/* dpbf16: VDPBF16PS's rate (32 multiply-adds an instruction), else the widest float32 FMA's. */
static int64_t peak_flops(int dpbf16, int64_t iters, int threads, float *sink) {
    (void)dpbf16;
    const int owners = threads > 0 ? threads : 1;
    float total = 0.0f;
#pragma omp parallel num_threads(owners) reduction(+ : total)
    {
        volatile float seed = 1.0f;
        const float w = seed * 0.999f, xv = seed * 1.001f;
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
        if (dpbf16) {
            __m512 acc[CHAINS];
            const __m512i wv = _mm512_set1_epi32(0x3f7f3f7f), xb = _mm512_set1_epi32(0x3f803f80);
            for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps(w);
            for (int64_t r = 0; r < iters; r++)
                for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], (__m512bh)wv, (__m512bh)xb);
            for (int c = 0; c < CHAINS; c++) total += _mm512_reduce_add_ps(acc[c]);
        } else
#endif
        {
#if defined(__AVX512F__)
            __m512 acc[CHAINS];
            const __m512 wv = _mm512_set1_ps(w), xb = _mm512_set1_ps(xv);
            for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_setzero_ps();
            for (int64_t r = 0; r < iters; r++)
                for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(wv, xb, acc[c]);
            for (int c = 0; c < CHAINS; c++) total += _mm512_reduce_add_ps(acc[c]);
#elif defined(__AVX2__) && defined(__FMA__)
            __m256 acc[CHAINS];
            const __m256 wv = _mm256_set1_ps(w), xb = _mm256_set1_ps(xv);
            for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_setzero_ps();
            for (int64_t r = 0; r < iters; r++)
                for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_fmadd_ps(wv, xb, acc[c]);
            float out[8];
            for (int c = 0; c < CHAINS; c++) {
                _mm256_storeu_ps(out, acc[c]);
                for (int l = 0; l < 8; l++) total += out[l];
            }
#else
            float acc[CHAINS][16] = {{0}};
            for (int64_t r = 0; r < iters; r++)
                for (int c = 0; c < CHAINS; c++)
                    for (int l = 0; l < 16; l++) acc[c][l] = fmaf(w, xv, acc[c][l]);
            for (int c = 0; c < CHAINS; c++)
                for (int l = 0; l < 16; l++) total += acc[c][l];
#endif
        }
    }
    if (sink) *sink = total;
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    const int64_t lanes = dpbf16 ? 32 : 16; /* VDPBF16PS: 16 lanes x a pair */
#elif defined(__AVX512F__)
    const int64_t lanes = 16;
#elif defined(__AVX2__) && defined(__FMA__)
    const int64_t lanes = 8;
#else
    const int64_t lanes = 16;
#endif
    return 2 * lanes * CHAINS * iters * owners;
}
