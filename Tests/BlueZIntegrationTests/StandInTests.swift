import Testing
import DBusKit
import GatewayCore
import GlucoseProfile
import MeterSimulator
import TestSupport
@testable import BlueZ

/// The client against the meter simulator's BlueZ stand-in on a private bus.
final class StandInRig: Sendable {
    static let address = "C0:FF:EE:00:00:01"
    static let passkey: UInt32 = 246_813

    let bus: PrivateBus
    let standIn: BlueZStandIn
    let client: BlueZClient

    init(records: Int = 50, withContext: Bool = false, faults: MeterFaults = MeterFaults(),
         configure: (inout StandInOptions) -> Void = { _ in }) async throws {
        bus = try await PrivateBus.start()
        var options = StandInOptions(busAddress: bus.address)
        options.clock = SimulationClock(scale: 20)
        configure(&options)
        let meter = MeterDescription(
            address: Self.address, name: "GlucoSim", passkey: Self.passkey,
            records: MeterSeries.records(count: records, firstSequence: 1, start: nil, intervalMinutes: 60,
                                         timeOffset: nil, unit: .kilogramPerLitre, withContext: withContext),
            faults: faults)
        standIn = BlueZStandIn(meters: [meter], options: options, logger: .silent)
        try await standIn.start()
        client = try await BlueZClient.connect(bus: bus.address)
    }

    /// The stand-in's log of BlueZ calls, "Interface.Method /path".
    func callLog() async throws -> [String] {
        let reply = try await client.connection.call(
            destination: "org.bluez", path: StandInDocs.controlPath, interface: "org.glucosegateway.Simulator1",
            member: "CallLog", timeout: .seconds(5))
        return reply.first?.stringArray ?? []
    }

    /// Discovers the meter (by the Glucose Service UUID) and returns it.
    func discover() async throws -> DiscoveredDevice {
        _ = try await client.waitForAdapter(timeout: .seconds(5))
        let found = await client.discoveredDevices(matching: [.glucoseService])
        try await client.startDiscovery()
        return try await withTimeout(10) { () -> DiscoveredDevice in
            for await device in found where device.address == Self.address { return device }
            throw BlueZError(.notFound, "meter not discovered")
        }
    }

    /// Discovers, pairs and connects; subscribes to 0x2A18 and RACP.
    func connectedLink() async throws -> BlueZMeterLink {
        _ = try await discover()
        try await client.pair(address: Self.address, pin: Self.passkey, timeout: .seconds(20))
        let link = try await client.connectMeter(address: Self.address, timeout: .seconds(20))
        try await link.subscribe(.glucoseMeasurement)
        try await link.subscribe(.recordAccessControlPoint)
        return link
    }

    func close() async {
        await client.close()
        await standIn.stop()
        bus.close()
    }
}

/// The sequence number of a Glucose Measurement (flags, then the sequence number, little-endian).
func sequenceNumber(_ bytes: [UInt8]) -> Int? {
    guard bytes.count >= 3 else { return nil }
    return Int(bytes[1]) | Int(bytes[2]) << 8
}

@Suite(.timeLimit(.minutes(1))) struct StandInTests {
    @Test func meterThatForgotItsBondIsReportedAsBondLostUntilPairedAgain() async throws {
        let rig = try await StandInRig(records: 3)
        let link = try await rig.connectedLink()
        await link.disconnect()
        try await rig.standIn.forgetBond(StandInRig.address)
        let before = try await rig.callLog().filter { $0.hasPrefix("org.bluez.Device1.Connect ") }.count
        let retry = ConnectRetry(initial: .milliseconds(20), maximum: .milliseconds(40), attempts: 6)
        let error = await #expect(throws: MeterLinkError.self) {
            try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20), retry: retry)
        }
        #expect(error?.kind == .bondLost)
        // The stand-in gives the reason, as BlueZ 5.83+ does; the key stays on the gateway's side.
        #expect(error?.message.contains("org.bluez.Reason.Authentication") == true)
        let after = try await rig.callLog().filter { $0.hasPrefix("org.bluez.Device1.Connect ") }.count
        #expect(after - before == 3)
        #expect(await rig.client.device(address: StandInRig.address)?.paired == true)
        // The client's object mirror takes in the link's `Connected = false` from its signal stream, which
        // may come to it after the `Connect` error has been answered: wait for it rather than race it.
        #expect(await waitUntil(5) { await rig.client.device(address: StandInRig.address)?.connected == false })

        // Pairing again (after removing the stale key) makes the meter work again.
        #expect(try await rig.client.removeDevice(address: StandInRig.address))
        _ = try await rig.discover()
        try await rig.client.pair(address: StandInRig.address, pin: StandInRig.passkey, timeout: .seconds(20))
        let again = try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20))
        #expect(try await again.read(.glucoseFeature).count == 2)
        await again.disconnect()
        await rig.close()
    }

    /// BlueZ 5.66 and 5.82 (Raspberry Pi OS bookworm and trixie) send no `Device1.Disconnected`: a meter
    /// that forgot its bond is then known only by links that drop right after they came up, before their
    /// services were resolved, three times in a row.
    @Test func meterThatForgotItsBondIsReportedAsBondLostWithoutADisconnectedSignal() async throws {
        let rig = try await StandInRig(records: 3) { $0.disconnectedSignal = false }
        let link = try await rig.connectedLink()
        await link.disconnect()
        try await rig.standIn.forgetBond(StandInRig.address)
        let retry = ConnectRetry(initial: .milliseconds(20), maximum: .milliseconds(40), attempts: 6)
        let error = await #expect(throws: MeterLinkError.self) {
            try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20), retry: retry)
        }
        #expect(error?.kind == .bondLost)
        #expect(error?.message.contains("org.bluez.Reason") == false)
        #expect(await rig.client.device(address: StandInRig.address)?.paired == true)
        await rig.close()
    }

    /// BlueZ 5.82 removes a connected device only once its link is down (`RemoveDevice` replies first):
    /// when `removeDevice` returns, the object with its `Paired=true` must be gone, or `pair` would take
    /// it for a working bond and keep the stale key (the bond-loss scenario on trixie).
    @Test func removingAConnectedDeviceWaitsUntilBlueZHasDroppedIt() async throws {
        let rig = try await StandInRig(records: 3) { $0.removalAfterDisconnect = 10 }
        let link = try await rig.connectedLink()
        #expect(await rig.client.device(address: StandInRig.address)?.connected == true)
        #expect(try await rig.client.removeDevice(address: StandInRig.address))
        #expect(await rig.client.device(address: StandInRig.address) == nil)
        await link.disconnect()
        await rig.close()
    }

    /// The stand-in playing 5.66/5.82 lists no signal on Device1, as their introspection does.
    @Test func withoutTheDisconnectedSignalDevice1IntrospectsNoSignal() async throws {
        let rig = try await StandInRig(records: 1) { $0.disconnectedSignal = false }
        _ = try await rig.discover()
        let path = "/org/bluez/hci0/dev_" + StandInRig.address.split(separator: ":").joined(separator: "_")
        let reply = try await rig.client.connection.call(
            destination: "org.bluez", path: path, interface: "org.freedesktop.DBus.Introspectable",
            member: "Introspect", timeout: .seconds(5))
        let xml = try #require(reply.first?.string)
        #expect(xml.contains("org.bluez.Device1"))
        #expect(!xml.contains("name=\"Disconnected\""))
        await rig.close()
    }

    @Test func discoverPairConnectAndReportAllInOrder() async throws {
        let rig = try await StandInRig(records: 60)
        let device = try await rig.discover()
        #expect(device.name == "GlucoSim")
        #expect(device.uuids.contains(GATTUUID.glucoseService.uuidString))
        #expect(device.paired == false)

        try await rig.client.pair(address: StandInRig.address, pin: StandInRig.passkey, timeout: .seconds(20))
        let paired = try #require(await rig.client.device(address: StandInRig.address))
        #expect(paired.paired)

        let link = try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20))
        #expect(await link.hasCharacteristic(.glucoseFeature))
        let feature = try await link.read(.glucoseFeature)
        #expect(feature.count == 2)
        try await link.subscribe(.glucoseMeasurement)
        if await link.hasCharacteristic(.glucoseMeasurementContext) { try await link.subscribe(.glucoseMeasurementContext) }
        try await link.subscribe(.recordAccessControlPoint)
        try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        let events = try await eventsUntilRACPAnswer(link)
        let sequences = events.compactMap { event -> Int? in
            if case .value(.glucoseMeasurement, let bytes) = event { return sequenceNumber(bytes) }
            return nil
        }
        #expect(sequences == Array(1...60))
        #expect(events.last == .value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01]))

        await link.disconnect()
        let log = try await rig.callLog()
        // The measurements come through an acquired socket, the RACP's indications over the bus.
        #expect(log.contains { $0.hasPrefix("org.bluez.GattCharacteristic1.AcquireNotify ") })
        let stops = log.indices.filter { log[$0].hasPrefix("org.bluez.GattCharacteristic1.StopNotify") }
        let disconnect = try #require(log.lastIndex { $0.hasPrefix("org.bluez.Device1.Disconnect") })
        #expect(stops.count >= 1)
        #expect(stops.allSatisfy { $0 < disconnect })
        #expect(log.contains { $0.hasPrefix("org.bluez.Adapter1.SetDiscoveryFilter") })
        #expect(log.contains("org.bluez.AgentManager1.RegisterAgent /org/bluez"))
        await rig.close()
    }

    @Test func wrongPinIsAuthenticationFailedAndAnUnansweredAgentTimesOut() async throws {
        let rig = try await StandInRig()
        _ = try await rig.discover()
        let wrong = await #expect(throws: BlueZError.self) {
            try await rig.client.pair(address: StandInRig.address, pin: 111_111, timeout: .seconds(20))
        }
        #expect(wrong?.name == "org.bluez.Error.AuthenticationFailed")
        #expect(wrong?.kind == .permanent)
        #expect(await rig.client.device(address: StandInRig.address)?.paired == false)

        // Nobody types the PIN: our Pair gives up after its own timeout and cancels the pairing. The PIN
        // prompt answers only after Pair has returned, so Pair cannot have waited for it.
        let pairReturned = TestEvent()
        let client = rig.client
        let outcome = try await withTimeout(20) { () -> BlueZError? in
            do throws(BlueZError) {
                try await client.pair(address: StandInRig.address, timeout: .seconds(1)) { _ in
                    try await pairReturned.wait()
                    return StandInRig.passkey
                }
                return nil
            } catch {
                return error
            }
        }
        pairReturned.signal()
        let timedOut = try #require(outcome, "an unanswered PIN prompt paired")
        #expect(timedOut.kind == .timeout)
        #expect(try await rig.callLog().contains { $0.hasPrefix("org.bluez.Device1.CancelPairing") })

        // The right PIN still works afterwards.
        try await rig.client.pair(address: StandInRig.address, pin: StandInRig.passkey, timeout: .seconds(20))
        #expect(await rig.client.device(address: StandInRig.address)?.paired == true)
        await rig.close()
    }

    @Test func bluetoothdRestartWhileSubscribed() async throws {
        let rig = try await StandInRig()
        let restarts = await rig.client.bluetoothdRestarts()
        let link = try await rig.connectedLink()
        let before = await rig.client.owner
        try await rig.standIn.restartBluetoothd()
        let last = try await withTimeout(10) { () -> MeterLinkEvent? in
            var last: MeterLinkEvent?
            for await event in link.events { last = event }
            return last
        }
        #expect(last == .disconnected(reason: "bluetoothd stopped") || last == .disconnected(reason: "bluetoothd restarted"))
        let newName = try await withTimeout(10) { () -> String? in
            for await name in restarts { return name }
            return nil
        }
        #expect(newName != nil)
        #expect(newName != before)
        let log = try await rig.callLog()
        #expect(log.contains("org.bluez.AgentManager1.RegisterAgent /org/bluez"))
        #expect(log.contains { $0.hasPrefix("org.bluez.Adapter1.StartDiscovery") })
        // The bond survived; the meter is found again and a new link works.
        _ = try await rig.client.waitForDevice(address: StandInRig.address, timeout: .seconds(10))
        let again = try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20))
        try await again.subscribe(.recordAccessControlPoint)
        await again.disconnect()
        await rig.close()
    }

    @Test func meterDroppingTheLinkMidTransfer() async throws {
        let rig = try await StandInRig(records: 40, faults: MeterFaults(dropLinkAfter: 10))
        let link = try await rig.connectedLink()
        try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        let events = try await withTimeout(20) { () -> [MeterLinkEvent] in
            var out: [MeterLinkEvent] = []
            for await event in link.events { out.append(event) }
            return out
        }
        let values = events.filter { if case .value(.glucoseMeasurement, _) = $0 { true } else { false } }
        #expect(values.count <= 10)
        #expect(events.last == .disconnected(reason: "the meter disconnected"))
        await rig.close()
    }

    @Test func adapterVanishingMidTransfer() async throws {
        let rig = try await StandInRig(records: 400, faults: MeterFaults(notificationDelay: 0.2))
        let link = try await rig.connectedLink()
        try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        let standIn = rig.standIn
        let events = try await withTimeout(20) { () -> [MeterLinkEvent] in
            var out: [MeterLinkEvent] = []
            for await event in link.events {
                out.append(event)
                if out.count == 3 { await standIn.removeAdapter() }
            }
            return out
        }
        #expect(events.count < 400)
        guard case .disconnected = events.last else {
            Issue.record("the link did not end: \(String(describing: events.last))")
            await rig.close()
            return
        }
        await rig.close()
    }

    @Test func busLossEndsTheLink() async throws {
        let rig = try await StandInRig()
        let link = try await rig.connectedLink()
        let events = await rig.client.bluetoothdEvents()
        rig.bus.kill()
        let last = try await withTimeout(10) { () -> MeterLinkEvent? in
            var last: MeterLinkEvent?
            for await event in link.events { last = event }
            return last
        }
        #expect(last == .disconnected(reason: "the connection to the bus was lost"))
        let seen = try await withTimeout(10) { () -> [BluetoothdEvent] in
            var out: [BluetoothdEvent] = []
            for await event in events { out.append(event) }
            return out
        }
        #expect(seen.last == .stopped)
        await rig.close()
    }

    /// BlueZ 5.66 brings the link up without a `Connected=true` signal (seen on the real stack): the client
    /// asks bluetoothd instead of taking the silent mirror for a drop, and the link works.
    @Test func connectedNeverSignalledIsConfirmedByAskingBluetoothd() async throws {
        let rig = try await StandInRig(records: 5)
        _ = try await rig.discover()
        try await rig.client.pair(address: StandInRig.address, pin: StandInRig.passkey, timeout: .seconds(20))
        try await rig.client.stopDiscovery()
        // Pair leaves the link up; the case is a fresh connection.
        let paired = try #require(await rig.client.device(address: StandInRig.address))
        _ = try await rig.client.connection.call(destination: "org.bluez", path: paired.path, interface: "org.bluez.Device1",
                                                 member: "Disconnect", timeout: .seconds(5))
        _ = try await rig.client.wait(timeout: .seconds(5), for: "the pairing link to end") { objects, _ in
            objects[paired.path]?["org.bluez.Device1"]?["Connected"]?.bool == false ? true : nil
        }
        try await rig.standIn.setQuirks(StandInRig.address, [.silentConnected])
        let link = try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(5),
                                                     retry: ConnectRetry(attempts: 1))
        #expect(await rig.client.device(address: StandInRig.address)?.connected == true)
        try await link.subscribe(.glucoseMeasurement)
        try await link.subscribe(.recordAccessControlPoint)
        try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        let events = try await eventsUntilRACPAnswer(link)
        #expect(events.compactMap { if case .value(.glucoseMeasurement, let b) = $0 { sequenceNumber(b) } else { nil } } == Array(1...5))
        // A real drop afterwards is still seen (the Connected=false signal does come).
        try await rig.standIn.dropLink(StandInRig.address)
        let last = try await withTimeout(10) { () -> MeterLinkEvent? in
            for await event in link.events { if case .disconnected = event { return event } }
            return nil
        }
        #expect(last == .disconnected(reason: "the meter disconnected"))
        let log = try await rig.callLog()
        #expect(log.filter { $0.hasPrefix("org.bluez.Device1.Connect ") }.count == 1)
        await rig.close()
    }

    /// Seen on the real stack: a killed bluetoothd leaves its discovery running in the kernel; the new
    /// one answers StartDiscovery with InProgress and keeps no session. The client asks again until the
    /// adapter discovers (it used to take InProgress for its own session and never discover again).
    @Test func discoveryReturnsAfterACrashedBluetoothdLeftItsOwnInTheKernel() async throws {
        let rig = try await StandInRig()
        _ = try await rig.discover()
        let restarts = await rig.client.bluetoothdRestarts()
        try await rig.standIn.crashBluetoothd()
        _ = try await withTimeout(10) { () -> String? in
            for await name in restarts { return name }
            return nil
        }
        _ = try await rig.client.wait(timeout: .seconds(10), for: "discovery after the crash") { objects, _ in
            BlueZClient.pickAdapter(named: nil, powered: true, in: objects)?.discovering == true ? true : nil
        }
        let log = try await rig.callLog()
        #expect(log.filter { $0.hasPrefix("org.bluez.Adapter1.StartDiscovery") }.count >= 3)
        await rig.close()
    }
}

/// Notifications through `AcquireNotify` sockets, against the stand-in (which offers them as bluetoothd does).
@Suite(.timeLimit(.minutes(1))) struct AcquiredNotificationTests {
    /// Subscribes as a download does, asks for every record and collects the events up to the RACP's answer.
    static func report(_ link: BlueZMeterLink) async throws -> [MeterLinkEvent] {
        let results = await link.subscribe([.glucoseMeasurement, .glucoseMeasurementContext, .recordAccessControlPoint])
        for result in results { try result.get() }
        return try await reportAgain(link)
    }

    /// Asks for every record on a link already subscribed and collects the events up to the RACP's answer.
    static func reportAgain(_ link: BlueZMeterLink) async throws -> [MeterLinkEvent] {
        try await link.write(.recordAccessControlPoint, [0x01, 0x01])
        return try await withTimeout(20) { () -> [MeterLinkEvent] in
            var out: [MeterLinkEvent] = []
            for await event in link.events {
                out.append(event)
                if case .value(.recordAccessControlPoint, _) = event { break }
            }
            return out
        }
    }

    static func connect(_ rig: StandInRig) async throws -> BlueZMeterLink {
        _ = try await rig.discover()
        try await rig.client.pair(address: StandInRig.address, pin: StandInRig.passkey, timeout: .seconds(20))
        return try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20))
    }

    static func sequences(_ events: [MeterLinkEvent], _ uuid: GATTUUID) -> [Int] {
        events.compactMap { event -> Int? in
            guard case .value(let from, let bytes) = event, from == uuid else { return nil }
            return sequenceNumber(bytes)
        }
    }

    static func calls(_ log: [String], _ member: String) -> [String] {
        log.filter { $0.hasPrefix("org.bluez.GattCharacteristic1.\(member) ") }
    }

    @Test func measurementsAndContextsComeThroughSocketsAndTheReportEndsAfterThem() async throws {
        let rig = try await StandInRig(records: 120, withContext: true)
        let link = try await Self.connect(rig)
        let events = try await Self.report(link)
        #expect(Self.sequences(events, .glucoseMeasurement) == Array(1...120))
        // Each socket in its order (between the two, a context may come before or after its measurement).
        #expect(Self.sequences(events, .glucoseMeasurementContext) == Array(1...120))
        #expect(events.last == .value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01]))
        let paths = link.characteristicPaths
        let measurementPath = try #require(paths[GATTUUID.glucoseMeasurement.uuidString])
        let contextPath = try #require(paths[GATTUUID.glucoseMeasurementContext.uuidString])
        let racpPath = try #require(paths[GATTUUID.recordAccessControlPoint.uuidString])
        var log = try await rig.callLog()
        // The two that notify are acquired; the RACP indicates, so it is started over the bus.
        #expect(Set(Self.calls(log, "AcquireNotify")) == ["org.bluez.GattCharacteristic1.AcquireNotify \(measurementPath)",
                                                         "org.bluez.GattCharacteristic1.AcquireNotify \(contextPath)"])
        #expect(Self.calls(log, "StartNotify") == ["org.bluez.GattCharacteristic1.StartNotify \(racpPath)"])
        // Giving the subscriptions up closes the sockets: bluetoothd releases them (NotifyAcquired false).
        await link.unsubscribe([.glucoseMeasurement, .glucoseMeasurementContext, .recordAccessControlPoint])
        let released = try await rig.client.wait(timeout: .seconds(5), for: "the sockets to be released") { objects, _ in
            [measurementPath, contextPath].allSatisfy {
                objects[$0]?["org.bluez.GattCharacteristic1"]?["NotifyAcquired"]?.bool == false
            } ? true : nil
        }
        #expect(released)
        log = try await rig.callLog()
        #expect(Self.calls(log, "StopNotify") == ["org.bluez.GattCharacteristic1.StopNotify \(racpPath)"])
        await link.disconnect()
        await rig.close()
    }

    @Test func aCharacteristicAnotherClientStartedFallsBackToStartNotify() async throws {
        let rig = try await StandInRig(records: 30)
        let link = try await Self.connect(rig)
        let measurementPath = try #require(link.characteristicPaths[GATTUUID.glucoseMeasurement.uuidString])
        // Another program on the bus subscribed first: bluetoothd answers AcquireNotify with InProgress.
        let other = try await BlueZClient.connect(bus: rig.bus.address)
        _ = try await other.connection.call(destination: "org.bluez", path: measurementPath,
                                            interface: "org.bluez.GattCharacteristic1", member: "StartNotify",
                                            timeout: .seconds(5))
        let events = try await Self.report(link)
        #expect(Self.sequences(events, .glucoseMeasurement) == Array(1...30))
        let log = try await rig.callLog()
        #expect(Self.calls(log, "AcquireNotify").contains("org.bluez.GattCharacteristic1.AcquireNotify \(measurementPath)"))
        #expect(Self.calls(log, "StartNotify").filter { $0.hasSuffix(measurementPath) }.count == 2)
        await link.disconnect()
        await other.close()
        await rig.close()
    }

    /// bluetoothd drops what finds a socket full (the quirk plays it for two values): the link delivers
    /// what came, in order, and the report's end still comes last.
    @Test func valuesDroppedAtAFullSocketAreMissingAndNothingElseIs() async throws {
        let rig = try await StandInRig(records: 12)
        let link = try await Self.connect(rig)
        try await rig.standIn.setQuirks(StandInRig.address, [.fullSocket])
        let events = try await Self.report(link)
        #expect(Self.sequences(events, .glucoseMeasurement) == [1, 2, 3, 4] + Array(7...12))
        #expect(events.last == .value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01]))
        #expect(await rig.standIn.droppedValues == 2)
        // The quirk is over: the next report brings everything.
        let again = try await Self.reportAgain(link)
        #expect(Self.sequences(again, .glucoseMeasurement) == Array(1...12))
        await link.disconnect()
        await rig.close()
    }

    /// The gateway told not to acquire (with bluetoothd offering it), or bluetoothd not offering it.
    @Test(arguments: [true, false]) func withoutSocketsEverythingComesOverTheBus(standInOffers: Bool) async throws {
        let rig = try await StandInRig(records: 30, withContext: true) { $0.offerAcquireNotify = standInOffers }
        if standInOffers { await rig.client.setAcquiresNotifications(false) }
        let link = try await Self.connect(rig)
        let events = try await Self.report(link)
        #expect(Self.sequences(events, .glucoseMeasurement) == Array(1...30))
        #expect(Self.sequences(events, .glucoseMeasurementContext) == Array(1...30))
        #expect(events.last == .value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01]))
        let log = try await rig.callLog()
        #expect(Self.calls(log, "AcquireNotify").isEmpty)
        #expect(Self.calls(log, "StartNotify").count == 3)
        await link.disconnect()
        await rig.close()
    }
}

/// The link's events up to and including the RACP answer (at most 20 s).
private func eventsUntilRACPAnswer(_ link: BlueZMeterLink) async throws -> [MeterLinkEvent] {
    try await withTimeout(20) { () -> [MeterLinkEvent] in
        var out: [MeterLinkEvent] = []
        for await event in link.events {
            out.append(event)
            if case .value(.recordAccessControlPoint, _) = event { break }
        }
        return out
    }
}
