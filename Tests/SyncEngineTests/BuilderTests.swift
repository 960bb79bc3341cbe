import GatewayCore
import GlucoseProfile
import Support
import SyncEngine
import Testing
import TestSupport
import Transport

@Suite("Outbox body builders")
struct BuilderTests {
    static let meterTime = GlucoseDateTime(naiveSeconds: 1_767_254_530)  // 2026-01-01T08:02:10

    func reading() -> NewReading {
        // Meter shows 08:02:10 in Europe/Berlin (+01:00); the gateway corrected the clock by +5 s.
        NewReading(
            meterAddress: "00:60:19:01:0E:92", sequence: 42, baseTime: Self.meterTime, timeOffsetMinutes: 0,
            userFacingTime: Self.meterTime, utcOffsetMinutes: 60, meterInstant: 1_767_250_930_000, instant: 1_767_250_935_000,
            mgdl: 112, mmoll: nil, special: nil, unit: .kilogramPerLitre, type: 1, sampleLocation: 1, sensorStatus: nil,
            analyte: .glucose, context: nil, rawMeasurement: [], rawContext: nil, receivedAt: 0, exclusion: nil)
    }

    @Test func nightscoutElementExactBytes() throws {
        let element = try #require(NightscoutBodyBuilder().element(for: reading(), meter: testMeter))
        let key = IdempotencyKey.key(meterAddress: "00:60:19:01:0E:92", sequence: 42, meterTime: "2026-01-01T08:02:10")
        #expect(element.key == key)
        let expected = #"{"type":"mbg","mbg":112,"date":1767250935000,"dateString":"2026-01-01T08:02:15.000+01:00","device":"glucose-gateway://CareSens-1234ABCD","identifier":""# + key + #""}"#
        #expect(String(decoding: element.body, as: UTF8.self) == expected)
    }

    @Test func deviceNameKeepsPlainASCIIOnly() throws {
        // Letters, digits, '.', '_' and '-' stay; anything else, one '_' per Unicode scalar.
        var meter = testMeter
        meter.model = "Accu-Chek\u{AE} Guide e\u{301}"
        meter.serial = "SN/42.x_y"
        let element = try #require(NightscoutBodyBuilder().element(for: reading(), meter: meter))
        let json = try JSONParser.parse(element.body)
        #expect(json["device"]?.stringValue == "glucose-gateway://Accu-Chek__Guide_e_-SN_42.x_y")
    }

    @Test func nightscoutConvertsMolarAndRounds() throws {
        var r = reading()
        r.mgdl = nil
        r.mmoll = 6.2
        r.unit = .molePerLitre
        let element = try #require(NightscoutBodyBuilder().element(for: r, meter: testMeter))
        let json = try JSONParser.parse(element.body)
        #expect(json["mbg"]?.int64Value == 112)  // 6.2 x 18.0156 = 111.7
    }

    @Test func sameReadingSameBytesWhateverHappensLater() throws {
        let builder = NightscoutBodyBuilder()
        let first = try #require(builder.element(for: reading(), meter: testMeter))
        #expect(builder.element(for: reading(), meter: testMeter) == first)
        // A later clock correction changes the instant: the key stays (it names the meter's record), and
        // the store never rebuilds the queued body, so what goes out is still `first`.
        var corrected = reading()
        corrected.instant = 1_767_250_999_000
        let rebuilt = try #require(builder.element(for: corrected, meter: testMeter))
        #expect(rebuilt.key == first.key)
        #expect(rebuilt.body != first.body)
    }

    @Test(arguments: ["control solution", "ketone", "unresolved time", "special value"])
    func excludedReadingsAreNotQueued(_ name: String) {
        var r = reading()
        switch name {
        case "control solution": r.exclusion = .controlSolution
        case "ketone": r.analyte = .ketone
        case "unresolved time": r.instant = nil; r.meterInstant = nil
        default: r.mgdl = nil; r.special = .positiveInfinity
        }
        #expect(NightscoutBodyBuilder().element(for: r, meter: testMeter) == nil, "\(name)")
        #expect(FHIRBodyBuilder(subject: "Patient/p1").element(for: r, meter: testMeter) == nil, "\(name)")
    }

    @Test func fhirEntryShape() throws {
        let element = try #require(FHIRBodyBuilder(subject: "Patient/p1").element(for: reading(), meter: testMeter))
        let json = try JSONParser.parse(element.body)
        let resource = try #require(json["resource"])
        #expect(resource["resourceType"]?.stringValue == "Observation")
        #expect(resource["identifier"]?.arrayValue?.first?["value"]?.stringValue == "urn:uuid:\(element.key)")
        let codes = resource["code"]?["coding"]?.arrayValue?.compactMap { $0["code"]?.stringValue }
        #expect(codes == ["160184", "41653-7"])
        #expect(resource["valueQuantity"]?["code"]?.stringValue == "mg/dL")
        #expect(resource["valueQuantity"]?["value"] == .decimal("112"))
        #expect(resource["effectiveDateTime"]?.stringValue == "2026-01-01T08:02:15.000+01:00")
        #expect(resource["subject"]?["reference"]?.stringValue == "Patient/p1")
        #expect(resource["contained"]?.arrayValue?.first?["resourceType"]?.stringValue == "Device")
        #expect(json["request"]?["ifNoneExist"]?.stringValue == "identifier=urn:ietf:rfc:3986|urn:uuid:\(element.key)")

        var molar = reading()
        molar.unit = .molePerLitre
        molar.mmoll = 6.2
        let m = try JSONParser.parse(try #require(FHIRBodyBuilder(subject: "Patient/p1").element(for: molar, meter: testMeter)).body)
        #expect(m["resource"]?["code"]?["coding"]?.arrayValue?.last?["code"]?.stringValue == "14743-9")
        #expect(m["resource"]?["valueQuantity"]?["value"] == .decimal("6.2"))
        #expect(m["resource"]?["valueQuantity"]?["unit"]?.stringValue == "mmol/L")
    }

    /// A one-shot upload watches system connectivity only when some destination is off this host.
    @Test func destinationsAllOnThisHost() {
        let local = NightscoutSettings(url: "http://127.0.0.1:1337/ns/")
        let remote = NightscoutSettings(url: "https://user@ns.example.org")
        #expect(UploadSettings(nightscout: local).allDestinationsLocal)
        #expect(UploadSettings(nightscout: NightscoutSettings(url: "http://localhost")).allDestinationsLocal)
        #expect(UploadSettings(nightscout: local, fhir: FHIRSettings(baseURL: "http://[::1]:8080/fhir", subject: "p1"),
                               mqtt: MQTTSettings(broker: MQTTBrokerSettings(host: "127.0.0.1", port: 1883))).allDestinationsLocal)
        #expect(!UploadSettings(nightscout: remote).allDestinationsLocal)
        #expect(!UploadSettings(nightscout: local, fhir: FHIRSettings(baseURL: "https://f.example.org/fhir", subject: "p1")).allDestinationsLocal)
        #expect(!UploadSettings(nightscout: local, mqtt: MQTTSettings(broker: MQTTBrokerSettings(host: "broker.lan", port: 1883))).allDestinationsLocal)
        #expect(!UploadSettings().allDestinationsLocal)
    }

    /// The problems a section's reader reports for `body` written under its `[name]` header.
    static func problems<T>(_ name: String, _ body: String, _ read: (inout ConfigSection) -> T) -> [String] {
        let document = ConfigParser.parse(Array("[\(name)]\n\(body)".utf8))
        var section = ConfigSections(document: document, schema: [(name, document.entries.map(\.key))], baseDirectory: "/").section(name)
        _ = read(&section)
        return section.problems.map(\.message)
    }

    /// The sections check their values once, as they read them; the settings the uploader runs with are
    /// made from what passed.
    @Test func settingsValidation() {
        let network = { (s: inout ConfigSection) in NetworkSection(section: &s, uploadURLs: []) }
        #expect(Self.problems("network", "", network).isEmpty)
        #expect(NetworkSection().recovery == RecoverySettings())
        #expect(Self.problems("network", "retry_count = 11", network) == ["network.retry_count: out of range 0..10"])
        #expect(Self.problems("network", "network_timeout_ms = 99", network).count == 1)
        #expect(Self.problems("network", "network_timeout_ms = 10001\nhealth_check_url = \"ftp://x\"", network).count == 2)
        #expect(Self.problems("nightscout", "url = \"https://ns.example.org\"\napi_secret = \"short\"",
                              { NightscoutSection(section: &$0) })
                == ["nightscout.api_secret: Nightscout API secrets are at least 12 characters long"])
        #expect(Self.problems("fhir", "enabled = true\nbase_url = \"https://f.example.org/fhir\"\nsubject = \"p1\"",
                              { FHIRSection(section: &$0) }).count == 1)
        // A secret never shows in text built from the settings.
        let secret = Secret("correct-horse-battery")
        #expect(!"\(secret) \(String(describing: NightscoutSettings(url: "https://x.org", apiSecret: secret)))".contains("horse"))
    }
}
