import DBusKit
import Foundation
import GatewayCore
import SyncEngine
import Testing
import TestSupport

/// A stand-in for NetworkManager on a private bus: the object, its `State`/`Connectivity` properties
/// and the `StateChanged` signal, which is all the gateway reads.
final class FakeNetworkManager: Sendable {
    let connection: DBusConnection
    init(bus: PrivateBus, state: UInt32, connectivity: UInt32) async throws {
        connection = try await DBusConnection.connect(address: bus.address)
        _ = try await connection.requestName(NetworkManagerState.busName)
        try await connection.export(path: NetworkManagerState.path, interfaces: [
            DBusInterface(NetworkManagerState.interface, properties: ["State": .uint32(state), "Connectivity": .uint32(connectivity)],
                          signals: ["StateChanged": "u"]),
        ])
    }

    func set(state: UInt32, connectivity: UInt32) async throws {
        await connection.setProperties(path: NetworkManagerState.path, interface: NetworkManagerState.interface,
                                       ["Connectivity": .uint32(connectivity), "State": .uint32(state)])
        try await connection.emitSignal(path: NetworkManagerState.path, interface: NetworkManagerState.interface,
                                        member: "StateChanged", arguments: [.uint32(state)])
    }
}

@Suite("Connectivity", .serialized, .timeLimit(.minutes(2)))
struct ConnectivityTests {
    @Test func networkManagerStateAndSignalsFeedTheHub() async throws {
        let bus = try await PrivateBus.start()
        defer { bus.close() }
        let nm = try await FakeNetworkManager(bus: bus, state: 20, connectivity: 1)
        let client = try await DBusConnection.connect(address: bus.address)
        let hub = ConnectivityHub()
        let watcher = Task { await NetworkManagerState.watch(connection: client, hub: hub, logger: .silent) }
        defer { watcher.cancel() }
        #expect(await waitUntil(5) { hub.current() == .down })
        let before = hub.upEventCount
        // The wait's timeout is on a clock that never moves: only the signal can end it.
        let clock = ManualClock()
        let woken = Task { await hub.waitForUp(timeout: .seconds(10), clock: clock) }
        #expect(await waitUntil(5) { hub.waiting == 1 })
        try await nm.set(state: 70, connectivity: 4)
        #expect(await woken.value)
        #expect(hub.current() == .up)
        #expect(hub.upEventCount > before)
        // A captive portal is not connectivity.
        try await nm.set(state: 60, connectivity: 2)
        #expect(await waitUntil(5) { hub.current() == .down })
    }

    @Test func sessionResumesOnTheNetworkManagerEventNotTheProbeTimer() async throws {
        let bus = try await PrivateBus.start()
        defer { bus.close() }
        let nm = try await FakeNetworkManager(bus: bus, state: 70, connectivity: 4)
        let client = try await DBusConnection.connect(address: bus.address)
        let hub = ConnectivityHub()
        let watcher = Task { await NetworkManagerState.watch(connection: client, hub: hub, logger: .silent) }
        defer { watcher.cancel() }
        #expect(await waitUntil(5) { hub.current() == .up })

        let server = try FakeNightscout()
        try await server.control(["mode": "slow", "delay_ms": 300, "times": 3])
        let store = await filledStore(1000)
        var timing = fastTiming()
        timing.probeBase = .seconds(20)
        timing.probeCap = .seconds(60)
        // The fallback probe timer runs on a clock that never moves: only the event can resume the session.
        let clock = ManualClock()
        let recovery = RecoverySettings(retryCount: 0, networkTimeoutMs: 500, recoveryMode: true)
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, connectivity: hub,
                                logger: .silent, timing: timing, loopbackIgnoresConnectivity: false, clock: clock)
        let drain = Task { await uploader.drain(deadline: clock.now + .seconds(40)) }
        // Under way (the first slow answer acknowledged) before the network goes.
        #expect(await waitUntil(10) { ((try? await store.counts(.nightscout))?.acknowledged ?? 0) > 0 })
        // NetworkManager notices first, then the connection breaks.
        try await nm.set(state: 20, connectivity: 1)
        #expect(await waitUntil(5) { hub.current() == .down })
        try await server.control(["mode": "down"])
        #expect(await waitUntil(10) { (try? await store.destinationState(.nightscout))?.state == .recovering })
        try await server.control(["mode": "up"])
        try await nm.set(state: 70, connectivity: 4)
        let outcome = await drain.value
        #expect(outcome.uploaded == 1000, "\(outcome.reports)")
        #expect(!outcome.deferred)
        #expect(try await server.stats()["count"] as? Int == 1000)
    }

    @Test func routeTablesAndNetlinkMessages() {
        let v4 = """
        Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
        eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
        eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
        """
        let v4NoDefault = """
        Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
        eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
        """
        let v6Reject = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
        let v6Default = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n"
        #expect(RouteTable.hasDefaultRoute(ipv4: v4, ipv6: ""))
        #expect(!RouteTable.hasDefaultRoute(ipv4: v4NoDefault, ipv6: v6Reject))
        #expect(RouteTable.hasDefaultRoute(ipv4: v4NoDefault, ipv6: v6Default))

        // RTM_NEWROUTE for 0.0.0.0/0 in the main table, then RTM_DELROUTE for a /24, in one datagram.
        func message(type: UInt16, dstLength: UInt8, table: UInt8) -> [UInt8] {
            var m: [UInt8] = []
            let length: UInt32 = 16 + 12
            m += withUnsafeBytes(of: length.littleEndian, Array.init)
            m += withUnsafeBytes(of: type.littleEndian, Array.init)
            m += [0, 0] + [UInt8](repeating: 0, count: 8)
            m += [2, dstLength, 0, 0, table, 3, 0, 1] + [0, 0, 0, 0]
            return m
        }
        let datagram = message(type: 24, dstLength: 0, table: 254) + message(type: 25, dstLength: 24, table: 254) + message(type: 24, dstLength: 0, table: 255)
        let changes = RouteTable.routeChanges(datagram)
        #expect(changes.count == 2)
        #expect(changes.first?.added == true && changes.first?.prefixLength == 0)
        #expect(changes.last?.added == false && changes.last?.prefixLength == 24)
        // Truncated or garbage input never traps.
        for cut in 0..<datagram.count { _ = RouteTable.routeChanges(Array(datagram[0..<cut])) }
        _ = RouteTable.routeChanges([0xFF, 0xFF, 0xFF, 0xFF, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    }

    @Test func netlinkWatcherStartsAndReadsTheRouteTable() throws {
        let hub = ConnectivityHub()
        let watcher = try #require(NetlinkRouteWatcher(hub: hub, logger: .silent))
        defer { watcher.stop() }
        #expect(hub.current() == RouteTable.current())
    }
}
