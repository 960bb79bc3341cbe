import GatewayCore
import GlucoseProfile
import Support

/// The Glucose Service of one simulated meter as a state machine with no clock and no bus: the
/// front ends feed it subscriptions and RACP writes and pull what the meter sends, one value at a time,
/// pacing the values themselves. Unit tests drive it directly.
///
/// Semantics (GLS 1.0.1; Cordio's server where the spec leaves room):
/// - "Report stored records" notifies every matching record on 0x2A18, oldest first, each followed (or
///   preceded, as a fault) by its 0x2A34 context when the record has one and 0x2A34 is subscribed, then
///   indicates `06 00 01 01`; nothing matching gives only `06 00 01 06`.
/// - "Report number of stored records" indicates `05 00 <count LE>`.
/// - "Abort" stops a running procedure and indicates `06 00 03 01`.
/// - A write while a procedure runs fails with ATT error 0x80 (except Abort); a write while RACP
///   indications are off, or "report records" while 0x2A18 notifications are off, fails with 0x81
///   (a meter with `MeterQuirks.racpWithoutIndications == .silent` accepts the former and never answers).
/// - Filters and "first"/"last record" apply to the numbers as stored, also on a meter that numbers
///   newest first (`MeterQuirks.numbering`): there "first record" is the newest.
public struct GlucoseServer: Sendable {
    /// What the meter sends.
    public enum Output: Sendable, Equatable {
        /// A notification (0x2A18, 0x2A34) or indication (0x2A52) with its value.
        case value(GATTUUID, [UInt8])
        /// The meter drops the link (a fault).
        case dropLink
    }

    /// ATT application errors of the Glucose Service.
    public struct ATTError: Error, Sendable, Equatable, CustomStringConvertible {
        public var code: UInt8
        public init(_ code: UInt8) { self.code = code }
        public static let procedureAlreadyInProgress = ATTError(0x80)
        public static let cccdImproperlyConfigured = ATTError(0x81)
        public var description: String { "ATT error 0x" + hexString([code]) }
    }

    public private(set) var meter: MeterDescription
    /// Characteristics whose notifications or indications the peer has enabled on this link.
    public private(set) var subscriptions: Set<GATTUUID> = []
    private var queue: [Output] = []
    private var dropsDone = 0
    private var generated = 0

    public init(meter: MeterDescription) {
        self.meter = meter
    }

    /// True while a RACP procedure has values left to send.
    public var isProcedureRunning: Bool { !queue.isEmpty }

    // MARK: Link

    public mutating func setSubscribed(_ uuid: GATTUUID, _ on: Bool) {
        if on { subscriptions.insert(uuid) } else { subscriptions.remove(uuid) }
    }

    /// The link went down: the running procedure ends silently and the client configuration resets.
    public mutating func linkDown() {
        queue.removeAll()
        subscriptions.removeAll()
    }

    // MARK: Reads

    /// The value of a readable characteristic, nil when it is not readable or absent.
    public func read(_ uuid: GATTUUID) -> [UInt8]? {
        if uuid == .glucoseFeature {
            return [UInt8(meter.features & 0xFF), UInt8(meter.features >> 8)]
        }
        for (u, text) in meter.deviceInformation.characteristics where u == uuid {
            return Array(text.utf8)
        }
        return nil
    }

    // MARK: Records

    /// Stores a record and keeps storage order: one with the number of a stored record replaces it in its
    /// place, a new one goes after the newest (after 65535 comes 0: the counter wraps, and the records
    /// before the wrap stay older). On a meter that numbers newest first, a record numbered 0 is a new
    /// measurement: every stored number goes up by one.
    public mutating func store(_ record: MeterRecord) {
        if meter.quirks.numbering != .newestFirst {
            if let i = meter.records.firstIndex(where: { $0.sequenceNumber == record.sequenceNumber }) {
                meter.records[i] = record
            } else {
                meter.records.append(record)
            }
            return
        }
        if record.sequenceNumber == 0 {
            meter.records = meter.records.map { r in
                var r = r
                r.sequenceNumber &+= 1
                r.context?.sequenceNumber = r.sequenceNumber
                return r
            }
            meter.faults.malformed = Dictionary(meter.faults.malformed.map { ($0.key &+ 1, $0.value) },
                                                uniquingKeysWith: { a, _ in a })
        }
        meter.records.removeAll { $0.sequenceNumber == record.sequenceNumber }
        meter.records.append(record)
        meter.records.sort { $0.sequenceNumber < $1.sequenceNumber }
    }

    /// The sequence number the next new record gets (last + 1, wrapping; 0 on an empty meter, and always 0
    /// on a meter that numbers newest first).
    public var nextSequenceNumber: UInt16 {
        if meter.quirks.numbering == .newestFirst { return 0 }
        guard let last = meter.records.last?.sequenceNumber else { return 0 }
        return last &+ 1
    }

    /// The newest record stored.
    var newestRecord: MeterRecord? {
        meter.quirks.numbering == .newestFirst ? meter.records.first : meter.records.last
    }

    /// Makes and stores the next record of the meter's new-record plan (or a default 120 mg/dL one),
    /// timed `minutesLater` after the newest record. Returns it, or nil once the plan's limit is reached.
    @discardableResult
    public mutating func addGeneratedRecord(minutesLater: Int = 5) -> MeterRecord? {
        if let limit = meter.newRecords?.limit, generated >= limit { return nil }
        let last = newestRecord
        let base = last?.baseTime.adding(minutes: max(1, minutesLater))
            ?? GlucoseDateTime(year: 2024, month: 1, day: 1, hour: 8, minute: 0, second: 0)
        guard let base else { return nil }
        let record = MeterRecord(
            sequenceNumber: nextSequenceNumber,
            baseTime: base,
            timeOffset: last?.timeOffset,
            result: .mgPerDL(meter.newRecords?.mgPerDL ?? 120),
            unit: last?.unit ?? .kilogramPerLitre
        )
        store(record)
        generated += 1
        return record
    }

    public mutating func setFaults(_ faults: MeterFaults) {
        meter.faults = faults
        dropsDone = 0
    }

    // MARK: RACP

    /// Handles a write to the Record Access Control Point. Returns the ATT error the write fails with,
    /// or queues the procedure's values and returns normally.
    public mutating func writeRACP(_ bytes: [UInt8]) throws(ATTError) {
        guard subscriptions.contains(.recordAccessControlPoint) else {
            // A meter that accepts the write and never answers (`MeterQuirks.RACPWithoutIndications.silent`).
            if meter.quirks.racpWithoutIndications == .silent { return }
            throw .cccdImproperlyConfigured
        }
        let opCode = bytes.first ?? 0
        if opCode == RACPOpCode.abortOperation.rawValue {
            queue.removeAll()
            queue.append(response(to: opCode, validateAbort(bytes)))
            return
        }
        guard queue.isEmpty else { throw .procedureAlreadyInProgress }
        switch opCode {
        case RACPOpCode.reportStoredRecords.rawValue:
            guard subscriptions.contains(.glucoseMeasurement) else { throw .cccdImproperlyConfigured }
            switch select(bytes) {
            case .refused(let code): queue.append(response(to: opCode, code))
            case .records(let records): queueReport(records)
            }
        case RACPOpCode.reportNumberOfStoredRecords.rawValue:
            switch select(bytes) {
            case .refused(let code): queue.append(response(to: opCode, code))
            case .records(let records):
                if records.isEmpty && meter.faults.zeroCountAsNoRecords {
                    queue.append(response(to: opCode, .noRecordsFound))
                } else {
                    let n = UInt16(clamping: records.count)
                    queue.append(.value(.recordAccessControlPoint, RACPResponse.numberOfRecords(n).encoded()))
                }
            }
        default:
            // Delete stored records and every reserved or server-to-client op code.
            queue.append(response(to: opCode, .opCodeNotSupported))
        }
    }

    /// The next value the meter sends, nil when idle. Values for characteristics the peer has since
    /// unsubscribed are skipped, as a server does not notify without a client configuration.
    public mutating func nextOutput() -> Output? {
        while !queue.isEmpty {
            let out = queue.removeFirst()
            switch out {
            case .dropLink:
                queue.removeAll()
                return out
            case .value(let uuid, _):
                if subscriptions.contains(uuid) { return out }
            }
        }
        return nil
    }

    private func response(to opCode: UInt8, _ code: RACPResponseCode) -> Output {
        .value(.recordAccessControlPoint,
               RACPResponse.response(requestOpCode: RACPOpCode(rawValue: opCode), code: code).encoded())
    }

    private func validateAbort(_ bytes: [UInt8]) -> RACPResponseCode {
        guard bytes.count >= 2, bytes[1] == RACPOperator.null.rawValue else { return .invalidOperator }
        guard bytes.count == 2 else { return .invalidOperand }
        return .success
    }

    private mutating func queueReport(_ records: [MeterRecord]) {
        let opCode = RACPOpCode.reportStoredRecords.rawValue
        guard !records.isEmpty else {
            queue.append(response(to: opCode, .noRecordsFound))
            return
        }
        let faults = meter.faults
        var sent = 0
        for record in records {
            if let n = faults.dropLinkAfter, sent == n, faults.dropLinkTimes.map({ dropsDone < $0 }) ?? true {
                dropsDone += 1
                queue.append(.dropLink)
                return
            }
            if let n = faults.failProcedureAfter, sent == n {
                queue.append(response(to: opCode, .procedureNotCompleted))
                return
            }
            let context: [UInt8]? = meter.hasContextCharacteristic ? record.contextBytes : nil
            var measurement = record.measurementBytes
            var stray: [UInt8]?
            switch faults.malformed[record.sequenceNumber] {
            case .truncated?: measurement = Array(measurement.prefix(5))
            case .invalidTime?: if measurement.count > 5 { measurement[5] = 13 }
            case .strayContext?:
                var c = GlucoseMeasurementContext(sequenceNumber: record.sequenceNumber ^ 0x8000)
                c.meal = 1
                stray = c.encoded()
            case .garbageContext?:
                stray = [0x01, UInt8(truncatingIfNeeded: record.sequenceNumber), UInt8(truncatingIfNeeded: record.sequenceNumber >> 8)]
            case nil: break
            }
            if let context, faults.contextOrder == .before { queue.append(.value(.glucoseMeasurementContext, context)) }
            queue.append(.value(.glucoseMeasurement, measurement))
            if let context, faults.contextOrder == .after { queue.append(.value(.glucoseMeasurementContext, context)) }
            if let stray { queue.append(.value(.glucoseMeasurementContext, stray)) }
            sent += 1
        }
        queue.append(response(to: opCode, .success))
    }

    /// Applies the operator and operand of a report or count request to the stored records.
    private func select(_ bytes: [UInt8]) -> Selection {
        guard bytes.count >= 2 else { return .refused(.invalidOperator) }
        let op = RACPOperator(rawValue: bytes[1])
        let operand = Array(bytes.dropFirst(2))
        let records = meter.records
        switch op {
        case .null:
            return .refused(.invalidOperator)
        case .allRecords, .firstRecord, .lastRecord:
            guard operand.isEmpty else { return .refused(.invalidOperand) }
            if op == .allRecords { return .records(records) }
            if op == .firstRecord { return .records(records.first.map { [$0] } ?? []) }
            return .records(records.last.map { [$0] } ?? [])
        case .lessThanOrEqual, .greaterThanOrEqual, .withinRange:
            let count = op == .withinRange ? 2 : 1
            guard let filterType = operand.first else { return .refused(.invalidOperand) }
            let values = Array(operand.dropFirst())
            switch filterType {
            case RACPFilterType.sequenceNumber.rawValue:
                guard values.count == 2 * count else { return .refused(.invalidOperand) }
                let a = UInt16(values[0]) | UInt16(values[1]) << 8
                let b = count == 2 ? UInt16(values[2]) | UInt16(values[3]) << 8 : a
                if op == .withinRange && a > b { return .refused(.invalidOperand) }
                return .records(records.filter { r in
                    switch op {
                    case .lessThanOrEqual: r.sequenceNumber <= a
                    case .greaterThanOrEqual: r.sequenceNumber >= a
                    default: r.sequenceNumber >= a && r.sequenceNumber <= b
                    }
                })
            case RACPFilterType.userFacingTime.rawValue:
                guard meter.supportsTimeFilter else { return .refused(.operandNotSupported) }
                guard values.count == 7 * count else { return .refused(.invalidOperand) }
                guard let a = try? GlucoseDateTime(bytes: values.prefix(7)) else { return .refused(.invalidOperand) }
                var b = a
                if count == 2 {
                    guard let upper = try? GlucoseDateTime(bytes: values.dropFirst(7)) else { return .refused(.invalidOperand) }
                    b = upper
                    if a.sortKey > b.sortKey { return .refused(.invalidOperand) }
                }
                return .records(records.filter { r in
                    let t = r.userFacingTime.sortKey
                    switch op {
                    case .lessThanOrEqual: return t <= a.sortKey
                    case .greaterThanOrEqual: return t >= a.sortKey
                    default: return t >= a.sortKey && t <= b.sortKey
                    }
                })
            default:
                return .refused(.operandNotSupported)
            }
        default:
            return .refused(.operatorNotSupported)
        }
    }
}

private enum Selection {
    case records([MeterRecord])
    case refused(RACPResponseCode)
}

extension GlucoseDateTime {
    /// A number that orders date-times chronologically (yyyyMMddHHmmss).
    var sortKey: Int {
        ((((year * 100 + month) * 100 + day) * 100 + hour) * 100 + minute) * 100 + second
    }
}
