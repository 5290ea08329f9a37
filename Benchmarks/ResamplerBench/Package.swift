// swift-tools-version:6.1
// A standalone timing harness for `Resampler` (not part of the main package's build).
// Run from this directory: swift run -c release ResamplerBench
import PackageDescription

let package = Package(
    name: "ResamplerBench",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Enlarger", path: "../..")],
    targets: [
        .executableTarget(name: "ResamplerBench", dependencies: [.product(name: "Imaging", package: "Enlarger")]),
    ]
)
