import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Testing
import TestSupport

/// Collects events until `stop` says enough (or the stream ends); fails after `seconds` of real time.
private func collect(_ p: MeterPeripheral, seconds: Double = 5,
                     until stop: @escaping @Sendable ([PeripheralEvent]) -> Bool) async throws -> [PeripheralEvent] {
    try await withTimeout(seconds) {
        var seen: [PeripheralEvent] = []
        for await e in p.events {
            seen.append(e)
            if stop(seen) { break }
        }
        return seen
    }
}

@Suite struct MeterPeripheralTests {
    static func meter(_ faults: MeterFaults = MeterFaults(), plan: NewRecordPlan? = nil, ad: AdvertisingPlan = .always) -> MeterDescription {
        MeterDescription(address: "C0:26:DA:00:00:09", name: "meter+9", passkey: 123456,
                         records: MeterSeries.records(count: 4, firstSequence: 20, start: nil, intervalMinutes: 60,
                                                      timeOffset: nil, unit: .kilogramPerLitre),
                         newRecords: plan, advertising: ad, faults: faults)
    }

    @Test(.timeLimit(.minutes(1))) func pacedProcedureKeepsOrderUnderTimeScale() async throws {
        // One simulated second per value, compressed 200 times.
        let p = MeterPeripheral(meter: Self.meter(MeterFaults(notificationDelay: 1)), clock: SimulationClock(scale: 200))
        await p.linkUp()
        await p.setSubscribed(.glucoseMeasurement, true)
        await p.setSubscribed(.recordAccessControlPoint, true)
        try await p.writeRACP([0x01, 0x01])
        await p.runProcedure()
        let events = try await collect(p) { $0.contains(.value(.recordAccessControlPoint, [6, 0, 1, 1])) }
        let seqs = try events.compactMap { e -> UInt16? in
            if case .value(.glucoseMeasurement, let b) = e { return try GlucoseMeasurement(bytes: b).sequenceNumber }
            return nil
        }
        #expect(seqs == [20, 21, 22, 23])
        await p.stop()
    }

    @Test(.timeLimit(.minutes(1))) func abortDuringASlowProcedure() async throws {
        // The meter's time stands still until the test moves it: the abort comes before the first record.
        let clock = ManualClock()
        let p = MeterPeripheral(meter: Self.meter(MeterFaults(notificationDelay: 0.2)), clock: SimulationClock(base: clock))
        await p.setSubscribed(.glucoseMeasurement, true)
        await p.setSubscribed(.recordAccessControlPoint, true)
        try await p.writeRACP([0x01, 0x01])
        await p.runProcedure()
        await #expect(throws: GlucoseServer.ATTError.procedureAlreadyInProgress) { try await p.writeRACP([0x01, 0x01]) }
        // Waiting out the first notification delay when the abort comes.
        try #require(await waitUntil(20) { clock.sleeping == 1 })
        try await p.writeRACP([0x03, 0x00])
        await p.runProcedure()
        clock.advance(by: .milliseconds(200))
        let events = try await collect(p) { $0.contains { if case .value(.recordAccessControlPoint, _) = $0 { true } else { false } } }
        #expect(events == [.value(.recordAccessControlPoint, [6, 0, 3, 1])])
        await p.stop()
    }

    @Test(.timeLimit(.minutes(1))) func dropLinkEvent() async throws {
        let p = MeterPeripheral(meter: Self.meter(MeterFaults(dropLinkAfter: 1)))
        await p.setSubscribed(.glucoseMeasurement, true)
        await p.setSubscribed(.recordAccessControlPoint, true)
        try await p.writeRACP([0x01, 0x01])
        await p.runProcedure()
        let events = try await collect(p) { $0.last == .dropLink }
        #expect(events.filter { if case .value = $0 { true } else { false } }.count == 1)
        await p.stop()
    }

    @Test(.timeLimit(.minutes(1))) func newRecordsAppearAndTheMeterAdvertises() async throws {
        let p = MeterPeripheral(meter: Self.meter(plan: NewRecordPlan(intervalSeconds: 10, limit: 2), ad: .off),
                                clock: SimulationClock(scale: 100))
        await p.start()
        let events = try await collect(p) { $0.filter { if case .recordAdded = $0 { true } else { false } }.count == 2 }
        #expect(events.contains(.recordAdded(24)))
        #expect(events.contains(.recordAdded(25)))
        #expect(events.contains(.advertising(true)))
        #expect(await p.meter.records.count == 6)
        await p.stop()
    }

    @Test(.timeLimit(.minutes(1))) func advertisingBursts() async throws {
        let p = MeterPeripheral(meter: Self.meter(ad: .bursts(onSeconds: 1, offSeconds: 1)), clock: SimulationClock(scale: 20))
        await p.start()
        let events = try await collect(p) { $0.count >= 4 }
        #expect(Array(events.prefix(4)) == [.advertising(true), .advertising(false), .advertising(true), .advertising(false)])
        await p.stop()
    }
}
