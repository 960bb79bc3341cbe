// swift-tools-version: 6.0
//
// glucose-gateway: a headless Bluetooth LE glucose-meter gateway.
// Targets depend downward only (see docs/layout.md). No outside Swift packages:
// C libraries come from Debian packages through system-library targets.
// Oldest Swift: 6.0 for the product (Debian 13's swiftlang 6.0.3 builds it, see scripts/trixie-root.sh);
// 6.1 for the tests, which use the error that Swift Testing's #expect(throws:) returns from 6.1 on.
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "glucose-gateway",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "glucose-gateway", targets: ["glucose-gateway"]),
        // The meter simulator: a test double and the demo's meter, kept out of the gateway's binary.
        .executable(name: "glucose-gateway-simulator", targets: ["glucose-gateway-simulator"]),
        .library(name: "GlucoseProfile", targets: ["GlucoseProfile"]),
    ],
    targets: [
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // libcurl's headers only: the library is loaded at run time on the first upload (see Sources/CCurl/shim.h),
        // so pkg-config, which would link it into every process, is not used here.
        .systemLibrary(name: "CCurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // libmosquitto's headers only, loaded at run time when [mqtt] is configured (see Sources/CMosquitto/shim.h).
        .systemLibrary(name: "CMosquitto", providers: [.apt(["libmosquitto-dev"])]),

        .target(name: "GlucoseProfile", swiftSettings: strict),
        .target(name: "GatewayCore", dependencies: ["GlucoseProfile"], swiftSettings: strict),
        .target(name: "DBusKit", dependencies: ["CDBus"], swiftSettings: strict),
        // recvmmsg, which the Swift importer's view of the C library does not show (see packet_socket.c).
        .target(name: "CPacketSocket"),
        .target(name: "BlueZ", dependencies: ["DBusKit", "GatewayCore", "CPacketSocket"], swiftSettings: strict),
        .target(name: "SQLiteStore", dependencies: ["CSQLite", "GatewayCore", "GlucoseProfile"], swiftSettings: strict),
        .target(name: "SyncEngine", dependencies: ["GatewayCore", "GlucoseProfile", "DBusKit", "CCurl", "CMosquitto"], swiftSettings: strict),
        .target(name: "Gateway", dependencies: ["GatewayCore", "GlucoseProfile"], swiftSettings: strict),
        // A session with a meter as a file (docs/captures.md): written by `glucose-gateway capture`, replayed by the simulator.
        .target(name: "MeterCapture", dependencies: ["GatewayCore"], swiftSettings: strict),
        .target(name: "MeterSimulator", dependencies: ["DBusKit", "GlucoseProfile", "GatewayCore", "MeterCapture"], swiftSettings: strict),
        .target(
            name: "GatewayCLI",
            dependencies: ["GlucoseProfile", "GatewayCore", "DBusKit", "BlueZ", "SQLiteStore", "SyncEngine", "Gateway", "MeterCapture"],
            swiftSettings: strict
        ),
        .executableTarget(name: "glucose-gateway", dependencies: ["GatewayCLI"], swiftSettings: strict),
        .executableTarget(name: "glucose-gateway-simulator", dependencies: ["MeterSimulator", "MeterCapture", "DBusKit", "GlucoseProfile", "GatewayCore"], swiftSettings: strict),
        .executableTarget(
            name: "glucose-gateway-bench",
            dependencies: ["GlucoseProfile", "GatewayCore", "DBusKit", "BlueZ", "SQLiteStore", "SyncEngine", "Gateway", "MeterSimulator", "GatewayCLI"],
            swiftSettings: strict
        ),

        .target(name: "TestSupport", dependencies: ["GatewayCore", "GlucoseProfile"], path: "Tests/TestSupport", exclude: ["private-bus.conf"], swiftSettings: strict),
        .testTarget(name: "GlucoseProfileTests", dependencies: ["GlucoseProfile", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "GatewayCoreTests", dependencies: ["GatewayCore", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "DBusKitTests", dependencies: ["DBusKit", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBusKit", "MeterSimulator", "Gateway", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "SQLiteStoreTests", dependencies: ["SQLiteStore", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "SyncEngineTests", dependencies: ["SyncEngine", "SQLiteStore", "TestSupport", "GatewayCore", "DBusKit"], swiftSettings: strict),
        .testTarget(name: "GatewayTests", dependencies: ["Gateway", "SQLiteStore", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "GatewayCLITests", dependencies: ["GatewayCLI", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "MeterCaptureTests", dependencies: ["MeterCapture", "GlucoseProfile", "GatewayCore", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "MeterSimulatorTests", dependencies: ["MeterSimulator", "BlueZ", "DBusKit", "GlucoseProfile", "GatewayCore", "TestSupport"], swiftSettings: strict),
    ],
    swiftLanguageModes: [.v6]
)
