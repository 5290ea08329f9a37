// The resampler's two inner loops for CPUs with AVX2, chosen at run time (the Swift package
// is built for baseline x86-64, whose widest integer multiply-add is SSE2's): the same
// arithmetic as the portable kernels in Resampler+Kernels.swift, 16 lanes a step instead of
// 8, on the same weight tables, and bit for bit the same results.
//
// Samples are 8-bit (`u8` true) or the 16-bit intermediate; weights are 14-bit fixed point,
// sums are 32-bit and rounded half up by `shift` bits; an 8-bit output is clamped to 0…255.
// The caller has checked every pointer and length: these functions read and write exactly
// what the portable kernels do, and never fail. On other CPUs `er_has_avx2` is 0 and the
// kernels must not be called.
#ifndef ENLARGER_CRESAMPLE_KERNELS_H
#define ENLARGER_CRESAMPLE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

// 1 when this CPU (and its operating system) runs AVX2 code, else 0.
int er_has_avx2(void);

// One output row of the vertical axis: `count` samples, each the weighted sum of the same
// sample in `taps` input rows `input_stride` samples apart from `input`. `pairs` holds
// (taps + 1) / 2 vectors of 8 weights: two consecutive rows' weights, repeated four times
// (an odd last row pairs with a zero weight).
void er_vertical_avx2(const void *input, int input_u8, ptrdiff_t input_stride, int taps,
                      const int16_t *pairs, void *output, int output_u8, ptrdiff_t count, int shift);

// One output row of the horizontal axis: `count` pixels of `channels` (1, 3 or 4) samples.
// Output pixel `i` reads from input pixel `starts[i]`, `group_count` steps of 32 weights
// each (see HorizontalTaps in Resampler+Kernels.swift for their layout).
void er_horizontal_avx2(int channels, const void *input, int input_u8, const ptrdiff_t *starts, ptrdiff_t count,
                        const int16_t *weights, ptrdiff_t group_count, void *output, int output_u8, int shift);

#endif
