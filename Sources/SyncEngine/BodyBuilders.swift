import GatewayCore
import GlucoseProfile
import Support

/// What both builders agree on: which readings are uploaded, their instant and their local offset.
enum UploadableReading {
    /// The instant (after clock correction) and the meter's UTC offset in minutes at that time, or nil
    /// when the reading must not be uploaded as a number.
    static func time(of reading: NewReading) -> (instant: Int64, offsetMinutes: Int)? {
        guard reading.analyte == .glucose, reading.exclusion == nil, reading.special == nil else { return nil }
        return placed(reading)
    }

    /// The instant and local offset of a reading whose time was resolved, whatever else excludes it.
    static func placed(_ reading: NewReading) -> (instant: Int64, offsetMinutes: Int)? {
        guard let instant = reading.instant, reading.meterInstant != nil, reading.exclusion != .timeUnresolved,
              reading.exclusion != .timeInFuture else { return nil }
        // The meter's zone offset, as its zone gave it when the time was resolved; an offset beyond any
        // zone's (±18 h) is not shown.
        var offset = 0
        if let minutes = reading.utcOffsetMinutes, abs(minutes) <= 18 * 60 { offset = minutes }
        return (instant, offset)
    }

    static func key(of reading: NewReading) -> String {
        IdempotencyKey.key(meterAddress: reading.meterAddress, sequence: reading.sequence, meterTime: reading.userFacingTime)
    }

    /// Plain ASCII for a device string: letters, digits, `.`, `_` and `-`; anything else becomes `_`.
    static func plain(_ text: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        appendPlain(text, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `plain` of `text`: one `_` per Unicode scalar outside the set, whatever its UTF-8 length (a
    /// scalar is its lead byte, below 0x80 or from 0xC0; its continuation bytes, 0x80...0xBF, add nothing).
    static func appendPlain(_ text: String, to out: inout [UInt8]) {
        for c in text.utf8 where !(0x80...0xBF).contains(c) {
            out.append(isPlain(c) ? c : UInt8(ascii: "_"))
        }
    }

    private static func isPlain(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// The meter's model (else its advertised name), cut to the length every meter string sent is cut to (`IdentityString`).
    static func meterModel(_ meter: MeterInfo) -> String {
        plain(IdentityString.capped(meter.model ?? meter.name ?? "meter"))
    }

    static func meterSerial(_ meter: MeterInfo) -> String {
        var out: [UInt8] = []
        appendSerial(meter, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `glucose-gateway://<model>-<serial>`, both plain.
    static func device(_ meter: MeterInfo) -> String {
        var out = Array("glucose-gateway://".utf8)
        out.reserveCapacity(64)
        appendPlain(IdentityString.capped(meter.model ?? meter.name ?? "meter"), to: &out)
        out.append(UInt8(ascii: "-"))
        appendSerial(meter, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `plain` of the serial as the meter gave it, or of its address without colons in upper case
    /// (an ASCII address, as BlueZ gives them, byte by byte; any other by Characters).
    private static func appendSerial(_ meter: MeterInfo, to out: inout [UInt8]) {
        if let serial = IdentityString.capped(meter.serial) {
            appendPlain(serial, to: &out)
        } else if meter.address.utf8.allSatisfy({ $0 < 0x80 }) {
            for var c in meter.address.utf8 where c != UInt8(ascii: ":") {
                if c >= UInt8(ascii: "a"), c <= UInt8(ascii: "z") { c -= 0x20 }
                out.append(isPlain(c) ? c : UInt8(ascii: "_"))
            }
        } else {
            appendPlain(String(meter.address.filter { $0 != ":" }).uppercased(), to: &out)
        }
    }
}

/// Nightscout v1 `entries` element for a meter reading (`type: mbg`, always mg/dL as an integer).
///
/// `dateString` carries the meter's local offset with millisecond precision and the same instant as
/// `date`: Nightscout derives its deduplication key `{sysTime, type}` from it, so these bytes must never
/// change once stored.
public struct NightscoutBodyBuilder: OutboxBodyBuilder {
    public let destination = DestinationName.nightscout
    /// mmol/L to mg/dL: the molar mass of glucose, 180.156 g/mol, the same factor the codec uses
    /// (only for a reading that carries mmol/L alone; readings from the download carry both units).
    public static let mmolToMgdl = 18.0156

    public init() {}

    public func element(for reading: NewReading, meter: MeterInfo) -> OutboxElement? {
        guard let (instant, offset) = UploadableReading.time(of: reading) else { return nil }
        let mgdl: Double
        if let value = reading.mgdl {
            mgdl = value
        } else if let value = reading.mmoll {
            mgdl = value * Self.mmolToMgdl
        } else {
            return nil
        }
        guard mgdl.isFinite, mgdl >= 1, mgdl < 10_000 else { return nil }
        let key = UploadableReading.key(of: reading)
        var w = JSONWriter(capacity: 256)
        w.beginObject()
        w.string("type", "mbg")
        w.integer("mbg", Int64(mgdl.rounded()))
        w.integer("date", instant)
        CivilCalendar.withISO8601(millis: instant, offsetMinutes: offset) { w.string("dateString", utf8: $0) }
        w.string("device", UploadableReading.device(meter))
        w.string("identifier", key)
        w.endObject()
        return OutboxElement(key: key, body: w.bytes)
    }
}

/// Nightscout v1 `treatments` element: a `BG Check` for each uploadable reading (when `bgChecks`), and a
/// `Note` without a number for a HI or LO reading (when `outOfRangeNotes`).
///
/// `created_at` is always sent, with the meter's local offset and milliseconds: a treatment without one
/// is stamped with the server's "now", and Nightscout 15.0.6 deduplicates on `created_at` + `eventType`,
/// so these bytes must never change once stored. `identifier` is the reading's key (15.0.7 deduplicates
/// on it first). Context carbohydrates are never sent: AAPS and Trio dose insulin on carb treatments.
public struct NightscoutTreatmentBuilder: OutboxBodyBuilder {
    public let destination = DestinationName.nightscoutTreatments
    public static let enteredBy = "glucose-gateway"
    public static let highNote = "Meter reading HI (above its range)"
    public static let lowNote = "Meter reading LO (below its range)"
    public var bgChecks: Bool
    public var units: NightscoutUnits
    public var outOfRangeNotes: Bool

    public init(bgChecks: Bool = true, units: NightscoutUnits = .mgdl, outOfRangeNotes: Bool = false) {
        self.bgChecks = bgChecks
        self.units = units
        self.outOfRangeNotes = outOfRangeNotes
    }

    public func element(for reading: NewReading, meter: MeterInfo) -> OutboxElement? {
        if bgChecks, let (instant, offset) = UploadableReading.time(of: reading) { return bgCheck(reading, instant: instant, offset: offset) }
        if outOfRangeNotes, let range = Self.outOfRange(reading), let (instant, offset) = UploadableReading.placed(reading) {
            let key = UploadableReading.key(of: reading)
            var w = JSONWriter()
            w.beginObject()
            w.string("eventType", "Note")
            w.string("notes", range == .high ? Self.highNote : Self.lowNote)
            CivilCalendar.withISO8601(millis: instant, offsetMinutes: offset) { w.string("created_at", utf8: $0) }
            w.string("enteredBy", Self.enteredBy)
            w.string("identifier", key)
            w.endObject()
            return OutboxElement(key: key, body: w.bytes)
        }
        return nil
    }

    private func bgCheck(_ reading: NewReading, instant: Int64, offset: Int) -> OutboxElement? {
        let mgdl: Double
        if let value = reading.mgdl { mgdl = value } else if let value = reading.mmoll { mgdl = value * NightscoutBodyBuilder.mmolToMgdl } else { return nil }
        guard mgdl.isFinite, mgdl >= 1, mgdl < 10_000 else { return nil }
        let key = UploadableReading.key(of: reading)
        var w = JSONWriter()
        w.beginObject()
        w.string("eventType", "BG Check")
        switch units {
        case .mgdl:
            w.integer("glucose", Int64(mgdl.rounded()))
        case .mmol:
            let mmol = reading.mmoll ?? mgdl / NightscoutBodyBuilder.mmolToMgdl
            // Nightscout drops `glucose` (and its type and unit) when it is 0: never send a value that rounds to 0.
            guard mmol.isFinite, mmol >= 0.05 else { return nil }
            w.decimal("glucose", mmol, fractionDigits: 1)
        }
        w.string("glucoseType", "Finger")
        w.string("units", units.rawValue)
        CivilCalendar.withISO8601(millis: instant, offsetMinutes: offset) { w.string("created_at", utf8: $0) }
        w.string("enteredBy", Self.enteredBy)
        w.string("identifier", key)
        if let notes = Self.notes(reading.context) { w.string("notes", notes) }
        w.endObject()
        return OutboxElement(key: key, body: w.bytes)
    }

    enum Range { case high, low }

    /// HI: +INF or sensor status bit 5 ("result higher than the device can process"); LO: -INF or bit 6.
    /// Nil when neither, when both, or when another measurement fault makes the reading doubtful.
    static func outOfRange(_ reading: NewReading) -> Range? {
        guard reading.analyte == .glucose else { return nil }
        let status = reading.sensorStatus ?? 0
        let highBit = 1 << 5, lowBit = 1 << 6
        // Measurement faults are bits 1-10; battery low (0) and time fault (11) say nothing of the value.
        let otherFaults = status & 0x07FE & ~(highBit | lowBit)
        let high = reading.special == .positiveInfinity || status & highBit != 0
        let low = reading.special == .negativeInfinity || status & lowBit != 0
        guard otherFaults == 0, high != low else { return nil }
        switch reading.exclusion {
        case .high?, .low?, .sensorFault?: break
        default: return nil
        }
        // A reading with a number, or another special value, beside a HI/LO flag is left out: doubt.
        if let special = reading.special, special != .positiveInfinity, special != .negativeInfinity { return nil }
        return high ? .high : .low
    }

    /// Plain words for the 0x2A34 meal, tester and health fields; nil when none is known. Carbohydrates,
    /// exercise, medication and HbA1c are left out.
    static func notes(_ context: ReadingContext?) -> String? {
        guard let context else { return nil }
        var parts: [String] = []
        switch context.meal {
        case 1?: parts.append("Before meal")
        case 2?: parts.append("After meal")
        case 3?: parts.append("Fasting")
        case 4?: parts.append("Casual (snack or drink)")
        case 5?: parts.append("Bedtime")
        default: break
        }
        switch context.tester {
        case 1?: parts.append("tested by self")
        case 2?: parts.append("tested by a health care professional")
        case 3?: parts.append("lab test")
        default: break
        }
        switch context.health {
        case 1?: parts.append("minor health issues")
        case 2?: parts.append("major health issues")
        case 3?: parts.append("during menses")
        case 4?: parts.append("under stress")
        case 5?: parts.append("no health issues")
        default: break
        }
        guard var text = parts.first else { return nil }
        if parts.count > 1 { text += ", " + parts.dropFirst().joined(separator: ", ") }
        return text.prefix(1).uppercased() + text.dropFirst()
    }
}

/// FHIR R4 batch-Bundle entry for one capillary glucose reading, following the HL7 Personal Health
/// Device implementation guide: an Observation with the MDC and LOINC codes, a UCUM quantity in the
/// unit the meter reported, the meter as a Device, the configured subject, and the idempotency key as
/// identifier; the entry's request is a conditional create (`ifNoneExist` on that identifier).
///
/// The Device is contained in the Observation: entries of a batch Bundle must not depend on each other,
/// and a server-assigned Device id could not be part of a body frozen before the first upload.
public struct FHIRBodyBuilder: OutboxBodyBuilder {
    public let destination = DestinationName.fhir
    public static let identifierSystem = "urn:ietf:rfc:3986"
    public var subject: String

    public init(subject: String) { self.subject = subject }

    /// MDC code, MDC reference id, for the GLS type nibble (Glucose Measurement, type field).
    static func mdc(type: Int?) -> (code: String, name: String) {
        switch type {
        case 1: ("160184", "MDC_CONC_GLU_CAPILLARY_WHOLEBLOOD")
        case 2: ("160188", "MDC_CONC_GLU_CAPILLARY_PLASMA")
        case 3: ("160192", "MDC_CONC_GLU_VENOUS_WHOLEBLOOD")
        case 4: ("160196", "MDC_CONC_GLU_VENOUS_PLASMA")
        case 5: ("160200", "MDC_CONC_GLU_ARTERIAL_WHOLEBLOOD")
        case 6: ("160204", "MDC_CONC_GLU_ARTERIAL_PLASMA")
        case 8: ("160368", "MDC_CONC_GLU_UNDETERMINED_PLASMA")
        default: ("160184", "MDC_CONC_GLU_CAPILLARY_WHOLEBLOOD")
        }
    }

    public func element(for reading: NewReading, meter: MeterInfo) -> OutboxElement? {
        guard let (instant, offset) = UploadableReading.time(of: reading) else { return nil }
        // Send the unit the meter reported; LOINC 41653-7 is mass/volume, 14743-9 moles/volume.
        let molar = reading.unit == .molePerLitre
        let value: Double
        if molar {
            guard let v = reading.mmoll else { return nil }
            value = v
        } else {
            guard let v = reading.mgdl else { return nil }
            value = v
        }
        guard value.isFinite, value > 0 else { return nil }
        let key = UploadableReading.key(of: reading)
        let identifierValue = "urn:uuid:\(key)"
        let mdc = Self.mdc(type: reading.type)
        let model = UploadableReading.meterModel(meter)
        let serial = UploadableReading.meterSerial(meter)

        var w = JSONWriter()
        w.beginObject()
        w.string("fullUrl", identifierValue)
        w.beginObject("resource")
        w.string("resourceType", "Observation")
        w.beginObject("meta")
        w.beginArray("profile")
        w.string(nil, "http://hl7.org/fhir/uv/phd/StructureDefinition/PhdNumericObservation")
        w.endArray()
        w.endObject()
        w.beginArray("contained")
        w.beginObject()
        w.string("resourceType", "Device")
        w.string("id", "meter")
        w.beginArray("identifier")
        w.beginObject()
        w.string("system", "urn:ietf:rfc:7042")
        w.string("value", meter.address.uppercased())
        w.endObject()
        w.endArray()
        if let manufacturer = IdentityString.capped(meter.manufacturer) { w.string("manufacturer", manufacturer) }
        w.string("serialNumber", serial)
        w.beginArray("deviceName")
        w.beginObject()
        w.string("name", model)
        w.string("type", "model-name")
        w.endObject()
        w.endArray()
        w.endObject()
        w.endArray()
        w.beginArray("identifier")
        w.beginObject()
        w.string("system", Self.identifierSystem)
        w.string("value", identifierValue)
        w.endObject()
        w.endArray()
        w.string("status", "final")
        w.beginArray("category")
        w.beginObject()
        w.beginArray("coding")
        w.beginObject()
        w.string("system", "http://hl7.org/fhir/uv/phd/CodeSystem/PhdObservationCategories")
        w.string("code", "phd")
        w.endObject()
        w.endArray()
        w.endObject()
        w.endArray()
        w.beginObject("code")
        w.beginArray("coding")
        w.beginObject()
        w.string("system", "urn:iso:std:iso:11073:10101")
        w.string("code", mdc.code)
        w.string("display", mdc.name)
        w.endObject()
        w.beginObject()
        w.string("system", "http://loinc.org")
        if molar {
            w.string("code", "14743-9")
            w.string("display", "Glucose [Moles/volume] in Capillary blood by Glucometer")
        } else {
            w.string("code", "41653-7")
            w.string("display", "Glucose [Mass/volume] in Capillary blood by Glucometer")
        }
        w.endObject()
        w.endArray()
        w.string("text", "Blood glucose (meter)")
        w.endObject()
        w.beginObject("subject")
        w.string("reference", subject)
        w.endObject()
        CivilCalendar.withISO8601(millis: instant, offsetMinutes: offset) { w.string("effectiveDateTime", utf8: $0) }
        w.beginObject("valueQuantity")
        w.decimal("value", value, fractionDigits: molar ? 3 : 1)
        w.string("unit", molar ? "mmol/L" : "mg/dL")
        w.string("system", "http://unitsofmeasure.org")
        w.string("code", molar ? "mmol/L" : "mg/dL")
        w.endObject()
        w.beginObject("device")
        w.string("reference", "#meter")
        w.string("display", "\(model) \(serial)")
        w.endObject()
        w.endObject()  // resource
        w.beginObject("request")
        w.string("method", "POST")
        w.string("url", "Observation")
        w.string("ifNoneExist", "identifier=\(Self.identifierSystem)|\(identifierValue)")
        w.endObject()
        w.endObject()
        return OutboxElement(key: key, body: w.bytes)
    }
}
