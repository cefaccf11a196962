/* trtlade: which of the native library's CPU variants this CPU can execute, read with CPUID.
 *
 * Compiled once, for the baseline of the architecture (no target flags), next to every variant of the
 * kernels; trtlade/reference/native/cpu.py turns the bits into the variant it loads. CPUID, not
 * /proc/cpuinfo: under an emulator (qemu-x86_64 -cpu Haswell) CPUID answers for the emulated CPU while
 * /proc/cpuinfo still shows the host's. The OS must also save the wider registers (XGETBV): a CPU with
 * AVX-512 under an OS that does not enable it cannot run the AVX-512 variant.
 *
 *   bit 1: AVX2 + FMA + F16C, YMM state enabled          -> the "avx2" variant
 *   bit 2: bit 1 and AVX-512 F/BW/VL/DQ, ZMM state       -> "avx512"
 *   bit 4: bit 2 and AVX512-BF16                         -> "avx512bf16"
 * Other architectures answer 0: the "portable" variant, which every CPU runs.
 */
#include <stdint.h>
#if defined(__x86_64__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

int trtlade_cpu_features(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(osxsave && avx)) return 0;
    const uint64_t xcr0 = xgetbv0();
    const int ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const int avx2 = (b >> 5) & 1, f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    unsigned a1 = 0, b1, c1, d1;
    const int bf16 = __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) ? (int)((a1 >> 5) & 1) : 0;
    int bits = 0;
    if (ymm && avx2 && fma && f16c) bits |= 1;
    if ((bits & 1) && zmm && f && dq && bw && vl) bits |= 2;
    if ((bits & 2) && bf16) bits |= 4;
    return bits;
#else
    return 0;
#endif
}
