import Testing
@testable import GlucoseProfile

@Suite("Record Access Control Point 0x2A52")
struct RACPTests {
    @Test func requestEncodings() {
        #expect(RACPRequest.reportAll.encoded() == hex("01 01"))
        #expect(RACPRequest.reportNumberAll.encoded() == hex("04 01"))
        #expect(RACPRequest.abort.encoded() == hex("03 00"))
        #expect(RACPRequest.reportRecords(.lastRecord).encoded() == hex("01 06"))
        #expect(RACPRequest.reportRecords(.firstRecord).encoded() == hex("01 05"))
        #expect(RACPRequest.deleteRecords(.allRecords).encoded() == hex("02 01"))
        // Operands are little-endian: sequence 0x012D is 2D 01.
        #expect(RACPRequest.reportFrom(sequence: 0x012D).encoded() == hex("01 03 01 2D 01"))
        #expect(RACPRequest.reportNumberFrom(sequence: 45).encoded() == hex("04 03 01 2D 00"))
        #expect(RACPRequest.reportRecords(.lessThanOrEqual, .sequenceNumber(min: nil, max: 7)).encoded() == hex("01 02 01 07 00"))
        #expect(RACPRequest.reportRecords(.withinRange, .sequenceNumber(min: 0x0A0A, max: 0x0B0B)).encoded() == hex("01 04 01 0A 0A 0B 0B"))
        #expect(RACPRequest.reportRecords(.greaterThanOrEqual, .userFacingTime(min: date(2024, 3, 5, 14, 30), max: nil)).encoded()
            == hex("01 03 02 E8 07 03 05 0E 1E 00"))
    }

    @Test func requestsParse() throws {
        #expect(try RACPRequest(bytes: hex("01 01")) == .reportAll)
        #expect(try RACPRequest(bytes: hex("03 00")) == .abort)
        #expect(try RACPRequest(bytes: hex("01 03 01 2D 01")) == .reportFrom(sequence: 301))
        let range = try RACPRequest(bytes: hex("04 04 02 E8 07 03 05 00 00 00 E8 07 03 06 00 00 00"))
        #expect(range.opCode == .reportNumberOfStoredRecords)
        #expect(range.operator == .withinRange)
        #expect(range.operand == .userFacingTime(min: date(2024, 3, 5), max: date(2024, 3, 6)))
        let le = try RACPRequest(bytes: hex("02 02 01 10 00"))
        #expect(le.operand == .sequenceNumber(min: nil, max: 16))
    }

    @Test func unknownOperatorAndFilterTypeAreKeptRaw() throws {
        let unknownFilter = try RACPRequest(bytes: hex("01 03 07 01 02"))
        #expect(unknownFilter.operand == .other(filterType: RACPFilterType(rawValue: 7), bytes: [1, 2]))
        #expect(unknownFilter.operand.filterType?.name == nil)
        let unknownOperator = try RACPRequest(bytes: hex("01 09"))
        #expect(unknownOperator.operator.rawValue == 9 && unknownOperator.operator.name == nil)
        #expect(unknownOperator.operand == .none)
    }

    @Test func malformedRequests() {
        let cases: [(String, GlucoseDecodingError.Kind, String, Int)] = [
            ("", .truncated, "Op Code", 0),
            ("01", .truncated, "Operator", 1),
            ("01 03", .truncated, "Filter Type", 2),
            ("01 03 01 2D", .truncated, "Operand minimum sequence number", 3),
            ("01 02 01", .truncated, "Operand maximum sequence number", 3),
            ("01 04 01 01 00 02", .truncated, "Operand maximum sequence number", 5),
            ("01 03 02 E8 07 0D 05 00 00 00", .invalidValue, "Operand minimum user facing time month", 5),
            ("01 03 02 E8 07 03", .truncated, "Operand minimum user facing time", 3),
            ("00 01", .unknownOpCode, "Op Code", 0),
            ("07 01", .unknownOpCode, "Op Code", 0),
            ("05 00 01 00", .unknownOpCode, "Op Code", 0),
            ("06 00 01 01", .unknownOpCode, "Op Code", 0),
        ]
        for (bytes, kind, field, offset) in cases {
            let error = decodingError { () throws(GlucoseDecodingError) in try RACPRequest(bytes: hex(bytes)) }
            #expect(error?.kind == kind, "\(bytes)")
            #expect(error?.field == field, "\(bytes)")
            #expect(error?.offset == offset, "\(bytes)")
        }
    }

    @Test func responsesParse() throws {
        #expect(try RACPResponse(bytes: hex("06 00 01 01")) == .response(requestOpCode: .reportStoredRecords, code: .success))
        #expect(try RACPResponse(bytes: hex("06 00 01 06")) == .response(requestOpCode: .reportStoredRecords, code: .noRecordsFound))
        #expect(try RACPResponse(bytes: hex("06 00 03 01")) == .response(requestOpCode: .abortOperation, code: .success))
        #expect(try RACPResponse(bytes: hex("06 00 01 08")) == .response(requestOpCode: .reportStoredRecords, code: .procedureNotCompleted))
        // Some meters answer "report number" with "no records found" instead of a zero count.
        #expect(try RACPResponse(bytes: hex("06 00 04 06")) == .response(requestOpCode: .reportNumberOfStoredRecords, code: .noRecordsFound))
        // Unknown request op code and response code are kept raw.
        #expect(try RACPResponse(bytes: hex("06 00 0C 02")) == .response(requestOpCode: RACPOpCode(rawValue: 12), code: .opCodeNotSupported))
        #expect(try RACPResponse(bytes: hex("06 00 01 0A")) == .response(requestOpCode: .reportStoredRecords, code: RACPResponseCode(rawValue: 10)))
        #expect(RACPResponseCode(rawValue: 10).name == nil)
        #expect(try RACPResponse(bytes: hex("05 00 02 01")) == .numberOfRecords(258))
        #expect(try RACPResponse(bytes: hex("05 00 FF FF")) == .numberOfRecords(65535))
        #expect(RACPResponse.numberOfRecords(258).encoded() == hex("05 00 02 01"))
        #expect(RACPResponse.response(requestOpCode: .reportStoredRecords, code: .noRecordsFound).encoded() == hex("06 00 01 06"))
    }

    @Test func countMustBeExactlyAUInt16() {
        for bytes in ["05 00", "05 00 01", "05 00 03 02 01", "05 00 04 03 02 01"] {
            let error = decodingError { () throws(GlucoseDecodingError) in try RACPResponse(bytes: hex(bytes)) }
            #expect(error?.kind == .wrongLength, "\(bytes)")
            #expect(error?.field == "Number of Stored Records", "\(bytes)")
            #expect(error?.offset == 2, "\(bytes)")
        }
    }

    @Test func malformedResponses() {
        let cases: [(String, GlucoseDecodingError.Kind, String)] = [
            ("", .truncated, "Op Code"),
            ("05", .truncated, "Operator"),
            ("06 00", .truncated, "Request Op Code"),
            ("06 01 01", .truncated, "Response Code Value"),
            ("01 01", .unknownOpCode, "Op Code"),
            ("FF 00 00 00", .unknownOpCode, "Op Code"),
        ]
        for (bytes, kind, field) in cases {
            let error = decodingError { () throws(GlucoseDecodingError) in try RACPResponse(bytes: hex(bytes)) }
            #expect(error?.kind == kind, "\(bytes)")
            #expect(error?.field == field, "\(bytes)")
        }
    }

    @Test func namesOfEveryDefinedValue() {
        #expect((1...6).map { RACPOpCode(rawValue: $0).name ?? "" } == [
            "report_stored_records", "delete_stored_records", "abort_operation", "report_number_of_stored_records",
            "number_of_stored_records_response", "response_code",
        ])
        #expect((0...6).map { RACPOperator(rawValue: $0).name ?? "" } == [
            "null", "all_records", "less_than_or_equal", "greater_than_or_equal", "within_range", "first_record", "last_record",
        ])
        #expect((1...9).map { RACPResponseCode(rawValue: $0).name ?? "" } == [
            "success", "op_code_not_supported", "invalid_operator", "operator_not_supported", "invalid_operand",
            "no_records_found", "abort_unsuccessful", "procedure_not_completed", "operand_not_supported",
        ])
        #expect(RACPFilterType.sequenceNumber.name == "sequence_number" && RACPFilterType.userFacingTime.name == "user_facing_time")
        #expect(RACPOpCode(rawValue: 7).name == nil && RACPOperator(rawValue: 7).name == nil)
    }
}
