// The resampler's widening of 16-bit samples and weights to 32 bits, always inlined.
//
// `pairSums` needs LLVM to see the widening, the multiply and the pairwise add together to
// emit one `pmaddwd`. The standard library's `SIMD8.init(truncatingIfNeeded:)` is a generic
// loop over the lanes marked `@inlinable`, which leaves inlining to the optimiser: a plain
// release build inlined it, but a build with `-enable-testing` (the tests' and `scripts/run`'s
// configuration, see `scripts/build`) kept it out of line, a call and a scalar loop per eight
// lanes, and the resampler ran at half speed. The same loop here, always inlined, gives both
// configurations the plain build's speed (the other lane conversions of the kernels were
// inlined either way and are left to the standard library, whose form LLVM shuffles best).

extension SIMD8 where Scalar: FixedWidthInteger {
    @inline(__always)
    init<Other: FixedWidthInteger & SIMDScalar>(truncatingLanes other: SIMD8<Other>) {
        self.init()
        for i in indices { self[i] = Scalar(truncatingIfNeeded: other[i]) }
    }
}
