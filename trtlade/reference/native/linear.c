/* trtlade: the reference engine's linear layers, y = x W^T + b, streaming the weights at memory speed.
 *
 * Why its own: a decode step of a small batch reads every weight once and is bound by memory, and
 * oneDNN's packed GEMM reached about 2/3 of the bandwidth of a plain torch.sum on the hosts of this
 * project with one row (docs/reference-engine.md, "Where a step's time goes"). This kernel streams a
 * pre-packed weight once per call, whatever the number of rows, on every OpenMP thread.
 *
 * Row-invariant by construction: output (i, n) is ONE chain of fused multiply-adds over k = 0, 1, ...,
 * K-1 in that order (bf16: one VDPBF16PS per pair k, k+1, in order), then the bias. The tiling (how many
 * rows and outputs a tile holds) and the threads (which outputs each computes) never change that chain,
 * so a row's result has the same bits alone, among 63 others, or beside another sequence's rows.
 *
 * Packed layout (see trtlade/reference/native/__init__.py, pack_weight): outputs in panels of 16,
 * float32 Wp[panel][k][16]; bfloat16 Wp[panel][k/2][16][2] (the pair of k's VDPBF16PS takes). N is
 * padded to a multiple of 16 with zero rows; the padded outputs are never stored.
 *
 * Worked example (K = 2, N = 16, one row x = [1, 2]): panel 0 holds W[0..15][0] then W[0..15][1];
 * acc = 0; acc = fma(Wp[0][0][:], 1, acc); acc = fma(Wp[0][1][:], 2, acc); y[n] = acc[n] + b[n].
 *
 * Built only where the compiler targets AVX-512 (float32) and AVX512-BF16 (bfloat16): trtlade_linear_caps
 * says which; the engine keeps oneDNN for what is missing.
 */
#include <stdint.h>
#include <string.h>
#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define CAP_F32 1
#define CAP_BF16 2
#define MT 8 /* rows per tile */
#define PT 3 /* panels of 16 outputs per tile: MT * PT = 24 accumulators */

int trtlade_linear_caps(void) {
    int caps = 0;
#if defined(__AVX512F__)
    caps |= CAP_F32;
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    caps |= CAP_BF16;
#endif
    return caps;
}

#if defined(__AVX512F__)
/* Store one tile row's panels: the last panel may be partial (N not a multiple of 16). */
static inline __mmask16 tail_mask(int64_t n0, int64_t N) {
    int64_t left = N - n0;
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* m rows (<= MT) x np panels (<= PT): m and np are compile-time constants in each instantiation, so
 * the accumulators stay in registers; every instantiation runs the same chain per output. */
static inline __attribute__((always_inline)) void tile_f32(const float *x, int64_t K, const float *wp,
                                                          const float *bias, float *y, int64_t N, int64_t n0,
                                                          const int m, const int np) {
    __m512 acc[MT][PT];
    for (int i = 0; i < m; i++)
        for (int p = 0; p < np; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m512 w[PT];
        for (int p = 0; p < np; p++) w[p] = _mm512_loadu_ps(wp + ((size_t)p * K + k) * 16);
        for (int i = 0; i < m; i++) {
            __m512 xb = _mm512_set1_ps(x[(size_t)i * K + k]);
            for (int p = 0; p < np; p++) acc[i][p] = _mm512_fmadd_ps(w[p], xb, acc[i][p]);
        }
    }
    for (int p = 0; p < np; p++) {
        int64_t at = n0 + 16 * p;
        __mmask16 mask = tail_mask(at, N);
        __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + at) : _mm512_setzero_ps();
        for (int i = 0; i < m; i++) _mm512_mask_storeu_ps(y + (size_t)i * N + at, mask, _mm512_add_ps(acc[i][p], b));
    }
}

#define TILE_CASES(FN, ...)                                                                                   \
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
#endif

/* The panels in groups of PT, handed out one group at a time to whichever thread is free (a thread
 * that the OS gives to another process for a while does not hold the others up); each group runs every
 * row tile while its weights stay in the L2 cache. Which thread computes a group never changes an
 * output's chain, so the bits do not depend on the schedule. */
#define FOR_TILES(BODY)                                                                                       \
    const int64_t panels = (N + 15) / 16, groups = (panels + PT - 1) / PT;                                    \
    _Pragma("omp parallel for schedule(dynamic, 1) num_threads(threads)")                                     \
    for (int64_t g = 0; g < groups; g++) {                                                                    \
        const int64_t p0 = g * PT;                                                                            \
        const int np = (int)(panels - p0 < PT ? panels - p0 : PT);                                            \
        for (int64_t i0 = 0; i0 < M; i0 += MT) {                                                              \
            const int m = (int)(M - i0 < MT ? M - i0 : MT);                                                   \
            BODY                                                                                              \
        }                                                                                                     \
    }

int trtlade_linear_f32(const float *x, int64_t M, int64_t K, const float *wp, const float *bias, int64_t N,
                       float *y, int threads) {
#if defined(__AVX512F__)
    if (M <= 0 || K <= 0 || N <= 0) return M < 0 || K <= 0 || N <= 0;
    FOR_TILES(TILE_CASES(tile_f32, x + i0 * K, K, wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16))
    return 0;
#else
    (void)x; (void)M; (void)K; (void)wp; (void)bias; (void)N; (void)y; (void)threads;
    return 2;
#endif
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
static inline __attribute__((always_inline)) void tile_bf16(const uint16_t *x, int64_t K, const uint16_t *wp,
                                                           const float *bias, uint16_t *y, int64_t N, int64_t n0,
                                                           const int m, const int np) {
    __m512 acc[MT][PT];
    const int64_t K2 = K / 2;
    for (int i = 0; i < m; i++)
        for (int p = 0; p < np; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K2; k++) {
        __m512i w[PT];
        for (int p = 0; p < np; p++) w[p] = _mm512_loadu_si512((const void *)(wp + ((size_t)p * K2 + k) * 32));
        for (int i = 0; i < m; i++) {
            int32_t pair;
            memcpy(&pair, x + (size_t)i * K + 2 * k, sizeof pair);
            __m512i xb = _mm512_set1_epi32(pair);
            for (int p = 0; p < np; p++)
                acc[i][p] = _mm512_dpbf16_ps(acc[i][p], (__m512bh)w[p], (__m512bh)xb);
        }
    }
    for (int p = 0; p < np; p++) {
        int64_t at = n0 + 16 * p;
        __mmask16 mask = tail_mask(at, N);
        __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + at) : _mm512_setzero_ps();
        for (int i = 0; i < m; i++) {
            __m256bh out = _mm512_cvtneps_pbh(_mm512_add_ps(acc[i][p], b)); /* round to nearest even */
            _mm256_mask_storeu_epi16(y + (size_t)i * N + at, mask, (__m256i)out);
        }
    }
}
#endif

/* bfloat16 x and packed W (as uint16), float32 bias, bfloat16 y; K even. */
int trtlade_linear_bf16(const uint16_t *x, int64_t M, int64_t K, const uint16_t *wp, const float *bias, int64_t N,
                        uint16_t *y, int threads) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    if (M <= 0 || K <= 0 || N <= 0 || K % 2) return M < 0 || K <= 0 || N <= 0 || K % 2;
    FOR_TILES(TILE_CASES(tile_bf16, x + i0 * K, K, wp + p0 * K * 16, bias, y + i0 * N, N, p0 * 16))
    return 0;
#else
    (void)x; (void)M; (void)K; (void)wp; (void)bias; (void)N; (void)y; (void)threads;
    return 2;
#endif
}
