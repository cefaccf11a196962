/* trtlade: the kernels one source calls in another (the body calls the linear layers and the attention),
 * and the tests' C harness (tests/native/bits.c) calls. Each variant's build renames them together
 * (trtlade/reference/native/build.py), so a variant's body calls its own kernels. */
#ifndef TRTLADE_KERNELS_H
#define TRTLADE_KERNELS_H
#include <stdint.h>

int trtlade_linear_f32(const float *x, int64_t M, int64_t K, const float *wp, const float *bias, int64_t N, float *y,
                       int threads);
int trtlade_linear_bf16(const uint16_t *x, int64_t M, int64_t K, const uint16_t *wp, const float *bias, int64_t N,
                        uint16_t *y, int threads);
int trtlade_row_attention(const float *q, int64_t rows, int64_t heads, int64_t dim, const void *k, const void *v,
                          int64_t kv_heads, int64_t capacity, const int64_t *slot, const int64_t *committed,
                          const int64_t *pos, const int64_t *path_ptr, const int64_t *path_idx,
                          const int64_t *path_pos, int64_t window, float scale, float softcap, float *out,
                          int kv_bf16);
int trtlade_argmax_rows(const float *x, int64_t rows, int64_t n, int64_t *out);
int trtlade_add_rms_norm(void *h, const void *a, int64_t rows, int64_t dim, const void *weight, float eps, void *out,
                         int dtype);
int trtlade_packed_rows(const void *wp, int64_t K, int64_t N, int dtype, const int64_t *ids, int64_t n, void *out);
#endif
