import GatewayCore
import GlucoseProfile
import Support
import Testing
import TestSupport
@testable import SyncEngine

/// Nightscout `treatments` bodies: BG Check treatments and out-of-range notes, frozen like entries.
@Suite("Nightscout treatment bodies")
struct TreatmentBuilderTests {
    static let meterTime = GlucoseDateTime(naiveSeconds: 1_767_254_530)  // 2026-01-01T08:02:10

    func reading() -> NewReading {
        // Meter shows 08:02:10 in Europe/Berlin (+01:00); the gateway corrected the clock by +5 s.
        NewReading(
            meterAddress: "00:60:19:01:0E:92", sequence: 42, baseTime: Self.meterTime, timeOffsetMinutes: 0,
            userFacingTime: Self.meterTime, utcOffsetMinutes: 60, meterInstant: 1_767_250_930_000, instant: 1_767_250_935_000,
            mgdl: 112, mmoll: 6.2168, special: nil, unit: .kilogramPerLitre, type: 1, sampleLocation: 1, sensorStatus: nil,
            analyte: .glucose, context: nil, rawMeasurement: [], rawContext: nil, receivedAt: 1_767_250_940_000, exclusion: nil)
    }

    static let key = IdempotencyKey.key(meterAddress: "00:60:19:01:0E:92", sequence: 42, meterTime: "2026-01-01T08:02:10")

    func text(_ e: OutboxElement?) -> String? { e.map { String(decoding: $0.body, as: UTF8.self) } }

    @Test func bgCheckInMgdlExactBytes() throws {
        let element = try #require(NightscoutTreatmentBuilder().element(for: reading(), meter: testMeter))
        #expect(element.key == Self.key)
        let expected = #"{"eventType":"BG Check","glucose":112,"glucoseType":"Finger","units":"mg/dl","created_at":"2026-01-01T08:02:15.000+01:00","enteredBy":"glucose-gateway","identifier":""# + Self.key + #""}"#
        #expect(text(element) == expected)
    }

    @Test func bgCheckInMmolHasOneDecimal() throws {
        let element = try #require(NightscoutTreatmentBuilder(units: .mmol).element(for: reading(), meter: testMeter))
        let expected = #"{"eventType":"BG Check","glucose":6.2,"glucoseType":"Finger","units":"mmol","created_at":"2026-01-01T08:02:15.000+01:00","enteredBy":"glucose-gateway","identifier":""# + Self.key + #""}"#
        #expect(text(element) == expected)
        // A reading that carries mg/dL alone is converted.
        var r = reading()
        r.mmoll = nil
        r.mgdl = 180
        let json = try JSONParser.parse(try #require(NightscoutTreatmentBuilder(units: .mmol).element(for: r, meter: testMeter)).body)
        #expect(json["glucose"]?.doubleValue == 10.0)
    }

    @Test func createdAtIsNeverOmittedAndCarriesTheLocalOffset() throws {
        var r = reading()
        r.utcOffsetMinutes = -420
        let json = try JSONParser.parse(try #require(NightscoutTreatmentBuilder().element(for: r, meter: testMeter)).body)
        #expect(json["created_at"]?.stringValue == "2026-01-01T00:02:15.000-07:00")
        #expect(ISOInstant.millis("2026-01-01T00:02:15.000-07:00") == r.instant)
    }

    @Test func mealTesterAndHealthBecomePlainWordsAndCarbsAreNeverSent() throws {
        var r = reading()
        var c = ReadingContext()
        c.meal = 2
        c.tester = 1
        c.health = 4
        c.carbohydrateID = 1
        c.carbohydrateKg = 0.045
        c.medicationID = 1
        c.medicationAmount = 0.000004
        r.context = c
        let body = try #require(text(NightscoutTreatmentBuilder().element(for: r, meter: testMeter)))
        let json = try JSONParser.parse(Array(body.utf8))
        #expect(json["notes"]?.stringValue == "After meal, tested by self, under stress")
        for word in ["carbs", "carb", "insulin", "45", "0.045"] { #expect(!body.contains(word), "\(word)") }
        #expect(json["eventType"]?.stringValue == "BG Check")
    }

    @Test(arguments: [(1, "Before meal"), (2, "After meal"), (3, "Fasting"), (4, "Casual (snack or drink)"), (5, "Bedtime")])
    func mealWords(_ meal: Int, _ words: String) {
        var c = ReadingContext()
        c.meal = meal
        #expect(NightscoutTreatmentBuilder.notes(c) == words)
    }

    @Test func unknownOrAbsentContextGivesNoNotes() throws {
        var c = ReadingContext()
        c.meal = 7
        c.tester = 15
        c.health = 15
        c.carbohydrateKg = 0.01
        #expect(NightscoutTreatmentBuilder.notes(c) == nil)
        #expect(NightscoutTreatmentBuilder.notes(nil) == nil)
        var r = reading()
        r.context = c
        let json = try JSONParser.parse(try #require(NightscoutTreatmentBuilder().element(for: r, meter: testMeter)).body)
        #expect(json["notes"] == nil)
    }

    @Test func sameReadingSameBytes() {
        let b = NightscoutTreatmentBuilder()
        #expect(b.element(for: reading(), meter: testMeter) == b.element(for: reading(), meter: testMeter))
        #expect(b.destination == .nightscoutTreatments)
    }

    @Test(arguments: ["control solution", "ketone", "unresolved time", "in the future", "sensor fault", "HI"])
    func excludedReadingsAreNoBGCheck(_ name: String) {
        var r = reading()
        switch name {
        case "control solution": r.exclusion = .controlSolution
        case "ketone": r.analyte = .ketone; r.exclusion = .ketone
        case "unresolved time": r.instant = nil; r.meterInstant = nil; r.exclusion = .timeUnresolved
        case "in the future": r.exclusion = .timeInFuture
        case "sensor fault": r.exclusion = .sensorFault; r.sensorStatus = 1 << 3
        default: r.mgdl = nil; r.mmoll = nil; r.special = .positiveInfinity; r.exclusion = .high
        }
        #expect(NightscoutTreatmentBuilder().element(for: r, meter: testMeter) == nil, "\(name)")
        // Out-of-range notes off: nothing for a HI either.
        #expect(NightscoutTreatmentBuilder(bgChecks: true, outOfRangeNotes: false).element(for: r, meter: testMeter) == nil)
    }

    // MARK: Out-of-range notes

    func outOfRange(_ special: SFloat.Special?, status: Int?, exclusion: ExclusionReason) -> NewReading {
        var r = reading()
        r.mgdl = special == nil ? 700 : nil
        r.mmoll = special == nil ? 38.9 : nil
        r.special = special
        r.sensorStatus = status
        r.exclusion = exclusion
        return r
    }

    @Test func hiBecomesANoteWithoutANumber() throws {
        let builder = NightscoutTreatmentBuilder(bgChecks: false, outOfRangeNotes: true)
        let element = try #require(builder.element(for: outOfRange(.positiveInfinity, status: 1 << 5, exclusion: .high), meter: testMeter))
        let expected = #"{"eventType":"Note","notes":"Meter reading HI (above its range)","created_at":"2026-01-01T08:02:15.000+01:00","enteredBy":"glucose-gateway","identifier":""# + Self.key + #""}"#
        #expect(text(element) == expected)
        #expect(element.key == Self.key)
    }

    @Test func loBecomesANote() throws {
        let builder = NightscoutTreatmentBuilder(bgChecks: false, outOfRangeNotes: true)
        let json = try JSONParser.parse(try #require(builder.element(for: outOfRange(.negativeInfinity, status: nil, exclusion: .low), meter: testMeter)).body)
        #expect(json["notes"]?.stringValue == "Meter reading LO (below its range)")
        #expect(json["glucose"] == nil)
        #expect(json["eventType"]?.stringValue == "Note")
    }

    @Test func statusBitsAloneMakeHIAndLO() throws {
        let builder = NightscoutTreatmentBuilder(bgChecks: false, outOfRangeNotes: true)
        // A number with bit 5 is a sensor fault: the note goes, the number never does.
        let hi = try #require(text(builder.element(for: outOfRange(nil, status: 1 << 5 | 1, exclusion: .sensorFault), meter: testMeter)))
        #expect(hi.contains("Meter reading HI"))
        #expect(!hi.contains("700") && !hi.contains("38.9"))
        let lo = try #require(text(builder.element(for: outOfRange(nil, status: 1 << 6, exclusion: .sensorFault), meter: testMeter)))
        #expect(lo.contains("Meter reading LO"))
    }

    @Test(arguments: [
        ("HI and LO together", Int?(1 << 5 | 1 << 6), ExclusionReason.sensorFault, SFloat.Special?.none),
        ("HI with a strip error", 1 << 5 | 1 << 3, .sensorFault, nil),
        ("+INF flagged LO", 1 << 6, .high, .positiveInfinity),
        ("NaN with HI bit", 1 << 5, .notANumber, .nan),
        ("other fault", 1 << 1, .sensorFault, nil),
        ("control solution HI", nil, .controlSolution, .positiveInfinity),
        ("future HI", nil, .timeInFuture, .positiveInfinity),
    ] as [(String, Int?, ExclusionReason, SFloat.Special?)])
    func doubtfulOutOfRangeGivesNoNote(_ name: String, _ status: Int?, _ exclusion: ExclusionReason, _ special: SFloat.Special?) {
        let builder = NightscoutTreatmentBuilder(bgChecks: true, outOfRangeNotes: true)
        #expect(builder.element(for: outOfRange(special, status: status, exclusion: exclusion), meter: testMeter) == nil, "\(name)")
    }

    @Test func aHIWithoutAPlaceInTimeGivesNoNote() {
        var r = outOfRange(.positiveInfinity, status: nil, exclusion: .high)
        r.instant = nil
        r.meterInstant = nil
        #expect(NightscoutTreatmentBuilder(outOfRangeNotes: true).element(for: r, meter: testMeter) == nil)
    }

    @Test func aKetoneHIGivesNoNote() {
        var r = outOfRange(.positiveInfinity, status: nil, exclusion: .high)
        r.analyte = .ketone
        #expect(NightscoutTreatmentBuilder(outOfRangeNotes: true).element(for: r, meter: testMeter) == nil)
    }

    @Test func entriesNeverCarryHIOrLO() {
        #expect(NightscoutBodyBuilder().element(for: outOfRange(.positiveInfinity, status: 1 << 5, exclusion: .high), meter: testMeter) == nil)
        #expect(NightscoutBodyBuilder().element(for: outOfRange(nil, status: 1 << 6, exclusion: .sensorFault), meter: testMeter) == nil)
    }

    // MARK: Settings

    @Test func settingsAddTheTreatmentsDestinationOnlyWhenAsked() {
        let plain = UploadSettings(nightscout: NightscoutSettings(url: "http://127.0.0.1:1", apiSecret: Secret("0123456789abcdef")))
        #expect(plain.destinations == [.nightscout])
        #expect(plain.bodyBuilders.map(\.destination) == [.nightscout])
        let bg = UploadSettings(nightscout: NightscoutSettings(url: "http://127.0.0.1:1", apiSecret: Secret("0123456789abcdef"), treatments: true))
        #expect(bg.destinations == [.nightscout, .nightscoutTreatments])
        #expect(bg.bodyBuilders.map(\.destination) == [.nightscout, .nightscoutTreatments])
        let notes = UploadSettings(nightscout: NightscoutSettings(url: "http://127.0.0.1:1", apiSecret: Secret("0123456789abcdef"),
                                                                  outOfRangeNotes: true))
        #expect(notes.destinations == [.nightscout, .nightscoutTreatments])
        let builder = notes.bodyBuilders.last as? NightscoutTreatmentBuilder
        #expect(builder?.bgChecks == false)
        #expect(builder?.outOfRangeNotes == true)
    }

    // MARK: Judging the answer

    @Test(arguments: [
        ("2026-01-01T07:02:15.000Z", Int64(1_767_250_935_000)),
        ("2026-01-01T08:02:15.000+01:00", 1_767_250_935_000),
        ("2026-01-01T07:02:15Z", 1_767_250_935_000),
        ("2026-01-01T07:02:15.5Z", 1_767_250_935_500),
        ("2026-01-01T07:02:15.123456Z", 1_767_250_935_123),
        ("2025-12-31T23:32:15.000-07:30", 1_767_250_935_000),
    ])
    func isoInstants(_ text: String, _ expected: Int64) {
        #expect(ISOInstant.millis(text) == expected)
    }

    @Test(arguments: ["", "2026-01-01", "2026-01-01T07:02:15", "2026-13-01T07:02:15Z", "2026-01-01T07:02:15.Z", "2026-01-01T07:02:15+0100",
                      "2026-01-01T07:02:15Zjunk", "2026-01-01 07:02:15Z"])
    func unreadableInstants(_ text: String) {
        #expect(ISOInstant.millis(text) == nil)
    }

    func item(_ id: Int64, _ body: String, key: String) -> OutboxItem {
        OutboxItem(id: id, destination: .nightscoutTreatments, readingID: id, key: key, body: Array(body.utf8), state: .inFlight,
                   attempts: 0, createdAt: 0)
    }

    @Test func answersConfirmByIdentifierOrByEventTypeAndInstant() {
        let a = item(1, #"{"eventType":"BG Check","created_at":"2026-01-01T08:02:15.000+01:00","identifier":"k1"}"#, key: "k1")
        let b = item(2, #"{"eventType":"Note","created_at":"2026-01-01T08:07:15.000+01:00","identifier":"k2"}"#, key: "k2")
        let c = item(3, #"{"eventType":"BG Check","created_at":"2026-01-01T08:12:15.000+01:00","identifier":"k3"}"#, key: "k3")
        // a by identifier (new), b without identifier but at its UTC instant (already there), c missing.
        let answer = #"[{"eventType":"BG Check","created_at":"2026-01-01T07:02:15.000Z","identifier":"k1","_id":"x1"},"#
            + #"{"eventType":"Note","created_at":"2026-01-01T07:07:15.000Z"},"#
            + #"{"eventType":"BG Check","created_at":"2026-01-01T07:12:15.000Z","identifier":"other"},"a string",null]"#
        let outcome = NightscoutTreatmentsDestination.judge(Array(answer.utf8), items: [a, b, c], status: 200)
        guard case let .perElement(stored, duplicates, rejected, retry, reason) = outcome else {
            Issue.record("unexpected \(outcome)")
            return
        }
        #expect(stored == [1, 2])
        #expect(duplicates == 1)
        #expect(rejected.isEmpty)
        #expect(retry == [3])
        #expect(reason.contains("2 of the 3 treatment(s)"))
        // The wrong eventType at the right time confirms nothing.
        let wrongType = #"[{"eventType":"BG Check","created_at":"2026-01-01T07:07:15.000Z"}]"#
        guard case let .perElement(none, _, _, again, _) = NightscoutTreatmentsDestination.judge(Array(wrongType.utf8), items: [b], status: 200) else {
            Issue.record("unexpected outcome")
            return
        }
        #expect(none.isEmpty)
        #expect(again == [2])
    }

    /// Entries judged by identifier against the table of every key sent, whatever the order of the answer,
    /// keys or rows sent twice, elements repeated, missing or without `_id`.
    @Test func identifiersJudgedAsByTheTableOfKeys() {
        func reference(_ body: [UInt8], items: [OutboxItem]) -> BatchOutcome? {
            guard let elements = (try? JSONParser.parse(body))?.arrayValue else { return nil }
            var byIdentifier: [String: Int64] = [:]
            for item in items { byIdentifier[item.key] = item.id }
            var stored: Set<Int64> = []
            var duplicates = 0
            for element in elements {
                guard case .object = element, let text = element["identifier"]?.stringValue, let match = byIdentifier[text],
                      !stored.contains(match) else { continue }
                stored.insert(match)
                if element["_id"] == nil { duplicates += 1 }
            }
            let reason = stored.isEmpty
                ? "server answered HTTP 200 without confirming any of the \(items.count) reading(s) sent"
                : "server answered HTTP 200 confirming only \(stored.count) of the \(items.count) reading(s) sent"
            return .perElement(stored: items.map(\.id).filter { stored.contains($0) }, duplicates: duplicates, rejected: [:],
                               retry: items.map(\.id).filter { !stored.contains($0) }, retryReason: reason)
        }
        var rng = SplitMix(seed: 0x1DE7)
        var inOrder = 0
        for _ in 0..<2_000 {
            let count = 1 + rng.below(8)
            let keys = (0..<count).map { _ in "k\(rng.below(rng.chance(50) ? 4 : 100))" }
            // Now and then rows given twice (the same id at two places), which no answer can all confirm.
            let sameIDs = rng.chance(10)
            let items = keys.enumerated().map { item(Int64(10 + (sameIDs ? $0.offset % 2 : $0.offset)), "{}", key: $0.element) }
            var answer: [String] = []
            if rng.chance(50) {
                inOrder += 1
                answer = keys.map { #"{"identifier":"\#($0)","_id":"x"}"# }
            } else {
                for _ in 0..<rng.below(10) {
                    let key = rng.chance(80) ? keys[rng.below(count)] : "other"
                    switch rng.below(5) {
                    case 0: answer.append(#"{"identifier":"\#(key)"}"#)
                    case 1: answer.append(#"{"identifier":7,"_id":"y"}"#)
                    case 2: answer.append(rng.chance(50) ? "null" : #""\#(key)""#)
                    default: answer.append(#"{"_id":"z","identifier":"\#(key)"}"#)
                    }
                }
            }
            if rng.chance(20), !answer.isEmpty { answer.swapAt(0, rng.below(answer.count)) }
            let body = Array(("[" + answer.joined(separator: ",") + "]").utf8)
            let outcome = judgeNightscoutV1Answer(body, items: items, status: 200, noun: "reading") { _ -> Int? in nil }
            #expect(outcome == reference(body, items: items), "\(keys) \(answer)")
        }
        #expect(inOrder > 500)
    }

    @Test func anUnreadableAnswerIsTransient() {
        let a = item(1, #"{"eventType":"BG Check","created_at":"2026-01-01T08:02:15.000+01:00","identifier":"k1"}"#, key: "k1")
        guard case .transient = NightscoutTreatmentsDestination.judge(Array("<html>".utf8), items: [a], status: 200) else {
            Issue.record("expected transient")
            return
        }
    }
}
