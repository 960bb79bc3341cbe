import GatewayCore
import GlucoseProfile

/// What both builders agree on: which readings are uploaded, their instant and their local offset.
enum UploadableReading {
    /// The instant (after clock correction) and the meter's UTC offset in minutes at that time, or nil
    /// when the reading must not be uploaded as a number.
    static func time(of reading: NewReading) -> (instant: Int64, offsetMinutes: Int)? {
        guard reading.analyte == .glucose, reading.exclusion == nil, reading.special == nil,
              let instant = reading.instant, reading.meterInstant != nil else { return nil }
        // The meter's zone offset, as its zone gave it when the time was resolved; an offset beyond any
        // zone's (±18 h) is not shown.
        var offset = 0
        if let minutes = reading.utcOffsetMinutes, abs(minutes) <= 18 * 60 { offset = minutes }
        return (instant, offset)
    }

    static func key(of reading: NewReading) -> String {
        IdempotencyKey.key(meterAddress: reading.meterAddress, sequence: reading.sequence, meterTime: reading.userFacingTime.isoString)
    }

    /// Plain ASCII for a device string: letters, digits, `.`, `_` and `-`; anything else becomes `_`.
    static func plain(_ text: String) -> String {
        String(text.unicodeScalars.map { s -> Character in
            s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s) || s == "." || s == "_" || s == "-") ? Character(s) : "_"
        })
    }

    static func meterModel(_ meter: MeterInfo) -> String {
        plain(meter.model ?? meter.name ?? "meter")
    }

    static func meterSerial(_ meter: MeterInfo) -> String {
        plain(meter.serial ?? meter.address.replacingColons())
    }
}

extension String {
    fileprivate func replacingColons() -> String { String(filter { $0 != ":" }).uppercased() }
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
        var w = JSONWriter()
        w.beginObject()
        w.string("type", "mbg")
        w.integer("mbg", Int64(mgdl.rounded()))
        w.integer("date", instant)
        w.string("dateString", CivilCalendar.iso8601(millis: instant, offsetMinutes: offset))
        w.string("device", "glucose-gateway://\(UploadableReading.meterModel(meter))-\(UploadableReading.meterSerial(meter))")
        w.string("identifier", key)
        w.endObject()
        return OutboxElement(key: key, body: w.bytes)
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
        if let manufacturer = meter.manufacturer { w.string("manufacturer", manufacturer) }
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
        w.string("effectiveDateTime", CivilCalendar.iso8601(millis: instant, offsetMinutes: offset))
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
