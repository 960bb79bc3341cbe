import GatewayCore
import GlucoseProfile
import Support
import Testing
import TestSupport
@testable import SyncEngine

/// Outbox bodies and keys are frozen when a reading is stored, and servers deduplicate on their bytes:
/// exact values, and the builders against plain references over many generated readings and meters.
@Suite("Outbox bodies and keys stay byte for byte")
struct BodyBytesTests {
    /// How the bodies' parts were first put together, piece by piece as Strings.
    enum Reference {
        static func escaped(_ s: String) -> String {
            var out: [UInt8] = [UInt8(ascii: "\"")]
            for b in s.utf8 {
                switch b {
                case 0x22: out += [0x5C, 0x22]
                case 0x5C: out += [0x5C, 0x5C]
                case 0x0A: out += [0x5C, UInt8(ascii: "n")]
                case 0x0D: out += [0x5C, UInt8(ascii: "r")]
                case 0x09: out += [0x5C, UInt8(ascii: "t")]
                case 0..<0x20: out += Array(("\\u00" + hexString([b])).utf8)
                default: out.append(b)
                }
            }
            out.append(UInt8(ascii: "\""))
            return String(decoding: out, as: UTF8.self)
        }

        static func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }

        static func dateTime(_ t: GlucoseDateTime) -> String {
            (t.year < 0 ? "-" : "") + pad(abs(t.year), 4) + "-" + pad(t.month, 2) + "-" + pad(t.day, 2) + "T"
                + pad(t.hour, 2) + ":" + pad(t.minute, 2) + ":" + pad(t.second, 2)
        }

        static func iso8601(millis: Int64, offsetMinutes: Int) -> String {
            let shifted = millis + Int64(offsetMinutes) * 60_000
            let ms = ((shifted % 1000) + 1000) % 1000
            let wall = GlucoseDateTime(naiveSeconds: (shifted - ms) / 1000)
            return dateTime(wall) + "." + pad(Int(ms), 3) + (offsetMinutes < 0 ? "-" : "+")
                + pad(abs(offsetMinutes) / 60, 2) + ":" + pad(abs(offsetMinutes) % 60, 2)
        }

        static func key(_ r: NewReading) -> String {
            let name = "\(r.meterAddress.uppercased())|\(r.sequence)|\(dateTime(r.userFacingTime))"
            return NameBasedUUID(namespace: IdempotencyKey.namespace, name: name).description
        }

        static func plain(_ text: String) -> String {
            String(text.unicodeScalars.map { s -> Character in
                guard s.isASCII else { return "_" }
                let c = Character(s)
                return c.isLetter || c.isNumber || c == "." || c == "_" || c == "-" ? c : "_"
            })
        }

        static func device(_ meter: MeterInfo) -> String {
            let serial = meter.serial ?? String(meter.address.filter { $0 != ":" }).uppercased()
            return "glucose-gateway://\(plain(meter.model ?? meter.name ?? "meter"))-\(plain(serial))"
        }

        static func offset(_ r: NewReading) -> Int {
            guard let m = r.utcOffsetMinutes, abs(m) <= 18 * 60 else { return 0 }
            return m
        }

        static func entry(_ r: NewReading, _ meter: MeterInfo) -> String {
            let instant = r.instant ?? 0
            return #"{"type":"mbg","mbg":\#(Int64((r.mgdl ?? 0).rounded())),"date":\#(instant),"dateString":"\#(iso8601(millis: instant, offsetMinutes: offset(r)))","device":\#(escaped(device(meter))),"identifier":"\#(key(r))"}"#
        }

        static func bgCheck(_ r: NewReading) -> String {
            let instant = r.instant ?? 0
            return #"{"eventType":"BG Check","glucose":\#(Int64((r.mgdl ?? 0).rounded())),"glucoseType":"Finger","units":"mg/dl","created_at":"\#(iso8601(millis: instant, offsetMinutes: offset(r)))","enteredBy":"glucose-gateway","identifier":"\#(key(r))"}"#
        }

        static func note(_ r: NewReading) -> String {
            let instant = r.instant ?? 0
            return #"{"eventType":"Note","notes":"Meter reading HI (above its range)","created_at":"\#(iso8601(millis: instant, offsetMinutes: offset(r)))","enteredBy":"glucose-gateway","identifier":"\#(key(r))"}"#
        }
    }

    /// Pieces of meter strings: plain ASCII, JSON's escapes, DEL, accents precomposed and combining,
    /// characters of several UTF-8 lengths, a colon with a combining mark.
    static let pieces = ["Accu-Chek", "CareSens", "N", "1234ABCD", "sn.42_x", " ", "/", "\"", "\\", "\n", "\t", "\u{01}", "\u{1F}", "\u{7F}",
                         "\u{E9}", "e\u{301}", "\u{DF}", "\u{1C6}", "\u{65E5}\u{672C}", "\u{1F600}", ":", ":\u{301}", "\u{AE}", "\u{0130}"]

    static func text(_ rng: inout SplitMix, pieces count: Int) -> String {
        (0..<count).map { _ in pieces[rng.below(pieces.count)] }.joined()
    }

    static func address(_ rng: inout SplitMix) -> String {
        if rng.chance(5) { return "aa:\u{DF}:\u{1C6}:0e" }
        let hex = rng.chance(30) ? "0123456789abcdef" : "0123456789ABCDEF"
        return (0..<6).map { _ in String((0..<2).map { _ in Array(hex)[rng.below(16)] }) }.joined(separator: ":")
    }

    static func meter(_ rng: inout SplitMix) -> MeterInfo {
        var m = MeterInfo(address: address(&rng), timeZone: "UTC")
        m.model = rng.chance(70) ? text(&rng, pieces: rng.below(4)) : nil
        m.name = rng.chance(50) ? text(&rng, pieces: 1 + rng.below(3)) : nil
        m.serial = rng.chance(60) ? text(&rng, pieces: rng.below(3)) : nil
        m.manufacturer = rng.chance(60) ? text(&rng, pieces: 1 + rng.below(3)) : nil
        return m
    }

    static func reading(_ rng: inout SplitMix, meter: MeterInfo) -> NewReading {
        // Wall times from 1582 to 9999 (leap days and year ends included by the draw's spread).
        let naive = Int64(rng.below(Int(253_402_300_799 + 12_219_292_800))) - 12_219_292_800
        let wall = rng.chance(10) ? GlucoseDateTime(naiveSeconds: 1_709_164_800 + Int64(rng.below(86_400)))  // 2024-02-29
            : rng.chance(10) ? GlucoseDateTime(naiveSeconds: 1_767_225_600 - 43_200 + Int64(rng.below(86_400)))  // the new year
            : GlucoseDateTime(naiveSeconds: naive)
        let offset = rng.chance(90) ? rng.below(2 * 14 * 60 + 1) - 14 * 60 : rng.below(6_001) - 3_000
        let instant = (naive - Int64(offset) * 60) * 1000 + Int64(rng.below(1000))
        return NewReading(
            meterAddress: meter.address, sequence: rng.chance(95) ? rng.below(65_536) : -rng.below(1_000_000),
            baseTime: wall, timeOffsetMinutes: 0, userFacingTime: wall, utcOffsetMinutes: offset,
            meterInstant: instant, instant: instant, mgdl: 1 + Double(rng.below(600_000)) / 1000, mmoll: nil, special: nil,
            unit: .kilogramPerLitre, type: 1, sampleLocation: 1, sensorStatus: nil, analyte: .glucose, context: nil,
            rawMeasurement: [], rawContext: nil, receivedAt: instant, exclusion: nil)
    }

    @Test func generatedReadingsMatchTheReference() throws {
        var rng = SplitMix(seed: 0xB0D1E5)
        let entries = NightscoutBodyBuilder()
        let treatments = NightscoutTreatmentBuilder(outOfRangeNotes: true)
        for i in 0..<3_000 {
            let meter = Self.meter(&rng)
            var r = Self.reading(&rng, meter: meter)
            let key = Reference.key(r)
            #expect(UploadableReading.key(of: r) == key, "case \(i)")
            #expect(IdempotencyKey.key(meterAddress: r.meterAddress, sequence: r.sequence, meterTime: r.userFacingTime.isoString) == key)
            #expect(IdempotencyKey.key(meterAddress: r.meterAddress, sequence: r.sequence, meterTime: r.userFacingTime) == key)
            let entry = try #require(entries.element(for: r, meter: meter))
            #expect(entry.key == key)
            #expect(String(decoding: entry.body, as: UTF8.self) == Reference.entry(r, meter), "case \(i)")
            let check = try #require(treatments.element(for: r, meter: meter))
            #expect(String(decoding: check.body, as: UTF8.self) == Reference.bgCheck(r), "case \(i)")
            r.mgdl = nil
            r.special = .positiveInfinity
            r.exclusion = .high
            let note = try #require(treatments.element(for: r, meter: meter))
            #expect(String(decoding: note.body, as: UTF8.self) == Reference.note(r), "case \(i)")
            let name = Self.text(&rng, pieces: rng.below(6))
            #expect(UploadableReading.plain(name) == Reference.plain(name), "case \(i): \(Array(name.unicodeScalars))")
        }
    }

    /// A meter without a serial: its address in the device name.
    @Test func deviceOfAMeterWithoutSerial() {
        let addresses = ["c0:26:da:0b:e4:02", "C0:26:DA:0B:E4:02", "", ":", "::", "a b/c.d_e-f:Z~", "aa:\u{DF}:\u{1C6}:0e",
                         "\u{7F}:\u{01}:\"\\", "e\u{301}:x", "\u{0130}:i", "zz:{}:[]:@`"]
        for address in addresses {
            for model: String? in [nil, "GlucoSim 1", "\u{E9}"] {
                var meter = MeterInfo(address: address, timeZone: "UTC")
                meter.model = model
                let device = UploadableReading.device(meter)
                #expect(device == Reference.device(meter), "\(Array(address.unicodeScalars))")
                meter.serial = address
                let withSerial = UploadableReading.device(meter)
                #expect(withSerial == Reference.device(meter), "\(Array(address.unicodeScalars))")
            }
        }
    }

    @Test func keysOfUnusualMetersAndSequences() {
        // Checked with Python's uuid module (uuid5 in the product's namespace of the name shown).
        // "00:60:19:01:0E:92|-7|2024-02-29T23:59:59"
        #expect(IdempotencyKey.key(meterAddress: "00:60:19:01:0e:92", sequence: -7, meterTime: "2024-02-29T23:59:59")
                == "344a3030-58da-58a2-ac1c-0c2c0c573523")
        // "AB:CD:EF:01:02:03|0|1999-12-31T23:59:59"
        #expect(IdempotencyKey.key(meterAddress: "ab:cd:ef:01:02:03", sequence: 0, meterTime: "1999-12-31T23:59:59")
                == "4cbb6722-9e8b-59a7-b269-6d01110ac014")
        // "C0:26:DA:0B:E4:02|123456789|2024-13-05T14:30:00": a base time that was not a date, as stored.
        #expect(IdempotencyKey.key(meterAddress: "C0:26:DA:0B:E4:02", sequence: 123_456_789, meterTime: "2024-13-05T14:30:00")
                == "809a017d-d96e-59af-b530-5396aa7a6d80")
    }

    static let fhirMeter: MeterInfo = {
        var m = MeterInfo(address: "c0:26:da:0b:e4:02", timeZone: "America/St_Johns")
        m.name = "Contour \u{AE} \"Next\""
        m.manufacturer = "Ascensia \"Diabetes\"\\Care\n\u{7F}\u{01}"
        return m
    }()

    @Test func fhirEntriesExactBytes() throws {
        var r = NewReading(
            meterAddress: "c0:26:da:0b:e4:02", sequence: 7, baseTime: GlucoseDateTime(naiveSeconds: 1_709_251_199),
            timeOffsetMinutes: 0, userFacingTime: GlucoseDateTime(naiveSeconds: 1_709_251_199), utcOffsetMinutes: -150,
            meterInstant: 1_709_260_199_000, instant: 1_709_260_199_250, mgdl: 101.9, mmoll: 5.6563, special: nil,
            unit: .molePerLitre, type: 2, sampleLocation: 1, sensorStatus: nil, analyte: .glucose, context: nil,
            rawMeasurement: [], rawContext: nil, receivedAt: 0, exclusion: nil)
        let builder = FHIRBodyBuilder(subject: "Patient/p\"1")
        let molar = try #require(builder.element(for: r, meter: Self.fhirMeter))
        #expect(String(decoding: molar.body, as: UTF8.self) == Self.fhirMolar)
        r.unit = .kilogramPerLitre
        let mass = try #require(builder.element(for: r, meter: testMeter))
        #expect(String(decoding: mass.body, as: UTF8.self) == Self.fhirMass)
    }

    static let fhirMolar = ##"{"fullUrl":"urn:uuid:0e876226-ea7a-574f-8d81-4044bc82dcbb","resource":{"resourceType":"Observation","meta":{"profile":["http://hl7.org/fhir/uv/phd/StructureDefinition/PhdNumericObservation"]},"contained":[{"resourceType":"Device","id":"meter","identifier":[{"system":"urn:ietf:rfc:7042","value":"C0:26:DA:0B:E4:02"}],"manufacturer":"Ascensia \"Diabetes\"\\Care\n"## + "\u{7F}" + ##"\u0001","serialNumber":"C026DA0BE402","deviceName":[{"name":"Contour____Next_","type":"model-name"}]}],"identifier":[{"system":"urn:ietf:rfc:3986","value":"urn:uuid:0e876226-ea7a-574f-8d81-4044bc82dcbb"}],"status":"final","category":[{"coding":[{"system":"http://hl7.org/fhir/uv/phd/CodeSystem/PhdObservationCategories","code":"phd"}]}],"code":{"coding":[{"system":"urn:iso:std:iso:11073:10101","code":"160188","display":"MDC_CONC_GLU_CAPILLARY_PLASMA"},{"system":"http://loinc.org","code":"14743-9","display":"Glucose [Moles/volume] in Capillary blood by Glucometer"}],"text":"Blood glucose (meter)"},"subject":{"reference":"Patient/p\"1"},"effectiveDateTime":"2024-02-29T23:59:59.250-02:30","valueQuantity":{"value":5.656,"unit":"mmol/L","system":"http://unitsofmeasure.org","code":"mmol/L"},"device":{"reference":"#meter","display":"Contour____Next_ C026DA0BE402"}},"request":{"method":"POST","url":"Observation","ifNoneExist":"identifier=urn:ietf:rfc:3986|urn:uuid:0e876226-ea7a-574f-8d81-4044bc82dcbb"}}"##
    static let fhirMass = ##"{"fullUrl":"urn:uuid:0e876226-ea7a-574f-8d81-4044bc82dcbb","resource":{"resourceType":"Observation","meta":{"profile":["http://hl7.org/fhir/uv/phd/StructureDefinition/PhdNumericObservation"]},"contained":[{"resourceType":"Device","id":"meter","identifier":[{"system":"urn:ietf:rfc:7042","value":"00:60:19:01:0E:92"}],"manufacturer":"i-SENS","serialNumber":"1234ABCD","deviceName":[{"name":"CareSens","type":"model-name"}]}],"identifier":[{"system":"urn:ietf:rfc:3986","value":"urn:uuid:0e876226-ea7a-574f-8d81-4044bc82dcbb"}],"status":"final","category":[{"coding":[{"system":"http://hl7.org/fhir/uv/phd/CodeSystem/PhdObservationCategories","code":"phd"}]}],"code":{"coding":[{"system":"urn:iso:std:iso:11073:10101","code":"160188","display":"MDC_CONC_GLU_CAPILLARY_PLASMA"},{"system":"http://loinc.org","code":"41653-7","display":"Glucose [Mass/volume] in Capillary blood by Glucometer"}],"text":"Blood glucose (meter)"},"subject":{"reference":"Patient/p\"1"},"effectiveDateTime":"2024-02-29T23:59:59.250-02:30","valueQuantity":{"value":101.9,"unit":"mg/dL","system":"http://unitsofmeasure.org","code":"mg/dL"},"device":{"reference":"#meter","display":"CareSens 1234ABCD"}},"request":{"method":"POST","url":"Observation","ifNoneExist":"identifier=urn:ietf:rfc:3986|urn:uuid:0e876226-ea7a-574f-8d81-4044bc82dcbb"}}"##
}
