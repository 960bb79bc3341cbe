import GatewayCore
import GlucoseProfile
import Support
import Synchronization
import SQLiteStore
import Testing
import TestSupport
@testable import Meters

/// Reading the meter's clock for skew (Current Time, Date Time, the i-SENS vendor clock) and keeping it
/// right (`set_meter_clock`, `meters set-clock`), against the in-memory fake meter.
@Suite("Meter clock", .timeLimit(.minutes(1)))
struct MeterClockTests {
    static let zone = "Europe/Berlin"

    static func time(_ y: Int, _ mo: Int, _ d: Int, _ h: Int, _ mi: Int, _ s: Int = 0) -> GlucoseDateTime {
        GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: s)!
    }

    /// Unix milliseconds of a UTC wall time.
    static func utc(_ t: GlucoseDateTime) -> UnixMillis { t.naiveSeconds * 1000 }

    static func download(_ meter: FakeMeter, options: DownloadOptions = DownloadOptions(), zone: String = zone,
                         now: UnixMillis, clock: any SessionClock = ContinuousClock())
        async throws -> (DownloadReport, MemoryReadingStore) {
        let info = MeterInfo(address: meter.address, timeZone: zone)
        let store = MemoryReadingStore(meters: [info])
        let report = try await MeterDownload(store: store, options: options, logger: .silent, now: { now }, clock: clock)
            .run(link: meter.connect(), meter: info)
        return (report, store)
    }

    static func ctsMeter(shows t: GlucoseDateTime, writable: Set<GATTUUID> = [.currentTime]) -> FakeMeter {
        var script = FakeMeterScript(records: [FakeRecord.glucose(0)])
        script.characteristics.insert(.currentTime)
        script.clockValue = FakeMeterScript.currentTime(t)
        script.writableClocks = writable
        return FakeMeter(script: script)
    }

    static func vendorMeter(shows t: GlucoseDateTime, writable: Bool = true, uuid: GATTUUID = .isensVendorClock) -> FakeMeter {
        var script = FakeMeterScript(records: [FakeRecord.glucose(0)])
        script.characteristics.insert(uuid)
        script.clockValue = FakeMeterScript.dateTime(t)
        script.writableClocks = writable ? [uuid] : []
        return FakeMeter(script: script)
    }

    static func clockWrites(_ meter: FakeMeter) -> [String] {
        meter.callLog.filter { $0.hasPrefix("write 0x2a2b") || $0.hasPrefix("write 0x2a08") || $0.hasPrefix("write 0xfff1") }
    }

    static var setting: DownloadOptions { DownloadOptions(setMeterClock: true) }

    // MARK: Reading the vendor clock

    @Test func vendorClockIsReadForSkewAndItsNotificationsRunUntilTheLinkEnds() async throws {
        // The CareSens shows 10:10 CEST; the gateway says 08:00 UTC (10:00 CEST).
        let meter = Self.vendorMeter(shows: Self.time(2024, 5, 1, 10, 10))
        let (report, store) = try await Self.download(meter, now: Self.utc(Self.time(2024, 5, 1, 8, 0)))
        #expect(report.skew?.seconds == 600)
        #expect(report.outcome == .completed)
        let log = meter.callLog
        let subscribe = try #require(log.firstIndex(of: "subscribe 0xfff1"))
        let ask = try #require(log.firstIndex(of: "write 0xfff1: c0 03 01 00 00 00 00 00 00 00 00"))
        #expect(subscribe < ask)
        // Never stopped by the session: the meter would switch off. The link's disconnect ends it.
        #expect(!log.contains("unsubscribe 0xfff1"))
        #expect(log.last == "disconnect")
        let r = try #require(store.readings.first)
        #expect(r.instant == (try #require(r.meterInstant)) - 600_000)
        #expect(Self.clockWrites(meter).count == 1)   // only the time request: setting is off by default
    }

    @Test func silentVendorClockLeavesTheSkewUnmeasuredAndTheDownloadGoesOn() async throws {
        let meter = Self.vendorMeter(shows: Self.time(2024, 5, 1, 10, 10))
        meter.update { $0.vendorClockAnswers = false }
        let clock = ManualClock()
        let task = Task {
            try await Self.download(meter, options: Self.setting, now: Self.utc(Self.time(2024, 5, 1, 8, 0)), clock: clock)
        }
        let asked = await waitUntil(10) { meter.callLog.contains { $0.hasPrefix("write 0xfff1") } && clock.sleeping > 0 }
        guard asked else { task.cancel(); Issue.record("the vendor clock was never asked"); return }
        clock.advance(by: VendorClock.answerTimeout)
        let (report, store) = try await task.value
        #expect(report.skew == nil)
        #expect(report.outcome == .completed)
        #expect(store.readings.count == 1)
        #expect(Self.clockWrites(meter).count == 1)
    }

    @Test func theVendorClockReadStartsWhenTheTimeIsAskedForNotWhenNotificationsAreSwitchedOn() async throws {
        // Switching notifications on takes a second on the gateway's clock; then the time request is written
        // and answered at once, at 08:00:01.000 UTC, with 10:00:01 CEST: a clock exactly at UTC+2. Timing the
        // read from before the switch-on puts its middle half a second early, and F a second high.
        let meter = Self.vendorMeter(shows: Self.time(2024, 5, 1, 10, 0, 1))
        let clock = ManualClock()
        let start = clock.now
        meter.update { $0.onSubscribe = { uuid in if uuid == .isensVendorClock { clock.advance(by: .seconds(1)) } } }
        let base = Self.utc(Self.time(2024, 5, 1, 8, 0))
        let now: @Sendable () -> UnixMillis = { base + (clock.now - start).components.seconds * 1000 }
        let info = MeterInfo(address: meter.address, timeZone: Self.zone)
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(info)
        let report = try await MeterDownload(store: store, options: DownloadOptions(), logger: .silent, now: now, clock: clock)
            .run(link: meter.connect(), meter: info)
        #expect(report.outcome == .completed)
        #expect(try await store.clockHistory(meter.address).map(\.offsetSeconds) == [7200])
    }

    // MARK: Keeping it right during a download

    @Test func beyondTheThresholdTheGatewayTimeIsWrittenAsLocalSummerTime() async throws {
        // 1 May 2024 is in CEST (UTC+2): the meter is told 10:00:00, a Wednesday (3), adjust reason manual.
        let meter = Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 10))
        let (report, store) = try await Self.download(meter, options: Self.setting, now: Self.utc(Self.time(2024, 5, 1, 8, 0)))
        #expect(Self.clockWrites(meter) == ["write 0x2a2b: e8 07 05 01 0a 00 00 03 00 01"])
        #expect(report.skew?.seconds == 600)
        #expect(report.clockSet?.old == Self.time(2024, 5, 1, 10, 10))
        #expect(report.clockSet?.new == Self.time(2024, 5, 1, 10, 0))
        // The readings of this download keep the correction by the skew measured before the write.
        let r = try #require(store.readings.first)
        #expect(r.instant == (try #require(r.meterInstant)) - 600_000)
        let event = try #require(store.events.first { $0.kind == .clockSet })
        #expect(event.code == 600)
        #expect(event.message.contains("was 2024-05-01T10:10:00") && event.message.contains("now 2024-05-01T10:00:00"))
        #expect(try await store.meter(meter.address)?.lastClockSkewSeconds == 600)
    }

    @Test func inWinterTheSameZoneGetsStandardTime() async throws {
        // 15 January: CET (UTC+1). A meter left on summer time shows 10:00 for 08:00 UTC.
        let meter = Self.ctsMeter(shows: Self.time(2024, 1, 15, 10, 0))
        let (report, _) = try await Self.download(meter, options: Self.setting, now: Self.utc(Self.time(2024, 1, 15, 8, 0)))
        #expect(report.skew?.seconds == 3600)
        #expect(Self.clockWrites(meter) == ["write 0x2a2b: e8 07 01 0f 09 00 00 01 00 01"])
    }

    @Test func nothingIsWrittenWhenDisabledOrWithinTheThreshold() async throws {
        let now = Self.utc(Self.time(2024, 5, 1, 8, 0))
        let off = Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 10))
        _ = try await Self.download(off, now: now)
        #expect(Self.clockWrites(off).isEmpty)
        let close = Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 2))   // 120 s: not beyond 120
        let (report, store) = try await Self.download(close, options: Self.setting, now: now)
        #expect(report.skew?.seconds == 120)
        #expect(Self.clockWrites(close).isEmpty)
        #expect(!store.events.contains { $0.kind == .clockSet })
    }

    @Test func theSyncSummaryNamesASkewOnlyBeyondTheConfiguredThreshold() async throws {
        let now = Self.utc(Self.time(2024, 5, 1, 8, 0))
        let wide = DownloadOptions(clinical: ClinicalSettings(clockSkewThresholdSeconds: 900))
        let (within, _) = try await Self.download(Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 10)), options: wide, now: now)
        #expect(within.skew?.seconds == 600)
        #expect(!MeterSyncResult(address: within.address, outcome: .downloaded(within)).summary.contains("clock off"))
        let narrow = DownloadOptions(clinical: ClinicalSettings(clockSkewThresholdSeconds: 30))
        let (beyond, _) = try await Self.download(Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 1)), options: narrow, now: now)
        #expect(beyond.skew?.seconds == 60)
        #expect(MeterSyncResult(address: beyond.address, outcome: .downloaded(beyond)).summary.hasSuffix("; meter clock off by 60 s"))
    }

    @Test func nothingIsWrittenFromAnUnusableClockOrWithoutAZone() async throws {
        let now = Self.utc(Self.time(2024, 5, 1, 8, 0))
        var script = FakeMeterScript(records: [FakeRecord.glucose(0)])
        script.characteristics.insert(.currentTime)
        script.clockValue = [0xE8, 0x07, 13, 1, 10, 10, 0, 3, 0, 0]   // month 13
        script.writableClocks = [.currentTime]
        let broken = FakeMeter(script: script)
        let (report, _) = try await Self.download(broken, options: Self.setting, now: now)
        #expect(report.skew == nil)
        #expect(Self.clockWrites(broken).isEmpty)
        let unzoned = Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 10))
        let (other, _) = try await Self.download(unzoned, options: Self.setting, zone: "Nowhere/Atlantis", now: now)
        #expect(other.skew == nil)
        #expect(Self.clockWrites(unzoned).isEmpty)
    }

    @Test func aRefusedWriteIsAWarningAndTheDownloadContinues() async throws {
        let meter = Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 10), writable: [])
        let (report, store) = try await Self.download(meter, options: Self.setting, now: Self.utc(Self.time(2024, 5, 1, 8, 0)))
        #expect(Self.clockWrites(meter).count == 1)
        #expect(report.clockSet == nil)
        #expect(report.outcome == .completed)
        #expect(store.readings.count == 1)
        #expect(!store.events.contains { $0.kind == .clockSet })
        #expect(store.events.contains { $0.kind == .clockSkew && $0.message.contains("setting the meter clock failed") })
    }

    @Test func dateTimeIsWrittenWhereCurrentTimeIsNotWritable() async throws {
        var script = FakeMeterScript(records: [FakeRecord.glucose(0)])
        script.characteristics.formUnion([.currentTime, .dateTime])
        script.clockValue = FakeMeterScript.currentTime(Self.time(2024, 5, 1, 9, 50))
        script.writableClocks = [.dateTime]
        let meter = FakeMeter(script: script)
        let (report, _) = try await Self.download(meter, options: Self.setting, now: Self.utc(Self.time(2024, 5, 1, 8, 0)))
        #expect(Self.clockWrites(meter) == ["write 0x2a2b: e8 07 05 01 0a 00 00 03 00 01", "write 0x2a08: e8 07 05 01 0a 00 00"])
        #expect(report.clockSet?.access == .dateTime)
    }

    @Test func theVendorClockIsSetWithItsCommand() async throws {
        let meter = Self.vendorMeter(shows: Self.time(2024, 5, 1, 9, 0))
        let (report, _) = try await Self.download(meter, options: Self.setting, now: Self.utc(Self.time(2024, 5, 1, 8, 0, 30)))
        #expect(report.skew?.seconds == -3630)
        #expect(Self.clockWrites(meter) == ["write 0xfff1: c0 03 01 00 00 00 00 00 00 00 00",
                                            "write 0xfff1: c0 03 01 00 e8 07 05 01 0a 00 1e"])
        #expect(!meter.callLog.contains("unsubscribe 0xfff1"))
        #expect(report.clockSet?.access == .vendor)
    }

    @Test func theNewerVendorProtocolUsesItsOwnCharacteristic() async throws {
        let v15 = GATTUUID.isensVendorClockV15
        #expect(v15.uuidString == "c4dea3bc-5a9d-11e9-8647-d663bd873d93")
        #expect(GATTUUID(vendor: "C4DEA3BC-5A9D-11E9-8647-D663BD873D93") == v15)
        #expect(GATTUUID(vendor: "0000fff1-0000-1000-8000-00805f9b34fb") == .isensVendorClock)
        #expect(GATTUUID(vendor: "c4dea3bc-5a9d-11e9-8647") == nil)
        let meter = Self.vendorMeter(shows: Self.time(2024, 5, 1, 10, 10), uuid: v15)
        let (report, _) = try await Self.download(meter, options: Self.setting, now: Self.utc(Self.time(2024, 5, 1, 8, 0)))
        #expect(report.skew?.seconds == 600)
        #expect(report.clockSet?.access == .vendor)
        #expect(meter.callLog.filter { $0.hasPrefix("write c4dea3bc") } == [
            "write c4dea3bc-5a9d-11e9-8647-d663bd873d93: c0 03 01 00 00 00 00 00 00 00 00",
            "write c4dea3bc-5a9d-11e9-8647-d663bd873d93: c0 03 01 00 e8 07 05 01 0a 00 00",
        ])
        #expect(!meter.callLog.contains("unsubscribe \(v15)"))
    }

    // MARK: meters set-clock

    static func session(_ meter: FakeMeter, store: MemoryReadingStore, now: UnixMillis) -> MeterClockSession {
        MeterClockSession(radio: FakeMeterRadio(meters: [meter]), store: store, logger: .silent, now: { now })
    }

    @Test func setClockWritesOnceAndReadsBack() async throws {
        let meter = Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 0, 40))
        let info = MeterInfo(address: meter.address, timeZone: Self.zone)
        let store = MemoryReadingStore(meters: [info])
        let outcome = await Self.session(meter, store: store, now: Self.utc(Self.time(2024, 5, 1, 8, 0))).run(info)
        guard case .set(let written, let skew, let after) = outcome else { Issue.record("\(outcome)"); return }
        #expect(skew == 40)   // below the threshold: set-clock writes all the same
        #expect(written.access == .currentTime && written.new == Self.time(2024, 5, 1, 10, 0))
        #expect(after == Self.time(2024, 5, 1, 10, 0))
        #expect(Self.clockWrites(meter) == ["write 0x2a2b: e8 07 05 01 0a 00 00 03 00 01"])
        #expect(!meter.callLog.contains { $0.hasPrefix("write 01") || $0.hasPrefix("write 04") })   // no download
        #expect(store.events.contains { $0.kind == .clockSet && $0.code == 40 })
    }

    @Test func setClockOnAVendorMeterTakesItsAnswer() async throws {
        let meter = Self.vendorMeter(shows: Self.time(2024, 5, 1, 11, 0))
        let info = MeterInfo(address: meter.address, timeZone: Self.zone)
        let outcome = await Self.session(meter, store: MemoryReadingStore(meters: [info]), now: Self.utc(Self.time(2024, 5, 1, 8, 0))).run(info)
        guard case .set(let written, let skew, let after) = outcome else { Issue.record("\(outcome)"); return }
        #expect(skew == 3600 && written.access == .vendor)
        #expect(after == Self.time(2024, 5, 1, 10, 0))
        #expect(!meter.callLog.contains("unsubscribe 0xfff1"))
    }

    @Test func setClockTimesTheVendorClockReadFromTheTimeRequest() async throws {
        // As in a download: notifications take a second to switch on, then the meter answers 10:00:01 CEST at
        // once, at 08:00:01.000 UTC. Timed from before the switch-on, the skew came out a second.
        let meter = Self.vendorMeter(shows: Self.time(2024, 5, 1, 10, 0, 1))
        let clock = ManualClock()
        let start = clock.now
        meter.update { $0.onSubscribe = { uuid in if uuid == .isensVendorClock { clock.advance(by: .seconds(1)) } } }
        let base = Self.utc(Self.time(2024, 5, 1, 8, 0))
        let info = MeterInfo(address: meter.address, timeZone: Self.zone)
        let session = MeterClockSession(radio: FakeMeterRadio(meters: [meter]), store: MemoryReadingStore(meters: [info]), logger: .silent,
                                        now: { base + (clock.now - start).components.seconds * 1000 }, clock: clock)
        guard case .set(_, let skew, _) = await session.run(info) else { Issue.record("the clock was not set"); return }
        #expect(skew == 0)
    }

    @Test func setClockRefusals() async throws {
        let now = Self.utc(Self.time(2024, 5, 1, 8, 0))
        let plain = FakeMeter(script: FakeMeterScript())
        let info = MeterInfo(address: plain.address, timeZone: Self.zone)
        #expect(await Self.session(plain, store: MemoryReadingStore(meters: [info]), now: now).run(info) == .noClock)

        let readOnly = Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 10), writable: [])
        guard case .refused = await Self.session(readOnly, store: MemoryReadingStore(meters: [info]), now: now).run(info) else {
            Issue.record("a read-only clock was not reported as refused"); return
        }

        var script = FakeMeterScript()
        script.characteristics.insert(.dateTime)
        script.clockValue = [0, 0, 0, 0, 0, 0, 0]
        script.writableClocks = [.dateTime]
        let unset = FakeMeter(script: script)
        #expect(await Self.session(unset, store: MemoryReadingStore(meters: [info]), now: now).run(info) == .unusableClock)
        #expect(Self.clockWrites(unset).isEmpty)

        let meter = Self.ctsMeter(shows: Self.time(2024, 5, 1, 10, 10))
        let unzoned = MeterInfo(address: meter.address, timeZone: "Nowhere/Atlantis")
        #expect(await Self.session(meter, store: MemoryReadingStore(meters: [unzoned]), now: now).run(unzoned) == .zoneUnknown("Nowhere/Atlantis"))
        #expect(meter.callLog.isEmpty)
    }

    @Test func vendorAnswersTimeOutOnTheSessionClock() async {
        let clock = ManualClock()
        let answers = VendorAnswers()
        let waiting = Task { await answers.next(clock: clock, timeout: .seconds(5)) }
        #expect(await waitUntil(10) { clock.sleeping > 0 })
        clock.advance(by: .seconds(5))
        #expect(await waiting.value == nil)
        answers.deliver([1, 2, 3])
        #expect(await answers.next(clock: clock, timeout: .seconds(5)) == [1, 2, 3])
    }
}
