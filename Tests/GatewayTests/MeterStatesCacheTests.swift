import GatewayCore
import SyncEngine
import Testing
@testable import Gateway

/// The MQTT states read the meters from the store only when a daemon snapshot shows that they may have
/// changed, not at every snapshot.
@Suite struct MeterStatesCacheTests {
    struct ReadFailed: Error {}

    static let meter = MeterPresentation(id: "c026da010203", name: "Meter A")

    struct Case: CustomStringConvertible {
        var description: String
        var change: @Sendable (inout DaemonSnapshot) -> Void
    }

    @Test func snapshotsThatChangeNothingOfTheMetersReadTheStoreOnce() async {
        var cache = MeterStatesCache()
        var reads = 0
        var snapshot = DaemonSnapshot()
        snapshot.phase = .running
        snapshot.pairedMeters = 1
        snapshot.readingsTotal = 10
        for second in 0..<50 {
            // What an idle daemon's snapshots change: the time, the upload queue, the radio.
            snapshot.updatedAt = Int64(second) * 1000
            snapshot.destinations = [DestinationSnapshot(name: .mqtt, counts: OutboxCounts(pending: second % 3), state: nil)]
            snapshot.bluetoothdAnswering = second % 2 == 0
            let states = await cache.states(at: snapshot) {
                reads += 1
                return [Self.meter]
            }
            #expect(states == [Self.meter])
        }
        #expect(reads == 1)
    }

    static let changes: [Case] = [
        Case(description: "a download ended") { $0.counters.downloads += 1 },
        Case(description: "a session failed") { $0.counters.failures["timeout", default: 0] += 1 },
        Case(description: "a session started") { $0.activeSessions = ["C0:26:DA:01:02:03"] },
        Case(description: "readings were stored") { $0.readingsTotal = 12 },
        Case(description: "a meter was paired") { $0.pairedMeters = 2 },
        Case(description: "a meter lost its bond") { $0.repairNeeded = ["C0:26:DA:01:02:03"] },
        Case(description: "another process wrote to the database") { $0.counters.otherWrites += 1 },
    ]

    @Test(arguments: changes)
    func aSnapshotThatMayHaveChangedTheMetersReadsThemAgain(_ change: Case) async {
        var cache = MeterStatesCache()
        var reads = 0
        var snapshot = DaemonSnapshot()
        snapshot.pairedMeters = 1
        snapshot.readingsTotal = 10
        _ = await cache.states(at: snapshot) { reads += 1; return [] }
        change.change(&snapshot)
        let states = await cache.states(at: snapshot) { reads += 1; return [Self.meter] }
        #expect(states == [Self.meter])
        #expect(reads == 2)
    }

    @Test func aFailedReadIsTriedAgainAtTheNextSnapshot() async throws {
        var cache = MeterStatesCache()
        var reads = 0
        let snapshot = DaemonSnapshot()
        await #expect(throws: ReadFailed.self) {
            _ = try await cache.states(at: snapshot) {
                reads += 1
                throw ReadFailed()
            }
        }
        let states = try await cache.states(at: snapshot) {
            reads += 1
            return [Self.meter]
        }
        #expect(states == [Self.meter])
        #expect(reads == 2)
    }
}
