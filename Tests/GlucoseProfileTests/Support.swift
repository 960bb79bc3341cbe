import GlucoseProfile
import TestSupport

/// `"1B 01 00"` or `"1b:01:00"` to bytes; test inputs only.
func hex(_ text: String) -> [UInt8] {
    let digits = text.filter { $0.isHexDigit }
    var bytes: [UInt8] = []
    var index = digits.startIndex
    while index < digits.endIndex {
        let next = digits.index(index, offsetBy: 2)
        bytes.append(UInt8(digits[index..<next], radix: 16) ?? 0)
        index = next
    }
    return bytes
}

func date(_ y: Int, _ mo: Int, _ d: Int, _ h: Int = 0, _ mi: Int = 0, _ s: Int = 0) -> GlucoseDateTime {
    GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: s)
        ?? GlucoseDateTime(year: 2000, month: 1, day: 1, hour: 0, minute: 0, second: 0)!
}

/// The error a decode throws, or nil when it succeeds.
func decodingError<T>(_ body: () throws(GlucoseDecodingError) -> T) -> GlucoseDecodingError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}

/// Valid values of every type, for round trips and as seeds for mutation.
struct Generator {
    var rng: SplitMix

    mutating func dateTime() -> GlucoseDateTime {
        let year = 1582 + rng.below(9999 - 1582 + 1)
        let month = 1 + rng.below(12)
        let day = 1 + rng.below(GlucoseDateTime.daysInMonth(year: year, month: month))
        return GlucoseDateTime(year: year, month: month, day: day, hour: rng.below(24), minute: rng.below(60), second: rng.below(60))
            ?? date(2024, 1, 1)
    }

    mutating func sfloat() -> SFloat { SFloat(bits: rng.uint16()) }

    mutating func measurement() -> GlucoseMeasurement {
        var m = GlucoseMeasurement(sequenceNumber: rng.uint16(), baseTime: dateTime())
        if rng.chance(70) { m.timeOffset = Int16(truncatingIfNeeded: rng.uint16()) }
        m.unit = rng.chance(50) ? .molePerLitre : .kilogramPerLitre
        if rng.chance(80) {
            m.concentration = sfloat()
            m.type = rng.byte() & 0x0F
            m.sampleLocation = rng.byte() & 0x0F
        }
        if rng.chance(50) { m.sensorStatus = SensorStatus(rawValue: rng.uint16()) }
        m.contextFollows = rng.chance(50)
        return m
    }

    mutating func context() -> GlucoseMeasurementContext {
        var c = GlucoseMeasurementContext(sequenceNumber: rng.uint16())
        if rng.chance(30) { c.extendedFlags = rng.byte() }
        if rng.chance(50) { c.carbohydrateID = rng.byte(); c.carbohydrateKg = sfloat() }
        if rng.chance(50) { c.meal = rng.byte() }
        if rng.chance(50) { c.tester = rng.byte() & 0x0F; c.health = rng.byte() & 0x0F }
        if rng.chance(50) { c.exerciseDurationSeconds = rng.uint16(); c.exerciseIntensityPercent = rng.byte() }
        if rng.chance(50) { c.medicationID = rng.byte(); c.medication = sfloat() }
        c.medicationUnit = rng.chance(50) ? .litres : .kilograms
        if rng.chance(50) { c.hba1cPercent = sfloat() }
        return c
    }

    mutating func request() -> RACPRequest {
        let opCodes: [RACPOpCode] = [.reportStoredRecords, .deleteStoredRecords, .abortOperation, .reportNumberOfStoredRecords]
        let opCode = opCodes[rng.below(opCodes.count)]
        if opCode == .abortOperation { return .abort }
        let op = RACPOperator(rawValue: UInt8(rng.below(8)))
        var operand = RACPOperand.none
        switch op {
        case .lessThanOrEqual, .greaterThanOrEqual, .withinRange:
            let min = op != .lessThanOrEqual
            let max = op != .greaterThanOrEqual
            switch rng.below(3) {
            case 0: operand = .sequenceNumber(min: min ? rng.uint16() : nil, max: max ? rng.uint16() : nil)
            case 1: operand = .userFacingTime(min: min ? dateTime() : nil, max: max ? dateTime() : nil)
            default:
                operand = .other(filterType: RACPFilterType(rawValue: UInt8(3 + rng.below(253))), bytes: (0..<rng.below(5)).map { _ in rng.byte() })
            }
        case .null, .allRecords, .firstRecord, .lastRecord:
            break
        default:
            if rng.chance(50) {
                operand = .other(filterType: RACPFilterType(rawValue: rng.byte()), bytes: (0..<rng.below(5)).map { _ in rng.byte() })
            }
        }
        return RACPRequest(opCode: opCode, operator: op, operand: operand)
    }

    mutating func response() -> RACPResponse {
        rng.chance(50)
            ? .numberOfRecords(rng.uint16())
            : .response(requestOpCode: RACPOpCode(rawValue: rng.byte()), code: RACPResponseCode(rawValue: rng.byte()))
    }
}
