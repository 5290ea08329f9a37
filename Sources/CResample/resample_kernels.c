#include "resample_kernels.h"

#include <string.h>

#if defined(__x86_64__)

#include <immintrin.h>

#define ER_AVX2 __attribute__((target("avx2")))
#define ER_INLINE static inline __attribute__((always_inline))

int er_has_avx2(void) {
    // Checks the CPU's flag and that the operating system saves the 256-bit registers.
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}

// Sixteen samples as 16-bit lanes.
ER_AVX2 ER_INLINE __m256i load16(const uint8_t *p, int u8) {
    return u8 ? _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_si256((const __m256i *)p);
}

// Sums rounded half up and shifted down; the caller clamps or packs.
ER_AVX2 ER_INLINE __m256i round256(__m256i sums, int shift) {
    return _mm256_sra_epi32(_mm256_add_epi32(sums, _mm256_set1_epi32(1 << (shift - 1))), _mm_cvtsi32_si128(shift));
}

ER_INLINE int32_t clamp_to(int32_t value, int u8) {
    int32_t low = u8 ? 0 : INT16_MIN, high = u8 ? 255 : INT16_MAX;
    return value < low ? low : value > high ? high : value;
}

ER_AVX2 ER_INLINE void vertical(const uint8_t *input, int in_u8, ptrdiff_t stride, int taps, const int16_t *pairs,
                                uint8_t *output, int out_u8, ptrdiff_t count, int shift) {
    const ptrdiff_t in_size = in_u8 ? 1 : 2, out_size = out_u8 ? 1 : 2;
    const ptrdiff_t stride_bytes = stride * in_size;
    ptrdiff_t x = 0;
    for (; x + 16 <= count; x += 16) {
        // Lanes 0…3 | 8…11 and 4…7 | 12…15 of the row: the 256-bit unpacks work per half.
        __m256i low = _mm256_setzero_si256(), high = _mm256_setzero_si256();
        const uint8_t *row = input + x * in_size;
        for (int pair = 0; pair < taps / 2; pair++) {
            __m256i w = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(pairs + 8 * pair)));
            __m256i a = load16(row, in_u8), b = load16(row + stride_bytes, in_u8);
            low = _mm256_add_epi32(low, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), w));
            high = _mm256_add_epi32(high, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), w));
            row += 2 * stride_bytes;
        }
        if (taps & 1) {
            // The last row pairs with itself; its partner's weight is zero.
            __m256i w = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(pairs + 8 * (taps / 2))));
            __m256i a = load16(row, in_u8);
            low = _mm256_add_epi32(low, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, a), w));
            high = _mm256_add_epi32(high, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, a), w));
        }
        // The pack undoes the unpacks' order: samples 0…15 in order, saturated to 16 bits
        // (the intermediate's range is inside them, see ResampleSample).
        __m256i packed = _mm256_packs_epi32(round256(low, shift), round256(high, shift));
        if (out_u8) {
            __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1));
            _mm_storeu_si128((__m128i *)(output + x), bytes);
        } else {
            _mm256_storeu_si256((__m256i *)(output + 2 * x), packed);
        }
    }
    // The last few samples of the row, one at a time.
    for (; x < count; x++) {
        int32_t sum = (int32_t)1 << (shift - 1);
        const uint8_t *row = input + x * in_size;
        for (int k = 0; k < taps; k++) {
            int32_t sample = in_u8 ? *row : *(const int16_t *)row;
            sum += sample * pairs[8 * (k / 2) + k % 2];
            row += stride_bytes;
        }
        int32_t value = clamp_to(sum >> shift, out_u8);
        if (out_u8) output[x] = (uint8_t)value;
        else { int16_t narrow = (int16_t)value; memcpy(output + out_size * x, &narrow, 2); }
    }
}

ER_AVX2 ER_INLINE void horizontal(int channels, const uint8_t *input, int in_u8, const ptrdiff_t *starts,
                                  ptrdiff_t count, const int16_t *weights, ptrdiff_t groups, uint8_t *output,
                                  int out_u8, int shift) {
    const ptrdiff_t in_size = in_u8 ? 1 : 2, out_size = out_u8 ? 1 : 2;
    // Samples between a step's two runs: `groupPixels` whole pixels.
    const ptrdiff_t run = (channels == 1 ? 16 : channels == 3 ? 5 : 4) * channels * in_size;
    const int16_t *w = weights;
    uint8_t *pixel = output;
    for (ptrdiff_t i = 0; i < count; i++) {
        const uint8_t *samples = input + starts[i] * channels * in_size;
        __m256i first = _mm256_setzero_si256(), second = _mm256_setzero_si256();
        for (ptrdiff_t g = 0; g < groups; g++) {
            __m256i w01 = _mm256_loadu_si256((const __m256i *)w), w23 = _mm256_loadu_si256((const __m256i *)(w + 16));
            if (in_u8) {
                // Bytes interleaved, then widened: pairs 0…7 and 8…15 in order.
                __m128i a = _mm_loadu_si128((const __m128i *)samples);
                __m128i b = _mm_loadu_si128((const __m128i *)(samples + run));
                first = _mm256_add_epi32(first, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b)), w01));
                second = _mm256_add_epi32(second, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b)), w23));
            } else {
                // Pairs 0…3 | 8…11 and 4…7 | 12…15: their weights are regrouped to match.
                __m256i a = _mm256_loadu_si256((const __m256i *)samples);
                __m256i b = _mm256_loadu_si256((const __m256i *)(samples + run));
                __m256i w02 = _mm256_permute2x128_si256(w01, w23, 0x20);
                __m256i w13 = _mm256_permute2x128_si256(w01, w23, 0x31);
                first = _mm256_add_epi32(first, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), w02));
                second = _mm256_add_epi32(second, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), w13));
            }
            samples += 2 * run;
            w += 32;
        }
        // Lanes 0…3, 4…7, 8…11 and 12…15 of the step's sums.
        __m128i q0 = _mm256_castsi256_si128(first), q3 = _mm256_extracti128_si256(second, 1), q1, q2;
        if (in_u8) {
            q1 = _mm256_extracti128_si256(first, 1);
            q2 = _mm256_castsi256_si128(second);
        } else {
            q1 = _mm256_castsi256_si128(second);
            q2 = _mm256_extracti128_si256(first, 1);
        }
        __m128i sums;
        if (channels == 1) {
            __m128i four = _mm_add_epi32(_mm_add_epi32(q0, q1), _mm_add_epi32(q2, q3));
            __m128i two = _mm_add_epi32(four, _mm_shuffle_epi32(four, _MM_SHUFFLE(1, 0, 3, 2)));
            sums = _mm_add_epi32(two, _mm_shuffle_epi32(two, _MM_SHUFFLE(2, 3, 0, 1)));
        } else if (channels == 3) {
            // Lane l holds channel l % 3: each quarter rotated onto lanes 0, 1, 2, and the
            // lanes that land in slot 3 (3, 7, 11; lane 15 weighs zero) added separately.
            __m128i aligned = _mm_add_epi32(_mm_add_epi32(q0, q3),
                                            _mm_add_epi32(_mm_shuffle_epi32(q1, _MM_SHUFFLE(3, 1, 0, 2)),
                                                          _mm_shuffle_epi32(q2, _MM_SHUFFLE(3, 0, 2, 1))));
            __m128i threes = _mm_unpackhi_epi64(_mm_unpackhi_epi32(q0, q1), _mm_srli_si128(q2, 4));
            sums = _mm_add_epi32(aligned, threes);
        } else {
            sums = _mm_add_epi32(_mm_add_epi32(q0, q1), _mm_add_epi32(q2, q3));
        }
        sums = _mm_sra_epi32(_mm_add_epi32(sums, _mm_set1_epi32(1 << (shift - 1))), _mm_cvtsi32_si128(shift));
        __m128i narrow = _mm_packs_epi32(sums, sums);
        if (out_u8) {
            uint32_t bytes = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(narrow, narrow));
            memcpy(pixel, &bytes, (size_t)channels);
        } else {
            uint64_t lanes = (uint64_t)_mm_cvtsi128_si64(narrow);
            memcpy(pixel, &lanes, (size_t)channels * 2);
        }
        pixel += channels * out_size;
    }
}

// Each combination compiled on its own, with its constants folded in.
#define ER_VERTICAL(IN, OUT) \
    vertical((const uint8_t *)input, IN, input_stride, taps, pairs, (uint8_t *)output, OUT, count, shift)

ER_AVX2 void er_vertical_avx2(const void *input, int input_u8, ptrdiff_t input_stride, int taps,
                              const int16_t *pairs, void *output, int output_u8, ptrdiff_t count, int shift) {
    if (input_u8) {
        if (output_u8) ER_VERTICAL(1, 1); else ER_VERTICAL(1, 0);
    } else {
        if (output_u8) ER_VERTICAL(0, 1); else ER_VERTICAL(0, 0);
    }
}

#define ER_HORIZONTAL(CHANNELS, IN, OUT) \
    horizontal(CHANNELS, (const uint8_t *)input, IN, starts, count, weights, group_count, (uint8_t *)output, OUT, shift)
#define ER_HORIZONTAL_CHANNELS(IN, OUT) \
    switch (channels) { \
    case 1: ER_HORIZONTAL(1, IN, OUT); break; \
    case 3: ER_HORIZONTAL(3, IN, OUT); break; \
    default: ER_HORIZONTAL(4, IN, OUT); break; \
    }

ER_AVX2 void er_horizontal_avx2(int channels, const void *input, int input_u8, const ptrdiff_t *starts,
                                ptrdiff_t count, const int16_t *weights, ptrdiff_t group_count, void *output,
                                int output_u8, int shift) {
    if (input_u8) {
        if (output_u8) { ER_HORIZONTAL_CHANNELS(1, 1) } else { ER_HORIZONTAL_CHANNELS(1, 0) }
    } else {
        if (output_u8) { ER_HORIZONTAL_CHANNELS(0, 1) } else { ER_HORIZONTAL_CHANNELS(0, 0) }
    }
}

#else

// Not an x86-64 CPU: the portable kernels run.
int er_has_avx2(void) { return 0; }

void er_vertical_avx2(const void *input, int input_u8, ptrdiff_t input_stride, int taps,
                      const int16_t *pairs, void *output, int output_u8, ptrdiff_t count, int shift) {
    (void)input; (void)input_u8; (void)input_stride; (void)taps; (void)pairs; (void)output; (void)output_u8;
    (void)count; (void)shift;
    __builtin_trap();
}

void er_horizontal_avx2(int channels, const void *input, int input_u8, const ptrdiff_t *starts, ptrdiff_t count,
                        const int16_t *weights, ptrdiff_t group_count, void *output, int output_u8, int shift) {
    (void)channels; (void)input; (void)input_u8; (void)starts; (void)count; (void)weights; (void)group_count;
    (void)output; (void)output_u8; (void)shift;
    __builtin_trap();
}

#endif
