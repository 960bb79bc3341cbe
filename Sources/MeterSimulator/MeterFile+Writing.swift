import GatewayCore
import GlucoseProfile
import Support

/// Writes a meter back in the JSON meter format that `MeterFile.parse` reads: identity, PIN, GATT options,
/// every stored record (value, unit, type, location, status, context, verbatim bytes), the new-record
/// plan, advertising, faults and the clock (as it was at start). Parsing what it writes gives the same
/// `MeterDescription`, so a test can take a running meter's own record list (control interface
/// `Describe`) as the truth to compare with.
extension MeterFile {
    public static func json(_ meter: MeterDescription) -> JSONValue {
        var o: [JSONMember] = [
            JSONMember("address", .string(meter.address)),
            JSONMember("addressType", .string(meter.addressType)),
            JSONMember("name", .string(meter.name)),
            JSONMember("pin", .string(pinText(meter.passkey))),
            JSONMember("bonding", .bool(meter.requiresBonding)),
            JSONMember("rssi", .int(meter.rssi)),
        ]
        var info: [JSONMember] = []
        let d = meter.deviceInformation
        for (key, value) in [("manufacturer", d.manufacturer), ("model", d.model), ("serial", d.serial),
                             ("firmware", d.firmware), ("software", d.software)] {
            // An absent string is left out: parsing a present object fills in no default.
            if let value { info.append(JSONMember(key, .string(value))) }
        }
        o.append(JSONMember("deviceInformation", .object(info)))
        o.append(JSONMember("features", .int(meter.features)))
        o.append(JSONMember("contextCharacteristic", .bool(meter.hasContextCharacteristic)))
        o.append(JSONMember("timeFilter", .bool(meter.supportsTimeFilter)))
        o.append(JSONMember("records", .array(meter.records.map(json(record:)))))
        if meter.quirks != MeterQuirks() {
            o.append(JSONMember("quirks", .object([
                JSONMember("numbering", .string(meter.quirks.numbering.rawValue)),
                JSONMember("racpWithoutIndications", .string(meter.quirks.racpWithoutIndications.rawValue)),
            ])))
        }
        if meter.pairing != MeterPairingBehaviour() {
            o.append(JSONMember("pairing", .object([
                JSONMember("method", .string(meter.pairing.method.rawValue)),
                JSONMember("startsPairing", .bool(meter.pairing.startsPairing)),
                JSONMember("answer", .string(meter.pairing.answer.rawValue)),
            ])))
        }
        if let plan = meter.newRecords {
            var n = [JSONMember("everySeconds", .double(plan.intervalSeconds))]
            if let limit = plan.limit { n.append(JSONMember("limit", .int(limit))) }
            n.append(JSONMember("mgdl", .double(plan.mgPerDL)))
            o.append(JSONMember("newRecords", .object(n)))
        }
        switch meter.advertising {
        case .always: o.append(JSONMember("advertising", .string("always")))
        case .off: o.append(JSONMember("advertising", .string("off")))
        case let .bursts(on, off):
            o.append(JSONMember("advertising", .object([JSONMember("onSeconds", .double(on)),
                                                        JSONMember("offSeconds", .double(off))])))
        }
        o.append(JSONMember("faults", json(faults: meter.faults)))
        let c = meter.clock
        o.append(JSONMember("clock", .object([
            JSONMember("kind", .string(c.kind.rawValue)), JSONMember("writable", .bool(c.writable)),
            JSONMember("skewSeconds", .double(c.skewSeconds)), JSONMember("utcOffsetMinutes", .int(c.utcOffsetMinutes)),
            JSONMember("driftSecondsPerDay", .double(c.driftSecondsPerDay)),
        ])))
        return .object(o)
    }

    static func pinText(_ passkey: UInt32) -> String {
        let digits = String(passkey)
        return String(repeating: "0", count: max(0, 6 - digits.count)) + digits
    }

    public static func json(record r: MeterRecord) -> JSONValue {
        var o: [JSONMember] = [
            JSONMember("sequence", .int(r.sequenceNumber)),
            JSONMember("time", .string(r.baseTime.isoString)),
        ]
        if let offset = r.timeOffset { o.append(JSONMember("timeOffset", .int(offset))) }
        switch r.result {
        case .mgPerDL(let v): o.append(JSONMember("mgdl", .double(v)))
        case .mmolPerL(let v): o.append(JSONMember("mmol", .double(v)))
        case .sfloat(let s): o.append(JSONMember("sfloat", .string("0x" + hexString([UInt8(s.bits >> 8), UInt8(s.bits & 0xFF)], uppercase: true))))
        case .high: o.append(JSONMember("result", .string("high")))
        case .low: o.append(JSONMember("result", .string("low")))
        case .absent: o.append(JSONMember("result", .string("none")))
        }
        o.append(JSONMember("unit", .string(r.unit == .molePerLitre ? "mol/L" : "kg/L")))
        o.append(JSONMember("type", .int(r.type)))
        o.append(JSONMember("location", .int(r.sampleLocation)))
        if let status = r.sensorStatus { o.append(JSONMember("status", .int(status))) }
        if let c = r.context { o.append(JSONMember("context", json(context: c))) }
        if let raw = r.rawMeasurement { o.append(JSONMember("hex", .string(hexString(raw)))) }
        if let raw = r.rawContext { o.append(JSONMember("contextHex", .string(hexString(raw)))) }
        return .object(o)
    }

    static func json(context c: GlucoseMeasurementContext) -> JSONValue {
        var o: [JSONMember] = []
        if let v = c.meal { o.append(JSONMember("meal", .int(v))) }
        if let v = c.tester { o.append(JSONMember("tester", .int(v))) }
        if let v = c.health { o.append(JSONMember("health", .int(v))) }
        if let v = c.extendedFlags { o.append(JSONMember("extendedFlags", .int(v))) }
        if let kg = c.carbohydrateKg, let grams = kg.scaledDouble(powerOfTen: 3) {
            o.append(JSONMember("carbohydrateID", .int(c.carbohydrateID ?? 1)))
            o.append(JSONMember("carbohydrateGrams", .double(grams)))
        }
        if let seconds = c.exerciseDurationSeconds {
            o.append(JSONMember("exerciseSeconds", .int(seconds)))
            if let p = c.exerciseIntensityPercent { o.append(JSONMember("exerciseIntensity", .int(p))) }
        }
        if let m = c.medication {
            o.append(JSONMember("medicationID", .int(c.medicationID ?? 1)))
            switch c.medicationUnit {
            case .kilograms: if let mg = m.scaledDouble(powerOfTen: 6) { o.append(JSONMember("medicationMilligrams", .double(mg))) }
            case .litres: if let ml = m.scaledDouble(powerOfTen: 3) { o.append(JSONMember("medicationMillilitres", .double(ml))) }
            }
        }
        if let a = c.hba1cPercent?.doubleValue { o.append(JSONMember("hba1c", .double(a))) }
        return .object(o)
    }

    static func json(faults f: MeterFaults) -> JSONValue {
        var o: [JSONMember] = []
        if let n = f.dropLinkAfter { o.append(JSONMember("dropLinkAfter", .int(n))) }
        o.append(JSONMember("dropLinkTimes", f.dropLinkTimes.map { .int($0) } ?? .null))
        if let n = f.failProcedureAfter { o.append(JSONMember("failProcedureAfter", .int(n))) }
        o.append(JSONMember("notificationDelayMs", .double(f.notificationDelay * 1000)))
        o.append(JSONMember("contextOrder", .string(f.contextOrder.rawValue)))
        o.append(JSONMember("malformed", .array(f.malformed.keys.sorted().map { seq in
            .object([JSONMember("sequence", .int(seq)), JSONMember("kind", .string(f.malformed[seq]?.rawValue ?? ""))])
        })))
        o.append(JSONMember("zeroCountAsNoRecords", .bool(f.zeroCountAsNoRecords)))
        return .object(o)
    }
}
