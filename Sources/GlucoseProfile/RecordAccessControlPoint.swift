/// Record Access Control Point, characteristic 0x2A52 (GLS 1.0.1 §3.4; write with response + indicate).
///
///     request  (collector -> meter): Op Code uint8 | Operator uint8 | Operand ...
///     response (meter -> collector): 0x05 | 0x00 | Number of Stored Records (uint16)
///                                    0x06 | 0x00 | Request Op Code uint8 | Response Code uint8
///
/// Operand of a filtered request (operators <=, >=, within range): Filter Type uint8, then one value
/// (<= maximum, >= minimum) or two (range: minimum, maximum). Filter 0x01 Sequence Number: uint16 each;
/// 0x02 User Facing Time: 7-byte Date Time each. Everything is little-endian.
///
/// Op codes, operators, filter types and response codes are open sets: values the specification has not
/// named decode to their raw numbers. An op code that is not valid for the direction being decoded is an
/// `unknownOpCode` error.

/// RACP op code (uint8).
public struct RACPOpCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let reportStoredRecords = RACPOpCode(rawValue: 1)
    public static let deleteStoredRecords = RACPOpCode(rawValue: 2)
    public static let abortOperation = RACPOpCode(rawValue: 3)
    public static let reportNumberOfStoredRecords = RACPOpCode(rawValue: 4)
    public static let numberOfStoredRecordsResponse = RACPOpCode(rawValue: 5)
    public static let responseCode = RACPOpCode(rawValue: 6)

    /// `report_stored_records`, ...; nil for values the specification reserves.
    public var name: String? {
        switch rawValue {
        case 1: return "report_stored_records"
        case 2: return "delete_stored_records"
        case 3: return "abort_operation"
        case 4: return "report_number_of_stored_records"
        case 5: return "number_of_stored_records_response"
        case 6: return "response_code"
        default: return nil
        }
    }

    /// Whether a collector sends this op code (1...4).
    public var isRequest: Bool { (1...4).contains(rawValue) }
    /// Whether a meter sends this op code (5, 6).
    public var isResponse: Bool { rawValue == 5 || rawValue == 6 }

    public var description: String { name ?? "op code \(rawValue)" }
}

/// RACP operator (uint8).
public struct RACPOperator: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let null = RACPOperator(rawValue: 0)
    public static let allRecords = RACPOperator(rawValue: 1)
    public static let lessThanOrEqual = RACPOperator(rawValue: 2)
    public static let greaterThanOrEqual = RACPOperator(rawValue: 3)
    public static let withinRange = RACPOperator(rawValue: 4)
    /// The oldest record.
    public static let firstRecord = RACPOperator(rawValue: 5)
    /// The most recent record.
    public static let lastRecord = RACPOperator(rawValue: 6)

    public var name: String? {
        switch rawValue {
        case 0: return "null"
        case 1: return "all_records"
        case 2: return "less_than_or_equal"
        case 3: return "greater_than_or_equal"
        case 4: return "within_range"
        case 5: return "first_record"
        case 6: return "last_record"
        default: return nil
        }
    }

    public var description: String { name ?? "operator \(rawValue)" }
}

/// RACP filter type (uint8), the first byte of a filtered operand.
public struct RACPFilterType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let sequenceNumber = RACPFilterType(rawValue: 1)
    public static let userFacingTime = RACPFilterType(rawValue: 2)

    public var name: String? {
        switch rawValue {
        case 1: return "sequence_number"
        case 2: return "user_facing_time"
        default: return nil
        }
    }

    public var description: String { name ?? "filter type \(rawValue)" }
}

/// RACP response code (uint8), the last byte of a Response Code (0x06) indication.
public struct RACPResponseCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let success = RACPResponseCode(rawValue: 1)
    public static let opCodeNotSupported = RACPResponseCode(rawValue: 2)
    public static let invalidOperator = RACPResponseCode(rawValue: 3)
    public static let operatorNotSupported = RACPResponseCode(rawValue: 4)
    public static let invalidOperand = RACPResponseCode(rawValue: 5)
    /// No record matched: a normal end of a download, not a failure.
    public static let noRecordsFound = RACPResponseCode(rawValue: 6)
    public static let abortUnsuccessful = RACPResponseCode(rawValue: 7)
    public static let procedureNotCompleted = RACPResponseCode(rawValue: 8)
    public static let operandNotSupported = RACPResponseCode(rawValue: 9)

    public var name: String? {
        switch rawValue {
        case 1: return "success"
        case 2: return "op_code_not_supported"
        case 3: return "invalid_operator"
        case 4: return "operator_not_supported"
        case 5: return "invalid_operand"
        case 6: return "no_records_found"
        case 7: return "abort_unsuccessful"
        case 8: return "procedure_not_completed"
        case 9: return "operand_not_supported"
        default: return nil
        }
    }

    public var description: String { name ?? "response code \(rawValue)" }
}

/// The operand of a request. Which bound is present follows the operator: `<=` carries `max`, `>=` carries
/// `min`, within range carries both; all, first and last carry `.none`.
public enum RACPOperand: Hashable, Sendable {
    case none
    case sequenceNumber(min: UInt16?, max: UInt16?)
    case userFacingTime(min: GlucoseDateTime?, max: GlucoseDateTime?)
    /// A filter type the specification has not defined (or an operand under an undefined operator),
    /// kept as its bytes after the filter type so a meter can answer "operand not supported".
    case other(filterType: RACPFilterType, bytes: [UInt8])

    public var filterType: RACPFilterType? {
        switch self {
        case .none: return nil
        case .sequenceNumber: return .sequenceNumber
        case .userFacingTime: return .userFacingTime
        case let .other(filterType, _): return filterType
        }
    }
}

/// A request written to the RACP: built by the gateway, parsed by the meter simulator.
public struct RACPRequest: Hashable, Sendable {
    public var opCode: RACPOpCode
    public var `operator`: RACPOperator
    public var operand: RACPOperand

    public init(opCode: RACPOpCode, operator: RACPOperator, operand: RACPOperand = .none) {
        self.opCode = opCode
        self.operator = `operator`
        self.operand = operand
    }

    public static func reportRecords(_ op: RACPOperator, _ operand: RACPOperand = .none) -> RACPRequest {
        RACPRequest(opCode: .reportStoredRecords, operator: op, operand: operand)
    }
    public static func reportNumberOfRecords(_ op: RACPOperator, _ operand: RACPOperand = .none) -> RACPRequest {
        RACPRequest(opCode: .reportNumberOfStoredRecords, operator: op, operand: operand)
    }
    public static func deleteRecords(_ op: RACPOperator, _ operand: RACPOperand = .none) -> RACPRequest {
        RACPRequest(opCode: .deleteStoredRecords, operator: op, operand: operand)
    }

    /// `01 01`: report all stored records.
    public static let reportAll = reportRecords(.allRecords)
    /// `04 01`: report the number of all stored records.
    public static let reportNumberAll = reportNumberOfRecords(.allRecords)
    /// `03 00`: abort the running procedure.
    public static let abort = RACPRequest(opCode: .abortOperation, operator: .null)
    /// `01 03 01 LL HH`: report records with sequence number >= `sequence`.
    public static func reportFrom(sequence: UInt16) -> RACPRequest {
        reportRecords(.greaterThanOrEqual, .sequenceNumber(min: sequence, max: nil))
    }
    /// `04 03 01 LL HH`: number of records with sequence number >= `sequence`.
    public static func reportNumberFrom(sequence: UInt16) -> RACPRequest {
        reportNumberOfRecords(.greaterThanOrEqual, .sequenceNumber(min: sequence, max: nil))
    }

    @inlinable
    public init(bytes: some Collection<UInt8>) throws(GlucoseDecodingError) {
        self = try RACPRequest.decode(bytes).get()
    }

    /// Decodes without throwing: the value or the typed error.
    @inlinable
    public static func decode(_ bytes: some Collection<UInt8>) -> Result<RACPRequest, GlucoseDecodingError> {
        withContiguousBytes(bytes, decode(raw:))
    }

    @usableFromInline
    static func decode(raw: UnsafeRawBufferPointer) -> Result<RACPRequest, GlucoseDecodingError> {
        var r = ByteReader(raw)
        let opCode = RACPOpCode(rawValue: r.uint8("Op Code"))
        if let error = r.error { return .failure(error) }
        guard opCode.isRequest else {
            return .failure(GlucoseDecodingError(
                .unknownOpCode, .name("Op Code"), offset: 0,
                .opCode(opCode.rawValue, opCode.isResponse ? "is a response, not a request" : "is not a request op code")
            ))
        }
        let op = RACPOperator(rawValue: r.uint8("Operator"))
        var request = RACPRequest(opCode: opCode, operator: op)
        if opCode == .abortOperation { return r.result(request) }
        switch op {
        case .lessThanOrEqual, .greaterThanOrEqual, .withinRange:
            let filterType = RACPFilterType(rawValue: r.uint8("Filter Type"))
            let wantsMin = op != .lessThanOrEqual
            let wantsMax = op != .greaterThanOrEqual
            switch filterType {
            case .sequenceNumber:
                let min = wantsMin ? r.uint16("Operand minimum sequence number") : nil
                let max = wantsMax ? r.uint16("Operand maximum sequence number") : nil
                request.operand = .sequenceNumber(min: min, max: max)
            case .userFacingTime:
                let min = wantsMin ? r.dateTime("Operand minimum user facing time") : nil
                let max = wantsMax ? r.dateTime("Operand maximum user facing time") : nil
                request.operand = .userFacingTime(min: min, max: max)
            default:
                request.operand = .other(filterType: filterType, bytes: r.rest())
            }
        case .null, .allRecords, .firstRecord, .lastRecord:
            break
        default:
            // An operator the specification has not defined: keep whatever operand follows, uninterpreted.
            if r.remaining > 0 {
                let filterType = RACPFilterType(rawValue: r.uint8("Filter Type"))
                request.operand = .other(filterType: filterType, bytes: r.rest())
            }
        }
        return r.result(request)
    }

    public func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 18)
        w.uint8(opCode.rawValue)
        w.uint8(self.operator.rawValue)
        switch operand {
        case .none:
            break
        case let .sequenceNumber(min, max):
            w.uint8(RACPFilterType.sequenceNumber.rawValue)
            if let min { w.uint16(min) }
            if let max { w.uint16(max) }
        case let .userFacingTime(min, max):
            w.uint8(RACPFilterType.userFacingTime.rawValue)
            if let min { w.dateTime(min) }
            if let max { w.dateTime(max) }
        case let .other(filterType, bytes):
            w.uint8(filterType.rawValue)
            w.bytes.append(contentsOf: bytes)
        }
        return w.bytes
    }
}

/// An indication from the RACP: parsed by the gateway, built by the meter simulator. The Operator byte of
/// a response is Null (0) by the specification; another value is ignored.
public enum RACPResponse: Hashable, Sendable {
    /// `05 00 LL HH`: the answer to "report number of stored records". The count is exactly a uint16;
    /// another size is a `wrongLength` error.
    case numberOfRecords(UInt16)
    /// `06 00 <request op code> <response code>`; bytes after the response code are ignored.
    case response(requestOpCode: RACPOpCode, code: RACPResponseCode)

    @inlinable
    public init(bytes: some Collection<UInt8>) throws(GlucoseDecodingError) {
        self = try RACPResponse.decode(bytes).get()
    }

    /// Decodes without throwing: the value or the typed error.
    @inlinable
    public static func decode(_ bytes: some Collection<UInt8>) -> Result<RACPResponse, GlucoseDecodingError> {
        withContiguousBytes(bytes, decode(raw:))
    }

    @usableFromInline
    static func decode(raw: UnsafeRawBufferPointer) -> Result<RACPResponse, GlucoseDecodingError> {
        var r = ByteReader(raw)
        let opCode = RACPOpCode(rawValue: r.uint8("Op Code"))
        switch opCode {
        case _ where r.failed:
            return r.result(.numberOfRecords(0))
        case .numberOfStoredRecordsResponse:
            _ = r.uint8("Operator")
            if !r.failed && r.remaining != 2 {
                r.fail(ByteReader.Failure(
                    kind: .wrongLength, field: "Number of Stored Records", offset: r.offset,
                    detail: .length(expected: "a uint16 (2 bytes)", got: r.remaining)
                ))
            }
            let count = r.uint16("Number of Stored Records")
            return r.result(.numberOfRecords(count))
        case .responseCode:
            _ = r.uint8("Operator")
            let request = RACPOpCode(rawValue: r.uint8("Request Op Code"))
            let code = RACPResponseCode(rawValue: r.uint8("Response Code Value"))
            return r.result(.response(requestOpCode: request, code: code))
        default:
            return .failure(GlucoseDecodingError(
                .unknownOpCode, .name("Op Code"), offset: 0,
                .opCode(opCode.rawValue, opCode.isRequest ? "is a request, not a response" : "is not a response op code")
            ))
        }
    }

    public func encoded() -> [UInt8] {
        switch self {
        case let .numberOfRecords(count):
            return [RACPOpCode.numberOfStoredRecordsResponse.rawValue, 0, UInt8(truncatingIfNeeded: count), UInt8(truncatingIfNeeded: count >> 8)]
        case let .response(requestOpCode, code):
            return [RACPOpCode.responseCode.rawValue, 0, requestOpCode.rawValue, code.rawValue]
        }
    }
}
