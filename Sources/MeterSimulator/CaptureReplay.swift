import GatewayCore
import GlucoseProfile
import MeterCapture

/// A capture played back as a meter (`--meter CAPTURE`): the Device Information strings and features it
/// read, a clock of the kind it read, and every record it received, each with the measurement and
/// context bytes exactly as captured. The records answer any report the gateway asks for (all, from a
/// sequence number on, a count), so an incremental sync works too; the gap between values is the
/// capture's median one. Not replayed: a vendor clock (a capture writes no clock), the meter's PIN (the
/// simulator's 123456), faults beyond the order of context and measurement.
extension MeterDescription {
    public init(replaying capture: Capture) throws(CaptureError) {
        var records: [MeterRecord] = []
        var index: [UInt16: Int] = [:]
        var contextFirst = 0
        var contextAfter = 0
        var pendingContexts: [UInt16: [UInt8]] = [:]
        var gaps: [Int64] = []
        var previousValue: Int64?
        var sawContext = false
        for (i, event) in capture.events.enumerated() where event.kind == .value {
            guard let uuid = event.uuid, let value = event.value else { continue }
            guard uuid == .glucoseMeasurement || uuid == .glucoseMeasurementContext else { continue }
            if let previousValue { gaps.append(event.milliseconds - previousValue) }
            previousValue = event.milliseconds
            // A value too short to carry a sequence number cannot be placed among the records.
            guard value.count >= 3 else { continue }
            let sequence = UInt16(value[1]) | UInt16(value[2]) << 8
            if uuid == .glucoseMeasurementContext {
                sawContext = true
                if let at = index[sequence] {
                    records[at].rawContext = value
                    contextAfter += 1
                } else {
                    pendingContexts[sequence] = value
                }
                continue
            }
            guard index[sequence] == nil else {
                throw CaptureError("events[\(i)]", "a second measurement with sequence number \(sequence)")
            }
            var record = Self.record(sequence: sequence, bytes: value)
            if let context = pendingContexts.removeValue(forKey: sequence) {
                record.rawContext = context
                contextFirst += 1
            }
            index[sequence] = records.count
            records.append(record)
        }
        // A meter that numbers newest first (0 the newest record) reports ascending numbers with
        // descending times.
        let ascending = records.sorted { $0.sequenceNumber < $1.sequenceNumber }
        let newestFirst = ascending.count > 1
            && zip(ascending, ascending.dropFirst()).allSatisfy { $1.userFacingTime < $0.userFacingTime }
        // The strings as the meter sent them, padding and all.
        let text = { (uuid: GATTUUID) in capture.readValue(uuid).map { String(decoding: $0, as: UTF8.self) } }
        var info = DeviceInformation(manufacturer: text(.manufacturerName), model: text(.modelNumber), serial: nil,
                                     firmware: text(.firmwareRevision), software: text(.softwareRevision))
        if info.manufacturer == nil, info.model == nil { info.model = "captured meter" }
        var features: UInt16 = 0x0020 | 0x0400
        if let f = capture.readValue(.glucoseFeature), f.count >= 2 {
            features = UInt16(f[0]) | UInt16(f[1]) << 8
        }
        let read = { (uuid: GATTUUID) in capture.readValue(uuid) != nil }
        let clock: MeterClock = read(.currentTime) ? MeterClock(kind: .currentTime, writable: false)
            : read(.dateTime) ? MeterClock(kind: .glsDateTime, writable: false) : .none
        var faults = MeterFaults()
        if contextFirst > contextAfter { faults.contextOrder = .before }
        let sortedGaps = gaps.sorted()
        if !sortedGaps.isEmpty {
            // At most a second: a capture's pauses (a meter thinking) are not what a replay tests.
            faults.notificationDelay = Double(min(sortedGaps[sortedGaps.count / 2], 1000)) / 1000
        }
        let address = Capture.placeholderAddress
        self.init(address: address, name: "capture+" + address.filter { $0 != ":" }.suffix(8), passkey: 123456,
                  deviceInformation: info, features: features,
                  hasContextCharacteristic: sawContext || capture.events.contains { $0.kind == .subscribe && $0.uuid == .glucoseMeasurementContext && $0.error == nil },
                  records: records, faults: faults, clock: clock,
                  quirks: MeterQuirks(numbering: newestFirst ? .newestFirst : .oldestFirst))
    }

    /// A record that sends `bytes` as they are; its fields, for the report's filters and `Describe`,
    /// from decoding them where they decode.
    static func record(sequence: UInt16, bytes: [UInt8]) -> MeterRecord {
        let fallbackTime = GlucoseDateTime(year: 2000, month: 1, day: 1, hour: 0, minute: 0, second: 0)
            ?? GlucoseDateTime(naiveSeconds: 0)
        guard case let .success(m) = GlucoseMeasurement.decode(bytes) else {
            return MeterRecord(sequenceNumber: sequence, baseTime: fallbackTime, result: .absent, rawMeasurement: bytes)
        }
        return MeterRecord(sequenceNumber: sequence, baseTime: m.baseTime, timeOffset: m.timeOffset,
                           result: m.concentration.map(MeterRecord.Result.sfloat) ?? .absent, unit: m.unit,
                           type: m.type ?? 1, sampleLocation: m.sampleLocation ?? 1,
                           sensorStatus: m.sensorStatus.map(\.rawValue), rawMeasurement: bytes)
    }
}
