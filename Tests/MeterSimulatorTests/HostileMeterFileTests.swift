import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Testing

/// The meter file as `Describe` writes it, read back: every profile, and identity strings with bytes JSON
/// must escape. Bad values in a meter file are one-line errors.
@Suite struct HostileMeterFileTests {
    @Test(arguments: MeterProfile.names)
    func everyProfileDescribedParsesToTheSameMeter(_ name: String) throws {
        let profile = try #require(MeterProfile.named(name))
        let written = MeterFile.json(profile.meter).compactText
        let again = try MeterFile.parse(written)
        #expect(again == profile.meter)
        #expect(MeterFile.json(again).compactText == written)
    }

    @Test func identityStringsWithNULQuotesControlAndNonBMPCharactersRoundTrip() throws {
        var meter = try #require(MeterProfile.named("contour-next-one")).meter
        meter.deviceInformation.manufacturer = "Ascensia\u{0}\u{0}\"\\\u{1B}[31m\u{7F}"
        meter.deviceInformation.model = "\u{2028}\u{2029}\u{FEFF}🩸"
        meter.deviceInformation.serial = String(repeating: "9", count: 512)
        meter.deviceInformation.firmware = ""
        meter.name = "TNG \u{0}"
        let written = MeterFile.json(meter).compactText
        #expect(!written.utf8.contains { $0 < 0x20 })
        let again = try MeterFile.parse(written)
        #expect(again == meter)
    }

    struct BadCase: CustomTestStringConvertible, Sendable {
        var text: String
        var field: String
        var testDescription: String { text }
    }

    @Test(arguments: [
        BadCase(text: #"{"profile": "nope"}"#, field: "profile"),
        BadCase(text: #"{"profile": null}"#, field: "profile"),
        BadCase(text: #"{"profile": "caresens", "quirks": {"numbering": 1}}"#, field: "quirks.numbering"),
        BadCase(text: #"{"profile": "caresens", "clock": {"kind": "sundial"}}"#, field: "clock.kind"),
        BadCase(text: #"{"profile": "caresens", "clock": {"kind": "cts", "skewSeconds": 1e999}}"#, field: "invalid number"),
        BadCase(text: #"{"profile": "caresens", "clock": {"kind": "cts", "driftSecondsPerDay": 1e300}}"#, field: "clock.driftSecondsPerDay"),
        BadCase(text: #"{"profile": "caresens", "generate": {"count": -1}}"#, field: "generate.count"),
        BadCase(text: #"{"profile": "taidoc-reversed", "records": [{"sequence": 65536, "time": "2024-03-05T07:30:00", "mgdl": 1}]}"#, field: "records[0].sequence"),
        BadCase(text: #"{"profile": "caresens", "records": [{"sequence": 1, "time": "2024-02-30T07:30:00", "mgdl": 1}]}"#, field: "records[0].time"),
        BadCase(text: #"{"profile": "caresens", "rssi": 99999999999999999999}"#, field: "rssi"),
    ])
    func aBadValueIsAOneLineErrorNamingItsField(_ c: BadCase) {
        do {
            _ = try MeterFile.parse(c.text)
            Issue.record("parsed: \(c.text)")
        } catch {
            let message = "\(error)"
            #expect(!message.contains("\n"))
            #expect(message.contains(c.field), "\(message)")
        }
    }

    @Test func clockFlagsOnAMeterWithoutAClockAreRefused() throws {
        for (skew, readOnly, offset) in [("5", false, nil), (nil, true, nil), (nil, false, "60")] as [(String?, Bool, String?)] {
            #expect(throws: MeterFileError.self) { _ = try MeterFile.clock(kind: "none", skew: skew, readOnly: readOnly, utcOffset: offset) }
        }
        #expect(try MeterFile.clock(kind: "none", skew: nil, readOnly: false, utcOffset: nil).kind == .none)
        #expect(try MeterFile.clock(kind: "cts", skew: "5", readOnly: true, utcOffset: "60").skewSeconds == 5)
    }
}
