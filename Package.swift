// swift-tools-version: 6.0
//
// glucose-gateway: a headless Bluetooth LE glucose-meter gateway.
// Targets depend downward only (see docs/layout.md). No outside Swift packages:
// C libraries come from Debian packages through system-library targets.
// Oldest Swift: 6.0 for the product (Debian 13's swiftlang 6.0.3 builds it, see scripts/trixie-root.sh);
// 6.1 for the tests, which use the error that Swift Testing's #expect(throws:) returns from 6.1 on.
// Linux only: the gateway reads notifications with `recvmmsg`, watches files with inotify and talks to BlueZ,
// none of which another platform has, so no platform is declared.
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "glucose-gateway",
    products: [
        .executable(name: "glucose-gateway", targets: ["glucose-gateway"]),
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
        // The toolkit: JSON, files, locks, logging, clocks, hex, terminal text. It knows nothing of the product.
        .target(name: "Support", swiftSettings: strict),
        .target(name: "GatewayCore", dependencies: ["GlucoseProfile"], swiftSettings: strict),
        .target(name: "DBusKit", dependencies: ["CDBus"], swiftSettings: strict),
        // recvmmsg, which the Swift importer's view of the C library does not show (see packet_socket.c).
        .target(name: "CPacketSocket"),
        .target(name: "BlueZ", dependencies: ["DBusKit", "GatewayCore", "CPacketSocket", "Support"], swiftSettings: strict),
        .target(name: "SQLiteStore", dependencies: ["CSQLite", "GatewayCore", "GlucoseProfile", "Support"], swiftSettings: strict),
        // The HTTP and MQTT clients and the URL type: the only importer of libcurl and libmosquitto.
        .target(name: "Transport", dependencies: ["Support", "CCurl", "CMosquitto"], swiftSettings: strict),
        .target(name: "SyncEngine", dependencies: ["Transport", "GatewayCore", "GlucoseProfile", "DBusKit", "Support"], swiftSettings: strict),
        .target(name: "Gateway", dependencies: ["GatewayCore", "GlucoseProfile", "Support", "Transport"], swiftSettings: strict),
        .target(name: "MeterSimulator", dependencies: ["DBusKit", "GlucoseProfile", "GatewayCore", "Support"], swiftSettings: strict),
        .target(
            name: "GatewayCLI",
            dependencies: ["GlucoseProfile", "GatewayCore", "DBusKit", "BlueZ", "SQLiteStore", "SyncEngine", "Gateway", "MeterSimulator", "Support", "Transport"],
            swiftSettings: strict
        ),
        .executableTarget(name: "glucose-gateway", dependencies: ["GatewayCLI"], swiftSettings: strict),
        // The benchmarks start the gateway and the simulator as programs; they import only these.
        .executableTarget(
            name: "glucose-gateway-bench",
            dependencies: ["GlucoseProfile", "GatewayCore", "DBusKit", "BlueZ", "SQLiteStore", "SyncEngine", "Support", "Transport"],
            swiftSettings: strict
        ),

        .target(name: "TestSupport", dependencies: ["GatewayCore", "GlucoseProfile", "Support"], path: "Tests/TestSupport", exclude: ["private-bus.conf"], swiftSettings: strict),
        .testTarget(name: "GlucoseProfileTests", dependencies: ["GlucoseProfile", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "GatewayCoreTests", dependencies: ["GatewayCore", "TestSupport", "Support"], swiftSettings: strict),
        .testTarget(name: "DBusKitTests", dependencies: ["DBusKit", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBusKit", "MeterSimulator", "Gateway", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "SQLiteStoreTests", dependencies: ["SQLiteStore", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "SyncEngineTests", dependencies: ["SyncEngine", "SQLiteStore", "TestSupport", "GatewayCore", "DBusKit", "Support", "Transport"], swiftSettings: strict),
        .testTarget(name: "GatewayTests", dependencies: ["Gateway", "SQLiteStore", "TestSupport", "Support"], swiftSettings: strict),
        .testTarget(name: "GatewayCLITests", dependencies: ["GatewayCLI", "TestSupport", "Support"], swiftSettings: strict),
        .testTarget(name: "MeterSimulatorTests", dependencies: ["MeterSimulator", "BlueZ", "DBusKit", "GlucoseProfile", "GatewayCore", "TestSupport", "Support"], swiftSettings: strict),
    ],
    swiftLanguageModes: [.v6]
)
