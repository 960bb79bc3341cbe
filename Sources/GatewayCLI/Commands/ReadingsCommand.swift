import Gateway
import GatewayCore
import GlucoseProfile
import Meters
import SQLiteStore
import Support

enum ReadingsCommand: GatewayCommand {
    static let name = "readings"
    static let abstract = "Export stored readings as a table, JSON or CSV"
    static let help = """
    usage: glucose-gateway readings [--meter ADDRESS] [--since TIME] [--limit N] [--json | --csv]

    Exports the readings stored on this gateway, oldest first, every one of them: also those kept out of
    upload (control solution, HI/LO, sensor faults, ketone, unresolved time), with the reason. Records
    the meter sent that could not be decoded come first, as `undecodable` with their bytes and why.
      --meter ADDRESS  only this meter's readings
      --since TIME     only readings at or after TIME: 2024-05-01, 2024-05-01T08:00 (gateway time zone),
                       2024-05-01T08:00Z or +02:00, or relative: 30m, 24h, 7d (undecodable records:
                       received at or after TIME)
      --limit N        at most N rows
      --json           a JSON array: times in UTC (time = corrected, meter_time = as the meter's clock
                       said; for a time-uncertain reading in the repeated autumn hour the meter's time
                       with no offset), local_time as the meter showed it, values in mg/dL and mmol/L; an
                       undecodable record has exclusion "undecodable", characteristic, raw (hex) and
                       reason, and no reading fields
      --csv            the same fields as comma-separated values with a header line
    """
    static let options = OptionTable(values: ["--meter", "--since", "--limit"], flags: ["--json", "--csv"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let meterText = try arguments.option("--meter")
        let sinceText = try arguments.option("--since")
        let limit = try arguments.intOption("--limit", in: 1...10_000_000)
        let json = arguments.flag("--json")
        let csv = arguments.flag("--csv")
        try arguments.finish()
        if json && csv { throw GatewayFailure(.usage, "choose one of --json and --csv") }
        let meter = try meterText.map { text throws(GatewayFailure) in try MeterCommandSupport.address(text, command: "--meter") }
        let config = try context.loadConfig(forMeterCommand: name)
        var since: UnixMillis?
        if let sinceText {
            // A wall time without an offset is in the gateway's zone ([gateway] time_zone), as `readings --help`
            // says, not in the zone of whoever runs the command (their TZ).
            let zoneName = config.gateway.timeZone ?? MeterTimeZone.systemIdentifier(environment: context.environment)
            let zone = MeterTimeZone(identifier: zoneName, environment: context.environment)
            guard let t = TimeArgument.parse(sinceText, now: SystemClock.now(), zone: zone) else {
                throw GatewayFailure(.usage, "--since: '\(sinceText.prefix(40))' is not a time (2024-05-01, 2024-05-01T08:00Z, 24h, 7d)")
            }
            since = t
        }
        let (rows, clocks) = try await MeterCommandSupport.withStore(config, readingOnly: "readings") { store in
            if let meter, try await store.meters(includingUnpaired: true).contains(where: { $0.info.address == meter }) == false {
                throw GatewayFailure(.failure, "no meter \(meter) in this gateway's database (see glucose-gateway meters --all)")
            }
            // Undecodable records first: they have no time of their own, as readings with an unresolved
            // time, which also come first. The limit counts both.
            let undecodable = try await store.undecodableValues(ReadingFilter(meterAddress: meter, since: since, limit: limit))
            let left = limit.map { max(0, $0 - undecodable.count) }
            let readings = left == 0 ? [] : try await store.readings(ReadingFilter(meterAddress: meter, since: since, limit: left))
            return (undecodable.map(Row.undecodable) + readings.map(Row.reading), try await ReadingClocks.load(store, for: readings, environment: context.environment))
        }
        if json {
            StandardStream.writeOutput(JSONValue.array(rows.map { jsonObject($0, clocks: clocks) }).prettyText + "\n")
        } else if csv {
            var out = csvHeader.joined(separator: ",") + "\n"
            for r in rows { out += csvRow(r, clocks: clocks).map(csvField).joined(separator: ",") + "\n" }
            StandardStream.writeOutput(out)
        } else {
            StandardStream.writeOutput(table(rows, clocks: clocks))
        }
        return .ok
    }

    /// One line of the export: a stored reading, or a value the meter sent that could not be decoded.
    /// Both in one listing, because the export promises every record the gateway kept, with the reason
    /// when it is not uploaded; an undecodable one is that reason's extreme case (nothing but bytes).
    enum Row {
        case reading(StoredReading)
        case undecodable(StoredUndecodableValue)
    }

    static let undecodableExclusion = "undecodable"

    static func decimal(_ value: Double?, digits: Int) -> String? {
        guard let value, value.isFinite else { return nil }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = (value * scale).rounded()
        guard abs(scaled) < 9e18 else { return nil }
        let negative = scaled < 0
        let magnitude = Int64(abs(scaled))
        let whole = magnitude / Int64(scale)
        var text = String(whole)
        if digits > 0 {
            var fraction = String(magnitude % Int64(scale))
            while fraction.count < digits { fraction = "0" + fraction }
            text += "." + fraction
        }
        return negative ? "-" + text : text
    }

    /// The camelCase keys `--json` printed before its keys became snake_case (see `DeprecatedJSONKeys`).
    static let deprecatedKeys: KeyValuePairs<String, String> = [
        "meter_time": "meterTime", "local_time": "localTime", "base_time": "baseTime",
        "time_offset_minutes": "timeOffsetMinutes", "sample_location": "sampleLocation", "sensor_status": "sensorStatus",
        "received_at": "receivedAt",
    ]
    static let deprecatedContextKeys: KeyValuePairs<String, String> = [
        "carbohydrate_id": "carbohydrateID", "carbohydrate_grams": "carbohydrateGrams",
        "exercise_duration_seconds": "exerciseDurationSeconds", "exercise_intensity_percent": "exerciseIntensityPercent",
        "medication_id": "medicationID", "medication_amount": "medicationAmount", "medication_unit": "medicationUnit",
        "hba1c_percent": "hba1cPercent",
    ]

    static func jsonObject(_ row: Row, clocks: ReadingClocks = ReadingClocks()) -> JSONValue {
        switch row {
        case .reading(let stored):
            return jsonObject(stored, clock: clocks.clock(stored.reading), civilMeterTime: clocks.civilMeterTime(stored.reading))
        case .undecodable(let stored): return jsonObject(stored)
        }
    }

    /// Only what the gateway knows of an undecodable record; no id (its numbering is not the readings').
    static func jsonObject(_ stored: StoredUndecodableValue) -> JSONValue {
        let v = stored.value
        var o = JSONObjectBuilder()
        o.add("meter", v.meterAddress)
        o.add("sequence", v.sequence)
        o.add("exclusion", undecodableExclusion)
        o.add("characteristic", v.characteristic.rawValue)
        o.add("raw", hexString(v.raw))
        o.add("reason", v.reason)
        o.add("received_at", MeterCommandSupport.isoUTC(v.receivedAt))
        // The deprecated camelCase key, as on every row (`DeprecatedJSONKeys`).
        return DeprecatedJSONKeys.adding(deprecatedKeys, to: o.value)
    }

    /// `civilMeterTime`: `meter_time` is the meter's civil time with no offset (`ReadingClocks.civilMeterTime`).
    static func jsonObject(_ stored: StoredReading, clock: ReadingClock? = nil, civilMeterTime: Bool = false) -> JSONValue {
        let r = stored.reading
        var o = JSONObjectBuilder()
        o.add("id", stored.id)
        o.add("meter", r.meterAddress)
        o.add("sequence", r.sequence)
        o.add("time", r.instant.map(MeterCommandSupport.isoUTC))
        o.add("meter_time", civilMeterTime ? r.meterInstant.map { _ in r.userFacingTime.isoString } : r.meterInstant.map(MeterCommandSupport.isoUTC))
        o.add("local_time", r.userFacingTime.isoString)
        o.add("base_time", r.baseTime.isoString)
        o.add("time_offset_minutes", r.timeOffsetMinutes)
        o.add("analyte", r.analyte.rawValue)
        o.add("mgdl", decimal(r.mgdl, digits: 1).map(JSONValue.decimal))
        o.add("mmoll", decimal(r.mmoll, digits: 2).map(JSONValue.decimal))
        o.add("unit", r.unit.rawValue)
        o.add("special", r.special?.rawValue)
        o.add("type", r.type)
        o.add("sample_location", r.sampleLocation)
        o.add("sensor_status", r.sensorStatus)
        o.add("exclusion", r.exclusion?.rawValue)
        // Where the meter's clock history placed it (`ReadingClock`); absent when its time is the zone's.
        o.add("clock", clock.map(ReadingClocks.json))
        if let c = r.context {
            var ctx = JSONObjectBuilder()
            ctx.add("meal", c.meal)
            ctx.add("carbohydrate_id", c.carbohydrateID)
            ctx.add("carbohydrate_grams", decimal(c.carbohydrateKg.map { $0 * 1000 }, digits: 1).map(JSONValue.decimal))
            ctx.add("tester", c.tester)
            ctx.add("health", c.health)
            ctx.add("exercise_duration_seconds", c.exerciseDurationSeconds)
            ctx.add("exercise_intensity_percent", c.exerciseIntensityPercent)
            ctx.add("medication_id", c.medicationID)
            ctx.add("medication_amount", c.medicationAmount.map(JSONValue.double))
            ctx.add("medication_unit", c.medicationUnit)
            ctx.add("hba1c_percent", c.hba1cPercent.map(JSONValue.double))
            o.add("context", DeprecatedJSONKeys.adding(deprecatedContextKeys, to: ctx.value))
        }
        o.add("received_at", MeterCommandSupport.isoUTC(r.receivedAt))
        return DeprecatedJSONKeys.adding(deprecatedKeys, to: o.value)
    }

    static let csvHeader = [
        "id", "meter", "sequence", "time", "meter_time", "local_time", "base_time", "time_offset_min", "analyte",
        "mgdl", "mmoll", "unit", "special", "type", "sample_location", "sensor_status", "exclusion", "meal", "received_at",
        // Appended, so existing columns keep their positions; empty on readings.
        "characteristic", "raw", "reason",
    ]

    static func csvRow(_ row: Row, clocks: ReadingClocks = ReadingClocks()) -> [String] {
        switch row {
        case .reading(let stored): return csvRow(stored, civilMeterTime: clocks.civilMeterTime(stored.reading)) + ["", "", ""]
        case .undecodable(let stored):
            let v = stored.value
            var cells = [String](repeating: "", count: csvHeader.count)
            cells[1] = v.meterAddress
            cells[2] = v.sequence.map(String.init) ?? ""
            cells[16] = undecodableExclusion
            cells[18] = MeterCommandSupport.isoUTC(v.receivedAt)
            cells[19] = v.characteristic.rawValue
            cells[20] = hexString(v.raw)
            cells[21] = v.reason
            return cells
        }
    }

    static func csvRow(_ stored: StoredReading, civilMeterTime: Bool = false) -> [String] {
        let r = stored.reading
        let meterTime = civilMeterTime ? r.meterInstant.map { _ in r.userFacingTime.isoString } : r.meterInstant.map(MeterCommandSupport.isoUTC)
        return [
            String(stored.id), r.meterAddress, String(r.sequence),
            r.instant.map(MeterCommandSupport.isoUTC) ?? "", meterTime ?? "",
            r.userFacingTime.isoString, r.baseTime.isoString, String(r.timeOffsetMinutes), r.analyte.rawValue,
            decimal(r.mgdl, digits: 1) ?? "", decimal(r.mmoll, digits: 2) ?? "", r.unit.rawValue, r.special?.rawValue ?? "",
            r.type.map(String.init) ?? "", r.sampleLocation.map(String.init) ?? "", r.sensorStatus.map(String.init) ?? "",
            r.exclusion?.rawValue ?? "", r.context?.meal.map(String.init) ?? "", MeterCommandSupport.isoUTC(r.receivedAt),
        ]
    }

    static func csvField(_ text: String) -> String {
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacingQuotes() + "\""
    }

    static func value(_ r: NewReading) -> String {
        switch r.special {
        case .positiveInfinity?: return "HI"
        case .negativeInfinity?: return "LO"
        case let s?: return s.rawValue.uppercased()
        case nil: break
        }
        if r.analyte == .ketone { return (decimal(r.mmoll, digits: 1) ?? "?") + " mmol/L ketone" }
        if r.unit == .molePerLitre { return (decimal(r.mmoll, digits: 1) ?? "?") + " mmol/L" }
        return (decimal(r.mgdl, digits: 0) ?? "-") + " mg/dL"
    }

    static func table(_ readings: [Row], clocks: ReadingClocks = ReadingClocks()) -> String {
        if readings.isEmpty { return "no readings\n" }
        let rows = readings.map { row -> [String] in
            switch row {
            case .reading(let s):
                let r = s.reading
                let note = [r.exclusion.map { "not uploaded: \($0.rawValue)" }, clocks.clock(r)?.summary].compactMap { $0 }
                return [r.userFacingTime.isoString.replacingT(), r.meterAddress, String(r.sequence), value(r), note.joined(separator: "; ")]
            case .undecodable(let s):
                let v = s.value
                return ["-", v.meterAddress, v.sequence.map(String.init) ?? "-", "undecodable",
                        "not uploaded: \(v.characteristic) \(v.reason); bytes in --json"]
            }
        }
        return MeterCommandSupport.table(["METER TIME", "METER", "SEQ", "VALUE", "NOTE"], rows)
    }
}

extension String {
    fileprivate func replacingQuotes() -> String {
        var out = ""
        for c in self { out += c == "\"" ? "\"\"" : String(c) }
        return out
    }

    fileprivate func replacingT() -> String {
        String(map { $0 == "T" ? " " : $0 })
    }
}
