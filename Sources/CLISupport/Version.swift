/// The version of Enlarger, printed by `enlarger --version` and `enlarger-bench --version`.
/// This is the one place it is set.
public let enlargerVersion = "0.9.0"
