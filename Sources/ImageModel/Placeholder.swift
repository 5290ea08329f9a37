/// What a page can paint before any image of a request arrives: the final result's exact
/// size and a ThumbHash of its picture (about 25 bytes; see `Imaging.ThumbHash` for the
/// layout, Evan Wallace's format, which its published decoders read).
public struct Placeholder: Sendable, Equatable {
    /// The final result's size, after orientation: the same as its image's.
    public var width: Int
    public var height: Int
    public var thumbHash: [UInt8]

    public init(width: Int, height: Int, thumbHash: [UInt8]) {
        self.width = width
        self.height = height
        self.thumbHash = thumbHash
    }
}
