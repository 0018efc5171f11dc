// swift-tools-version: 6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "todostream",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "todostreamd", targets: ["todostreamd"]),
        .executable(name: "todostream-load", targets: ["todostream-load"]),
        .executable(name: "todostream", targets: ["todostream-cli"]),
        .library(name: "TodostreamClient", targets: ["TodostreamClient"]),
        // For the microbenchmarks in Benchmarks/ (a package of their own).
        .library(name: "EventStream", targets: ["EventStream"]),
        .library(name: "TodoApp", targets: ["TodoApp"]),
        .library(name: "TodoStore", targets: ["TodoStore"]),
        .library(name: "Relay", targets: ["Relay"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/vapor/sqlite-nio.git", from: "1.13.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
    ],
    targets: [
        .target(
            name: "EventStream",
            dependencies: [],
            swiftSettings: strict
        ),
        .target(
            name: "TodoApp",
            dependencies: ["EventStream"],
            swiftSettings: strict
        ),
        .target(
            name: "TodoStore",
            dependencies: [
                "TodoApp",
                "EventStream",
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "Relay",
            dependencies: [
                "EventStream",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            swiftSettings: strict
        ),
        // A client library of the daemon: the app's events over TCP, TLS or WebSocket.
        .target(
            name: "TodostreamClient",
            dependencies: [
                "TodoApp",
                "EventStream",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "todostream-cli",
            dependencies: [
                "TodostreamClient",
                "TodoApp",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        // The todo app's web page (web/), embedded in the binary by SwiftPM.
        .target(
            name: "TodoWeb",
            resources: [.embedInCode("web")],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "todostreamd",
            dependencies: [
                "EventStream",
                "TodoApp",
                "TodoStore",
                "Relay",
                "TodoWeb",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "todostream-load",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "EventStreamTests",
            dependencies: ["EventStream", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TodoAppTests",
            dependencies: ["TodoApp", "EventStream", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TodoStoreTests",
            dependencies: [
                "TodoStore", "TodoApp", "EventStream", .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "RelayTests",
            dependencies: [
                "Relay",
                "EventStream",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TodostreamClientTests",
            dependencies: [
                "TodostreamClient", "TodoApp", "EventStream",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "todostreamd", "todostream-cli", "TodostreamClient", "Relay", "TodoApp", "TodoStore", "EventStream",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
