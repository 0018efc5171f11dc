// swift-tools-version: 6.1
// Microbenchmarks of todostream's hot path (ordo-one/benchmark), kept in a package of their own
// so that building and testing the daemon does not build the benchmark tooling.
//
//   scripts/microbench                 run them all
//   scripts/microbench --filter 'Fan-out.*'
import PackageDescription

let package = Package(
    name: "todostream-benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "todostream", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
    ],
    targets: [
        .executableTarget(
            name: "HotPath",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "EventStream", package: "todostream"),
                .product(name: "TodoApp", package: "todostream"),
                .product(name: "TodoStore", package: "todostream"),
                .product(name: "Relay", package: "todostream"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/HotPath",
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark")
            ]
        )
    ],
    swiftLanguageModes: [.v6]
)
