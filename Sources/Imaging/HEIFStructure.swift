import ImageModel

/// What libheif does not check before decoding, found by fuzzing:
///
/// - The canvas of a derived image. A `grid` or `iovl` (overlay) item states its canvas size
///   in its own payload, and libheif 1.15 allocates that canvas without checking it against
///   the item's `ispe` size (which is what it reports) or any pixel limit: a 1.4 KB overlay
///   declaring 61679×52624 makes it allocate 3.2 GB and overflow a 32-bit length, as primary
///   image, as thumbnail or as the primary's alpha (auxiliary) image. Every derived item that
///   a decode reads is checked: the primary's canvas must be its declared size; no other may
///   be larger than it. Items that are never decoded (a larger grid or overlay beside the
///   primary, as in conformance files) are left alone.
/// - AV1 items: libheif's AV1 decoder leaks on damaged data, so AV1 is read only through
///   libavif, and a HEIF file holding AV1 items without naming itself AVIF is refused.
///
/// This reads just enough of the ISOBMFF boxes (`pitm`, `iinf`, `iloc`, `idat`) to find the
/// items' types and a derived item's payload.
enum HEIFStructure {
    /// The items of a HEIF file: the primary item's id and every item's type (empty when
    /// the boxes cannot be read: libheif then judges).
    struct Items {
        var primary: Int?
        var types: [Int: String] = [:]
        /// The item ids in the order the first box in `meta` to name items lists them (`iloc`
        /// or `iinf`, whichever comes first; `iinf` otherwise): the order libavif 0.11 keeps
        /// its items in, and lays a grid's tiles out in.
        var order: [Int] = []
        /// `iref` references: of `type`, from an item to others (`dimg`: a derived image's
        /// inputs, in order; `auxl`: an auxiliary image, such as alpha, to its master).
        var references: [(type: String, from: Int, to: [Int])] = []
        var meta: Range<Int>?
        /// Ids that `iinf` declares more than once, with another type or the same: what these
        /// checks read of such an item need not be what a decoder reads (the type here is
        /// the last declaration's; libheif decodes the first), so such a file is refused.
        var declaredTwice: [Int] = []

        /// The items a decode of `item` reads: the item, its auxiliary images (alpha, depth:
        /// libheif reads them with it), and the inputs of every derived image among them.
        func decoded(with item: Int) -> Set<Int> {
            var found: Set<Int> = [item]
            var pending = [item]
            while let next = pending.popLast() {
                var more: [Int] = []
                for reference in references {
                    if reference.type == "auxl", reference.to.contains(next) { more.append(reference.from) }
                    if reference.type == "dimg", reference.from == next { more += reference.to }
                }
                for candidate in more where found.insert(candidate).inserted { pending.append(candidate) }
            }
            return found
        }
    }

    /// What libavif 0.11 reads wrong in an AVIF whose primary image is a grid: tiles whose
    /// `dimg` order (the layout, row by row) is not the order in which `meta` first names
    /// them (`Items.order`, the order libavif lays them out in; `tilesInGridOrder` rewrites
    /// that), and auxiliary images (alpha) attached to the tiles rather than to the grid,
    /// which it drops.
    struct GridIssues: Equatable {
        var tilesOutOfItemOrder = false
        var auxiliaryPerTile = false
    }

    static func gridIssues(_ items: Items) -> GridIssues {
        var issues = GridIssues()
        guard let primary = items.primary, items.types[primary] == "grid",
              let tiles = items.references.first(where: { $0.type == "dimg" && $0.from == primary })?.to else {
            return issues
        }
        let order = Dictionary(items.order.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        // Every grid libavif reads: the primary's and an alpha grid's.
        for grid in items.references where grid.type == "dimg" && items.types[grid.from] == "grid" {
            let positions = grid.to.compactMap { order[$0] }
            if positions.count == grid.to.count && positions != positions.sorted() { issues.tilesOutOfItemOrder = true }
        }
        let tileSet = Set(tiles)
        let auxiliary = items.references.filter { $0.type == "auxl" }
        issues.auxiliaryPerTile = !auxiliary.contains { $0.to.contains(primary) }
            && auxiliary.contains { !$0.to.isEmpty && $0.to.allSatisfy(tileSet.contains) }
        return issues
    }

    /// A grid primary whose alpha is stored per tile (each tile the master of its own `auxl`
    /// AV1 item, the grid of none): the change that makes the grid's `dimg` list those alpha
    /// items in place of its tiles, in the same order and the same bytes, so that a decoder
    /// reads the alpha tiles as one monochrome image laid out as the grid. Nil when the file
    /// is not so, or a tile has no such item or more than one.
    static func alphaTilesAsGrid(_ data: UnsafeRawBufferPointer, items: Items) -> (range: Range<Int>, bytes: [UInt8])? {
        guard let primary = items.primary, items.types[primary] == "grid", let meta = items.meta,
              !items.references.contains(where: { $0.type == "auxl" && $0.to.contains(primary) }) else { return nil }
        let reader = BoxReader(data: data)
        guard let (at, idSize, tiles) = reader.dimgTargets(of: primary, in: meta) else { return nil }
        var alpha: [Int] = []
        for tile in tiles {
            let auxiliary = items.references.filter { $0.type == "auxl" && $0.to == [tile] && items.types[$0.from] == "av01" }
            guard auxiliary.count == 1 else { return nil }
            alpha.append(auxiliary[0].from)
        }
        guard alpha.allSatisfy({ $0 >> (8 * idSize) == 0 }) else { return nil }
        let bytes = alpha.flatMap { id in (0..<idSize).reversed().map { UInt8(truncatingIfNeeded: id >> (8 * $0)) } }
        return (at..<(at + bytes.count), bytes)
    }

    static func items(_ data: UnsafeRawBufferPointer) -> Items {
        var reader = BoxReader(data: data)
        guard let meta = reader.child("meta", in: 0..<data.count), meta.count >= 4 else { return Items() }
        let children = (meta.lowerBound + 4)..<meta.upperBound  // after version and flags
        let (types, listed, declaredTwice) = reader.itemTypes(in: children)
        let naming = reader.namingEntries(in: children)
        return Items(primary: reader.primaryItem(in: children), types: types, order: naming?.ids ?? listed,
                     references: reader.references(in: children), meta: children, declaredTwice: declaredTwice)
    }

    /// libavif 0.11 lays a grid's tiles out in the order `meta` first names them, not in the
    /// grid's `dimg` order, which is the layout. This rewrites the box that names them first
    /// (`iloc` or `iinf`): every grid's tiles move to their `dimg` order among the places the
    /// tiles held, every other entry stays where it was, and entries move whole, so no box
    /// changes size and no offset in the file moves. Returns the new bytes of that box's
    /// entries and where they go, or nil when the tiles are in order already or the file
    /// cannot be rewritten so (a tile named twice, or by no entry).
    static func tilesInGridOrder(_ data: UnsafeRawBufferPointer, items: Items) -> (range: Range<Int>, bytes: [UInt8])? {
        let reader = BoxReader(data: data)
        guard let meta = items.meta, let naming = reader.namingEntries(in: meta) else { return nil }
        var position: [Int: Int] = [:]
        for (index, id) in naming.ids.enumerated() {
            guard position.updateValue(index, forKey: id) == nil else { return nil }  // named twice
        }
        var placement = Array(naming.ranges.indices)  // entry placed at each position
        var moved = false
        for grid in items.references where grid.type == "dimg" && items.types[grid.from] == "grid" {
            guard Set(grid.to).count == grid.to.count else { return nil }
            let positions = grid.to.compactMap { position[$0] }
            guard positions.count == grid.to.count else { return nil }
            for (slot, tile) in zip(positions.sorted(), positions) where slot != tile {
                placement[slot] = tile
                moved = true
            }
        }
        // A tile shared by two grids could be placed twice: only a permutation is written.
        guard moved, Set(placement).count == placement.count,
              let first = naming.ranges.first, let last = naming.ranges.last else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(last.upperBound - first.lowerBound)
        for (slot, entry) in placement.enumerated() {
            bytes += data[naming.ranges[entry]]
            // What lies between one entry and the next (nothing, in any file seen) stays.
            if slot + 1 < naming.ranges.count {
                bytes += data[naming.ranges[slot].upperBound..<naming.ranges[slot + 1].lowerBound]
            }
        }
        guard bytes.count == last.upperBound - first.lowerBound else { return nil }
        return (first.lowerBound..<last.upperBound, bytes)
    }

    /// Throws `.tooLarge` or `.corrupt` when `item` is a derived image (`grid`, `iovl`) whose
    /// canvas exceeds `maxPixels` or, when a size is given, is not `width`×`height` (either
    /// way round). Anything it cannot find is left to libheif.
    static func checkCanvas(_ data: UnsafeRawBufferPointer, items: Items, item: Int, width: Int? = nil, height: Int? = nil,
                            maxPixels: Int) throws(ImagingError) {
        var reader = BoxReader(data: data)
        guard let meta = items.meta, let type = items.types[item], type == "grid" || type == "iovl",
              let payload = reader.itemPayload(item, in: meta) else { return }
        guard let canvas = reader.canvasSize(type, payload) else {
            throw ImagingError(.corrupt, "HEIF: the \(type) item's data is too short for its canvas size")
        }
        let (pixels, overflow) = canvas.width.multipliedReportingOverflow(by: canvas.height)
        if overflow || pixels > maxPixels {
            throw ImagingError(.tooLarge, "HEIF: the \(type) canvas of \(canvas.width)×\(canvas.height) exceeds the limit "
                               + "of \(maxPixels) pixels")
        }
        guard let width, let height else { return }
        let matches = (canvas.width, canvas.height) == (width, height) || (canvas.width, canvas.height) == (height, width)
        guard matches else {
            throw ImagingError(.corrupt, "HEIF: the \(type) canvas of \(canvas.width)×\(canvas.height) is not the image's "
                               + "declared \(width)×\(height)")
        }
    }

    /// The length the top-level boxes claim when it is more than `data` holds: the file is
    /// cut (nil when it is not, or when the boxes cannot be read).
    static func claimedLength(_ data: UnsafeRawBufferPointer) -> Int? {
        let reader = BoxReader(data: data)
        var at = 0
        while at + 8 <= data.count, let size32 = reader.uint(at, 4) {
            var size = size32
            if size32 == 1 {
                guard let large = reader.uint(at + 8, 8) else { return nil }
                size = large
            } else if size32 == 0 {
                return nil  // to the end of the file, whatever it is
            }
            guard size >= 8 else { return nil }
            // A size near Int.max (eight bytes of 0xFF) must not overflow the sum.
            if size > data.count - at { return size > Int.max - at ? Int.max : at + size }
            at += size
        }
        return at > data.count ? at : nil
    }

    /// Bounds-checked reading of ISOBMFF boxes; every accessor returns nil past the data.
    struct BoxReader {
        let data: UnsafeRawBufferPointer

        func uint(_ at: Int, _ size: Int) -> Int? {
            guard size >= 0, size <= 8, at >= 0, at <= data.count - size else { return nil }
            var value = 0
            for i in 0..<size { value = value << 8 | Int(data[at + i]) }
            return value
        }

        func fourCC(_ at: Int) -> String? {
            guard at >= 0, at <= data.count - 4 else { return nil }
            return String(decoding: data[at..<at + 4], as: UTF8.self)
        }

        /// What follows the first `offset` bytes of `range` (empty when the range is shorter).
        func tail(of range: Range<Int>, from offset: Int) -> Range<Int> {
            min(range.lowerBound + offset, range.upperBound)..<range.upperBound
        }

        /// The boxes directly inside `range`: their type, content range and whole range.
        func boxes(in range: Range<Int>) -> [(type: String, content: Range<Int>, whole: Range<Int>)] {
            var result: [(String, Range<Int>, Range<Int>)] = []
            var at = range.lowerBound
            while at + 8 <= range.upperBound, let size32 = uint(at, 4), let type = fourCC(at + 4) {
                var header = 8, size = size32
                if size32 == 1 {
                    guard let large = uint(at + 8, 8) else { break }
                    size = large
                    header = 16
                } else if size32 == 0 {
                    size = range.upperBound - at
                }
                guard size >= header, size <= range.upperBound - at else { break }
                result.append((type, (at + header)..<(at + size), at..<(at + size)))
                at += size
            }
            return result
        }

        mutating func child(_ type: String, in range: Range<Int>) -> Range<Int>? {
            boxes(in: range).first { $0.type == type }?.content
        }

        mutating func primaryItem(in meta: Range<Int>) -> Int? {
            guard let pitm = child("pitm", in: meta), let version = uint(pitm.lowerBound, 1) else { return nil }
            return uint(pitm.lowerBound + 4, version == 0 ? 2 : 4)
        }

        mutating func itemTypes(in meta: Range<Int>) -> (types: [Int: String], order: [Int], declaredTwice: [Int]) {
            guard let iinf = child("iinf", in: meta), let version = uint(iinf.lowerBound, 1) else { return ([:], [], []) }
            let entries = tail(of: iinf, from: 4 + (version == 0 ? 2 : 4))
            var types: [Int: String] = [:]
            var order: [Int] = []
            var declaredTwice: [Int] = []
            for (type, content, _) in boxes(in: entries) where type == "infe" {
                guard let infeVersion = uint(content.lowerBound, 1), infeVersion >= 2 else { continue }
                let idSize = infeVersion == 2 ? 2 : 4
                guard let id = uint(content.lowerBound + 4, idSize),
                      let itemType = fourCC(content.lowerBound + 4 + idSize + 2) else { continue }
                if types.updateValue(itemType, forKey: id) != nil { declaredTwice.append(id) }
                order.append(id)
            }
            return (types, order, declaredTwice)
        }

        /// The `iref` box's references (at most 4096, each with at most 4096 targets).
        mutating func references(in meta: Range<Int>) -> [(type: String, from: Int, to: [Int])] {
            guard let iref = child("iref", in: meta), let version = uint(iref.lowerBound, 1) else { return [] }
            let idSize = version == 0 ? 2 : 4
            var result: [(type: String, from: Int, to: [Int])] = []
            for (type, content, _) in boxes(in: tail(of: iref, from: 4)).prefix(4096) {
                guard let from = uint(content.lowerBound, idSize), let count = uint(content.lowerBound + idSize, 2) else {
                    continue
                }
                var targets: [Int] = []
                // No more targets than the box holds.
                for i in 0..<min(count, 4096, max(content.count - idSize - 2, 0) / idSize) {
                    guard let to = uint(content.lowerBound + idSize + 2 + i * idSize, idSize) else { break }
                    targets.append(to)
                }
                result.append((type, from, targets))
            }
            return result
        }

        /// One `iloc` entry: where an item's data is, and the entry's own bytes.
        struct Location {
            var id: Int
            var method: Int
            var base: Int
            var extents: [(offset: Int, length: Int)]
            var entry: Range<Int>
        }

        /// The `iloc` box's entries (at most 4096), or nil when the box is missing or damaged.
        func locations(in meta: Range<Int>) -> [Location]? {
            guard let iloc = boxes(in: meta).first(where: { $0.type == "iloc" })?.content,
                  let version = uint(iloc.lowerBound, 1), version <= 2,
                  let sizes = uint(iloc.lowerBound + 4, 2) else { return nil }
            let offsetSize = sizes >> 12, lengthSize = (sizes >> 8) & 15, baseSize = (sizes >> 4) & 15
            let indexSize = version >= 1 ? sizes & 15 : 0
            let countSize = version < 2 ? 2 : 4
            guard var at = Optional(iloc.lowerBound + 6), let count = uint(at, countSize) else { return nil }
            at += countSize
            var result: [Location] = []
            let extentSize = indexSize + offsetSize + lengthSize
            for _ in 0..<min(count, 4096) {
                // Every entry lies in the box: a damaged count cannot make this read on.
                guard at <= iloc.upperBound else { return nil }
                let start = at
                let idSize = version < 2 ? 2 : 4
                guard let id = uint(at, idSize) else { return nil }
                at += idSize
                var method = 0
                if version >= 1 {
                    guard let field = uint(at, 2) else { return nil }
                    method = field & 15
                    at += 2
                }
                at += 2  // data reference index
                guard let base = uint(at, baseSize) else { return nil }
                at += baseSize
                guard let extentCount = uint(at, 2) else { return nil }
                at += 2
                var extents: [(offset: Int, length: Int)] = []
                guard extentCount * extentSize <= iloc.upperBound - at else { return nil }
                for _ in 0..<(extentSize == 0 ? min(extentCount, 64) : extentCount) {
                    at += indexSize
                    guard let offset = uint(at, offsetSize), let length = uint(at + offsetSize, lengthSize) else { return nil }
                    at += offsetSize + lengthSize
                    if extents.count < 64 { extents.append((offset, length)) }
                }
                result.append(Location(id: id, method: method, base: base, extents: extents, entry: start..<at))
            }
            return result
        }

        /// The entries of the first box in `meta` that names items, `iloc` or `iinf` (nil
        /// when another comes first, or it cannot be read): each item's id and its entry.
        func namingEntries(in meta: Range<Int>) -> (ids: [Int], ranges: [Range<Int>])? {
            let naming: Set<String> = ["iloc", "iinf", "iref", "iprp"]
            guard let first = boxes(in: meta).first(where: { naming.contains($0.type) }) else { return nil }
            switch first.type {
            case "iloc":
                guard let locations = locations(in: meta), locations.allSatisfy({ $0.entry.upperBound <= first.content.upperBound })
                else { return nil }
                return (locations.map(\.id), locations.map(\.entry))
            case "iinf":
                guard let version = uint(first.content.lowerBound, 1) else { return nil }
                let entries = tail(of: first.content, from: 4 + (version == 0 ? 2 : 4))
                var ids: [Int] = [], ranges: [Range<Int>] = []
                for (type, content, whole) in boxes(in: entries) where type == "infe" {
                    guard let infeVersion = uint(content.lowerBound, 1), infeVersion >= 2,
                          let id = uint(content.lowerBound + 4, infeVersion == 2 ? 2 : 4) else { return nil }
                    ids.append(id)
                    ranges.append(whole)
                }
                return (ids, ranges)
            default:
                return nil
            }
        }

        /// Where the `dimg` reference from `item` lists its inputs: the first id's offset, the
        /// ids' size and the ids.
        func dimgTargets(of item: Int, in meta: Range<Int>) -> (at: Int, idSize: Int, ids: [Int])? {
            guard let iref = boxes(in: meta).first(where: { $0.type == "iref" })?.content,
                  let version = uint(iref.lowerBound, 1) else { return nil }
            let idSize = version == 0 ? 2 : 4
            for (type, content, _) in boxes(in: tail(of: iref, from: 4)).prefix(4096) where type == "dimg" {
                guard uint(content.lowerBound, idSize) == item, let count = uint(content.lowerBound + idSize, 2),
                      count <= 4096 else { continue }
                let at = content.lowerBound + idSize + 2
                guard at + count * idSize <= content.upperBound else { return nil }
                return (at, idSize, (0..<count).compactMap { uint(at + $0 * idSize, idSize) })
            }
            return nil
        }

        /// The first bytes (up to 64) of the item's data, from the file or the `idat` box.
        mutating func itemPayload(_ item: Int, in meta: Range<Int>) -> [UInt8]? {
            guard let location = locations(in: meta)?.first(where: { $0.id == item }) else { return nil }
            var bytes: [UInt8] = []
            for (offset, length) in location.extents where bytes.count < 64 {
                // Eight-byte fields hold any value, negative ones included: every sum is
                // checked, and the extent must start inside the data.
                var (start, overflow) = location.base.addingReportingOverflow(offset)
                guard !overflow else { return nil }
                if location.method == 1 {
                    guard let idat = child("idat", in: meta) else { return nil }
                    (start, overflow) = start.addingReportingOverflow(idat.lowerBound)
                    guard !overflow else { return nil }
                } else if location.method != 0 {
                    return nil
                }
                guard start >= 0, start <= data.count, length >= 0 else { return nil }
                let end = length == 0 || length > data.count - start ? data.count : start + length
                bytes += data[start..<min(end, start + 64 - bytes.count)]
            }
            return bytes
        }

        /// A `grid`'s or `iovl`'s output size, from its payload.
        func canvasSize(_ type: String, _ payload: [UInt8]) -> (width: Int, height: Int)? {
            guard payload.count >= 2 else { return nil }
            let wide = payload[1] & 1 != 0, field = wide ? 4 : 2
            // grid: version, flags, rows − 1, columns − 1; iovl: version, flags, 4 × 16-bit fill.
            let start = type == "grid" ? 4 : 2 + 8
            guard payload.count >= start + 2 * field else { return nil }
            func read(_ at: Int) -> Int { payload[at..<at + field].reduce(0) { $0 << 8 | Int($1) } }
            return (read(start), read(start + field))
        }
    }
}
