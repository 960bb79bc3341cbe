import GatewayCore
import SQLiteStore
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

@Suite("Daemon: a meter that lost its bond", .timeLimit(.minutes(1)))
struct DaemonBondLossTests {
    typealias Fixture = DaemonTests.Fixture

    static func connects(_ f: Fixture, _ address: String) -> Int {
        f.radio.calls.filter { $0 == "connect \(address)" }.count
    }

    @Test("re-pair needed: stored, shown, alerted once; the daemon stops connecting, also after a restart, until it is paired again")
    func lostBondIsAStateUntilPairedAgain() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: DaemonTests.records(1...3)))
        let clock = ManualClock()
        let f = try await Fixture(meters: [meter], clock: clock)
        f.radio.add(meter, paired: true)
        f.radio.setForgotBond(meter.address, true)
        // The first refusal is no verdict; one a confirmation period later is.
        try await Self.refusedTwice(f, clock, meter.address)
        #expect(Self.connects(f, meter.address) == 2)

        let row = try #require(try await f.store.meter(meter.address))
        #expect(row.bondLostAt != nil)
        #expect(row.bondLostMessage?.contains("refused the encryption") == true)
        #expect(try await f.store.recentEvents(meterAddress: meter.address, kind: .bondLost).count == 1)
        #expect(f.meterAlerts.all.count == 1)
        #expect(f.meterAlerts.all.first?.hasPrefix("\(DaemonAlert.meterBondLost) \(meter.address) ") == true)
        #expect(f.meterAlerts.all.first?.contains("glucose-gateway pair \(meter.address)") == true)
        let snapshot = await f.daemon.currentSnapshot()
        #expect(snapshot.statusLine.contains("1 re-pair needed"))
        #expect(snapshot.counters.failures["bond-lost"] == 2)
        #expect(snapshot.metrics(now: 0).metersRepairNeeded == 1)
        #expect(f.alerts.all.isEmpty)

        // The meter keeps advertising: hours pass, no connect, no second alert.
        for _ in 0..<20 {
            clock.advance(by: .seconds(600))
            await f.daemon.handle(.meterSeen(address: meter.address, connected: false))
            await f.daemon.handle(.meterSeen(address: meter.address, connected: true))
            // A session started by either would be running now; let it end before counting.
            try await Fixture.until("no session") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
        }
        #expect(Self.connects(f, meter.address) == 2)
        #expect(f.meterAlerts.all.count == 1)
        await f.finish()

        // A restart keeps the state: still no connect and no new alert.
        let restarted = try await Fixture(meters: [], clock: clock, directory: f.directory, radio: FakeMeterRadio(meters: [meter]))
        restarted.radio.add(meter, paired: true)
        restarted.radio.setForgotBond(meter.address, true)
        #expect(await restarted.daemon.currentSnapshot().repairNeeded == [meter.address])
        for _ in 0..<5 {
            clock.advance(by: .seconds(600))
            await restarted.daemon.handle(.meterSeen(address: meter.address, connected: false))
            try await Fixture.until("no session") { await restarted.daemon.currentSnapshot().activeSessions.isEmpty }
        }
        #expect(Self.connects(restarted, meter.address) == 0)
        #expect(restarted.meterAlerts.all.isEmpty)

        // `pair` (another process) pairs it again: the state is gone and the meter is downloaded.
        restarted.radio.setForgotBond(meter.address, false)
        let other = try SQLiteStore(path: f.directory + "/gateway.sqlite3")
        let pairing = MeterPairing(radio: restarted.radio, store: other, logger: .silent)
        _ = try await pairing.run(address: meter.address, passkey: 123_456, timeZone: DaemonTests.zone)
        await other.close()
        #expect(try await restarted.store.meter(meter.address)?.bondLostAt == nil)
        await restarted.daemon.databaseWritten()
        #expect(await restarted.daemon.currentSnapshot().repairNeeded == [])
        await restarted.daemon.handle(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("3 readings") { try await restarted.sequences(meter.address) == [1, 2, 3] }
        #expect(!(await restarted.daemon.currentSnapshot().statusLine.contains("re-pair")))
        await restarted.finish()
    }

    /// A session refused at the key, then another one `bondLossConfirmation` later: re-pair needed.
    static func refusedTwice(_ f: Fixture, _ clock: ManualClock, _ address: String) async throws {
        f.radio.send(.meterSeen(address: address, connected: false))
        try await Fixture.until("first refusal") { await f.daemon.currentSnapshot().counters.failures["bond-lost"] == 1 }
        try await Fixture.until("session end") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
        #expect(await f.daemon.currentSnapshot().repairNeeded == [])
        #expect(try await f.store.meter(address)?.bondLostAt == nil)
        #expect(f.meterAlerts.all.isEmpty)
        clock.advance(by: GatewayDaemon.bondLossConfirmation)
        f.radio.send(.meterSeen(address: address, connected: false))
        try await Fixture.until("re-pair needed") { await f.daemon.currentSnapshot().repairNeeded == [address] }
        try await Fixture.until("session end") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
    }

    @Test("a refused key is no lost bond before a later session confirms it; a connection that works between clears it")
    func refusedKeyNeedsConfirmation() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: DaemonTests.records(1...2)))
        let clock = ManualClock()
        let f = try await Fixture(meters: [meter], clock: clock)
        f.radio.add(meter, paired: true)
        f.radio.setForgotBond(meter.address, true)
        f.radio.send(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("first refusal") { await f.daemon.currentSnapshot().counters.failures["bond-lost"] == 1 }
        try await Fixture.until("session end") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
        // Refused again, but sooner than the confirmation period: still no verdict.
        clock.advance(by: Fixture.settings.retryDelay)
        f.radio.send(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("second refusal") { await f.daemon.currentSnapshot().counters.failures["bond-lost"] == 2 }
        try await Fixture.until("session end") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
        #expect(await f.daemon.currentSnapshot().repairNeeded == [])
        // The key works again (the refusals came from elsewhere): the count starts over.
        f.radio.setForgotBond(meter.address, false)
        clock.advance(by: GatewayDaemon.bondLossConfirmation)
        f.radio.send(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("2 readings") { try await f.sequences(meter.address) == [1, 2] }
        try await Fixture.until("session end") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
        f.radio.setForgotBond(meter.address, true)
        clock.advance(by: GatewayDaemon.bondLossConfirmation)
        f.radio.send(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("third refusal") { await f.daemon.currentSnapshot().counters.failures["bond-lost"] == 3 }
        try await Fixture.until("session end") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
        #expect(await f.daemon.currentSnapshot().repairNeeded == [])
        #expect(f.meterAlerts.all.isEmpty)
        await f.finish()
    }

    @Test("a meter advertising in bursts: refusals between connections that failed otherwise still confirm a lost bond")
    func refusalsBetweenOtherFailuresConfirmTheLoss() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: DaemonTests.records(1...2)))
        let clock = ManualClock()
        let f = try await Fixture(meters: [meter], clock: clock)
        f.radio.add(meter, paired: true)
        f.radio.setForgotBond(meter.address, true)
        f.radio.setAdvertisesInBursts(meter.address, true)
        try await Self.refusedTwice(f, clock, meter.address)
        let row = try #require(try await f.store.meter(meter.address))
        #expect(row.bondLostAt != nil)
        // The verdict names the evidence, not the last connection's own failure.
        #expect(row.bondLostMessage?.contains("refused the encryption with this gateway's key") == true)
        #expect(row.bondLostMessage?.contains("NoReply") == false)
        #expect(f.meterAlerts.all.count == 1)
        #expect(f.meterAlerts.all.first?.contains("glucose-gateway pair \(meter.address)") == true)
        await f.finish()
    }

    @Test("one failed connection of another kind is no verdict: the meter is tried again after the retry delay")
    func otherFailuresKeepTrying() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: DaemonTests.records(1...2)))
        let clock = ManualClock()
        let f = try await Fixture(meters: [meter], clock: clock)
        f.radio.setInRange(meter.address, false)
        await f.daemon.handle(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("first attempt ended") {
            await f.daemon.currentSnapshot().counters.failures["disconnected"] == 1
        }
        #expect(await f.daemon.currentSnapshot().repairNeeded == [])
        f.radio.setInRange(meter.address, true)
        clock.advance(by: Fixture.settings.retryDelay)
        await f.daemon.handle(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("2 readings") { try await f.sequences(meter.address) == [1, 2] }
        #expect(try await f.store.meter(meter.address)?.bondLostAt == nil)
        await f.finish()
    }
}
