import GatewayCore

/// `--redact-values`: the glucose values and the times taken out of a capture, the layout of every value
/// kept (flags, sequence numbers, types, status bits, lengths), so the capture still shows how the meter
/// speaks. A concentration becomes SFLOAT NaN (a reading nobody can mistake for a real one: the gateway
/// stores none from it), a time 2000-01-01 00:00:00, a time offset 0; a context's carbohydrate,
/// exercise, medication and HbA1c values NaN or 0. Bytes a value announces but does not hold (a cut-short
/// value) are set to 0 after its sequence number: nothing of a value is kept unread.
extension Capture {
    public static let redactedTime: [UInt8] = [0xD0, 0x07, 1, 1, 0, 0, 0]
    static let nanSFloat: [UInt8] = [0xFF, 0x07]

    /// The events with every glucose value and time replaced.
    public static func redactingValues(_ events: [CaptureEvent]) -> [CaptureEvent] {
        events.map { event in
            guard let uuid = event.uuid, var value = event.value, event.kind == .value || event.kind == .read else { return event }
            switch uuid {
            case .glucoseMeasurement: redactMeasurement(&value)
            case .glucoseMeasurementContext: redactContext(&value)
            case .currentTime, .dateTime: overwrite(&value, at: 0, with: redactedTime)
            default: return event
            }
            var copy = event
            copy.value = value
            return copy
        }
    }

    /// 0x2A18: flags, sequence number, base time, [time offset], [concentration, type and location], [status].
    static func redactMeasurement(_ value: inout [UInt8]) {
        guard let flags = value.first else { return }
        var fields: [(Int, [UInt8])] = [(3, redactedTime)]
        var end = 10
        if flags & 0x01 != 0 { fields.append((end, [0, 0])); end += 2 }
        if flags & 0x02 != 0 { fields.append((end, nanSFloat)); end += 3 }
        if flags & 0x08 != 0 { end += 2 }
        guard value.count >= end else { zeroAfterSequence(&value); return }
        for (offset, bytes) in fields { overwrite(&value, at: offset, with: bytes) }
    }

    /// 0x2A34: flags, sequence number, [extended flags], [carbohydrate id, value], [meal], [tester and
    /// health], [exercise duration, intensity], [medication id, value], [HbA1c].
    static func redactContext(_ value: inout [UInt8]) {
        guard let flags = value.first else { return }
        var fields: [(Int, [UInt8])] = []
        var end = 3
        if flags & 0x80 != 0 { end += 1 }
        if flags & 0x01 != 0 { fields.append((end + 1, nanSFloat)); end += 3 }
        if flags & 0x02 != 0 { end += 1 }
        if flags & 0x04 != 0 { end += 1 }
        if flags & 0x08 != 0 { fields.append((end, [0, 0, 0])); end += 3 }
        if flags & 0x10 != 0 { fields.append((end + 1, nanSFloat)); end += 3 }
        if flags & 0x40 != 0 { fields.append((end, nanSFloat)); end += 2 }
        guard value.count >= end else { zeroAfterSequence(&value); return }
        for (offset, bytes) in fields { overwrite(&value, at: offset, with: bytes) }
    }

    static func zeroAfterSequence(_ value: inout [UInt8]) {
        for i in value.indices where i >= 3 { value[i] = 0 }
    }

    /// Writes `bytes` at `offset` as far as the value reaches.
    static func overwrite(_ value: inout [UInt8], at offset: Int, with bytes: [UInt8]) {
        for (i, byte) in bytes.enumerated() where offset + i < value.count { value[offset + i] = byte }
    }
}
