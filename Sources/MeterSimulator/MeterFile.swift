import GatewayCore
import GlucoseProfile
import Support

/// A meter file or meter flag that could not be used; the message names the field.
public typealias MeterFileError = JSONFieldError

/// Reads the JSON meter format (documented in `glucose-gateway-simulator --help` and the simulator notes).
///
/// ```json
/// { "address": "C0:26:DA:01:02:03", "name": "meter+06543210", "pin": "123456",
///   "unit": "kg/L",
///   "records": [ { "sequence": 4, "time": "2024-03-05T14:30:00", "timeOffset": 60, "mgdl": 111 } ] }
/// ```
/// Unknown keys are errors, so a misspelt fault never silently does nothing.
public enum MeterFile {
    public static func parse(_ bytes: [UInt8]) throws(MeterFileError) -> MeterDescription {
        let json: JSONValue
        do { json = try JSONValue.parse(bytes) } catch { throw MeterFileError("", error.description) }
        return try meter(from: json)
    }

    public static func parse(_ text: String) throws(MeterFileError) -> MeterDescription {
        try parse(Array(text.utf8))
    }

    static let meterKeys: Set<String> = [
        "address", "addressType", "name", "pin", "bonding", "rssi", "deviceInformation", "features",
        "contextCharacteristic", "timeFilter", "unit", "records", "generate", "newRecords", "advertising", "faults",
        "clock",
        "profile", "quirks", "pairing",
    ]

    /// A meter object. With `"profile": "NAME"` the built-in profile is the base and every other key given
    /// replaces what the profile says (records as a whole, when `records` or `generate` is given).
    public static func meter(from json: JSONValue) throws(MeterFileError) -> MeterDescription {
        let o = try JSONObject(json, path: "")
        try o.onlyKeys(meterKeys)
        var base: MeterDescription?
        if let profile = try o.optionalString("profile") {
            guard let p = MeterProfile.named(profile) else {
                throw MeterFileError("profile", "must be one of \(MeterProfile.names.joined(separator: ", "))")
            }
            base = p.meter
        }
        let address: String
        if let text = try o.optionalString("address") {
            guard let a = MeterDescription.normalizedAddress(text) else {
                throw MeterFileError("address", "must look like AA:BB:CC:DD:EE:FF")
            }
            address = a
        } else if let base {
            address = base.address
        } else {
            throw MeterFileError("address", "is required")
        }
        let addressType = try o.optionalString("addressType") ?? base?.addressType ?? "public"
        guard addressType == "public" || addressType == "random" else {
            throw MeterFileError("addressType", "must be \"public\" or \"random\"")
        }
        let pin: UInt32
        if let text = try o.optionalString("pin") {
            pin = try parsePIN(text, field: "pin")
        } else if let base {
            pin = base.passkey
        } else {
            throw MeterFileError("pin", "is required")
        }
        let baseUnit = base?.records.last?.unit ?? .kilogramPerLitre
        let unit = try o.optionalString("unit").map { (u) throws(MeterFileError) in try parseUnit(u, field: "unit") }
            ?? baseUnit
        var records: [MeterRecord] = []
        if let list = try o.optionalArray("records") {
            for (i, item) in list.enumerated() {
                records.append(try record(from: item, path: "records[\(i)]", defaultUnit: unit))
            }
        }
        if let g = try o.optionalObject("generate") {
            var series = try generated(g, unit: unit)
            if let base, base.quirks.numbering == .newestFirst, g["firstSequence"] == nil {
                series = MeterProfile.renumbered(series, .newestFirst)
            }
            records += series
        }
        if o["records"] == nil, o["generate"] == nil, let base {
            records = base.records
        }
        var seen = Set<UInt16>()
        for r in records where !seen.insert(r.sequenceNumber).inserted {
            throw MeterFileError("records", "sequence number \(r.sequenceNumber) appears twice")
        }
        var info = base?.deviceInformation ?? DeviceInformation()
        if let d = try o.optionalObject("deviceInformation") {
            try d.onlyKeys(["manufacturer", "model", "serial", "firmware", "software"])
            info = DeviceInformation(manufacturer: try d.optionalString("manufacturer"), model: try d.optionalString("model"),
                                     serial: try d.optionalString("serial"), firmware: try d.optionalString("firmware"),
                                     software: try d.optionalString("software"))
        }
        let name: String
        if let text = try o.optionalString("name") {
            name = text
        } else if let base {
            name = base.name
        } else {
            throw MeterFileError("name", "is required")
        }
        let rssi = try o.optionalInt("rssi", in: -127...20).map { Int16($0) } ?? base?.rssi ?? -60
        let features = o["features"] == nil ? (base?.features ?? 0x0020 | 0x0400) : try features(o)
        let advertising = o["advertising"] == nil ? (base?.advertising ?? .always) : try advertising(o)
        return MeterDescription(
            address: address,
            addressType: addressType,
            name: name,
            passkey: pin,
            requiresBonding: try o.optionalBool("bonding") ?? base?.requiresBonding ?? true,
            rssi: rssi,
            deviceInformation: info,
            features: features,
            hasContextCharacteristic: try o.optionalBool("contextCharacteristic") ?? base?.hasContextCharacteristic ?? true,
            supportsTimeFilter: try o.optionalBool("timeFilter") ?? base?.supportsTimeFilter ?? true,
            records: records,
            newRecords: try o.optionalObject("newRecords").map { (n) throws(MeterFileError) in try newRecords(n) }
                ?? base?.newRecords,
            advertising: advertising,
            faults: try o.optionalObject("faults").map { (f) throws(MeterFileError) in try faults(f) }
                ?? base?.faults ?? MeterFaults(),
            clock: try o.optionalObject("clock").map { (c) throws(MeterFileError) in try clock(c) } ?? base?.clock ?? .none,
            quirks: try o.optionalObject("quirks").map { (q) throws(MeterFileError) in try quirks(q) }
                ?? base?.quirks ?? MeterQuirks(),
            pairing: try pairing(o) ?? base?.pairing ?? MeterPairingBehaviour()
        )
    }

    /// `"pairing": "just-works"` or `"pairing": {"method": "...", "startsPairing": true, "answer": "..."}`
    /// (see `MeterPairingBehaviour`); nil when absent.
    static func pairing(_ o: JSONObject) throws(MeterFileError) -> MeterPairingBehaviour? {
        guard o["pairing"] != nil else { return nil }
        let methods = MeterPairingBehaviour.Method.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
        if case .string(let text)? = o["pairing"] {
            guard let method = MeterPairingBehaviour.Method(rawValue: text) else {
                throw MeterFileError("pairing", "must be one of \(methods), or an object")
            }
            return MeterPairingBehaviour(method: method)
        }
        guard let p = try o.optionalObject("pairing") else { return nil }
        try p.onlyKeys(["method", "startsPairing", "answer"])
        var behaviour = MeterPairingBehaviour()
        if let text = try p.optionalString("method") {
            guard let method = MeterPairingBehaviour.Method(rawValue: text) else {
                throw MeterFileError(p.field("method"), "must be one of \(methods)")
            }
            behaviour.method = method
        }
        behaviour.startsPairing = try p.optionalBool("startsPairing") ?? false
        if let text = try p.optionalString("answer") {
            guard let answer = MeterPairingBehaviour.Answer(rawValue: text) else {
                let answers = MeterPairingBehaviour.Answer.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
                throw MeterFileError(p.field("answer"), "must be one of \(answers)")
            }
            behaviour.answer = answer
        }
        return behaviour
    }

    /// `"quirks": {"numbering": "newest-first", "racpWithoutIndications": "silent"}` (see `MeterQuirks`).
    static func quirks(_ o: JSONObject) throws(MeterFileError) -> MeterQuirks {
        try o.onlyKeys(["numbering", "racpWithoutIndications"])
        var q = MeterQuirks()
        if let text = try o.optionalString("numbering") {
            guard let v = MeterQuirks.Numbering(rawValue: text) else {
                throw MeterFileError(o.field("numbering"), "must be \"oldest-first\" or \"newest-first\"")
            }
            q.numbering = v
        }
        if let text = try o.optionalString("racpWithoutIndications") {
            guard let v = MeterQuirks.RACPWithoutIndications(rawValue: text) else {
                throw MeterFileError(o.field("racpWithoutIndications"), "must be \"att-error\" or \"silent\"")
            }
            q.racpWithoutIndications = v
        }
        return q
    }

    public static func parsePIN(_ text: String, field: String) throws(MeterFileError) -> UInt32 {
        guard text.count == 6, text.allSatisfy({ $0.isASCII && $0.isNumber }), let v = UInt32(text) else {
            throw MeterFileError(field, "must be six digits")
        }
        return v
    }

    public static func parseUnit(_ text: String, field: String) throws(MeterFileError) -> ConcentrationUnit {
        switch text {
        case "kg/L": return .kilogramPerLitre
        case "mol/L": return .molePerLitre
        default: throw MeterFileError(field, "must be \"kg/L\" or \"mol/L\"")
        }
    }

    /// `2024-03-05T14:30:00` (seconds optional), validated as a GLS Date Time.
    public static func parseTime(_ text: String, field: String) throws(MeterFileError) -> GlucoseDateTime {
        let bad = MeterFileError(field, "must be a date-time like 2024-03-05T14:30:00")
        let parts = text.split(separator: "T", omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw bad }
        let date = parts[0].split(separator: "-", omittingEmptySubsequences: false).map { Int($0) }
        let time = parts[1].split(separator: ":", omittingEmptySubsequences: false).map { Int($0) }
        guard date.count == 3, time.count == 2 || time.count == 3,
              let y = date[0], let mo = date[1], let d = date[2], let h = time[0], let mi = time[1] else { throw bad }
        let s = time.count == 3 ? time[2] : 0
        guard let s, let value = GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: s) else {
            throw MeterFileError(field, "is not a valid date-time")
        }
        return value
    }

    static let recordKeys: Set<String> = [
        "sequence", "time", "timeOffset", "mgdl", "mmol", "sfloat", "result", "unit", "type", "location",
        "control", "status", "context", "hex", "contextHex",
    ]

    /// One record object. Exactly one of `mgdl`, `mmol`, `sfloat` or `result` ("high", "low", "none").
    public static func record(from json: JSONValue, path: String, defaultUnit: ConcentrationUnit,
                              defaultSequence: UInt16? = nil) throws(MeterFileError) -> MeterRecord {
        let o = try JSONObject(json, path: path)
        try o.onlyKeys(recordKeys)
        let sequence: UInt16
        if let s = try o.optionalInt("sequence", in: 0...65535) {
            sequence = UInt16(s)
        } else if let defaultSequence {
            sequence = defaultSequence
        } else {
            throw MeterFileError(o.field("sequence"), "is required")
        }
        let time = try parseTime(try o.string("time"), field: o.field("time"))
        let offset = try o.optionalInt("timeOffset", in: -32768...32767).map { Int16($0) }
        let unit = try o.optionalString("unit").map { (u) throws(MeterFileError) in try parseUnit(u, field: o.field("unit")) }
            ?? defaultUnit
        var results: [MeterRecord.Result] = []
        if let v = try o.optionalNumber("mgdl") { results.append(.mgPerDL(v)) }
        if let v = try o.optionalNumber("mmol") { results.append(.mmolPerL(v)) }
        if let text = try o.optionalString("sfloat") {
            guard let bits = parseHex16(text) else { throw MeterFileError(o.field("sfloat"), "must be 16-bit hex like 0xB06F") }
            results.append(.sfloat(SFloat(bits: bits)))
        }
        if let r = try o.optionalString("result") {
            switch r {
            case "high": results.append(.high)
            case "low": results.append(.low)
            case "none": results.append(.absent)
            default: throw MeterFileError(o.field("result"), "must be \"high\", \"low\" or \"none\"")
            }
        }
        guard results.count == 1, let result = results.first else {
            throw MeterFileError(path, "needs exactly one of mgdl, mmol, sfloat or result")
        }
        let control = try o.optionalBool("control") ?? false
        var type = UInt8(try o.optionalInt("type", in: 0...15) ?? (control ? 10 : 1))
        var location = UInt8(try o.optionalInt("location", in: 0...15) ?? (control ? 4 : 1))
        if control { type = 10; location = 4 }
        var status: UInt16?
        if let s = o["status"] {
            status = try sensorStatus(s, field: o.field("status"))
        }
        var raw: [UInt8]?
        if let hex = try o.optionalString("hex") {
            guard let bytes = hexBytes(hex) else { throw MeterFileError(o.field("hex"), "must be hex bytes") }
            raw = bytes
        }
        var rawContext: [UInt8]?
        if let hex = try o.optionalString("contextHex") {
            guard let bytes = hexBytes(hex) else { throw MeterFileError(o.field("contextHex"), "must be hex bytes") }
            rawContext = bytes
        }
        var recordContext: GlucoseMeasurementContext?
        if let c = try o.optionalObject("context") { recordContext = try Self.context(c, sequence: sequence) }
        return MeterRecord(sequenceNumber: sequence, baseTime: time, timeOffset: offset, result: result, unit: unit,
                           type: type, sampleLocation: location, sensorStatus: status, context: recordContext,
                           rawMeasurement: raw, rawContext: rawContext)
    }

    static let statusNames: [String: UInt16] = [
        "batteryLow": 0x0001, "sensorMalfunction": 0x0002, "sampleSizeInsufficient": 0x0004,
        "stripInsertionError": 0x0008, "stripTypeIncorrect": 0x0010, "resultTooHigh": 0x0020,
        "resultTooLow": 0x0040, "temperatureTooHigh": 0x0080, "temperatureTooLow": 0x0100,
        "readInterrupted": 0x0200, "generalDeviceFault": 0x0400, "timeFault": 0x0800,
    ]

    static func sensorStatus(_ json: JSONValue, field: String) throws(MeterFileError) -> UInt16 {
        switch json {
        case .number(let number):
            let n = number.value
            guard n >= 0, n <= 65535, n == n.rounded() else { throw MeterFileError(field, "must be 0...65535") }
            return UInt16(n)
        case .array(let names):
            var bits: UInt16 = 0
            for (i, item) in names.enumerated() {
                guard case .string(let name) = item, let bit = statusNames[name] else {
                    throw MeterFileError("\(field)[\(i)]", "must be one of \(statusNames.keys.sorted().joined(separator: ", "))")
                }
                bits |= bit
            }
            return bits
        default:
            throw MeterFileError(field, "must be a number or an array of status names")
        }
    }

    static let featureNames: [String: UInt16] = [
        "lowBattery": 1 << 0, "sensorMalfunction": 1 << 1, "sampleSize": 1 << 2, "stripInsertion": 1 << 3,
        "stripType": 1 << 4, "highLow": 1 << 5, "temperature": 1 << 6, "readInterrupt": 1 << 7,
        "generalFault": 1 << 8, "timeFault": 1 << 9, "multipleBond": 1 << 10,
    ]

    static func features(_ o: JSONObject) throws(MeterFileError) -> UInt16 {
        guard let json = o["features"] else { return 0x0020 | 0x0400 }
        switch json {
        case .number(let number):
            let n = number.value
            guard n >= 0, n <= 65535, n == n.rounded() else { throw MeterFileError("features", "must be 0...65535") }
            return UInt16(n)
        case .array(let names):
            var bits: UInt16 = 0
            for (i, item) in names.enumerated() {
                guard case .string(let name) = item, let bit = featureNames[name] else {
                    throw MeterFileError("features[\(i)]", "must be one of \(featureNames.keys.sorted().joined(separator: ", "))")
                }
                bits |= bit
            }
            return bits
        default:
            throw MeterFileError("features", "must be a number or an array of feature names")
        }
    }

    static func context(_ o: JSONObject, sequence: UInt16) throws(MeterFileError) -> GlucoseMeasurementContext {
        try o.onlyKeys(["meal", "carbohydrateID", "carbohydrateGrams", "tester", "health", "exerciseSeconds",
                        "exerciseIntensity", "medicationID", "medicationMilligrams", "medicationMillilitres", "hba1c",
                        "extendedFlags"])
        var c = GlucoseMeasurementContext(sequenceNumber: sequence)
        c.meal = try o.optionalInt("meal", in: 0...255).map { UInt8($0) }
        c.tester = try o.optionalInt("tester", in: 0...15).map { UInt8($0) }
        c.health = try o.optionalInt("health", in: 0...15).map { UInt8($0) }
        if c.tester != nil || c.health != nil {
            c.tester = c.tester ?? 15
            c.health = c.health ?? 15
        }
        c.extendedFlags = try o.optionalInt("extendedFlags", in: 0...255).map { UInt8($0) }
        if let grams = try o.optionalNumber("carbohydrateGrams") {
            c.carbohydrateID = UInt8(try o.optionalInt("carbohydrateID", in: 0...255) ?? 1)
            guard let s = SFloat.encoding(grams, baseExponent: -3, roundingDigits: 0) else {
                throw MeterFileError(o.field("carbohydrateGrams"), "does not fit an SFLOAT")
            }
            c.carbohydrateKg = s
        }
        if let seconds = try o.optionalInt("exerciseSeconds", in: 0...65535) {
            c.exerciseDurationSeconds = UInt16(seconds)
            c.exerciseIntensityPercent = UInt8(try o.optionalInt("exerciseIntensity", in: 0...100) ?? 50)
        }
        let mg = try o.optionalNumber("medicationMilligrams")
        let ml = try o.optionalNumber("medicationMillilitres")
        if mg != nil && ml != nil {
            throw MeterFileError(o.path, "has both medicationMilligrams and medicationMillilitres")
        }
        if let mg {
            c.medicationID = UInt8(try o.optionalInt("medicationID", in: 0...255) ?? 1)
            c.medication = SFloat.encoding(mg, baseExponent: -6, roundingDigits: 0)
            c.medicationUnit = .kilograms
        } else if let ml {
            c.medicationID = UInt8(try o.optionalInt("medicationID", in: 0...255) ?? 1)
            c.medication = SFloat.encoding(ml, baseExponent: -3, roundingDigits: 1)
            c.medicationUnit = .litres
        }
        if let a = try o.optionalNumber("hba1c") {
            c.hba1cPercent = SFloat.encoding(a, baseExponent: 0, roundingDigits: 1)
        }
        return c
    }

    /// `"generate": {"count": 20, "firstSequence": 4, "start": "...", "intervalMinutes": 240, "timeOffset": 60}`:
    /// a series of ordinary readings with varying values.
    static func generated(_ o: JSONObject, unit: ConcentrationUnit) throws(MeterFileError) -> [MeterRecord] {
        try o.onlyKeys(["count", "firstSequence", "start", "intervalMinutes", "timeOffset", "withContext"])
        let count = try o.optionalInt("count", in: 0...65536) ?? 10
        let first = try o.optionalInt("firstSequence", in: 0...65535) ?? 1
        let start = try o.optionalString("start").map { (s) throws(MeterFileError) in try parseTime(s, field: o.field("start")) }
        let interval = try o.optionalInt("intervalMinutes", in: 1...100_000) ?? 240
        let offset = try o.optionalInt("timeOffset", in: -32768...32767).map { Int16($0) }
        let withContext = try o.optionalBool("withContext") ?? false
        return MeterSeries.records(count: count, firstSequence: UInt16(first), start: start,
                                   intervalMinutes: interval, timeOffset: offset, unit: unit, withContext: withContext)
    }

    static func newRecords(_ o: JSONObject) throws(MeterFileError) -> NewRecordPlan {
        try o.onlyKeys(["everySeconds", "limit", "mgdl"])
        guard let every = try o.optionalNumber("everySeconds"), every > 0, every <= 86_400 * 365 else {
            throw MeterFileError(o.field("everySeconds"), "is required and must be positive (at most a year)")
        }
        return NewRecordPlan(intervalSeconds: every, limit: try o.optionalInt("limit", in: 0...65536),
                             mgPerDL: try o.optionalNumber("mgdl") ?? 120)
    }

    static func advertising(_ o: JSONObject) throws(MeterFileError) -> AdvertisingPlan {
        guard let json = o["advertising"] else { return .always }
        if case .string(let s) = json {
            switch s {
            case "always": return .always
            case "off": return .off
            default: throw MeterFileError("advertising", "must be \"always\", \"off\" or an object with onSeconds and offSeconds")
            }
        }
        let a = try JSONObject(json, path: "advertising")
        try a.onlyKeys(["onSeconds", "offSeconds"])
        guard let on = try a.optionalNumber("onSeconds"), on > 0, on <= 86_400,
              let off = try a.optionalNumber("offSeconds"), off >= 0, off <= 86_400 else {
            throw MeterFileError("advertising", "needs positive onSeconds and non-negative offSeconds")
        }
        return .bursts(onSeconds: on, offSeconds: off)
    }

    static func faults(_ o: JSONObject) throws(MeterFileError) -> MeterFaults {
        try o.onlyKeys(["dropLinkAfter", "dropLinkTimes", "failProcedureAfter", "notificationDelayMs", "contextOrder",
                        "malformed", "zeroCountAsNoRecords"])
        var f = MeterFaults()
        f.dropLinkAfter = try o.optionalInt("dropLinkAfter", in: 0...65536)
        if let t = o["dropLinkTimes"] {
            if case .null = t { f.dropLinkTimes = nil } else { f.dropLinkTimes = try o.optionalInt("dropLinkTimes", in: 1...1_000_000) }
        }
        f.failProcedureAfter = try o.optionalInt("failProcedureAfter", in: 0...65536)
        f.notificationDelay = (try o.optionalNumber("notificationDelayMs") ?? 0) / 1000
        guard f.notificationDelay >= 0, f.notificationDelay <= 60 else {
            throw MeterFileError(o.field("notificationDelayMs"), "must be 0...60000")
        }
        if let order = try o.optionalString("contextOrder") {
            guard let v = MeterFaults.ContextOrder(rawValue: order) else {
                throw MeterFileError(o.field("contextOrder"), "must be \"after\" or \"before\"")
            }
            f.contextOrder = v
        }
        if let list = try o.optionalArray("malformed") {
            for (i, item) in list.enumerated() {
                let m = try JSONObject(item, path: o.field("malformed") + "[\(i)]")
                try m.onlyKeys(["sequence", "kind"])
                guard let seq = try m.optionalInt("sequence", in: 0...65535) else {
                    throw MeterFileError(m.field("sequence"), "is required")
                }
                let kindText = try m.optionalString("kind") ?? "truncated"
                guard let kind = MeterFaults.MalformedKind(rawValue: kindText) else {
                    throw MeterFileError(m.field("kind"), "must be truncated, invalid-time, stray-context or garbage-context")
                }
                f.malformed[UInt16(seq)] = kind
            }
        }
        f.zeroCountAsNoRecords = try o.optionalBool("zeroCountAsNoRecords") ?? false
        return f
    }

    static func parseHex16(_ text: String) -> UInt16? {
        var t = Substring(text)
        if t.hasPrefix("0x") || t.hasPrefix("0X") { t = t.dropFirst(2) }
        guard (1...4).contains(t.count) else { return nil }
        return UInt16(t, radix: 16)
    }

}

/// Generates ordinary readings: values cycle through a plausible day, times advance by a fixed step.
public enum MeterSeries {
    public static let defaultStart = GlucoseDateTime(year: 2024, month: 3, day: 5, hour: 7, minute: 30, second: 0)

    public static func records(count: Int, firstSequence: UInt16, start: GlucoseDateTime?, intervalMinutes: Int,
                               timeOffset: Int16?, unit: ConcentrationUnit, withContext: Bool = false) -> [MeterRecord] {
        guard let start = start ?? defaultStart else { return [] }
        let values: [Double] = [96, 142, 118, 187, 104, 131, 88, 163, 112, 149]
        var out: [MeterRecord] = []
        out.reserveCapacity(count)
        for i in 0..<count {
            let seq = firstSequence &+ UInt16(truncatingIfNeeded: i)
            var context: GlucoseMeasurementContext?
            if withContext {
                var c = GlucoseMeasurementContext(sequenceNumber: seq)
                c.meal = UInt8(1 + i % 5)
                context = c
            }
            out.append(MeterRecord(sequenceNumber: seq, baseTime: start.adding(minutes: i * intervalMinutes),
                                   timeOffset: timeOffset, result: .mgPerDL(values[i % values.count]), unit: unit,
                                   context: context))
        }
        return out
    }
}

/// Field access on a JSON object with errors that name the field's path.
struct JSONObject {
    let members: [JSONMember]
    let path: String

    init(_ json: JSONValue, path: String) throws(MeterFileError) {
        guard case .object(let m) = json else { throw MeterFileError(path, "must be an object, not \(json.typeName)") }
        members = m
        self.path = path
    }

    func field(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    subscript(_ key: String) -> JSONValue? { members.first { $0.key == key }?.value }

    func onlyKeys(_ allowed: Set<String>) throws(MeterFileError) {
        for m in members where !allowed.contains(m.key) {
            throw MeterFileError(field(m.key), "is not a known key")
        }
    }

    func string(_ key: String) throws(MeterFileError) -> String {
        guard let s = try optionalString(key) else { throw MeterFileError(field(key), "is required") }
        return s
    }

    func optionalString(_ key: String) throws(MeterFileError) -> String? {
        guard let v = self[key] else { return nil }
        guard case .string(let s) = v else { throw MeterFileError(field(key), "must be a string, not \(v.typeName)") }
        return s
    }

    func optionalBool(_ key: String) throws(MeterFileError) -> Bool? {
        guard let v = self[key] else { return nil }
        guard case .bool(let b) = v else { throw MeterFileError(field(key), "must be true or false, not \(v.typeName)") }
        return b
    }

    func optionalNumber(_ key: String) throws(MeterFileError) -> Double? {
        guard let v = self[key] else { return nil }
        guard case .number(let n) = v else { throw MeterFileError(field(key), "must be a number, not \(v.typeName)") }
        return n.value
    }

    func optionalInt(_ key: String, in range: ClosedRange<Int>) throws(MeterFileError) -> Int? {
        guard let n = try optionalNumber(key) else { return nil }
        guard n == n.rounded(), n >= Double(range.lowerBound), n <= Double(range.upperBound) else {
            throw MeterFileError(field(key), "must be an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return Int(n)
    }

    func optionalArray(_ key: String) throws(MeterFileError) -> [JSONValue]? {
        guard let v = self[key] else { return nil }
        guard case .array(let a) = v else { throw MeterFileError(field(key), "must be an array, not \(v.typeName)") }
        return a
    }

    func optionalObject(_ key: String) throws(MeterFileError) -> JSONObject? {
        guard let v = self[key] else { return nil }
        return try JSONObject(v, path: field(key))
    }
}
