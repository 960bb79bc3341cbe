import GatewayCore
import Support
import SyncEngine
import Synchronization
import Testing
import TestSupport
import Transport

/// The engine under the heartbeat and the device status: one job at a time, the newest waiting job in
/// place of older ones, one timer on a manual clock.
@Suite struct PacedSenderTests {
    /// What the jobs did, in order.
    final class Record: Sendable {
        private let list = Mutex<[String]>([])
        func add(_ entry: String) { list.withLock { $0.append(entry) } }
        var entries: [String] { list.withLock { $0 } }
    }

    @Test func aJobWaitsForTheOneInFlightAndOnlyTheNewestWaitingOneRuns() async throws {
        let sender = PacedSender(clock: ManualClock())
        let record = Record()
        let release = TestEvent()
        sender.submit {
            record.add("first started")
            try? await release.wait()
            record.add("first ended")
        }
        #expect(await waitUntil(30) { record.entries == ["first started"] })
        sender.submit { record.add("second") }
        sender.submit { record.add("third") }
        release.signal()
        #expect(await waitUntil(30) { record.entries.count == 3 })
        #expect(record.entries == ["first started", "first ended", "third"])
        // Once idle, a job runs at once again.
        sender.submit { record.add("fourth") }
        #expect(await waitUntil(30) { record.entries.last == "fourth" })
        sender.stop()
    }

    @Test func oneTimerReplacedAtEveryWakeAndNoneAfterNil() async {
        let clock = ManualClock()
        let sender = PacedSender(clock: clock)
        let record = Record()
        let start = clock.now
        sender.wake(at: start + .seconds(10)) { record.add("10 s") }
        sender.wake(at: start + .seconds(20)) { record.add("20 s") }
        #expect(await waitUntil(30) { clock.deadlines == [start + .seconds(20)] })
        clock.advance(by: .seconds(20))
        #expect(await waitUntil(30) { record.entries == ["20 s"] })
        sender.wake(at: clock.now + .seconds(5)) { record.add("25 s") }
        #expect(await waitUntil(30) { clock.sleeping == 1 })
        sender.wake(at: nil) {}
        #expect(await waitUntil(30) { clock.sleeping == 0 })
        clock.advance(by: .seconds(60))
        #expect(record.entries == ["20 s"])
    }

    @Test func afterStopNothingRunsAndTheWaitingJobIsDropped() async {
        let clock = ManualClock()
        let sender = PacedSender(clock: clock)
        let record = Record()
        let release = TestEvent()
        sender.submit {
            try? await release.wait()
            record.add("first")
        }
        sender.submit { record.add("waiting") }
        sender.wake(at: clock.now + .seconds(1)) { record.add("timer") }
        sender.stop()
        release.signal()
        // The job in flight was cancelled, so its wait ended; the waiting one and the timer never run.
        #expect(await waitUntil(30) { record.entries == ["first"] })
        sender.submit { record.add("after stop") }
        sender.wake(at: clock.now + .seconds(1)) { record.add("timer after stop") }
        #expect(clock.sleeping == 0)
        clock.advance(by: .seconds(5))
        #expect(record.entries == ["first"])
    }

    @Test func anOutcomeIsReportedOncePerChange() {
        var outcomes = OutcomeChanges()
        let errors: [String?] = [nil, "HTTP 500", "HTTP 500", "connection refused", nil, nil, "HTTP 500"]
        let changes = errors.map { outcomes.record(error: $0) }
        #expect(changes == [nil, .failing("HTTP 500"), nil, .failing("connection refused"), .recovered, nil, .failing("HTTP 500")])
    }
}

/// Nightscout's device status reads the gateway's state only when it builds a document.
@Suite struct DeviceStatusReadTests {
    final class Reads: Sendable {
        private let count = Mutex(0)
        func add() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    static func reporter(clock: ManualClock, http: RecordingHTTPClient) -> DeviceStatusReporter {
        DeviceStatusReporter(settings: DeviceStatusTests.settings(api: .v1), http: http, device: "pi",
                             policy: DeviceStatusPolicy(interval: .seconds(300)), networkTimeoutMs: 1000, clock: clock,
                             now: { 1_000_000 }, logger: Logger(label: "t", sink: MemoryLogSink()))
    }

    @Test func manyUpdatesWithinOneIntervalReadTheStateOncePerDocument() async {
        let clock = ManualClock()
        let http = RecordingHTTPClient()
        let reads = Reads()
        let reporter = Self.reporter(clock: clock, http: http)
        for pending in 0..<20 {
            await reporter.update {
                reads.add()
                return DeviceStatusReport(problem: nil, pending: pending, meters: [])
            }
        }
        #expect(await waitUntil(30) { http.sent.count == 1 && clock.sleeping == 1 })
        #expect(reads.value == 1)
        clock.advance(by: .seconds(300))
        #expect(await waitUntil(30) { http.sent.count == 2 })
        // The second document has the state of its own moment, from the newest update.
        #expect(http.sent.last?.body.contains("\"pending\":19") == true)
        #expect(reads.value == 2)
        await reporter.stop()
    }

    @Test func aStateThatCannotBeReadSendsNothingAndTheNextUpdateIsNews() async {
        let clock = ManualClock()
        let http = RecordingHTTPClient()
        let reads = Reads()
        let reporter = Self.reporter(clock: clock, http: http)
        await reporter.update {
            reads.add()
            return nil
        }
        #expect(await waitUntil(30) { reads.value == 1 && clock.sleeping == 1 })
        #expect(http.sent.isEmpty)
        // Readable again: a document goes out after the minimum spacing, not an interval later.
        await reporter.update {
            reads.add()
            return DeviceStatusReport(problem: nil, pending: 4, meters: [])
        }
        #expect(await waitUntil(30) { clock.deadlines == [clock.now + DeviceStatusPolicy.minimumSpacing] })
        clock.advance(by: DeviceStatusPolicy.minimumSpacing)
        #expect(await waitUntil(30) { http.sent.count == 1 })
        #expect(http.sent.first?.body.contains("\"pending\":4") == true)
        #expect(reads.value == 2)
        await reporter.stop()
    }
}
