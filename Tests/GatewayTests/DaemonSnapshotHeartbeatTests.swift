import GatewayCore
import SyncEngine
import Testing

@testable import Gateway

/// What the heartbeat reads from a daemon snapshot.
@Suite struct DaemonSnapshotHeartbeatTests {
    static func running() -> DaemonSnapshot {
        var s = DaemonSnapshot()
        s.phase = .running
        s.radio = RadioState(bluetoothdRunning: true, adapter: "hci0", adapterPowered: true)
        return s
    }

    @Test func onlyARunningDaemonHasAHealth() {
        var s = Self.running()
        #expect(s.heartbeatHealth(now: 0) == HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true))
        for phase in [DaemonPhase.starting, .stopping, .stopped] {
            s.phase = phase
            #expect(s.heartbeatHealth(now: 0) == nil)
        }
    }

    @Test func bluetoothAdapterDestinationsAndTheOldestUnsentReading() throws {
        var s = Self.running()
        s.bluetoothdAnswering = false
        s.radio.adapterPowered = false
        s.destinations = [
            DestinationSnapshot(name: .nightscout, counts: OutboxCounts(pending: 1, oldestUnsent: 5_000), state: DestinationState(destination: .nightscout, state: .paused)),
            DestinationSnapshot(name: .fhir, counts: OutboxCounts(pending: 1, oldestUnsent: 2_000), state: DestinationState(destination: .fhir, state: .retrying)),
        ]
        let health = try #require(s.heartbeatHealth(now: 62_000))
        #expect(!health.bluetoothdReachable)
        #expect(!health.adapterPowered)
        #expect(health.blockedDestinations.map(\.name) == ["nightscout"])
        #expect(health.blockedDestinations.map(\.state) == ["paused"])
        #expect(health.oldestUnsentAge == .seconds(60))
    }

    @Test func aHeldAlertIsAFailureOfItsOwn() throws {
        var s = DaemonSnapshot()
        s.phase = .alert
        s.alert = HeldAlert(code: DaemonAlert.databaseDamaged, message: "database /x is damaged")
        let health = try #require(s.heartbeatHealth(now: 0))
        #expect(health.problem(maxPending: .seconds(3600)) == "alert 2002 DATABASE_DAMAGED: not downloading or uploading")
    }

    @Test func aDestinationTheServerTurnedOffIsNamedSo() throws {
        var s = Self.running()
        var off = DestinationState(destination: DestinationName(rawValue: "nightscout-treatments"), state: .paused)
        off.lastErrorCode = 404
        s.destinations = [DestinationSnapshot(name: off.destination, counts: OutboxCounts(), state: off)]
        let health = try #require(s.heartbeatHealth(now: 0))
        #expect(health.problem(maxPending: .seconds(3600)) == "upload to nightscout-treatments paused (turned off on the server)")
    }

    @Test func aMeterInStateRePairNeededMakesTheGatewayUnhealthyUntilPaired() throws {
        var s = Self.running()
        s.pairedMeters = 2
        s.repairNeeded = ["C0:26:DA:01:02:03"]
        let health = try #require(s.heartbeatHealth(now: 0))
        #expect(health.repairNeeded == ["C0:26:DA:01:02:03"])
        #expect(health.problem(maxPending: .seconds(3600)) == "meter C0:26:DA:01:02:03 needs pairing again")
        s.repairNeeded = []
        #expect(try #require(s.heartbeatHealth(now: 0)).problem(maxPending: .seconds(3600)) == nil)
    }
}
