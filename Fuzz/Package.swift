// swift-tools-version: 6.1
// Coverage-guided fuzz targets (libFuzzer + AddressSanitizer) for every parser of todostream
// that takes bytes from outside. A package of its own so that the unsafe flag and the
// sanitizers stay out of the daemon's build.
//
//   scripts/fuzz                         build, then run every target for 20 s
//   scripts/fuzz --seconds 60 fuzz-redactor
//
// Each target is an executable whose entry point is libFuzzer's `main`: the Swift code is
// compiled with `-parse-as-library` and exports `LLVMFuzzerTestOneInput`. The Relay module's
// internal types are reached with `@testable import`: scripts/fuzz builds in release mode with
// `-enable-testing`.
import PackageDescription

let fuzzSettings: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

func fuzzTarget(_ name: String, _ dependencies: [Target.Dependency]) -> Target {
    .executableTarget(
        name: name,
        dependencies: dependencies,
        path: "Sources/\(name)",
        swiftSettings: fuzzSettings
    )
}

let nio: [Target.Dependency] = [
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "NIOEmbedded", package: "swift-nio"),
]

let package = Package(
    name: "todostream-fuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "todostream", path: ".."),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
    ],
    targets: [
        fuzzTarget("fuzz-client-frame", [.product(name: "Relay", package: "todostream")]),
        fuzzTarget("fuzz-request-payload", [.product(name: "TodoApp", package: "todostream")]),
        fuzzTarget(
            "fuzz-fast-json",
            [
                .product(name: "Relay", package: "todostream"),
                .product(name: "TodoApp", package: "todostream"),
                .product(name: "EventStream", package: "todostream"),
            ]
        ),
        fuzzTarget("fuzz-line-decoder", [.product(name: "Relay", package: "todostream")] + nio),
        fuzzTarget("fuzz-redactor", [.product(name: "Relay", package: "todostream")] + nio),
        fuzzTarget(
            "fuzz-websocket",
            [
                .product(name: "Relay", package: "todostream"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ] + nio
        ),
        fuzzTarget(
            "fuzz-deflate",
            [
                .product(name: "Relay", package: "todostream"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ] + nio
        ),
        // Compiles the daemon's Sources/todostreamd/ConfigFile.swift through a symlink (an
        // executable target cannot be a dependency).
        fuzzTarget(
            "fuzz-config-file",
            [
                .product(name: "Relay", package: "todostream"),
                .product(name: "EventStream", package: "todostream"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        fuzzTarget(
            "fuzz-http",
            [
                .product(name: "Relay", package: "todostream"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ] + nio
        ),
    ],
    swiftLanguageModes: [.v5]
)
