extension Enlarger_V1_ImageSource {
    /// A file or a URL: a place the worker reads, named by location until it has opened it.
    public var namesPlace: Bool {
        switch kind {
        case .file?, .url?: true
        case .inline?, nil: false
        }
    }
}
