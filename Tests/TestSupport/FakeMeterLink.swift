import GatewayCore
import GlucoseProfile
import Synchronization

/// One record in a scripted meter's memory.
public struct FakeRecord: Sendable, Equatable {
    public enum ContextPlacement: Sendable, Equatable {
        /// The context follows its measurement (the specification's order).
        case after
        /// The context is sent before its measurement.
        case before
        /// The measurement says a context follows, but none is ever sent.
        case missing
    }

    public var measurement: [UInt8]
    public var context: [UInt8]?
    public var placement: ContextPlacement
    public var sequence: UInt16

    public init(measurement: GlucoseMeasurement, context: GlucoseMeasurementContext? = nil, placement: ContextPlacement = .after) {
        var m = measurement
        if context != nil || placement == .missing { m.contextFollows = true }
        self.measurement = m.encoded()
        self.context = context?.encoded()
        self.placement = placement
        self.sequence = measurement.sequenceNumber
    }

    /// A record from raw bytes (for values the codec would not encode, e.g. an invalid base time).
    public init(rawMeasurement: [UInt8], sequence: UInt16, rawContext: [UInt8]? = nil, placement: ContextPlacement = .after) {
        self.measurement = rawMeasurement
        self.context = rawContext
        self.placement = placement
        self.sequence = sequence
    }

    /// A plain capillary-plasma glucose record in mg/dL (kg/L on the wire).
    public static func glucose(
        _ sequence: UInt16, mgdl: Int = 100, at time: GlucoseDateTime = FakeRecord.defaultTime, offset: Int16? = 0,
        status: SensorStatus? = nil, context: GlucoseMeasurementContext? = nil
    ) -> FakeRecord {
        let measurement = GlucoseMeasurement(
            sequenceNumber: sequence, baseTime: time.adding(minutes: Int(sequence)), timeOffset: offset,
            concentration: .value(mantissa: Int16(clamping: mgdl), exponent: -5), unit: .kilogramPerLitre,
            type: 2, sampleLocation: 1, sensorStatus: status
        )
        return FakeRecord(measurement: measurement, context: context)
    }

    public static let defaultTime = GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 8, minute: 0, second: 0)
        ?? GlucoseDateTime(year: 2000, month: 1, day: 1, hour: 0, minute: 0, second: 0)!
}

/// What the scripted meter does, and how it misbehaves.
public struct FakeMeterScript: Sendable {
    public var records: [FakeRecord] = []
    public var characteristics: Set<GATTUUID> = [
        .glucoseMeasurement, .glucoseMeasurementContext, .glucoseFeature, .recordAccessControlPoint,
        .manufacturerName, .modelNumber, .serialNumber, .firmwareRevision,
    ]
    public var manufacturer = "Acme Diagnostics"
    public var model = "GL-1"
    public var serial = "SN0001"
    public var firmware = "1.0"
    public var features: UInt16 = 0x0400
    /// Value of 0x2A2B (10 bytes) or 0x2A08 (7 bytes); add the UUID to `characteristics` too. For the
    /// vendor clock 0xFFF1, the 7-byte Date Time its answers carry. A write the meter takes replaces it.
    public var clockValue: [UInt8]?
    /// Clock characteristics that take writes (0x2A2B, 0x2A08, 0xFFF1); the others refuse with ATT 0x03.
    public var writableClocks: Set<GATTUUID> = []
    /// Whether the vendor clock answers a command (`05 00 00 00` and its Date Time) when subscribed.
    public var vendorClockAnswers = true
    /// Drops the link after sending this many records (per link; counts measurements).
    public var disconnectAfterRecords: Int?
    /// Goes silent (no more notifications, no RACP response) after this many records.
    public var silentAfterRecords: Int?
    /// Called as each subscription is made, before it takes effect (a test advances its manual clock here
    /// for a switch-on that takes time).
    public var onSubscribe: (@Sendable (GATTUUID) -> Void)?
    /// Characteristics whose subscription the meter refuses (ATT 0x0E).
    public var refusedSubscriptions: Set<GATTUUID> = []
    /// ATT errors thrown by the next RACP writes, in order (0 = no error for that write).
    public var racpWriteErrors: [UInt8] = []
    /// Refuses RACP writes with ATT 0x81 until RACP indications are enabled.
    public var requireIndications = true
    /// Answers "report number" with `06 00 04 02` (op code not supported).
    public var countUnsupported = false
    /// Answers "report stored records" with the last-record operator as not supported.
    public var lastRecordUnsupported = false
    /// Refuses the `>=` sequence filter (operator not supported).
    public var greaterOrEqualUnsupported = false
    /// Sends every measurement twice.
    public var duplicateNotifications = false
    /// Answers a report with "success" first and keeps its records until the test calls
    /// `deliverLateRecords()` on the link (a BlueZ peripheral batching notifications, or EATT bearers).
    public var responseBeforeRecords = false
    /// An RACP indication sent first when a report starts (a stray count answer, as a confused meter might).
    public var indicationBeforeReport: [UInt8]?
    /// Records added to memory right after the meter answers its first count request in a link.
    public var recordsArrivingAfterCount: [FakeRecord] = []
    /// The whole memory right after the meter answers its first count request in a link (a meter that
    /// numbers newest first renumbers every record when one is added).
    public var memoryAfterCount: [FakeRecord]?
    /// Answers every count request with this number instead of the records it holds.
    public var countAnswer: UInt16?
    /// Ends every report with "success" after this many of its records (the rest are never sent).
    public var successAfterRecords: Int?

    public init(records: [FakeRecord] = []) {
        self.records = records
    }

    /// A Current Time (0x2A2B) value.
    public static func currentTime(_ t: GlucoseDateTime) -> [UInt8] {
        [UInt8(t.year & 0xFF), UInt8(t.year >> 8), UInt8(t.month), UInt8(t.day), UInt8(t.hour), UInt8(t.minute), UInt8(t.second), 1, 0, 0]
    }

    /// A Date Time (0x2A08) value.
    public static func dateTime(_ t: GlucoseDateTime) -> [UInt8] {
        Array(currentTime(t).prefix(7))
    }
}

/// A scripted Glucose Service meter. Each `connect()` gives a fresh link onto the same memory, so tests
/// can run several sessions (interrupted, resumed, after a counter reset) against one meter.
public final class FakeMeter: Sendable {
    public let address: String
    private let state: Mutex<FakeMeterScript>
    private let calls = Mutex<[String]>([])

    public init(address: String = "AA:BB:CC:DD:EE:01", script: FakeMeterScript) {
        self.address = address
        self.state = Mutex(script)
    }

    public var script: FakeMeterScript {
        get { state.withLock { $0 } }
    }

    public func update(_ body: @Sendable (inout FakeMeterScript) -> Void) {
        state.withLock { body(&$0) }
    }

    /// Every call the links made, in order: `read 0x2a51`, `subscribe 0x2a18`, `write 01 01`, ...
    public var callLog: [String] { calls.withLock { $0 } }

    func record(_ call: String) { calls.withLock { $0.append(call) } }

    public func connect() -> FakeMeterLink {
        FakeMeterLink(meter: self)
    }

    func withScript<T>(_ body: (inout FakeMeterScript) -> T) -> T {
        state.withLock { body(&$0) }
    }
}

/// A link to a `FakeMeter`, implementing `MeterLink`. RACP requests are answered synchronously: the
/// notifications and the response indication are queued on `events` before `write` returns.
public final class FakeMeterLink: MeterLink {
    public let meter: FakeMeter
    public let events: AsyncStream<MeterLinkEvent>
    private let continuation: AsyncStream<MeterLinkEvent>.Continuation

    private struct LinkState {
        var connected = true
        var subscribed: Set<GATTUUID> = []
        var recordsSent = 0
        var silent = false
        var countAnswered = false
        var late: [FakeRecord] = []
    }
    private let state = Mutex(LinkState())

    init(meter: FakeMeter) {
        self.meter = meter
        (events, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    public var address: String { meter.address }

    public var isConnected: Bool { state.withLock { $0.connected } }
    public var subscriptions: Set<GATTUUID> { state.withLock { $0.subscribed } }

    public func hasCharacteristic(_ uuid: GATTUUID) async -> Bool {
        meter.script.characteristics.contains(uuid)
    }

    public func read(_ uuid: GATTUUID) async throws(MeterLinkError) -> [UInt8] {
        meter.record("read \(uuid)")
        try checkConnected()
        let script = meter.script
        guard script.characteristics.contains(uuid) else { throw MeterLinkError(.notSupported, "no characteristic \(uuid)") }
        switch uuid {
        case .glucoseFeature: return [UInt8(script.features & 0xFF), UInt8(script.features >> 8)]
        case .manufacturerName: return Array(script.manufacturer.utf8)
        case .modelNumber: return Array(script.model.utf8)
        case .serialNumber: return Array(script.serial.utf8)
        case .firmwareRevision: return Array(script.firmware.utf8)
        case .currentTime, .dateTime:
            guard let value = script.clockValue else { throw MeterLinkError(.permanent, "Operation failed with ATT error: 0x0e", attError: 0x0E) }
            return value
        default: throw MeterLinkError(.permanent, "Not readable", attError: 0x02)
        }
    }

    public func subscribe(_ uuid: GATTUUID) async throws(MeterLinkError) {
        meter.record("subscribe \(uuid)")
        meter.script.onSubscribe?(uuid)
        try checkConnected()
        guard meter.script.characteristics.contains(uuid) else { throw MeterLinkError(.notSupported, "no characteristic \(uuid)") }
        if meter.script.refusedSubscriptions.contains(uuid) {
            throw MeterLinkError(.permanent, "Operation failed with ATT error: 0x0e", attError: 0x0E)
        }
        state.withLock { _ = $0.subscribed.insert(uuid) }
    }

    public func unsubscribe(_ uuid: GATTUUID) async {
        meter.record("unsubscribe \(uuid)")
        state.withLock { _ = $0.subscribed.remove(uuid) }
    }

    public func disconnect() async {
        meter.record("disconnect")
        let wasConnected = state.withLock { s in
            defer { s.connected = false; s.subscribed.removeAll() }
            return s.connected
        }
        if wasConnected {
            continuation.yield(.disconnected(reason: "local"))
            continuation.finish()
        }
    }

    public func write(_ uuid: GATTUUID, _ value: [UInt8]) async throws(MeterLinkError) {
        if uuid != .recordAccessControlPoint, meter.script.characteristics.contains(uuid) { return try writeClock(uuid, value) }
        meter.record("write " + value.map { hex($0) }.joined(separator: " "))
        try checkConnected()
        guard uuid == .recordAccessControlPoint else { throw MeterLinkError(.permanent, "Write not permitted", attError: 0x03) }
        let scripted: UInt8? = meter.withScript { s in s.racpWriteErrors.isEmpty ? nil : s.racpWriteErrors.removeFirst() }
        if let code = scripted, code != 0 {
            throw MeterLinkError(.permanent, "Operation failed with ATT error: 0x\(hex(code))", attError: code)
        }
        let subscribed = state.withLock { $0.subscribed }
        if meter.script.requireIndications, !subscribed.contains(.recordAccessControlPoint) {
            throw MeterLinkError(.permanent, "Operation failed with ATT error: 0x81", attError: 0x81)
        }
        guard let request = try? RACPRequest(bytes: value) else {
            indicate(RACPResponse.response(requestOpCode: RACPOpCode(rawValue: value.first ?? 0), code: .opCodeNotSupported))
            return
        }
        answer(request)
    }

    private func answer(_ request: RACPRequest) {
        let script = meter.script
        switch request.opCode {
        case .reportNumberOfStoredRecords:
            if script.countUnsupported {
                indicate(.response(requestOpCode: request.opCode, code: .opCodeNotSupported))
                return
            }
            let n = select(request, in: script.records)?.count ?? 0
            indicate(.numberOfRecords(script.countAnswer ?? UInt16(clamping: n)))
            let first = state.withLock { s in
                defer { s.countAnswered = true }
                return !s.countAnswered
            }
            if first, let memory = script.memoryAfterCount {
                meter.withScript { s in
                    s.records = memory
                    s.memoryAfterCount = nil
                }
            }
            if first, !script.recordsArrivingAfterCount.isEmpty {
                meter.withScript { s in
                    s.records.append(contentsOf: s.recordsArrivingAfterCount)
                    s.recordsArrivingAfterCount = []
                }
            }
        case .reportStoredRecords:
            if request.operator == .lastRecord, script.lastRecordUnsupported {
                indicate(.response(requestOpCode: request.opCode, code: .operatorNotSupported))
                return
            }
            if request.operator == .greaterThanOrEqual, script.greaterOrEqualUnsupported {
                indicate(.response(requestOpCode: request.opCode, code: .operatorNotSupported))
                return
            }
            guard let selected = select(request, in: script.records) else {
                indicate(.response(requestOpCode: request.opCode, code: .invalidOperator))
                return
            }
            if selected.isEmpty {
                indicate(.response(requestOpCode: request.opCode, code: .noRecordsFound))
                return
            }
            if script.responseBeforeRecords {
                indicate(.response(requestOpCode: request.opCode, code: .success))
                state.withLock { $0.late = selected }
                return
            }
            if let stray = script.indicationBeforeReport {
                let on = state.withLock { $0.subscribed.contains(.recordAccessControlPoint) }
                if on { continuation.yield(.value(.recordAccessControlPoint, stray)) }
            }
            let subscribed = state.withLock { $0.subscribed }
            for record in selected.prefix(script.successAfterRecords ?? selected.count) {
                guard send(record, subscribed: subscribed, script: script) else { return }
            }
            indicate(.response(requestOpCode: request.opCode, code: .success))
        case .abortOperation:
            indicate(.response(requestOpCode: request.opCode, code: .success))
        case .deleteStoredRecords:
            meter.record("DELETE REQUESTED")
            indicate(.response(requestOpCode: request.opCode, code: .opCodeNotSupported))
        default:
            indicate(.response(requestOpCode: request.opCode, code: .opCodeNotSupported))
        }
    }

    /// A write to a clock characteristic, logged as `write 0x2a2b: e8 07 ...`.
    private func writeClock(_ uuid: GATTUUID, _ value: [UInt8]) throws(MeterLinkError) {
        meter.record("write \(uuid): " + value.map { hex($0) }.joined(separator: " "))
        try checkConnected()
        let script = meter.script
        if uuid == .isensVendorClock || uuid == .isensVendorClockV15 {
            guard value.count == 11, value.prefix(4) == [0xC0, 0x03, 0x01, 0x00] else {
                throw MeterLinkError(.permanent, "Operation failed with ATT error: 0x80", attError: 0x80)
            }
            let date = Array(value[4...])
            if !date.allSatisfy({ $0 == 0 }) {
                guard script.writableClocks.contains(uuid) else {
                    throw MeterLinkError(.permanent, "Operation failed with ATT error: 0x80", attError: 0x80)
                }
                meter.withScript { $0.clockValue = date }
            }
            let answer = meter.script.clockValue
            if script.vendorClockAnswers, state.withLock({ $0.subscribed.contains(uuid) }), let answer {
                continuation.yield(.value(uuid, [0x05, 0x00, 0x00, 0x00] + answer))
            }
            return
        }
        guard script.writableClocks.contains(uuid) else { throw MeterLinkError(.permanent, "Write not permitted", attError: 0x03) }
        meter.withScript { $0.clockValue = value }
    }

    /// Sends the records held back by `responseBeforeRecords`, if the link is still up and subscribed.
    public func deliverLateRecords() {
        let (late, connected, subscribed) = state.withLock { s in
            defer { s.late = [] }
            return (s.late, s.connected, s.subscribed)
        }
        guard connected else { return }
        let script = meter.script
        for record in late {
            guard send(record, subscribed: subscribed, script: script) else { return }
        }
    }

    /// Sends one record; false when the link dropped or went silent.
    private func send(_ record: FakeRecord, subscribed: Set<GATTUUID>, script: FakeMeterScript) -> Bool {
        let sent = state.withLock { $0.recordsSent }
        if let n = script.disconnectAfterRecords, sent >= n {
            state.withLock { $0.connected = false; $0.subscribed.removeAll() }
            continuation.yield(.disconnected(reason: "remote"))
            continuation.finish()
            return false
        }
        if let n = script.silentAfterRecords, sent >= n {
            state.withLock { $0.silent = true }
            return false
        }
        let contextOn = subscribed.contains(.glucoseMeasurementContext)
        if let context = record.context, record.placement == .before, contextOn {
            continuation.yield(.value(.glucoseMeasurementContext, context))
        }
        if subscribed.contains(.glucoseMeasurement) {
            continuation.yield(.value(.glucoseMeasurement, record.measurement))
            if script.duplicateNotifications {
                continuation.yield(.value(.glucoseMeasurement, record.measurement))
            }
        }
        if let context = record.context, record.placement == .after, contextOn {
            continuation.yield(.value(.glucoseMeasurementContext, context))
        }
        state.withLock { $0.recordsSent += 1 }
        return true
    }

    private func select(_ request: RACPRequest, in records: [FakeRecord]) -> [FakeRecord]? {
        switch request.operator {
        case .allRecords: return records
        case .lastRecord: return records.last.map { [$0] } ?? []
        case .firstRecord: return records.first.map { [$0] } ?? []
        case .greaterThanOrEqual:
            guard case .sequenceNumber(let min?, _) = request.operand else { return nil }
            return records.filter { $0.sequence >= min }
        case .lessThanOrEqual:
            guard case .sequenceNumber(_, let max?) = request.operand else { return nil }
            return records.filter { $0.sequence <= max }
        case .withinRange:
            guard case .sequenceNumber(let min?, let max?) = request.operand, min <= max else { return nil }
            return records.filter { $0.sequence >= min && $0.sequence <= max }
        default:
            return nil
        }
    }

    private func indicate(_ response: RACPResponse) {
        let (connected, silent, on) = state.withLock { ($0.connected, $0.silent, $0.subscribed.contains(.recordAccessControlPoint)) }
        guard connected, !silent, on else { return }
        continuation.yield(.value(.recordAccessControlPoint, response.encoded()))
    }

    private func checkConnected() throws(MeterLinkError) {
        if !state.withLock({ $0.connected }) { throw MeterLinkError(.disconnected, "Not connected") }
    }
}

func hex(_ b: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return String([digits[Int(b >> 4)], digits[Int(b & 0x0F)]])
}
