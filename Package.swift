// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "Enlarger",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "enlarger", targets: ["EnlargerCLI"]),
        .executable(name: "enlarger-bench", targets: ["EnlargerBench"]),
        .executable(name: "imaging-fuzzer", targets: ["ImagingFuzzer"]),
        .library(name: "Imaging", targets: ["Imaging", "ImageModel"]),
        .library(name: "Enlarger", targets: ["Enlarger", "ImageModel"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // C: libjpeg-turbo behind setjmp guards (libjpeg's error recovery is longjmp).
        .target(name: "CJPEG", linkerSettings: [.linkedLibrary("jpeg")]),
        // C: libzmq, imported as a system library (no pkg-config: its flags are unusable here).
        .systemLibrary(name: "CZeroMQ"),

        // C: openat2(2), to open a file source beneath the worker's files root.
        .target(name: "CFiles"),
        // C: glibc's allocator settings (mallopt), for a process that runs the broker.
        .target(name: "CAllocator"),
        .target(name: "Mirroring", dependencies: ["CFiles"]),
        // A pthread mutex with Mutex's API: ThreadSanitizer sees its synchronisation.
        .target(name: "Locking"),
        // Deadline bookkeeping shared by the broker and client cores.
        .target(name: "Timekeeping"),
        // The services' operational HTTP port: Prometheus metrics, health and readiness.
        .target(
            name: "Telemetry",
            dependencies: [
                "Locking",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        // What a resize asks for and gives back (options, delivery, encoded image, errors),
        // without libjpeg: shared by the imaging library, the worker and the client.
        .target(name: "ImageModel"),
        // C: Little CMS 2, for embedded ICC profiles → sRGB.
        .target(name: "CColour", linkerSettings: [.linkedLibrary("lcms2")]),
        .target(name: "CPNG", linkerSettings: [.linkedLibrary("spng")]),
        .target(name: "CWebP", linkerSettings: [.linkedLibrary("webp"), .linkedLibrary("webpdemux"), .linkedLibrary("webpmux")]),
        // C: dlopen on first use, for the codec libraries most processes never call (libheif,
        // libavif, libjxl and the thirty libraries they pull in).
        .target(name: "CLoader", linkerSettings: [.linkedLibrary("dl")]),
        .target(name: "CHEIF", dependencies: ["CLoader"]),
        .target(name: "CAVIF", dependencies: ["CLoader"]),
        .target(name: "CGIF", linkerSettings: [.linkedLibrary("gif")]),
        .target(name: "CJXL", dependencies: ["CLoader"]),
        .target(name: "Imaging",
                dependencies: ["CJPEG", "CColour", "CPNG", "CWebP", "CHEIF", "CAVIF", "CGIF", "CJXL", "CResample", "ImageModel", "Locking"]),
        // C: the resampler's inner loops for CPUs with AVX2, chosen at run time (the package is
        // built for baseline x86-64).
        .target(name: "CResample"),
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ", "Locking"]),
        // C: SHA-256 from the system's libcrypto, for the contract's digests.
        .target(name: "CDigest", linkerSettings: [.linkedLibrary("crypto")]),
        .target(
            name: "EnlargerProtocol",
            dependencies: ["ImageModel", "CDigest", .product(name: "SwiftProtobuf", package: "swift-protobuf")],
            // The generated messages keep their fields in a class; every field access paid a
            // run-time exclusivity check (a thread-local lookup), about 4% of the broker's CPU.
            // The compile-time checks stay; the generated accessors cannot overlap.
            swiftSettings: [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]
        ),
        // Where the protocol meets ZeroMQ: shared by the broker, the worker and the client.
        .target(name: "EnlargerTransport", dependencies: ["EnlargerProtocol", "ZeroMQ"]),
        .target(
            name: "EnlargerBroker",
            dependencies: [
                "EnlargerProtocol", "EnlargerTransport", "ZeroMQ", "Locking", "Timekeeping", "Telemetry", "CAllocator",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        .target(
            name: "EnlargerWorker",
            dependencies: [
                "EnlargerProtocol", "EnlargerTransport", "ZeroMQ", "ImageModel", "Imaging", "Locking", "Telemetry", "CFiles",
                "Fetching",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        .target(
            name: "Enlarger",
            dependencies: [
                "EnlargerProtocol", "EnlargerTransport", "ZeroMQ", "ImageModel", "Locking", "Timekeeping",
            ]
        ),
        // What the two executables share: finding a broker (`--broker`, `--runtime-dir`) and errors.
        .target(
            name: "CLISupport",
            dependencies: ["Enlarger", "ZeroMQ", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(
            name: "EnlargerCLI",
            dependencies: [
                "ImageModel", "Imaging", "Enlarger", "EnlargerBroker", "EnlargerWorker", "EnlargerProtocol", "ZeroMQ", "Locking",
                "CLISupport", "Telemetry", "Fetching", "Mirroring",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Downloading a source image over http/https: size limit, timeouts, re-checked redirects
        // and an address policy applied after name resolution (no rebinding).
        .target(
            name: "Fetching",
            dependencies: [
                "Locking",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // `enlarger-bench`: measures Enlarger itself, kept out of the production binary.
        .executableTarget(
            name: "EnlargerBench",
            dependencies: [
                "ImageModel", "Imaging", "Enlarger", "EnlargerWorker", "EnlargerProtocol", "EnlargerTransport", "ZeroMQ",
                "CLISupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // libFuzzer entry point over decode → resize → encode (see its main.swift).
        .executableTarget(name: "ImagingFuzzer", dependencies: ["ImageModel", "Imaging"]),

        // Helpers shared by the test targets (ipc endpoints, the corpus, seeded randomness).
        .target(name: "TestSupport", dependencies: ["Locking"], path: "Tests/Support"),
        .testTarget(name: "LockingTests", dependencies: ["Locking"]),
        .testTarget(name: "TimekeepingTests", dependencies: ["Timekeeping", "TestSupport"]),
        .testTarget(name: "TelemetryTests", dependencies: [
            "Telemetry", "TestSupport", .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "ImageModelTests", dependencies: ["ImageModel"]),
        .testTarget(name: "MirroringTests", dependencies: ["Mirroring", "TestSupport"]),
        .testTarget(name: "FetchingTests", dependencies: ["Fetching", "Locking", "TestSupport"]),
        // The test images are read from the source tree (like the corpus), not bundled.
        .testTarget(name: "ImagingTests", dependencies: ["ImageModel", "Imaging", "CLoader", "TestSupport"], exclude: ["Images", "Regressions"]),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ", "TestSupport"]),
        .testTarget(name: "EnlargerProtocolTests", dependencies: ["EnlargerProtocol", "ImageModel", "TestSupport"]),
        .testTarget(
            name: "EnlargerBrokerTests",
            dependencies: [
                "EnlargerBroker", "EnlargerProtocol", "ZeroMQ", "Telemetry", "TestSupport",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "EnlargerWorkerTests",
            dependencies: [
                "EnlargerWorker", "EnlargerBroker", "EnlargerProtocol", "ZeroMQ", "ImageModel", "Imaging", "TestSupport",
                "Fetching",
            ]
        ),
        .testTarget(
            name: "EnlargerClientTests",
            dependencies: [
                "Enlarger", "EnlargerBroker", "EnlargerProtocol", "ZeroMQ", "ImageModel", "Locking", "TestSupport",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "Enlarger", "EnlargerBroker", "EnlargerWorker", "EnlargerProtocol", "EnlargerTransport", "ZeroMQ",
                "ImageModel", "Imaging", "TestSupport", "Telemetry", "Fetching",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ]
        ),
    ]
)
