import Testing
import DBusKit
import GatewayCore
import TestSupport
@testable import BlueZ

let meterAddress = "AA:BB:CC:DD:EE:01"

/// A private bus, the fake BlueZ and a client.
final class Rig: Sendable {
    let bus: PrivateBus
    let fake: FakeBlueZ
    let client: BlueZClient

    init(script: FakeBlueZ.Script = FakeBlueZ.Script()) async throws {
        bus = try await PrivateBus.start()
        let clock = ManualClock()
        fake = try await FakeBlueZ.start(on: bus, script: script, clock: clock)
        client = try await BlueZClient.connect(bus: bus.address, linkClock: clock)
    }

    func close() async {
        await client.close()
        await fake.stop()
        bus.close()
    }
}

@Suite(.timeLimit(.minutes(1))) struct BlueZClientTests {
    @Test func mirrorFollowsBluetoothdStartingLateAndDiscoveryFiltersByUUID() async throws {
        let bus = try await PrivateBus.start()
        let client = try await BlueZClient.connect(bus: bus.address)
        #expect(await client.owner == nil)
        await #expect(throws: BlueZError.self) { try await client.adapter() }
        let fake = try await FakeBlueZ.start(on: bus)
        let adapter = try await client.waitForAdapter(timeout: .seconds(5))
        #expect(adapter.name == "hci0")
        #expect(adapter.powered)
        #expect(await client.owner == fake.connection.uniqueName)

        try await client.startDiscovery()
        #expect(fake.calls.contains("SetDiscoveryFilter le 00001808-0000-1000-8000-00805f9b34fb"))
        #expect(fake.calls.last == "StartDiscovery")
        let found = await client.discoveredDevices(matching: [.glucoseService])
        try await fake.addDevice(address: "11:22:33:44:55:66", name: "Headphones", uuids: ["0000110b-0000-1000-8000-00805f9b34fb"])
        try await fake.addDevice(address: meterAddress, name: "Meter", rssi: -55)
        let first = try await withTimeout(5) { () -> DiscoveredDevice? in
            for await device in found { return device }
            return nil
        }
        #expect(first?.address == meterAddress)
        #expect(first?.name == "Meter")
        #expect(first?.rssi == -55)
        #expect(first?.paired == false)
        #expect(first?.uuids.contains(GATTUUID.glucoseService.uuidString) == true)
        // RSSI updates of a known device come through too.
        await fake.connection.setProperties(path: FakeBlueZ.devicePath(meterAddress), interface: "org.bluez.Device1",
                                            ["RSSI": .int16(-40)])
        let update = try await withTimeout(5) { () -> Int? in
            for await device in found where device.rssi == -40 { return device.rssi }
            return nil
        }
        #expect(update == -40)
        #expect(try await client.waitForAdapter(timeout: .seconds(1)).discovering)
        try await client.stopDiscovery()
        #expect(fake.calls.last == "StopDiscovery")
        await client.close()
        await fake.stop()
        bus.close()
    }

    @Test func connectResolveSubscribeAndReportAllInOrder() async throws {
        let rig = try await Rig(script: FakeBlueZ.Script(records: 200))
        try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let link = try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(10))
        // One Connect: the mirror had caught up with Connected=true before the services were awaited.
        #expect(rig.fake.calls.filter { $0 == "Connect" }.count == 1)
        #expect(await link.hasCharacteristic(.recordAccessControlPoint))
        #expect(await link.hasCharacteristic(.glucoseMeasurementContext) == false)
        #expect(try await link.read(.glucoseFeature) == [0x02, 0x04])
        try await link.subscribe(.glucoseMeasurement)
        try await link.subscribe(.recordAccessControlPoint)
        try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        let events = try await withTimeout(10) { () -> [MeterLinkEvent] in
            var out: [MeterLinkEvent] = []
            for await event in link.events {
                out.append(event)
                if case .value(.recordAccessControlPoint, _) = event { break }
            }
            return out
        }
        #expect(events.count == 201)
        let expected: [MeterLinkEvent] = (0..<200).map { .value(.glucoseMeasurement, [0x00, UInt8($0 & 0xFF), UInt8($0 >> 8)]) }
            + [.value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01])]
        #expect(events == expected)
        #expect(rig.fake.calls.contains("WriteValue 2a52 request"))
        await link.disconnect()
        // StopNotify for every subscription (sent together, so the fake may run them in either order)
        // answered before Disconnect.
        let tail = Array(rig.fake.calls.suffix(3))
        #expect(tail.prefix(2).sorted() == ["StopNotify 2a18", "StopNotify 2a52"])
        #expect(tail.last == "Disconnect")
        let last = try await withTimeout(5) { () -> MeterLinkEvent? in
            var last: MeterLinkEvent?
            for await event in link.events { last = event }
            return last
        }
        #expect(last == .disconnected(reason: "disconnected by the gateway"))
        await rig.close()
    }

    @Test func transientConnectFailuresAreRetried() async throws {
        let rig = try await Rig(script: FakeBlueZ.Script(
            connectFailures: [
                DBusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local"),
                DBusError(name: "org.bluez.Error.InProgress", message: "In Progress"),
            ],
            dropsBeforeResolve: 1))
        try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let link = try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(20),
                                                     retry: ConnectRetry(initial: .milliseconds(20), attempts: 6))
        #expect(rig.fake.calls.filter { $0 == "Connect" }.count == 4)
        #expect(await link.hasCharacteristic(.glucoseMeasurement))
        await link.disconnect()
        await rig.close()
    }

    /// A meter that forgot its bond, as BlueZ 5.66 shows it (no `Disconnected` reason): each link comes
    /// up and drops some 30 ms later, before services resolve.
    struct BondCase: Sendable, CustomStringConvertible {
        var description: String
        var paired: Bool
        var drops: Int
        var dropAfter: Duration = .milliseconds(30)
        var reason: String?
        /// nil: the link comes up in the end.
        var expected: MeterLinkError.Kind?
        var connects: Int
    }

    static let bondCases: [BondCase] = [
        BondCase(description: "5.66: three quick drops of a bonded meter are a lost bond", paired: true, drops: 10,
                 expected: .bondLost, connects: 3),
        BondCase(description: "two quick drops, then the link works: no verdict", paired: true, drops: 2,
                 expected: nil, connects: 3),
        BondCase(description: "quick drops of a device without a bond are only transient", paired: false, drops: 10,
                 expected: .transient, connects: 6),
        BondCase(description: "slow drops (a fading radio) are only transient", paired: true, drops: 10,
                 dropAfter: .milliseconds(600), expected: .transient, connects: 6),
        BondCase(description: "5.83+: reason Authentication counts however late the drop", paired: true, drops: 10,
                 dropAfter: .milliseconds(600), reason: "org.bluez.Reason.Authentication", expected: .bondLost, connects: 3),
        BondCase(description: "5.83+: another reason does not count however quick the drop", paired: true, drops: 10,
                 reason: "org.bluez.Reason.Remote", expected: .transient, connects: 6),
    ]

    @Test(arguments: bondCases) func lostBondNeedsRepeatedEvidenceOnABondedDevice(_ c: BondCase) async throws {
        let rig = try await Rig(script: FakeBlueZ.Script(dropsBeforeResolve: c.drops, dropAfter: c.dropAfter, dropReason: c.reason))
        try await rig.fake.addDevice(address: meterAddress, name: "Meter", paired: c.paired)
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let retry = ConnectRetry(initial: .milliseconds(20), maximum: .milliseconds(40), attempts: 6, refusedWithin: .milliseconds(300))
        do {
            let link = try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(30), retry: retry)
            #expect(c.expected == nil)
            await link.disconnect()
        } catch {
            #expect(error.kind == c.expected)
            if c.expected == .bondLost {
                #expect(error.message.contains("no longer has the bond"))
            }
        }
        #expect(rig.fake.calls.filter { $0 == "Connect" }.count == c.connects)
        await rig.close()
    }

    @Test func permanentConnectFailureIsNotRetried() async throws {
        let rig = try await Rig(script: FakeBlueZ.Script(connectFailures: [
            DBusError(name: "org.bluez.Error.NotPermitted", message: "Not paired"),
        ]))
        try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let error = await #expect(throws: MeterLinkError.self) {
            try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(10))
        }
        #expect(error?.kind == .permanent)
        #expect(error?.message.contains("org.bluez.Error.NotPermitted") == true)
        #expect(rig.fake.calls.filter { $0 == "Connect" }.count == 1)
        let unknown = await #expect(throws: MeterLinkError.self) {
            try await rig.client.connectMeter(address: "00:00:00:00:00:09", timeout: .seconds(1))
        }
        #expect(unknown?.kind == .permanent)
        await rig.close()
    }

    @Test func servicesNeverResolvingTimesOutAndDisconnects() async throws {
        let rig = try await Rig(script: FakeBlueZ.Script(hangAfterConnect: true))
        try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let error = await #expect(throws: MeterLinkError.self) {
            try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(2))
        }
        #expect(error?.kind == .timeout)
        #expect(rig.fake.calls.last == "Disconnect")
        await rig.close()
    }

    /// Reads and subscriptions of several characteristics go out in one round, answered in the order asked.
    @Test func severalReadsAndSubscriptionsInOneRound() async throws {
        let rig = try await Rig(script: FakeBlueZ.Script(records: 3))
        try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let link = try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(10))
        let reads = await link.read([.glucoseFeature, .dateTime, .glucoseFeature])
        #expect(reads.count == 3)
        #expect(try reads[0].get() == [0x02, 0x04])
        #expect(try reads[2].get() == [0x02, 0x04])
        guard case .failure(let missing) = reads[1] else {
            Issue.record("a characteristic the meter lacks was read")
            return
        }
        #expect(missing.kind == .notSupported)
        #expect(rig.fake.calls.filter { $0 == "ReadValue 2a51" }.count == 2)
        let subscribed = await link.subscribe([.glucoseMeasurement, .glucoseMeasurementContext, .recordAccessControlPoint])
        #expect(subscribed.count == 3)
        #expect((try? subscribed[0].get()) != nil && (try? subscribed[2].get()) != nil)
        guard case .failure(let noContext) = subscribed[1] else {
            Issue.record("a characteristic the meter lacks was subscribed")
            return
        }
        #expect(noContext.kind == .notSupported)
        #expect(rig.fake.calls.filter { $0.hasPrefix("StartNotify") }.sorted() == ["StartNotify 2a18", "StartNotify 2a52"])
        // Both are on: the RACP takes the request (without indications it refuses with ATT 0x81).
        try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        await link.disconnect()
        let stops = Array(rig.fake.calls.suffix(3))
        #expect(stops.prefix(2).sorted() == ["StopNotify 2a18", "StopNotify 2a52"])
        #expect(stops.last == "Disconnect")
        let closed = await link.read([.glucoseFeature])
        guard case .failure(let gone) = closed.first else {
            Issue.record("a closed link was read")
            return
        }
        #expect(gone.kind == .disconnected)
        await rig.close()
    }

    @Test func attErrorsKeepTheirCode() async throws {
        let rig = try await Rig()
        try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let link = try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(10))
        let notConfigured = await #expect(throws: MeterLinkError.self) {
            try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        }
        #expect(notConfigured?.attError == 0x81)
        try await link.subscribe(.recordAccessControlPoint)
        let busy = await #expect(throws: MeterLinkError.self) {
            try await link.write(.recordAccessControlPoint, [0x01, 0x06])
        }
        #expect(busy?.attError == 0x80)
        let missing = await #expect(throws: MeterLinkError.self) { try await link.read(.dateTime) }
        #expect(missing?.kind == .notSupported)
        await link.disconnect()
        let closed = await #expect(throws: MeterLinkError.self) { try await link.read(.glucoseFeature) }
        #expect(closed?.kind == .disconnected)
        await rig.close()
    }

    @Test func deviceVanishingMidTransferEndsTheLink() async throws {
        let rig = try await Rig(script: FakeBlueZ.Script(records: 3))
        let path = try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let link = try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(10))
        try await link.subscribe(.glucoseMeasurement)
        try await link.subscribe(.recordAccessControlPoint)
        try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        let fake = rig.fake
        let events = try await withTimeout(5) { () -> [MeterLinkEvent] in
            var out: [MeterLinkEvent] = []
            for await event in link.events {
                out.append(event)
                // Remove the device in the middle of the transfer.
                if out.count == 2 { await fake.removeDevice(path: path) }
            }
            return out
        }
        // Whatever arrived before the removal, then the end; nothing after it.
        #expect(events.count >= 3 && events.count <= 5)
        #expect(events.dropLast().allSatisfy { if case .value = $0 { true } else { false } })
        #expect(events.last == .disconnected(reason: "the meter's device object was removed"))
        await rig.close()
    }

    @Test func meterDisconnectingEndsTheLink() async throws {
        let rig = try await Rig()
        let path = try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let link = try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(10))
        await rig.fake.connection.setProperties(path: path, interface: "org.bluez.Device1", ["Connected": .bool(false)])
        let last = try await withTimeout(5) { () -> MeterLinkEvent? in
            var last: MeterLinkEvent?
            for await event in link.events { last = event }
            return last
        }
        #expect(last == .disconnected(reason: "the meter disconnected"))
        await rig.close()
    }

    @Test func bluetoothdRestartIsSeenAndRegistrationsAreRenewed() async throws {
        let bus = try await PrivateBus.start()
        let first = try await FakeBlueZ.start(on: bus)
        let client = try await BlueZClient.connect(bus: bus.address)
        let restarts = await client.bluetoothdRestarts()
        try await first.addDevice(address: meterAddress, name: "Meter")
        _ = try await client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        _ = try await client.ensureAgent()
        try await client.startDiscovery()
        let link = try await client.connectMeter(address: meterAddress, timeout: .seconds(10))
        try await link.subscribe(.glucoseMeasurement)
        await first.stop()
        let last = try await withTimeout(5) { () -> MeterLinkEvent? in
            var last: MeterLinkEvent?
            for await event in link.events { last = event }
            return last
        }
        #expect(last == .disconnected(reason: "bluetoothd stopped"))
        let second = try await FakeBlueZ.start(on: bus)
        let newName = try await withTimeout(10) { () -> String? in
            for await name in restarts { return name }
            return nil
        }
        #expect(newName == second.connection.uniqueName)
        #expect(newName != first.connection.uniqueName)
        #expect(second.calls.contains("RegisterAgent KeyboardOnly"))
        #expect(second.calls.contains("StartDiscovery"))
        #expect(await client.device(address: meterAddress) == nil)
        await client.close()
        await second.stop()
        bus.close()
    }

    @Test func pairingAnswersThePasskeyOnlyForTheDeviceBeingPaired() async throws {
        let rig = try await Rig(script: FakeBlueZ.Script(passkey: 4321))
        let path = try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))

        let wrong = await #expect(throws: BlueZError.self) {
            try await rig.client.pair(address: meterAddress, pin: 1234, timeout: .seconds(10))
        }
        #expect(wrong?.name == "org.bluez.Error.AuthenticationFailed")
        #expect(wrong?.kind == .permanent)
        #expect(!rig.fake.calls.contains { $0.hasPrefix("Set Trusted") })

        try await rig.client.pair(address: meterAddress, pin: 4321, timeout: .seconds(10))
        #expect(rig.fake.calls.contains("Set Trusted=true"))
        #expect(rig.fake.calls.filter { $0 == "RegisterAgent KeyboardOnly" }.count == 1)
        let device = try await withTimeout(5) {
            try await rig.client.wait(timeout: .seconds(5), for: "paired") { objects, _ in
                DiscoveredDevice(path: path, interfaces: objects[path]).flatMap { $0.paired && $0.trusted ? $0 : nil }
            }
        }
        #expect(device.paired)

        // Outside a Pair call, or for another device, the agent refuses.
        let agentPath = BlueZClient.agentPath
        let refused = await #expect(throws: DBusError.self) {
            try await rig.fake.connection.call(destination: rig.client.connection.uniqueName, path: agentPath,
                                               interface: "org.bluez.Agent1", member: "RequestPasskey",
                                               arguments: [.objectPath(path)], timeout: .seconds(5))
        }
        #expect(refused?.name.rawValue == "org.bluez.Error.Rejected")
        let confirm = await #expect(throws: DBusError.self) {
            try await rig.fake.connection.call(destination: rig.client.connection.uniqueName, path: agentPath,
                                               interface: "org.bluez.Agent1", member: "RequestConfirmation",
                                               arguments: [.objectPath(path), .uint32(1)], timeout: .seconds(5))
        }
        #expect(confirm?.name.rawValue == "org.bluez.Error.Rejected")
        let cancel = try await rig.fake.connection.call(destination: rig.client.connection.uniqueName, path: agentPath,
                                                        interface: "org.bluez.Agent1", member: "Cancel", timeout: .seconds(5))
        #expect(cancel.isEmpty)
        let agent = try await rig.client.ensureAgent()
        #expect(agent.requests.filter { $0 == .passkeyAnswered(device: path) }.count == 2)
        #expect(agent.requests.last == .cancelled)

        #expect(try await rig.client.removeDevice(address: meterAddress))
        #expect(rig.fake.calls.last == "RemoveDevice \(path)")
        #expect(try await rig.client.removeDevice(address: meterAddress) == false)
        await rig.close()
    }

    @Test func busLossEndsLinksAndEvents() async throws {
        let rig = try await Rig()
        try await rig.fake.addDevice(address: meterAddress, name: "Meter")
        _ = try await rig.client.waitForDevice(address: meterAddress, timeout: .seconds(5))
        let events = await rig.client.bluetoothdEvents()
        let link = try await rig.client.connectMeter(address: meterAddress, timeout: .seconds(10))
        rig.bus.kill()
        let last = try await withTimeout(5) { () -> MeterLinkEvent? in
            var last: MeterLinkEvent?
            for await event in link.events { last = event }
            return last
        }
        #expect(last == .disconnected(reason: "the connection to the bus was lost"))
        let seen = try await withTimeout(5) { () -> [BluetoothdEvent] in
            var out: [BluetoothdEvent] = []
            for await event in events { out.append(event) }
            return out
        }
        #expect(seen == [.stopped])
        await rig.close()
    }
}
