import ImageModel

// A Submit's variants (VARIANTS in client.proto): several outputs from one decode. The broker
// accepts, keys and caches them with these; the worker reads each spec as it reads `spec`.

extension Enlarger_V1_Submit {
    /// The most variants one Submit may name.
    public static let maxVariants = 8

    /// Checks `variants` as the contract says: at most `maxVariants`, each a valid spec, one
    /// fail_on for all, and a delivery that sends finals.
    public func validateVariants() throws(InvalidArgumentError) {
        guard variants.count <= Self.maxVariants else {
            throw InvalidArgumentError("\(variants.count) variants: at most \(Self.maxVariants) are allowed")
        }
        guard delivery == .progressive || delivery == .final else {
            throw InvalidArgumentError("variants come as finals: delivery \(delivery) cannot take them")
        }
        var failOn: FailOn?
        for (index, spec) in variants.enumerated() {
            do {
                try spec.validate()
            } catch {
                throw InvalidArgumentError("variants[\(index)]: \(error.message)")
            }
            let level = try ResizeOptions(spec).failOn
            if let failOn, failOn != level {
                throw InvalidArgumentError("the variants name different fail_on levels; one decode serves them all")
            }
            failOn = level
        }
    }

    /// The canonical form of the whole set, in order (a single spec's key never equals it).
    public func variantsSharingKey() throws(InvalidArgumentError) -> [UInt8] {
        var key: [UInt8] = [0xFF, UInt8(variants.count)]
        for spec in variants {
            let one = try spec.sharingKey(delivery: .final)
            key += [UInt8(one.count >> 8 & 0xFF), UInt8(one.count & 0xFF)] + one
        }
        return key
    }
}
