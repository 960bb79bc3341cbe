import GatewayCore
import GlucoseProfile
import Support

/// `glucose-gateway decode CHARACTERISTIC HEX`: decodes one Glucose Service value from a capture (btmon,
/// Wireshark, nRF Connect) and prints it as one JSON object. Malformed input is exit 65 with one line on
/// stderr naming the field; an unknown characteristic is a usage error (64).
enum DecodeCommand: GatewayCommand {
    static let name = "decode"
    static let abstract = "Decode a Glucose Service value from a capture (hex) and print it as JSON"
    static let help = """
    usage: glucose-gateway decode [--compact] CHARACTERISTIC HEX...

    Decode one Glucose Service value and print it as a JSON object.

      CHARACTERISTIC  2a18 (Glucose Measurement), 2a34 (Glucose Measurement Context),
                      2a51 (Glucose Feature) or 2a52 (Record Access Control Point); also 0x2A18 or
                      the full 128-bit UUID 00002a18-0000-1000-8000-00805f9b34fb
      HEX             the value's bytes in hex, as btmon, Wireshark or nRF Connect print them:
                      "1b 34 12 ...", "1b:34:12:...", "(0x) 1B-34-12-...", "0x1b3412..."; several
                      arguments are joined
      --compact       print the object on one line

    Keys are snake_case and a key is left out when the value does not carry the field. mg_dl is rounded
    half away from zero to 1 decimal, mmol_l to 2, from the exact decimal value the meter sent
    (1 mmol/L = 18.0156 mg/dL). Times are the meter's wall clock, ISO 8601 without a zone.

    Exit status: 0 decoded, 64 usage error (unknown characteristic), 65 malformed hex or value.
    """
    static let options = OptionTable(flags: ["--compact"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let compact = arguments.flag("--compact")
        guard let characteristicText = arguments.positional() else {
            throw GatewayFailure(.usage, "missing CHARACTERISTIC and HEX (see glucose-gateway decode --help)")
        }
        var hexParts: [String] = []
        while let part = arguments.positional() { hexParts.append(part) }
        try arguments.finish()
        guard !hexParts.isEmpty else {
            throw GatewayFailure(.usage, "missing HEX (see glucose-gateway decode --help)")
        }
        let characteristic = try parseCharacteristic(characteristicText)
        let bytes = try parseHex(hexParts.joined(separator: " "))
        let json = try render(characteristic, bytes)
        StandardStream.writeOutput((compact ? json.compactText : json.prettyText) + "\n")
        return .ok
    }

    static let supported: [GATTUUID] = [
        .glucoseMeasurement, .glucoseMeasurementContext, .glucoseFeature, .recordAccessControlPoint,
    ]

    /// `2a18`, `2A18`, `0x2a18` or the 128-bit SIG-base form; anything else is a usage error.
    static func parseCharacteristic(_ text: String) throws(GatewayFailure) -> GATTUUID {
        var short = text.trimmingASCIISpaces()
        if short.hasPrefix("0x") || short.hasPrefix("0X") { short = String(short.dropFirst(2)) }
        guard let uuid = GATTUUID(string: short), supported.contains(uuid) else {
            throw GatewayFailure(
                .usage,
                "unknown characteristic '\(TerminalText.escaped(text, limit: 64))' (expected 2a18, 2a34, 2a51 or 2a52)"
            )
        }
        return uuid
    }

    /// Hex digits with optional separators (space, tab, `:`, `-`, `,`), an optional `0x` before any group
    /// and nRF Connect's `(0x)` marker. Odd digit counts and other characters are malformed data (65).
    static func parseHex(_ text: String) throws(GatewayFailure) -> [UInt8] {
        let scalars = Array(text.unicodeScalars)
        var nibbles: [UInt8] = []
        nibbles.reserveCapacity(scalars.count)
        var atGroupStart = true
        var i = 0
        while i < scalars.count {
            let c = scalars[i]
            switch c {
            case " ", "\t", "\n", "\r", ":", "-", ",":
                atGroupStart = true
                i += 1
                continue
            case "(":
                if i + 3 < scalars.count, scalars[i + 1] == "0", scalars[i + 2] == "x" || scalars[i + 2] == "X", scalars[i + 3] == ")" {
                    atGroupStart = true
                    i += 4
                    continue
                }
            case "0":
                if atGroupStart, i + 1 < scalars.count, scalars[i + 1] == "x" || scalars[i + 1] == "X" {
                    atGroupStart = false
                    i += 2
                    continue
                }
            default:
                break
            }
            guard let nibble = hexDigitValue(c.value) else {
                throw GatewayFailure(
                    .dataError,
                    "HEX has an invalid character \(describe(c)) at position \(i + 1) (expected hex digits, spaces or colons)"
                )
            }
            nibbles.append(nibble)
            atGroupStart = false
            i += 1
        }
        guard nibbles.count % 2 == 0 else {
            throw GatewayFailure(.dataError, "HEX has an odd number of hex digits (\(nibbles.count)); each byte needs two")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(nibbles.count / 2)
        var j = 0
        while j + 1 < nibbles.count {
            bytes.append(nibbles[j] << 4 | nibbles[j + 1])
            j += 2
        }
        return bytes
    }

    /// The JSON object for a value, or exit 65 naming the characteristic and the field.
    static func render(_ characteristic: GATTUUID, _ bytes: [UInt8]) throws(GatewayFailure) -> JSONValue {
        do throws(GlucoseDecodingError) {
            switch characteristic {
            case .glucoseMeasurement: return measurementJSON(try GlucoseMeasurement(bytes: bytes))
            case .glucoseMeasurementContext: return contextJSON(try GlucoseMeasurementContext(bytes: bytes))
            case .glucoseFeature: return featuresJSON(try GlucoseFeatures(bytes: bytes))
            default: return try racpJSON(bytes)
            }
        } catch {
            throw GatewayFailure(.dataError, "\(characteristic) \(error.description)")
        }
    }

    static func measurementJSON(_ m: GlucoseMeasurement) -> JSONValue {
        var o = JSONObjectBuilder()
        o.add("sequence", m.sequenceNumber)
        o.add("base_time", m.baseTime.isoString)
        o.add("user_facing_time", m.userFacingTime.isoString)
        o.add("time_offset_minutes", m.timeOffset)
        if let concentration = m.concentration {
            o.add("unit", m.unit.rawValue)
            o.add("concentration", number(concentration))
            o.add("concentration_special", concentration.specialName)
            o.add("mg_dl", GlucoseUnits.rounded(concentration, unit: m.unit, to: .mgPerDL).map { JSONValue.decimal($0.description) })
            o.add("mmol_l", GlucoseUnits.rounded(concentration, unit: m.unit, to: .mmolPerL).map { JSONValue.decimal($0.description) })
        }
        if let type = m.type {
            o.add("type", type)
            o.add("type_name", GlucoseMeasurement.typeName(type))
        }
        if let location = m.sampleLocation {
            o.add("sample_location", location)
            o.add("sample_location_name", GlucoseMeasurement.sampleLocationName(location))
        }
        if let status = m.sensorStatus {
            o.add("sensor_status_raw", status.rawValue)
            o.add("sensor_status", status.names)
        }
        o.add("context_follows", m.contextFollows)
        return o.value
    }

    static func contextJSON(_ c: GlucoseMeasurementContext) -> JSONValue {
        var o = JSONObjectBuilder()
        o.add("sequence", c.sequenceNumber)
        o.add("extended_flags", c.extendedFlags)
        o.add("carbohydrate_id", c.carbohydrateID)
        addAmount(&o, "carbohydrate_kg", c.carbohydrateKg)
        o.add("meal", c.meal)
        o.add("tester", c.tester)
        o.add("health", c.health)
        o.add("exercise_duration_s", c.exerciseDurationSeconds)
        o.add("exercise_intensity_pct", c.exerciseIntensityPercent)
        o.add("medication_id", c.medicationID)
        addAmount(&o, c.medicationUnit == .litres ? "medication_l" : "medication_kg", c.medication)
        addAmount(&o, "hba1c_pct", c.hba1cPercent)
        return o.value
    }

    static func featuresJSON(_ f: GlucoseFeatures) -> JSONValue {
        var o = JSONObjectBuilder()
        o.add("features_raw", f.rawValue)
        o.add("features", f.names)
        return o.value
    }

    static func racpJSON(_ bytes: [UInt8]) throws(GlucoseDecodingError) -> JSONValue {
        var o = JSONObjectBuilder()
        let opCode = RACPOpCode(rawValue: bytes.first ?? 0)
        if opCode.isResponse {
            let response = try RACPResponse(bytes: bytes)
            addOpCode(&o, opCode, RACPOperator(rawValue: bytes.count > 1 ? bytes[1] : 0))
            switch response {
            case let .numberOfRecords(count):
                o.add("number_of_records", count)
            case let .response(requestOpCode, code):
                o.add("request_opcode", requestOpCode.rawValue)
                o.add("response_code", code.rawValue)
                o.add("response_name", code.name ?? "reserved")
            }
            return o.value
        }
        let request = try RACPRequest(bytes: bytes)
        addOpCode(&o, request.opCode, request.operator)
        switch request.operand {
        case .none:
            break
        case let .sequenceNumber(min, max):
            o.add("filter_type", RACPFilterType.sequenceNumber.rawValue)
            o.add("operand_min", min)
            o.add("operand_max", max)
        case let .userFacingTime(min, max):
            o.add("filter_type", RACPFilterType.userFacingTime.rawValue)
            o.add("operand_min", min?.isoString)
            o.add("operand_max", max?.isoString)
        case let .other(filterType, operandBytes):
            o.add("filter_type", filterType.rawValue)
            o.add("operand_bytes", operandBytes.map { hexString([$0]) }.joined(separator: " "))
        }
        return o.value
    }

    private static func addOpCode(_ o: inout JSONObjectBuilder, _ opCode: RACPOpCode, _ op: RACPOperator) {
        o.add("opcode", opCode.rawValue)
        o.add("opcode_name", opCode.name ?? "reserved")
        o.add("operator", op.rawValue)
        o.add("operator_name", op.name ?? "reserved")
    }

    /// An SFLOAT as its exact decimal, or null when it is a special value.
    private static func number(_ value: SFloat) -> JSONValue {
        value.decimalString.map(JSONValue.decimal) ?? .null
    }

    /// An optional SFLOAT amount; a special value is null plus `<key>_special`.
    private static func addAmount(_ o: inout JSONObjectBuilder, _ key: String, _ value: SFloat?) {
        guard let value else { return }
        o.add(key, number(value))
        o.add(key + "_special", value.specialName)
    }

    /// A character for an error line: printable ASCII quoted, anything else as U+XXXX.
    private static func describe(_ c: Unicode.Scalar) -> String {
        if c.value >= 0x21 && c.value < 0x7F { return "'\(Character(c))'" }
        let hex = String(c.value, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }
}

extension String {
    fileprivate func trimmingASCIISpaces() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" { s.removeLast() }
        return String(s)
    }
}
