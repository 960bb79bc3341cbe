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
        // The meter side: one session with one meter, its download (RACP procedures, intake, clinical rules),
        // meter clocks, pairing and zones.
        .target(name: "Meters", dependencies: ["GatewayCore", "GlucoseProfile", "Support"], swiftSettings: strict),
        // The application: the daemon, its schedule and the services its snapshots feed; the config loader.
        .target(name: "Gateway", dependencies: ["Meters", "SyncEngine", "Transport", "SQLiteStore", "GatewayCore", "GlucoseProfile", "Support"], swiftSettings: strict),
        // A session with a meter as a file (docs/captures.md): written by `glucose-gateway capture`, replayed by the simulator.
        .target(name: "MeterCapture", dependencies: ["GatewayCore", "Support"], swiftSettings: strict),
        .target(name: "MeterSimulator", dependencies: ["DBusKit", "GlucoseProfile", "GatewayCore", "MeterCapture", "Support"], swiftSettings: strict),
        .target(
            name: "GatewayCLI",
            dependencies: ["GlucoseProfile", "GatewayCore", "DBusKit", "BlueZ", "SQLiteStore", "SyncEngine", "Meters", "Gateway", "MeterCapture", "Support"],
            swiftSettings: strict
        ),
        .executableTarget(name: "glucose-gateway", dependencies: ["GatewayCLI", "Support"], swiftSettings: strict),
        .executableTarget(name: "glucose-gateway-simulator", dependencies: ["MeterSimulator", "MeterCapture", "DBusKit", "GlucoseProfile", "GatewayCore", "Support"], swiftSettings: strict),
        // The benchmarks start the gateway and the simulator as programs; they import only these.
        .executableTarget(
            name: "glucose-gateway-bench",
            dependencies: ["GlucoseProfile", "GatewayCore", "DBusKit", "BlueZ", "SQLiteStore", "SyncEngine", "Support", "Transport"],
            swiftSettings: strict
        ),

        // Tests come in two kinds (see docs/testing.md). A `...Tests` target is pure: in-process, no child
        // process, no bus, no socket server, no real-time wait; these run in parallel in seconds.
        // A `...IntegrationTests` target starts what the code meets outside the process (a private
        // dbus-daemon, bluezoo, the Python servers, mosquitto, loopback HTTP servers, a child writer) and
        // runs one test at a time (scripts/test.sh).
        .target(name: "TestSupport", dependencies: ["GatewayCore", "GlucoseProfile", "Support"], path: "Tests/TestSupport", exclude: ["private-bus.conf"], swiftSettings: strict),
        // What tests look at inside a store, through a testable import: the product carries none of it.
        .target(name: "SQLiteStoreTestSupport", dependencies: ["SQLiteStore", "Support"], path: "Tests/SQLiteStoreTestSupport", swiftSettings: strict),
        .testTarget(name: "GlucoseProfileTests", dependencies: ["GlucoseProfile", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "GatewayCoreTests", dependencies: ["GatewayCore", "TestSupport", "Support"], swiftSettings: strict),
        .testTarget(name: "DBusKitTests", dependencies: ["DBusKit", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "DBusKitIntegrationTests", dependencies: ["DBusKit", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBusKit", "TestSupport", "GatewayCore"], swiftSettings: strict),
        .testTarget(name: "BlueZIntegrationTests", dependencies: ["BlueZ", "DBusKit", "MeterSimulator", "Meters", "TestSupport", "GatewayCore", "GlucoseProfile", "Support"], swiftSettings: strict),
        .testTarget(name: "SQLiteStoreTests", dependencies: ["SQLiteStore", "SQLiteStoreTestSupport", "CSQLite", "GatewayCore", "GlucoseProfile"], swiftSettings: strict),
        .testTarget(name: "SQLiteStoreIntegrationTests", dependencies: ["SQLiteStore", "TestSupport", "GatewayCore"], swiftSettings: strict),
        .testTarget(name: "SyncEngineTests", dependencies: ["SyncEngine", "TestSupport", "GatewayCore", "Support", "Transport", "GlucoseProfile"], swiftSettings: strict),
        .testTarget(name: "SyncEngineIntegrationTests", dependencies: ["SyncEngine", "TestSupport", "GatewayCore", "DBusKit", "Support", "Transport", "GlucoseProfile"], swiftSettings: strict),
        .testTarget(name: "GatewayTests", dependencies: ["Gateway", "Meters", "SyncEngine", "SQLiteStore", "SQLiteStoreTestSupport", "TestSupport", "Support", "GatewayCore", "GlucoseProfile", "Transport"], swiftSettings: strict),
        .testTarget(name: "GatewayCLITests", dependencies: ["GatewayCLI", "Support", "Gateway", "GatewayCore", "SyncEngine"], swiftSettings: strict),
        .testTarget(name: "MeterCaptureTests", dependencies: ["MeterCapture", "GlucoseProfile", "GatewayCore", "TestSupport", "Support"], swiftSettings: strict),
        .testTarget(name: "MeterSimulatorTests", dependencies: ["MeterSimulator", "BlueZ", "GlucoseProfile", "GatewayCore", "TestSupport", "Support"], swiftSettings: strict),
        .testTarget(name: "MeterSimulatorIntegrationTests", dependencies: ["MeterSimulator", "BlueZ", "GlucoseProfile", "GatewayCore", "TestSupport", "Support"], swiftSettings: strict),
    ],
    swiftLanguageModes: [.v6]
)
