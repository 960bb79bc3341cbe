import GatewayCore
import GlucoseProfile
import Support
import Synchronization
import Testing
import TestSupport
@testable import Meters

@Suite("Download procedure", .timeLimit(.minutes(1)))
struct MeterDownloadTests {
    static let zone = "Europe/Berlin"

    static func meterInfo(_ meter: FakeMeter, zone: String = zone) -> MeterInfo {
        MeterInfo(address: meter.address, timeZone: zone)
    }

    static func makeStore(_ meter: FakeMeter, zone: String = zone) -> MemoryReadingStore {
        MemoryReadingStore(meters: [meterInfo(meter, zone: zone)])
    }

    static func download(
        _ meter: FakeMeter, _ store: MemoryReadingStore, options: DownloadOptions = DownloadOptions(),
        now: @escaping @Sendable () -> UnixMillis = SystemClock.now, clock: any SessionClock = ContinuousClock(),
        progress: @escaping @Sendable (DownloadProgress) -> Void = { _ in }
    ) async throws(DownloadError) -> DownloadReport {
        let info = MeterInfo(address: meter.address, timeZone: zone)
        return try await MeterDownload(store: store, options: options, logger: .silent, now: now, clock: clock)
            .run(link: meter.connect(), meter: info, progress: progress)
    }

    /// Progress reports of a download as a stream, to wait on without sleeping.
    static func progressStream() -> (AsyncStream<Int>, @Sendable (DownloadProgress) -> Void) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .unbounded)
        return (stream, { continuation.yield($0.received) })
    }

    /// Returns once `count` records have been received.
    static func received(_ count: Int, on stream: AsyncStream<Int>) async {
        for await received in stream where received >= count { return }
    }

    /// Returns once the session's timer sleeps on `clock` (the session has nothing left to do until then).
    static func timerSleeping(_ clock: ManualClock) async {
        while clock.sleeping == 0 { await Task.yield() }
    }

    /// Returns once the session's one timer sleeps until `deadline`: the session has taken in everything
    /// the test caused so far (a write's answer, the records) and armed its timer from it.
    static func timerSleeping(_ clock: ManualClock, until deadline: ContinuousClock.Instant) async {
        while clock.deadlines != [deadline] { await Task.yield() }
    }

    static func records(_ range: ClosedRange<UInt16>) -> [FakeRecord] {
        range.map { FakeRecord.glucose($0, mgdl: 80 + Int($0 % 100)) }
    }

    static func sequences(_ store: MemoryReadingStore) -> [Int] {
        store.readings.map(\.sequence).sorted()
    }

    static func writes(_ meter: FakeMeter) -> [String] {
        meter.callLog.filter { $0.hasPrefix("write ") }
    }

    static func expectNoDeletes(_ meter: FakeMeter) {
        #expect(!meter.callLog.contains { $0.hasPrefix("write 02") || $0 == "DELETE REQUESTED" })
    }

    // MARK: First and incremental sync

    /// The three subscriptions go out in one round: a refused measurement subscription fails the download
    /// before any RACP write, and the ones that did go on are stopped; a refused context is only a warning.
    @Test func aRefusedMeasurementSubscriptionStopsBeforeAnyRACPWriteAndStopsTheOthers() async throws {
        var script = FakeMeterScript(records: Self.records(0...2))
        script.refusedSubscriptions = [.glucoseMeasurement]
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let error = await #expect(throws: DownloadError.self) { try await Self.download(meter, store) }
        #expect(error?.kind == .meter)
        #expect(error?.message.contains("cannot subscribe to") == true)
        #expect(Self.writes(meter).isEmpty)
        let log = meter.callLog
        #expect(log.contains("unsubscribe 0x2a34") && log.contains("unsubscribe 0x2a52"))
        #expect(!log.contains("unsubscribe 0x2a18"))
        #expect(log.last == "disconnect")
        #expect(Self.sequences(store).isEmpty)
    }

    @Test func aRefusedContextSubscriptionStillDownloads() async throws {
        var script = FakeMeterScript(records: Self.records(0...2))
        script.refusedSubscriptions = [.glucoseMeasurementContext]
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .completed)
        #expect(Self.sequences(store) == [0, 1, 2])
        #expect(!meter.callLog.contains("unsubscribe 0x2a34"))
    }

    @Test func firstSyncDownloadsEverythingInOrder() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(0...9)))
        let store = Self.makeStore(meter)
        let seen = Mutex<[DownloadProgress]>([])
        let report = try await Self.download(meter, store, progress: { p in seen.withLock { $0.append(p) } })
        #expect(report.outcome == .completed)
        #expect(report.received == 10)
        #expect(report.stored == 10)
        #expect(report.total == 10)
        #expect(Self.sequences(store) == Array(0...9))
        #expect(seen.withLock { $0.last } == DownloadProgress(received: 10, total: 10))

        let log = meter.callLog
        let firstWrite = try #require(log.firstIndex { $0.hasPrefix("write") })
        for s in ["subscribe 0x2a18", "subscribe 0x2a34", "subscribe 0x2a52", "read 0x2a51"] {
            let i = try #require(log.firstIndex(of: s), "\(s) missing")
            #expect(i < firstWrite, "\(s) after the first RACP write")
        }
        #expect(Self.writes(meter) == ["write 04 01", "write 01 01"])
        #expect(Array(log.suffix(4)) == ["unsubscribe 0x2a52", "unsubscribe 0x2a34", "unsubscribe 0x2a18", "disconnect"])
        Self.expectNoDeletes(meter)
        #expect(report.identity == MeterIdentity(manufacturer: "Acme Diagnostics", model: "GL-1", serial: "SN0001", firmware: "1.0"))
        #expect(report.features == 0x0400)
        let row = try #require(try await store.meter(meter.address))
        #expect(row.serial == "SN0001")
        #expect(row.highestSequence == 9)
        #expect(row.lastSync != nil)
        #expect(store.events.contains { $0.kind == .downloadFinished })
    }

    @Test func incrementalSyncAsksFromHighestPlusOne() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(0...4)))
        let store = Self.makeStore(meter)
        _ = try await Self.download(meter, store)
        meter.update { $0.records += MeterDownloadTests.records(5...7) }
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .completed)
        #expect(report.stored == 3)
        #expect(report.duplicates == 0)
        #expect(report.total == 3)
        #expect(Array(Self.writes(meter).suffix(2)) == ["write 04 03 01 05 00", "write 01 03 01 05 00"])
        #expect(Self.sequences(store) == Array(0...7))
        Self.expectNoDeletes(meter)
    }

    @Test func nothingNewEndsNormally() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(0...4)))
        let store = Self.makeStore(meter)
        _ = try await Self.download(meter, store)
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .noRecords)
        #expect(report.stored == 0)
        #expect(!report.counterReset)
        // Count from 5 answered 0, then the last record is checked for a counter that went back.
        #expect(Array(Self.writes(meter).suffix(2)) == ["write 04 03 01 05 00", "write 01 06"])
        #expect(store.readings.count == 5)
    }

    @Test func emptyMeterEndsNormally() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: []))
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .noRecords)
        #expect(report.total == 0)
        #expect(Self.writes(meter) == ["write 04 01"])
        #expect(meter.callLog.last == "disconnect")
    }

    @Test func noRecordsFoundResponseIsANormalEnd() async throws {
        // The count is not supported, so the report itself says "no records found".
        var script = FakeMeterScript(records: [])
        script.countUnsupported = true
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .noRecords)
        #expect(report.total == nil)
        #expect(Self.writes(meter) == ["write 04 01", "write 01 01"])
    }

    // MARK: Interruptions

    @Test func dropAfterNRecordsThenResyncHasNoGapAndNoDuplicate() async throws {
        var script = FakeMeterScript(records: Self.records(0...99))
        script.disconnectAfterRecords = 37
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let first = try await Self.download(meter, store)
        #expect(first.outcome == .interrupted(reason: "remote"))
        #expect(first.stored == 37)
        #expect(Self.sequences(store) == Array(0...36))
        let row = try #require(try await store.meter(meter.address))
        #expect(row.lastSync == nil)

        meter.update { $0.disconnectAfterRecords = nil }
        let second = try await Self.download(meter, store)
        #expect(second.outcome == .completed)
        #expect(second.stored == 63)
        #expect(second.duplicates == 0)
        #expect(Self.writes(meter).suffix(2) == ["write 04 03 01 25 00", "write 01 03 01 25 00"])
        #expect(Self.sequences(store) == Array(0...99))
    }

    @Test func silenceEndsTheDownloadAfterTheInactivityTimeout() async throws {
        var script = FakeMeterScript(records: Self.records(0...9))
        script.silentAfterRecords = 4
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let clock = ManualClock()
        let start = clock.now
        let (progress, onProgress) = Self.progressStream()
        let options = DownloadOptions(inactivityTimeout: .seconds(30))
        let task = Task { try await Self.download(meter, store, options: options, clock: clock, progress: onProgress) }
        await Self.received(4, on: progress)
        // The first four are committed after the commit interval; the download goes on listening. (The
        // timer is waited for at its deadline: the answer to the report request may be taken in after
        // the records, and activity counts from it.)
        await Self.timerSleeping(clock, until: start + options.commitInterval)
        clock.advance(by: options.commitInterval)
        while store.readings.count < 4 { await Task.yield() }
        #expect(!meter.callLog.contains("disconnect"))
        // Just before the timeout it still listens; at the timeout it ends.
        await Self.timerSleeping(clock, until: start + options.inactivityTimeout)
        clock.advance(by: options.inactivityTimeout - options.commitInterval - .milliseconds(1))
        await Self.timerSleeping(clock, until: start + options.inactivityTimeout)
        #expect(!meter.callLog.contains("disconnect"))
        clock.advance(by: .milliseconds(1))
        let result = try await task.value
        #expect(clock.now - start == options.inactivityTimeout)
        #expect(result.outcome == .timedOut)
        #expect(result.stored == 4)
        // Abort sent, then notifications stopped and the link closed.
        #expect(Self.writes(meter).last == "write 03 00")
        #expect(meter.callLog.last == "disconnect")
    }

    /// A `ManualClock` that counts the sleeps started on it: each is one timer the session armed.
    final class CountingClock: SessionClock {
        let clock: ManualClock
        let count = Mutex(0)
        init(clock: ManualClock) { self.clock = clock }
        var sleeps: Int { count.withLock { $0 } }
        var now: ContinuousClock.Instant { clock.now }
        var minimumResolution: Duration { clock.minimumResolution }
        func sleep(until deadline: ContinuousClock.Instant, tolerance: Duration?) async throws {
            count.withLock { $0 += 1 }
            try await clock.sleep(until: deadline, tolerance: tolerance)
        }
    }

    /// While a meter is connected and silent, the session sleeps until its next deadline (here the
    /// inactivity timeout) instead of waking on a ticker to look at the time.
    @Test func aSilentMeterWakesTheSessionOnlyAtItsDeadlines() async throws {
        var script = FakeMeterScript(records: Self.records(0...9))
        script.silentAfterRecords = 4
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let manual = ManualClock()
        let clock = CountingClock(clock: manual)
        let (progress, onProgress) = Self.progressStream()
        let options = DownloadOptions(inactivityTimeout: .seconds(30))
        let task = Task { try await Self.download(meter, store, options: options, clock: clock, progress: onProgress) }
        await Self.received(4, on: progress)
        await Self.timerSleeping(manual)
        manual.advance(by: options.commitInterval)
        while store.readings.count < 4 { await Task.yield() }
        await Self.timerSleeping(manual)
        let armed = clock.sleeps
        for _ in 0..<29 {
            manual.advance(by: .seconds(1))
            await Task.yield()
        }
        await Self.timerSleeping(manual)
        #expect(clock.sleeps == armed)
        #expect(!meter.callLog.contains("disconnect"))
        manual.advance(by: .seconds(1))
        let result = try await task.value
        #expect(result.outcome == .timedOut)
        #expect(clock.sleeps == armed)
    }

    @Test func readingsAreCommittedWhileTheDownloadRuns() async throws {
        var script = FakeMeterScript(records: Self.records(0...5))
        script.silentAfterRecords = 3
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let clock = ManualClock()
        let (progress, onProgress) = Self.progressStream()
        let options = DownloadOptions(inactivityTimeout: .seconds(30), commitInterval: .milliseconds(100))
        let task = Task { try await Self.download(meter, store, options: options, clock: clock, progress: onProgress) }
        await Self.received(3, on: progress)
        await Self.timerSleeping(clock)
        // Nothing is committed before the commit interval has passed on the session's clock.
        #expect(store.readings.isEmpty)
        clock.advance(by: options.commitInterval)
        while store.readings.count < 3 { await Task.yield() }
        // Committed by the interval timer while the download still runs.
        #expect(store.readings.count == 3)
        #expect(!meter.callLog.contains("disconnect"))
        task.cancel()
        let report = try await task.value
        #expect(report.outcome == .interrupted(reason: "the gateway is stopping"))
        #expect(store.insertBatches == [3])
    }

    @Test func cancellingTheDownloadKeepsWhatArrivedAndClosesTheLink() async throws {
        var script = FakeMeterScript(records: Self.records(0...9))
        script.silentAfterRecords = 4
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let (progress, onProgress) = Self.progressStream()
        let task = Task {
            try await Self.download(meter, store, options: DownloadOptions(inactivityTimeout: .seconds(30)), clock: ManualClock(),
                                    progress: onProgress)
        }
        await Self.received(4, on: progress)
        task.cancel()
        let report = try await task.value
        #expect(report.outcome == .interrupted(reason: "the gateway is stopping"))
        #expect(Self.sequences(store) == [0, 1, 2, 3])
        #expect(meter.callLog.last == "disconnect")
    }

    /// More records than two batches of the default size: at least three commits, none above the size.
    @Test func largeDownloadsCommitInBatches() async throws {
        let batch = DownloadOptions().commitBatchSize
        let count = 2 * batch + batch / 4
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(0...UInt16(count - 1))))
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.stored == count)
        #expect(store.insertBatches.allSatisfy { $0 <= batch })
        #expect(store.insertBatches.reduce(0, +) == count)
        #expect(store.insertBatches.count >= 3)
    }

    @Test func storeFailureFailsTheDownloadAndKeepsWhatWasCommitted() async throws {
        let batch = DownloadOptions().commitBatchSize
        let count = 2 * batch + batch / 4
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(0...UInt16(count - 1))))
        let store = Self.makeStore(meter)
        store.failInserts(after: 1)
        await #expect(throws: DownloadError.self) { try await Self.download(meter, store) }
        #expect(store.readings.count == batch)
        #expect(meter.callLog.last == "disconnect")
        // The store refused a commit: no bookkeeping or event writes are attempted against it.
        #expect(store.events.isEmpty)
        store.failInserts(after: nil)
        let report = try await Self.download(meter, store)
        #expect(report.stored == count - batch)
        #expect(Self.sequences(store) == Array(0...(count - 1)))
    }

    // MARK: Counter reset

    @Test func counterThatWentBackTriggersAFullDeduplicatedDownload() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(0...19)))
        let store = Self.makeStore(meter)
        _ = try await Self.download(meter, store)
        // Battery change: the meter keeps records 0...19 but its counter restarts, new records get 0...4
        // again with later times.
        let later = GlucoseDateTime(year: 2024, month: 6, day: 1, hour: 9, minute: 0, second: 0)!
        let fresh = (UInt16(0)...4).map { FakeRecord.glucose($0, mgdl: 150, at: later) }
        meter.update { $0.records += fresh }
        let report = try await Self.download(meter, store)
        #expect(report.counterReset)
        #expect(report.outcome == .completed)
        #expect(report.stored == 5)
        #expect(store.readings.count == 25)
        #expect(store.events.contains { $0.kind == .counterReset })
        #expect(try await store.highestSequence(meter.address) == 4)
        // The next sync resumes after the new counter.
        meter.update { $0.records.append(FakeRecord.glucose(5, mgdl: 151, at: later)) }
        let next = try await Self.download(meter, store)
        #expect(next.stored == 1)
        #expect(!next.counterReset)
        #expect(Self.writes(meter).suffix(2) == ["write 04 03 01 05 00", "write 01 03 01 05 00"])
        #expect(store.readings.count == 26)
        Self.expectNoDeletes(meter)
    }

    @Test func sequenceAtTheTopOfTheRangeChecksTheLastRecord() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: [FakeRecord.glucose(65535)]))
        let store = Self.makeStore(meter)
        _ = try await Self.download(meter, store)
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .noRecords)
        #expect(Self.writes(meter).last == "write 01 06")
    }

    // MARK: Context pairing

    @Test(arguments: [FakeRecord.ContextPlacement.after, .before])
    func contextIsPairedBySequence(_ placement: FakeRecord.ContextPlacement) async throws {
        let records = (UInt16(1)...6).map { seq in
            var record = FakeRecord.glucose(seq, context: GlucoseMeasurementContext(sequenceNumber: seq, meal: UInt8(seq % 5 + 1)))
            record.placement = placement
            return record
        }
        let meter = FakeMeter(script: FakeMeterScript(records: records))
        let store = Self.makeStore(meter)
        // Batches of one: a measurement must still get the context that follows it.
        let report = try await Self.download(meter, store, options: DownloadOptions(commitBatchSize: 1))
        #expect(report.stored == 6)
        #expect(report.unmatchedContexts == 0)
        for r in store.readings {
            #expect(r.context?.meal == r.sequence % 5 + 1, "sequence \(r.sequence)")
            #expect(r.rawContext != nil)
        }
    }

    @Test func missingContextNeverHoldsAMeasurementBack() async throws {
        var records = Self.records(1...5)
        records[2] = FakeRecord(measurement: try GlucoseMeasurement(bytes: records[2].measurement), placement: .missing)
        records[4] = FakeRecord(measurement: try GlucoseMeasurement(bytes: records[4].measurement), placement: .missing)
        let meter = FakeMeter(script: FakeMeterScript(records: records))
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.stored == 5)
        #expect(store.readings.allSatisfy { $0.context == nil })
    }

    @Test func contextForAnotherSequenceIsNotAttached() async throws {
        // Measurement 1 says a context follows, but the meter sends the context of sequence 9.
        let m1 = FakeRecord(measurement: try GlucoseMeasurement(bytes: FakeRecord.glucose(1).measurement), placement: .missing)
        var stray = FakeRecord.glucose(2)
        stray.context = GlucoseMeasurementContext(sequenceNumber: 9, meal: 2).encoded()
        let meter = FakeMeter(script: FakeMeterScript(records: [m1, stray]))
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.stored == 2)
        #expect(store.readings.allSatisfy { $0.context == nil })
        #expect(report.unmatchedContexts == 1)
    }

    @Test func meterWithoutContextCharacteristic() async throws {
        var script = FakeMeterScript(records: Self.records(1...3))
        script.characteristics.remove(.glucoseMeasurementContext)
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.stored == 3)
        #expect(!meter.callLog.contains("subscribe 0x2a34"))
    }

    @Test func ketoneRecordsAreStoredAsKetone() async throws {
        let ketone = FakeRecord.glucose(3, mgdl: 12, context: GlucoseMeasurementContext(sequenceNumber: 3, meal: 6))
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(1...2) + [ketone]))
        let store = Self.makeStore(meter)
        _ = try await Self.download(meter, store)
        let r = try #require(store.readings.first { $0.sequence == 3 })
        #expect(r.analyte == .ketone)
        #expect(r.mmoll == 1.2)
        #expect(r.exclusion == .ketone)
    }

    // MARK: Meter behaviour

    @Test func recordsArrivingDuringASyncAreKeptOnce() async throws {
        var script = FakeMeterScript(records: Self.records(0...9))
        script.recordsArrivingAfterCount = Self.records(10...12)
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.total == 10)
        #expect(report.received == 13)
        meter.update { $0.records += MeterDownloadTests.records(13...14) }
        let next = try await Self.download(meter, store)
        #expect(next.stored == 2)
        #expect(Self.sequences(store) == Array(0...14))
    }

    /// The count from highest + 1 says 0, then the meter makes a record before the last-record check:
    /// that record is new, so the download completed with one new reading, not "no new records".
    @Test func aRecordMadeBetweenTheCountAndTheLastRecordCheckIsANewReading() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(0...4)))
        let store = Self.makeStore(meter)
        _ = try await Self.download(meter, store)
        meter.update { $0.recordsArrivingAfterCount = MeterDownloadTests.records(5...5) }
        let report = try await Self.download(meter, store)
        #expect(Array(Self.writes(meter).suffix(2)) == ["write 04 03 01 05 00", "write 01 06"])
        #expect(report.stored == 1)
        #expect(report.outcome == .completed)
        #expect(!report.counterReset)
        #expect(Self.sequences(store) == Array(0...5))
    }

    @Test func duplicateNotificationsAreOneReading() async throws {
        var script = FakeMeterScript(records: Self.records(0...4))
        script.duplicateNotifications = true
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.received == 5)
        #expect(Self.sequences(store) == Array(0...4))
    }

    @Test func refusedSequenceFilterFallsBackToAFullDeduplicatedDownload() async throws {
        var script = FakeMeterScript(records: Self.records(0...4))
        script.greaterOrEqualUnsupported = true
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        _ = try await Self.download(meter, store)
        meter.update { $0.records += MeterDownloadTests.records(5...6) }
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .completed)
        #expect(report.stored == 2)
        #expect(report.duplicates == 5)
        #expect(Self.writes(meter).suffix(2) == ["write 01 03 01 05 00", "write 01 01"])
    }

    @Test func procedureAlreadyInProgressAbortsAndRetriesOnce() async throws {
        var script = FakeMeterScript(records: Self.records(0...2))
        script.racpWriteErrors = [0x80]
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .completed)
        #expect(Self.writes(meter) == ["write 04 01", "write 03 00", "write 04 01", "write 01 01"])
        #expect(report.stored == 3)
    }

    @Test func procedureAlreadyInProgressTwiceFails() async throws {
        var script = FakeMeterScript(records: Self.records(0...2))
        script.racpWriteErrors = [0x80, 0, 0x80]
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        do {
            _ = try await Self.download(meter, store)
            Issue.record("expected a failure")
        } catch {
            #expect(error.kind == .meter)
            #expect(error.message.contains("0x80"))
        }
        #expect(meter.callLog.last == "disconnect")
    }

    @Test func cccdImproperlyConfiguredSubscribesAgainAndRetries() async throws {
        var script = FakeMeterScript(records: Self.records(0...2))
        script.racpWriteErrors = [0x81]
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.outcome == .completed)
        #expect(meter.callLog.filter { $0 == "subscribe 0x2a52" }.count == 2)
        #expect(Self.writes(meter) == ["write 04 01", "write 04 01", "write 01 01"])
    }

    @Test func clockSkewIsMeasuredFromCurrentTime() async throws {
        // Meter shows 2024-05-01 10:10:00 CEST; the gateway's clock says 08:00:00 UTC (10:00 CEST).
        var script = FakeMeterScript(records: Self.records(0...0))
        script.characteristics.insert(.currentTime)
        script.clockValue = FakeMeterScript.currentTime(GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 10, minute: 10, second: 0)!)
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let gatewayNow = try #require(GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 8, minute: 0, second: 0)).naiveSeconds * 1000
        let report = try await Self.download(meter, store, now: { gatewayNow })
        #expect(report.skew?.seconds == 600)
        let r = try #require(store.readings.first)
        let meterInstant = try #require(r.meterInstant)
        #expect(r.instant == meterInstant - 600_000)
        #expect(store.events.contains { $0.kind == .clockSkew && $0.code == 600 })
        #expect(try await store.meter(meter.address)?.lastClockSkewSeconds == 600)
    }

    @Test func rocheDateTimeInsideTheGlucoseServiceIsUsed() async throws {
        var script = FakeMeterScript(records: Self.records(0...0))
        script.characteristics.insert(.dateTime)
        script.clockValue = FakeMeterScript.dateTime(GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 9, minute: 59, second: 0)!)
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let gatewayNow = try #require(GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 8, minute: 0, second: 0)).naiveSeconds * 1000
        let report = try await Self.download(meter, store, now: { gatewayNow })
        #expect(report.skew?.seconds == -60)
        #expect(meter.callLog.contains("read 0x2a08"))
        let r = try #require(store.readings.first)
        #expect(r.instant == r.meterInstant)
    }

    @Test func undecodableValuesAreSkippedAndTheRestKept() async throws {
        var records = Self.records(0...3)
        records.insert(FakeRecord(rawMeasurement: [0x1F, 0x07], sequence: 100), at: 2)
        let meter = FakeMeter(script: FakeMeterScript(records: records))
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        #expect(report.malformed == 1)
        #expect(Self.sequences(store) == Array(0...3))
    }

    /// A truncated measurement and a context that cannot be decoded are kept as sent with the codec's
    /// reason, not counted as readings; a second download that delivers them again keeps nothing new.
    @Test func undecodableValuesAreKeptRawOnceAndAreNoReadings() async throws {
        var records = Self.records(0...3)
        let cut = Array(FakeRecord.glucose(4).measurement.prefix(5))
        records.append(FakeRecord(rawMeasurement: cut, sequence: 4))
        // A record whose measurement decodes and whose context (flags: carbohydrate) ends after its number.
        records[1] = FakeRecord(rawMeasurement: records[1].measurement, sequence: 1, rawContext: [0x01, 0x01, 0x00])
        let meter = FakeMeter(script: FakeMeterScript(records: records))
        let store = Self.makeStore(meter)
        let first = try await Self.download(meter, store)
        #expect(first.stored == 4)
        #expect(first.undecodable == 2 && first.undecodableKept == 2)
        #expect(Self.sequences(store) == Array(0...3))
        let kept = store.undecodable
        #expect(kept.map(\.characteristic) == [.glucoseMeasurementContext, .glucoseMeasurement])
        #expect(kept.map(\.sequence) == [1, 4])
        #expect(kept.last?.raw == cut)
        #expect(kept.allSatisfy { $0.reason.contains("value too short") && $0.meterAddress == meter.address })
        #expect(MeterSyncResult(address: meter.address, outcome: .downloaded(first)).summary
            == "\(meter.address): 4 new readings; 2 records could not be decoded; their bytes are kept")
        #expect(store.events.contains { $0.kind == .downloadFinished && $0.message.contains("2 undecodable kept raw") })

        // The truncated record was the newest: the meter delivers it again.
        let second = try await Self.download(meter, store)
        #expect(second.stored == 0)
        #expect(second.undecodable >= 1 && second.undecodableKept == 0)
        #expect(store.undecodable.count == 2)
        #expect(Self.sequences(store) == Array(0...3))
    }

    @Test func meterDroppingDuringInformationReadsIsAnInterruption() async throws {
        var script = FakeMeterScript(records: Self.records(0...3))
        script.disconnectAfterRecords = 0
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let report = try await Self.download(meter, store)
        if case .interrupted = report.outcome {} else { Issue.record("outcome \(report.outcome)") }
        #expect(store.readings.isEmpty)
    }

    // MARK: Records arriving after the RACP response

    /// A log sink that passes each line on, for tests that wait for the download to reach a step.
    final class LineSink: LogSink {
        let continuation: AsyncStream<String>.Continuation
        init(_ continuation: AsyncStream<String>.Continuation) { self.continuation = continuation }
        func write(level: LogLevel, label: String, message: String) { continuation.yield(message) }
    }

    /// Seen on BlueZ as a peripheral: the response indication overtakes the five records it ends. The
    /// download keeps listening and stores all five (it used to stop at the response and store none).
    @Test func recordsArrivingAfterTheRACPResponseAreKept() async throws {
        var script = FakeMeterScript(records: Self.records(1...5))
        script.responseBeforeRecords = true
        let meter = FakeMeter(script: script)
        let store = Self.makeStore(meter)
        let clock = ManualClock()
        let (lines, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .unbounded)
        let logger = Logger(label: "test", minimumLevel: .debug, sink: LineSink(continuation))
        let link = meter.connect()
        let info = Self.meterInfo(meter)
        let done = Mutex(false)
        let download = Task { () throws(DownloadError) -> DownloadReport in
            defer {
                done.withLock { $0 = true }
                continuation.yield("finished")
            }
            return try await MeterDownload(store: store, logger: logger, clock: clock)
                .run(link: link, meter: info, progress: { continuation.yield("progress \($0.received)") })
        }
        var waiting = false
        for await line in lines {
            if line.contains("waiting for them") { waiting = true; break }
            if line == "finished" { break }
        }
        if waiting {
            link.deliverLateRecords()
            for await line in lines where line == "progress 5" { break }
            // The fifth wakes the session, which sees that all five are in; advancing the clock would end
            // the wait too (after 300 ms of quiet), so either way the download completes.
            while !done.withLock({ $0 }) {
                if clock.sleeping > 0 { clock.advance(by: .milliseconds(50)) }
                await Task.yield()
            }
        }
        let report = try await download.value
        #expect(report.outcome == .completed)
        #expect(report.stored == 5)
        #expect(Self.sequences(store) == Array(1...5))
        #expect(link.subscriptions.isEmpty)
    }

    struct LateCase: Sendable, CustomTestStringConvertible {
        var name: String
        /// Milliseconds after the response: now, and when the last value arrived (negative: before it).
        var now: Int
        var lastValue: Int
        var received: Int
        var expected: Int?
        var awaitingContext = false
        var over: Bool
        var testDescription: String { name }
    }

    static let lateCases: [LateCase] = [
        LateCase(name: "all announced records in: stop at once", now: 0, lastValue: -5, received: 5, expected: 5, over: true),
        LateCase(name: "all in but the last awaits its context: wait", now: 100, lastValue: 0, received: 5, expected: 5,
                 awaitingContext: true, over: false),
        LateCase(name: "all in, context awaited, quiet long enough: stop", now: 400, lastValue: 50, received: 5, expected: 5,
                 awaitingContext: true, over: true),
        LateCase(name: "no count known, values still coming: wait", now: 500, lastValue: 400, received: 3, expected: nil, over: false),
        LateCase(name: "no count known, quiet for 300 ms: stop", now: 700, lastValue: 400, received: 3, expected: nil, over: true),
        LateCase(name: "fewer than announced, quiet but within patience: wait", now: 1_000, lastValue: 0, received: 2, expected: 5, over: false),
        LateCase(name: "fewer than announced, past patience and quiet: stop", now: 2_000, lastValue: 500, received: 2, expected: 5, over: true),
        LateCase(name: "fewer than announced, past patience but values coming: wait", now: 2_500, lastValue: 2_400, received: 4, expected: 5, over: false),
        LateCase(name: "values trickling forever: stop at the limit", now: 10_000, lastValue: 9_990, received: 9, expected: 50, over: true),
    ]

    /// The session sleeps until `decisionTime` when no value comes: the wait is over then, and not before.
    @Test(arguments: lateCases)
    func lateRecordWaitDecidesAtItsDecisionTime(_ c: LateCase) {
        let wait = LateRecordWait()
        let respondedAt = ContinuousClock.now
        let lastValueAt = respondedAt + .milliseconds(c.lastValue)
        let at = wait.decisionTime(respondedAt: respondedAt, lastValueAt: lastValueAt, received: c.received, expected: c.expected)
        func over(_ now: ContinuousClock.Instant) -> Bool {
            wait.isOver(respondedAt: respondedAt, lastValueAt: lastValueAt, now: now, received: c.received, expected: c.expected,
                        awaitingContext: c.awaitingContext)
        }
        #expect(over(at))
        let allIn = c.expected.map { c.received >= $0 } ?? false
        if !(allIn && !c.awaitingContext) { #expect(!over(at - .microseconds(1))) }
    }

    @Test(arguments: lateCases)
    func lateRecordWaitIsBounded(_ c: LateCase) {
        let wait = LateRecordWait()
        let respondedAt = ContinuousClock.now
        let over = wait.isOver(respondedAt: respondedAt, lastValueAt: respondedAt + .milliseconds(c.lastValue),
                               now: respondedAt + .milliseconds(c.now), received: c.received, expected: c.expected,
                               awaitingContext: c.awaitingContext)
        #expect(over == c.over)
    }
}
