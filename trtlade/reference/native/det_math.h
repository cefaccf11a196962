/* trtlade: exp and tanh from float arithmetic only, the same bits on every CPU and architecture.
 *
 * libm's expf/tanhf are not one function: glibc picks an FMA or a plain version by CPU (ifunc), and with
 * -ffast-math the compiler calls a vector library whose lanes round otherwise. These use +, -, * and
 * bit operations in a fixed order, in files compiled with -ffp-contract=off and without -ffast-math, so
 * a vectorised loop and a scalar one, AVX-512, AVX2, SSE2 and NEON give the same bits.
 *
 * Worked example: exp_det(1.0f) = 2.7182817f (expf: 2.7182817f), exp_det(-1.0f) = 0.36787945f.
 */
#ifndef TRTLADE_DET_MATH_H
#define TRTLADE_DET_MATH_H
#include <stdint.h>
#include <string.h>

/* exp(x) from float arithmetic only (no libm call), so that the compiler may vectorise a loop of it
 * and every lane still computes the scalar's bits (the file is compiled without -ffast-math): range
 * reduction x = n ln2 + r (Cody-Waite, two constants), Cephes' degree-6 polynomial for exp(r), times 2^n
 * built in the exponent bits. About 1 ulp; x is clamped to [-87.3, 88.7]. */
static inline __attribute__((always_inline)) float exp_det(float x) {
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.7f ? 88.7f : x;
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * (r * r) + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

/* tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|): within a few float32 ulps of tanhf away from 0,
 * about 3e-8 absolute near 0 (attention soft-capping multiplies it by the cap). */
static inline __attribute__((always_inline)) float tanh_det(float x) {
    const float a = x < 0.0f ? -x : x;
    const float e = exp_det(-2.0f * a);
    const float t = (1.0f - e) / (1.0f + e);
    return x < 0.0f ? -t : t;
}
#endif
