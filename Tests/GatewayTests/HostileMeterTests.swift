import GatewayCore
import GlucoseProfile
import SQLiteStore
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// What a broken or hostile meter sends to the per-meter handling: counts that do not match the records,
/// numbers outside the count, duplicates, reports cut short, answers where records belong. Nothing crashes,
/// nothing is lost, nothing is stored twice.
@Suite("Hostile meter input", .timeLimit(.minutes(1)))
struct HostileMeterTests {
    typealias H = MeterHandlingTests

    // MARK: - A meter that numbers newest first

    @Test func aReportThatEndsBeforeItsCountLeavesTheMissingRecordsForTheNextSync() async throws {
        let mem = H.memory(8)
        let f = try await H.taiDoc(mem)
        // The meter counts 8 and ends its report with success after the newest 5.
        f.meter.update { $0.successAfterRecords = 5 }
        let short = try await f.download()
        #expect(short.stored == 5)
        #expect(try await f.stored().count == 5)
        f.meter.update { $0.successAfterRecords = nil }
        let again = try await f.download()
        #expect(again.stored == 3)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.positions() == Array(0..<8))
        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }

    @Test func anIncrementalReportMissingARecordInTheMiddleIsNotTakenAsComplete() async throws {
        var mem = H.memory(4)
        let f = try await H.taiDoc(mem)
        _ = try await f.download()
        // Three new records; the meter's `<=` report skips the middle one of them (number 1).
        mem += [(H.time(3, 1), 201), (H.time(3, 2), 202), (H.time(3, 3), 203)]
        let all = H.newestFirst(mem)
        f.meter.update { $0.records = all.filter { $0.sequence != 1 } ; $0.countAnswer = 7 }
        let gap = try await f.download()
        #expect(gap.stored == 2)
        f.meter.update { $0.records = all; $0.countAnswer = nil }
        let again = try await f.download()
        #expect(again.stored == 1)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.positions() == Array(0..<7))
    }

    @Test func recordsNumberedBeyondTheCountEachKeepAPositionOfTheirOwn() async throws {
        let mem = H.memory(6)
        let f = try await H.taiDoc(mem)
        // The meter says 3 but reports 6 records, numbers 0...5.
        f.meter.update { $0.countAnswer = 3 }
        let first = try await f.download()
        #expect(first.stored == 6)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.positions() == Array(0..<6))
        #expect(try await f.store.highestSequence(H.address) == 5)
        f.meter.update { $0.countAnswer = nil }
        let second = try await f.download()
        #expect(second.stored == 0)
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }

    @Test func aRecordAddedBetweenCountAndReportIsStoredOnceAtItsPosition() async throws {
        var mem = H.memory(5)
        let f = try await H.taiDoc(mem)
        _ = try await f.download()
        // The meter counts 5, then a measurement shifts every number up by one before the report.
        mem += [(H.time(3, 1), 201)]
        let after = H.newestFirst(mem)
        f.meter.update { $0.memoryAfterCount = after }
        let second = try await f.download()
        #expect(second.stored == 1)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.positions() == Array(0..<6))
        #expect(try await f.store.highestSequence(H.address) == 5)
        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(third.received == 1)   // incremental again: only the newest stored record
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }

    @Test func aCountOfZeroLeavesWhatIsStored() async throws {
        let mem = H.memory(3)
        let f = try await H.taiDoc(mem)
        _ = try await f.download()
        f.meter.update { $0.countAnswer = 0 }
        let report = try await f.download()
        #expect(report.outcome == .noRecords)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.store.highestSequence(H.address) == 2)
    }

    @Test func aCountOfOneThenOfMoreIsIncremental() async throws {
        var mem = H.memory(1)
        let f = try await H.taiDoc(mem)
        #expect(try await f.download().stored == 1)
        #expect(try await f.positions() == [0])
        mem += [(H.time(3, 1), 201)]
        let next = H.newestFirst(mem)
        f.meter.update { $0.records = next }
        let second = try await f.download()
        #expect(second.stored == 1 && second.received == 2)
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }

    @Test func aCountOf65535WithThreeRecordsStoresThemOnceAndDoesNotTrap() async throws {
        let mem = H.memory(3)
        let f = try await H.taiDoc(mem)
        f.meter.update { $0.countAnswer = 65535 }
        let first = try await f.download()
        #expect(first.stored == 3)
        let second = try await f.download()
        #expect(second.stored == 0)
        f.meter.update { $0.countAnswer = nil }
        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.store.highestSequence(H.address) == 2)
    }

    @Test func aRecordNumbered65535AmongFewIsStoredAndDoesNotTrap() async throws {
        var records = H.newestFirst(H.memory(2))
        var m = GlucoseMeasurement(sequenceNumber: 65535, baseTime: H.time(1, 0, year: 2026, month: 10), timeOffset: 0,
                                   concentration: .value(mantissa: 77, exponent: -5), unit: .kilogramPerLitre,
                                   type: 1, sampleLocation: 1)
        m.sequenceNumber = 65535
        records.append(FakeRecord(measurement: m))
        let sent = records
        let f = try await H.taiDoc([])
        f.meter.update { $0.records = sent }
        let first = try await f.download()
        #expect(first.stored == 3)
        let second = try await f.download()
        #expect(second.stored == 0)
        #expect(try await f.stored().count == 3)
    }

    @Test func aCountTheMeterCannotGiveFailsWithOneLineAndStoresNothing() async throws {
        let f = try await H.taiDoc(H.memory(3))
        f.meter.update { $0.countUnsupported = true }
        await #expect(throws: DownloadError.self) { _ = try await f.download() }
        do { _ = try await f.download() } catch {
            #expect(!"\(error)".contains("\n"))
            #expect("\(error)".contains("did not count"))
        }
        #expect(try await f.stored().isEmpty)
    }

    @Test func aReportAnsweredWithNoRecordsAfterACountStoresNothingAndFailsNothing() async throws {
        let f = try await H.taiDoc(H.memory(3))
        f.meter.update { $0.countAnswer = 3; $0.records = [] }
        let report = try await f.download()
        #expect(report.outcome == .noRecords)
        #expect(try await f.stored().isEmpty)
        #expect(try await f.store.highestSequence(H.address) == nil)
    }

    @Test func recordsWithIdenticalBytesButTheirNumbersAreEachStoredOnce() async throws {
        // Two measurements in the same minute with the same result: only the number tells them apart.
        let mem: H.Memory = [(H.time(1, 8), 120), (H.time(1, 8), 120), (H.time(1, 9), 130)]
        let f = try await H.taiDoc(mem)
        #expect(try await f.download().stored == 3)
        #expect(try await f.download().stored == 0)
        let more = mem + [(H.time(1, 10), 140)]
        f.meter.update { $0.records = H.newestFirst(more) }
        #expect(try await f.download().stored == 1)
        #expect(H.same(try await f.stored(), H.expected(more)))
    }

    @Test func duplicateNumbersInOneReportLoseNoReading() async throws {
        // Two different records the meter both numbers 1.
        var records = H.newestFirst(H.memory(3))
        var m = GlucoseMeasurement(sequenceNumber: 1, baseTime: H.time(5, 5), timeOffset: 0,
                                   concentration: .value(mantissa: 155, exponent: -5), unit: .kilogramPerLitre,
                                   type: 1, sampleLocation: 1)
        m.sequenceNumber = 1
        records.insert(FakeRecord(measurement: m), at: 2)
        let sent = records
        let f = try await H.taiDoc([])
        f.meter.update { $0.records = sent; $0.countAnswer = 3 }
        _ = try await f.download()
        let stored = try await f.stored()
        #expect(stored.count == 4)
        #expect(stored.contains { $0.0 == H.time(5, 5).isoString && $0.1 == 155 })
        _ = try await f.download()
        #expect(try await f.stored().count == 4)
    }
}

/// Clock values a broken meter may show: Current Time, Date Time and the i-SENS vendor clock's answer.
@Suite("Hostile meter clock values", .timeLimit(.minutes(1)))
struct HostileMeterClockTests {
    static let now = MeterClockTests.utc(MeterClockTests.time(2026, 11, 28, 12, 0))

    static func dateTime(year: Int, month: Int, day: Int, hour: Int, minute: Int = 0, second: Int = 0) -> [UInt8] {
        [UInt8(year & 0xFF), UInt8(year >> 8), UInt8(month), UInt8(day), UInt8(hour), UInt8(minute), UInt8(second)]
    }

    struct ValueCase: CustomTestStringConvertible, Sendable {
        var label: String
        var bytes: [UInt8]
        var testDescription: String { label }
    }

    @Test(arguments: [
        ValueCase(label: "empty", bytes: []),
        ValueCase(label: "six bytes", bytes: Array(dateTime(year: 2026, month: 11, day: 28, hour: 12).prefix(6))),
        ValueCase(label: "month 13", bytes: dateTime(year: 2026, month: 13, day: 28, hour: 12)),
        ValueCase(label: "month 0", bytes: dateTime(year: 2026, month: 0, day: 28, hour: 12)),
        ValueCase(label: "day 0", bytes: dateTime(year: 2026, month: 11, day: 0, hour: 12)),
        ValueCase(label: "day 31 of November", bytes: dateTime(year: 2026, month: 11, day: 31, hour: 12)),
        ValueCase(label: "hour 25", bytes: dateTime(year: 2026, month: 11, day: 28, hour: 25)),
        ValueCase(label: "minute 60", bytes: dateTime(year: 2026, month: 11, day: 28, hour: 12, minute: 60)),
        ValueCase(label: "year 0", bytes: dateTime(year: 0, month: 11, day: 28, hour: 12)),
        ValueCase(label: "year 65535", bytes: dateTime(year: 65535, month: 255, day: 255, hour: 255, minute: 255, second: 255)),
    ])
    func aClockValueThatIsNoDateGivesNoSkew(_ c: ValueCase) throws {
        let zone = try #require(MeterTimeZone(identifier: "UTC"))
        #expect(ClockSkew.measure(clockValue: c.bytes, zone: zone, gatewayNow: Self.now) == nil)
        // The same in the vendor clock's answer.
        #expect(VendorClock.answerDateTime([0x05, 0, 0, 0] + c.bytes).flatMap {
            ClockSkew.measure(clockValue: $0, zone: zone, gatewayNow: Self.now)
        } == nil)
    }

    @Test func aLongClockValueIsReadByItsFirstSevenBytes() throws {
        let zone = try #require(MeterTimeZone(identifier: "UTC"))
        let bytes = Self.dateTime(year: 2026, month: 11, day: 28, hour: 12, minute: 5) + [UInt8](repeating: 0xFF, count: 505)
        #expect(ClockSkew.measure(clockValue: bytes, zone: zone, gatewayNow: Self.now)?.seconds == 300)
    }

    @Test func aVendorNotificationThatIsNotATimeAnswerIsNotTakenForOne() {
        let time = Self.dateTime(year: 2026, month: 11, day: 28, hour: 12)
        #expect(VendorClock.answerDateTime([0x06, 0, 0, 0] + time) == nil)      // another command byte
        #expect(VendorClock.answerDateTime([0xC0, 0x03, 0x01, 0x00] + time) == nil)   // the gateway's own command echoed
        #expect(VendorClock.answerDateTime([0x05, 0, 0, 0] + time.prefix(6)) == nil)   // cut short
        #expect(VendorClock.answerDateTime([]) == nil)
        #expect(VendorClock.answerDateTime([0x05]) == nil)
        #expect(VendorClock.answerDateTime([0x05, 0, 0, 0] + time + [1, 2, 3]) == time)
    }

    /// A clock showing the year 9999 is a valid Date Time. Its skew (nearly 8,000 years) must not move the
    /// meter's readings, which are dated 2026, thousands of years into the past and upload them there.
    @Test func aClockAtYear9999MovesNoReadingToATimeBeforeBluetoothLE() async throws {
        let meter = MeterClockTests.ctsMeter(shows: MeterClockTests.time(9999, 12, 31, 23, 0))
        meter.update { $0.records = [FakeRecord.glucose(1, mgdl: 120, at: MeterClockTests.time(2026, 11, 28, 11, 0))] }
        let (report, store) = try await MeterClockTests.download(meter, zone: "UTC", now: Self.now)
        #expect(report.stored == 1)
        let r = try #require(store.readings.first)
        #expect(r.mgdl == 120)
        #expect(r.meterInstant == MeterClockTests.utc(MeterClockTests.time(2026, 11, 28, 11, 1)))
        #expect(r.instant == nil)
        #expect(r.exclusion == .timeUnresolved)
    }

    @Test func aClockSomeYearsFastStillCorrects() async throws {
        // The rule above is no limit on the skew itself: a clock reset years back or set years ahead still
        // corrects the readings it dated, as long as the corrected time is one a Bluetooth LE meter can have.
        let meter = MeterClockTests.ctsMeter(shows: MeterClockTests.time(2030, 11, 28, 12, 0))
        meter.update { $0.records = [FakeRecord.glucose(1, mgdl: 120, at: MeterClockTests.time(2030, 11, 28, 10, 0))] }
        let (_, store) = try await MeterClockTests.download(meter, zone: "UTC", now: Self.now)
        let r = try #require(store.readings.first)
        #expect(r.exclusion == nil)
        #expect(r.instant == MeterClockTests.utc(MeterClockTests.time(2026, 11, 28, 10, 1)))
    }
}

/// Device Information strings a broken meter may send.
@Suite("Hostile identity strings", .timeLimit(.minutes(1)))
struct HostileIdentityTests {
    @Test func emptyAllControlInvalidAndLongStringsAreCleanedWithoutLosingTheBytes() {
        #expect(IdentityText.clean([]) == (nil, false))
        let controls: [UInt8] = Array(0...31) + [0x7F, 0xC2, 0x80, 0xC2, 0x9F]
        #expect(IdentityText.clean(controls) == (nil, true))
        // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an overlong NUL) becomes U+FFFD.
        let invalid: [UInt8] = [0x41, 0x80, 0x42, 0xE2, 0x82, 0x43, 0xC0, 0x80]
        let cleaned = IdentityText.clean(invalid)
        #expect(cleaned.changed)
        #expect(cleaned.text?.hasPrefix("A\u{FFFD}B") == true)
        #expect(cleaned.text?.contains("C") == true)
        #expect(cleaned.text?.unicodeScalars.allSatisfy { $0.properties.generalCategory != .control } == true)
        // 512 bytes, NUL-padded halfway: cut to 64 characters (`IdentityString`).
        let long = [UInt8](repeating: 0x4D, count: 256) + [UInt8](repeating: 0, count: 256)
        #expect(IdentityText.clean(long) == (String(repeating: "M", count: 64), true))
    }

    @Test func aMeterSendingBrokenIdentityStringsIsDownloadedAndItsBytesKept() async throws {
        var script = FakeMeterScript(records: [FakeRecord.glucose(1, mgdl: 111, at: MeterHandlingTests.time(1, 8))])
        script.manufacturer = String(repeating: "\u{0}", count: 512)
        script.model = String(repeating: "X", count: 512)
        script.serial = "\u{1B}[31m\u{7}"
        script.firmware = ""
        let meter = FakeMeter(address: MeterHandlingTests.address, script: script)
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(MeterInfo(address: MeterHandlingTests.address, timeZone: "UTC"))
        let report = try await MeterHandlingTests.Fixture(meter: meter, store: store).download()
        #expect(report.stored == 1)
        let row = try #require(try await store.meter(MeterHandlingTests.address))
        #expect(row.manufacturer == nil)
        #expect(row.model == String(repeating: "X", count: 64))
        #expect(row.serial == "[31m")
        #expect(row.rawIdentity["manufacturer"] == [UInt8](repeating: 0, count: 512))
        #expect(row.rawIdentity["model"] == [UInt8](repeating: 0x58, count: 512))
        #expect(row.rawIdentity["serial"] == Array(script.serial.utf8))
        #expect(row.handling.kinds == [.identityStringsCleaned])
    }
}

/// The Fora memory-full marker is chosen by the advertised name, which a user does not pick for the meter
/// (BlueZ's Name, or its Alias only when the meter advertises no name). What it can do is limited to what
/// the rule excludes: a HI (no number) dated 2037 or later, which is excluded either way (`time-in-future`
/// otherwise); a measured value is never hidden by it.
@Suite("Hostile Fora marker", .timeLimit(.minutes(1)))
struct HostileForaMarkerTests {
    typealias H = MeterHandlingTests

    static func record(_ seq: UInt16, year: Int, _ concentration: SFloat, status: SensorStatus? = nil) -> FakeRecord {
        FakeRecord(measurement: GlucoseMeasurement(sequenceNumber: seq, baseTime: H.time(1, 0, 0, year: year, month: 1), timeOffset: 0,
                                                   concentration: concentration, unit: .kilogramPerLitre,
                                                   type: 1, sampleLocation: 1, sensorStatus: status))
    }

    static func download(name: String?, manufacturer: String, _ records: [FakeRecord]) async throws -> [Int: NewReading] {
        var script = FakeMeterScript(records: records)
        script.manufacturer = manufacturer
        let meter = FakeMeter(address: H.address, script: script)
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(MeterInfo(address: H.address, timeZone: "UTC"))
        var f = H.Fixture(meter: meter, store: store)
        f.name = name
        _ = try await f.download()
        var out: [Int: NewReading] = [:]
        for r in try await store.readings(ReadingFilter(meterAddress: H.address)) { out[r.reading.sequence] = r.reading }
        return out
    }

    @Test func onAForaOnlyAHIDated2037OrLaterIsTheMarker() async throws {
        let r = try await Self.download(name: "TNG VOICE 3A1F", manufacturer: "", [
            Self.record(1, year: 2037, .value(mantissa: 104, exponent: -5)),
            Self.record(2, year: 2037, .negativeInfinity),
            Self.record(3, year: 2036, .positiveInfinity),
            Self.record(4, year: 2037, .value(mantissa: 700, exponent: -5), status: [.resultTooHigh]),
            Self.record(5, year: 2037, .positiveInfinity),
        ])
        #expect(r[1]?.exclusion == .timeInFuture && r[1]?.mgdl == 104)
        #expect(r[2]?.exclusion == .timeInFuture)
        #expect(r[3]?.exclusion == .timeInFuture)
        #expect(r[4]?.exclusion == .memoryFullMarker)
        #expect(r[5]?.exclusion == .memoryFullMarker)
    }

    @Test(arguments: ["TNGX 100", "TNGLUCO", "XTNG VOICE", "Contour TNG"])
    func aNameThatOnlyStartsWithTheLettersTNGIsNoFora(_ name: String) async throws {
        let r = try await Self.download(name: name, manufacturer: "", [Self.record(1, year: 2037, .positiveInfinity)])
        #expect(r[1]?.exclusion == .timeInFuture)
    }

    @Test(arguments: ["TNG", "TNG VOICE", "tng voice 3a1f", "TNG-VOICE"])
    func aTNGNameWithoutManufacturerIsAFora(_ name: String) async throws {
        let r = try await Self.download(name: name, manufacturer: "", [Self.record(1, year: 2037, .positiveInfinity)])
        #expect(r[1]?.exclusion == .memoryFullMarker)
    }

    @Test func aTNGNameOnAnotherMakersMeterIsNoFora() async throws {
        let r = try await Self.download(name: "TNG VOICE", manufacturer: "Roche", [Self.record(1, year: 2037, .positiveInfinity)])
        #expect(r[1]?.exclusion == .timeInFuture)
    }
}

/// A meter whose identity says it numbers newest first (TaiDoc 1.2.4) but that numbers oldest first, as
/// the Glucose Profile says: the handling must cost it time, never readings.
@Suite("Identity that does not match the numbering", .timeLimit(.minutes(1)))
struct MisidentifiedNumberingTests {
    typealias H = MeterHandlingTests

    static func oldestFirst(_ memory: H.Memory) -> [FakeRecord] {
        memory.enumerated().map { i, entry in
            FakeRecord(measurement: GlucoseMeasurement(
                sequenceNumber: UInt16(i), baseTime: entry.0, timeOffset: 0,
                concentration: .value(mantissa: Int16(entry.1), exponent: -5), unit: .kilogramPerLitre,
                type: 1, sampleLocation: 1))
        }
    }

    @Test func aTaiDoc124ThatNumbersOldestFirstLosesNoNewRecord() async throws {
        var mem = H.memory(5)
        let f = try await H.taiDoc([])
        let first = Self.oldestFirst(mem)
        f.meter.update { $0.records = first }
        #expect(try await f.download().stored == 5)
        mem += [(H.time(3, 1), 201), (H.time(3, 2), 202)]
        let next = Self.oldestFirst(mem)
        f.meter.update { $0.records = next }
        let second = try await f.download()
        #expect(second.stored == 2)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }
}

/// A meter that numbers newest first has its report held in memory until the report ends: a meter that
/// never ends it must not make the gateway hold records without bound.
@Suite("Held report bound", .timeLimit(.minutes(1)))
struct HeldReportBoundTests {
    typealias H = MeterHandlingTests

    @Test func aReportLongerThanAnyMeterCanHoldFailsWithOneLineAndStoresNothing() async throws {
        let f = try await H.taiDoc(H.memory(120))
        var options = DownloadOptions(commitBatchSize: 10)
        options.maxHeldRecords = 50
        var info = MeterInfo(address: f.meter.address, timeZone: "UTC")
        info.name = nil
        let meter = f.meter
        let store = f.store
        let error = await #expect(throws: DownloadError.self) {
            _ = try await MeterDownload(store: store, options: options, logger: .silent, now: { H.millis(H.time(28, 12)) })
                .run(link: meter.connect(), meter: info)
        }
        #expect(error?.message.contains("more than 50 records") == true, "\(String(describing: error))")
        #expect(error.map { !"\($0)".contains("\n") } == true)
        #expect(try await f.stored().isEmpty)
        #expect(try await f.store.highestSequence(H.address) == nil)
    }

    @Test func theBoundByDefaultIsTwiceWhatAMeterCanNumber() {
        #expect(DownloadOptions().maxHeldRecords == 2 * 65_536)
    }
}
