import Foundation

/// ThumbHash: a placeholder of about 25 bytes that a page can paint before an image arrives
/// (Evan Wallace's format: the average colour, the aspect ratio and a few low-frequency
/// cosine coefficients of luminance, two colour-difference channels and alpha).
///
/// Encoded from at most 100 × 100 pixels: more would cost time without changing the hash,
/// which keeps only the lowest frequencies. The byte layout, and so every decoder's view of
/// a hash, is the format's:
/// - bytes 0–2: luminance DC (6 bits), the two colour DCs (6 bits each), luminance AC
///   scale (5 bits), whether alpha is present (1 bit);
/// - bytes 3–4: the luminance grid's shorter side (3 bits), the colour AC scales (6 bits
///   each), whether the image is landscape (1 bit);
/// - with alpha, one byte: alpha DC and alpha AC scale (4 bits each);
/// - then every AC coefficient in 4 bits, two to a byte, low nibble first: luminance,
///   the two colour channels, then alpha.
/// Rounding is half away from zero, as the format's reference rounds.
public enum ThumbHash {
    /// The largest side `encode` takes.
    public static let maxSide = 100

    /// The hash of `width` × `height` RGBA pixels (8 bits a channel, not premultiplied,
    /// rows top to bottom). Both sides 1...`maxSide`; `rgba` holds exactly 4 bytes a pixel.
    public static func encode(width: Int, height: Int, rgba: [UInt8]) -> [UInt8] {
        precondition((1...maxSide).contains(width) && (1...maxSide).contains(height),
                     "ThumbHash encodes at most \(maxSide) × \(maxSide) pixels")
        precondition(rgba.count == width * height * 4, "4 bytes per pixel")
        let pixels = width * height

        // The average colour, weighted by alpha: what transparent pixels are blended with.
        var average = (r: 0.0, g: 0.0, b: 0.0, a: 0.0)
        for index in 0..<pixels {
            let alpha = Double(rgba[index * 4 + 3]) / 255
            average.r += alpha / 255 * Double(rgba[index * 4])
            average.g += alpha / 255 * Double(rgba[index * 4 + 1])
            average.b += alpha / 255 * Double(rgba[index * 4 + 2])
            average.a += alpha
        }
        if average.a > 0 {
            average.r /= average.a
            average.g /= average.a
            average.b /= average.a
        }
        let hasAlpha = average.a < Double(pixels)

        // Luminance gets the finer grid, shaped like the image (fewer cells with alpha, to
        // leave room for it).
        let limit = hasAlpha ? 5.0 : 7.0
        let longer = Double(max(width, height))
        let lx = max(1, Int(rounded(limit * Double(width) / longer)))
        let ly = max(1, Int(rounded(limit * Double(height) / longer)))

        var l = [Double](repeating: 0, count: pixels)
        var p = l, q = l, a = l
        for index in 0..<pixels {
            let alpha = Double(rgba[index * 4 + 3]) / 255
            let r = average.r * (1 - alpha) + alpha / 255 * Double(rgba[index * 4])
            let g = average.g * (1 - alpha) + alpha / 255 * Double(rgba[index * 4 + 1])
            let b = average.b * (1 - alpha) + alpha / 255 * Double(rgba[index * 4 + 2])
            l[index] = (r + g + b) / 3
            p[index] = (r + g) / 2 - b
            q[index] = r - g
            a[index] = alpha
        }

        let grid = Grid(width: width, height: height)
        let luminance = grid.encode(l, nx: max(lx, 3), ny: max(ly, 3))
        let blueYellow = grid.encode(p, nx: 3, ny: 3)
        let redGreen = grid.encode(q, nx: 3, ny: 3)
        let opacity = hasAlpha ? grid.encode(a, nx: 5, ny: 5) : Channel(dc: 1, ac: [], scale: 1)

        let isLandscape = width > height
        let header24 = Int(rounded(63 * luminance.dc))
            | Int(rounded(31.5 + 31.5 * blueYellow.dc)) << 6
            | Int(rounded(31.5 + 31.5 * redGreen.dc)) << 12
            | Int(rounded(31 * luminance.scale)) << 18
            | (hasAlpha ? 1 << 23 : 0)
        let header16 = (isLandscape ? ly : lx)
            | Int(rounded(63 * blueYellow.scale)) << 3
            | Int(rounded(63 * redGreen.scale)) << 9
            | (isLandscape ? 1 << 15 : 0)
        var hash: [UInt8] = [
            UInt8(header24 & 0xff), UInt8(header24 >> 8 & 0xff), UInt8(header24 >> 16),
            UInt8(header16 & 0xff), UInt8(header16 >> 8),
        ]
        if hasAlpha {
            hash.append(UInt8(Int(rounded(15 * opacity.dc)) | Int(rounded(15 * opacity.scale)) << 4))
        }
        var nibble = 0
        for coefficient in luminance.ac + blueYellow.ac + redGreen.ac + opacity.ac {
            let value = UInt8(Int(rounded(15 * coefficient)))
            if nibble & 1 == 0 {
                hash.append(value)
            } else {
                hash[hash.count - 1] |= value << 4
            }
            nibble += 1
        }
        return hash
    }

    /// One channel's cosine coefficients: the DC term, the AC terms mapped to 0...1 by the
    /// largest magnitude among them (`scale`).
    struct Channel {
        let dc: Double
        let ac: [Double]
        let scale: Double
    }

    /// The image's sample grid, with the cosines along each axis computed once per
    /// frequency.
    private struct Grid {
        let width: Int
        let height: Int

        /// The coefficients of the lowest frequencies: `nx` × `ny`, cut to a triangle (a
        /// coefficient (cx, cy) is kept while cx·ny < nx·(ny − cy)), row by row.
        func encode(_ channel: [Double], nx: Int, ny: Int) -> Channel {
            var dc = 0.0
            var ac: [Double] = []
            var scale = 0.0
            var fx = [Double](repeating: 0, count: width)
            for cy in 0..<ny {
                var cx = 0
                while cx * ny < nx * (ny - cy) {
                    for x in 0..<width { fx[x] = cos(Double.pi / Double(width) * Double(cx) * (Double(x) + 0.5)) }
                    var sum = 0.0
                    for y in 0..<height {
                        let fy = cos(Double.pi / Double(height) * Double(cy) * (Double(y) + 0.5))
                        for x in 0..<width { sum += channel[x + y * width] * fx[x] * fy }
                    }
                    let coefficient = sum / Double(width * height)
                    if cx > 0 || cy > 0 {
                        ac.append(coefficient)
                        scale = max(scale, abs(coefficient))
                    } else {
                        dc = coefficient
                    }
                    cx += 1
                }
            }
            if scale > 0 { ac = ac.map { 0.5 + 0.5 / scale * $0 } }
            return Channel(dc: dc, ac: ac, scale: scale)
        }
    }

    /// Half away from zero: the reference's rounding for the non-negative values it rounds.
    private static func rounded(_ value: Double) -> Double {
        value.rounded(.toNearestOrAwayFromZero)
    }
}
