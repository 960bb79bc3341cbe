import Testing
@testable import GlucoseProfile

/// Vectors from public third-party implementations and real captures. The facts (byte layouts, expected
/// values) were checked against the Glucose Service specification; where a source's own reading differs
/// from the specification, the specification wins and the test says so.
@Suite("Vectors from public implementations and captures")
struct PublicVectorTests {
    /// Nordic Android BLE Common Library, glucose measurement test: offset -5 min is applied (they assert
    /// minute 5 from base 11:10:30); status 0x0105 is bits 0, 2 and 8. Nordic's comment calls bit 2 "device
    /// fault"; the specification names it "sample size insufficient".
    @Test func nordicMeasurement() throws {
        let m = try GlucoseMeasurement(bytes: hex("1B 01 00 E3 07 02 1B 0B 0A 1E FB FF 1E 00 12 05 01"))
        #expect(m.sequenceNumber == 1)
        #expect(m.timeOffset == -5)
        #expect(m.userFacingTime.isoString == "2019-02-27T11:05:30")
        #expect(m.concentration == .value(mantissa: 30, exponent: 0))
        #expect(m.unit == .kilogramPerLitre)
        #expect(m.type == 2 && m.sampleLocation == 1)
        #expect(m.sensorStatus?.rawValue == 261)
        #expect(m.sensorStatus?.names == ["battery_low", "sample_size_insufficient", "temperature_too_low"])
        #expect(m.contextFollows)
    }

    /// Nordic: flags announce 17 bytes, only 15 arrive. The status is the field that is missing.
    @Test func nordicMeasurementTooShort() {
        let error = decodingError { () throws(GlucoseDecodingError) in
            try GlucoseMeasurement(bytes: hex("1B 00 00 E2 07 04 1A 0B 09 1E 1E 00 12 05 01"))
        }
        #expect(error?.kind == .truncated)
        #expect(error?.field == "Sensor Status Annunciation")
        #expect(error?.offset == 15)
    }

    /// nRF Toolbox (Kotlin) parser tests: all flags with mol/L; type 4 (venous plasma) in the low nibble,
    /// location 1 (finger) in the high one; status 6 = bits 1 and 2.
    @Test func nrfToolboxMeasurements() throws {
        let full = try GlucoseMeasurement(bytes: hex("1F 02 00 E4 07 05 15 0A 1E 2D 00 00 51 00 14 06 00"))
        #expect(full.sequenceNumber == 2)
        #expect(full.baseTime.isoString == "2020-05-21T10:30:45")
        #expect(full.unit == .molePerLitre)
        #expect(full.concentration == .value(mantissa: 81, exponent: 0))
        #expect(full.type == 4 && full.sampleLocation == 1)
        #expect(full.sensorStatus?.names == ["sensor_malfunction", "sample_size_insufficient"])
        #expect(full.contextFollows)

        let required = try GlucoseMeasurement(bytes: hex("00 01 00 E4 07 05 15 0A 1E 2D"))
        #expect(required.baseTime.isoString == "2020-05-21T10:30:45" && required.concentration == nil)

        let incomplete = decodingError { () throws(GlucoseDecodingError) in
            try GlucoseMeasurement(bytes: hex("0F 03 00 E4 07 05 15 0A 1E 2D 05 00 CD CC"))
        }
        #expect(incomplete?.field == "Type-Sample Location" && incomplete?.offset == 14)

        let nine = decodingError { () throws(GlucoseDecodingError) in try GlucoseMeasurement(bytes: [UInt8](repeating: 0, count: 9)) }
        #expect(nine?.field == "Base Time" && nine?.kind == .truncated)
    }

    /// Accu-Chek Guide capture (mySugr HCI log): type 8 / location 15 in 0xF8, offset +60, 111 mg/dL as
    /// 111 x 10^-5 kg/L, and a LO reading as -INFINITY with status 0x0040 (bit 6, "lower than the device can
    /// process"; Nordic's Java and Kotlin libraries name bits 5 and 6 the other way round).
    @Test func accuChekGuideCapture() throws {
        let reading = try GlucoseMeasurement(bytes: hex("0B 04 00 E5 07 0B 0E 0A 14 1E 3C 00 6F B0 F8 00 00"))
        #expect(reading.mgPerDL == 111)
        #expect(reading.userFacingTime.isoString == "2021-11-14T11:20:30")
        #expect(GlucoseMeasurement.typeName(reading.type ?? 0) == "undetermined_plasma")
        let lo = try GlucoseMeasurement(bytes: hex("0B 06 00 E5 07 0B 0E 0A 14 1E 3C 00 02 08 F8 40 00"))
        #expect(lo.concentration == .negativeInfinity && lo.sensorStatus == .resultTooLow)
    }

    /// Accu-Chek with a +339 minute offset (reported in a react-native-ble-manager thread).
    @Test func largePositiveOffset() throws {
        let m = try GlucoseMeasurement(bytes: hex("03 09 00 E8 07 06 1E 14 00 00 53 01 82 B0 F8"))
        #expect(m.timeOffset == 339)
        #expect(m.userFacingTime.isoString == "2024-07-01T01:39:00")
        #expect(m.mgPerDL == 130)
    }

    /// Contour Next One: base time in UTC and offset -420 (PDT); context meal only (`02 <seq> <meal>`).
    @Test func contourNextOne() throws {
        let m = try GlucoseMeasurement(bytes: hex("13 2D 00 E8 07 01 01 03 00 00 5C FE 7C B0 11"))
        #expect(m.sequenceNumber == 45)
        #expect(m.userFacingTime.isoString == "2023-12-31T20:00:00")
        #expect(m.mgPerDL == 124)
        #expect(m.contextFollows)
        let c = try GlucoseMeasurementContext(bytes: hex("02 2D 00 02"))
        #expect(c.sequenceNumber == 45 && c.meal == 2)
        // The RACP request Contour users see: report records with sequence >= 45, little-endian operand.
        #expect(RACPRequest.reportFrom(sequence: 45).encoded() == [1, 3, 1, 45, 0])
    }

    /// Nordic context test: every field; tester is the low nibble (0x12: tester 2 = health care
    /// professional, health 1 = minor issues). nRF Toolbox (Kotlin) and Wireshark swap the two.
    @Test func nordicContext() throws {
        let c = try GlucoseMeasurementContext(bytes: hex("FF 00 00 B3 03 64 00 04 12 3C 00 32 04 D2 F4 59 F1"))
        #expect(c.carbohydrateID == 3 && c.carbohydrateKg?.doubleValue == 100)
        #expect(c.meal == 4)
        #expect(c.tester == 2 && c.health == 1)
        #expect(c.exerciseDurationSeconds == 60 && c.exerciseIntensityPercent == 50)
        #expect(c.medicationID == 4 && c.medicationUnit == .litres && c.medication?.doubleValue == 123.4)
        #expect(c.hba1cPercent?.doubleValue == 34.5)
        let short = decodingError { () throws(GlucoseDecodingError) in try GlucoseMeasurementContext(bytes: hex("FF 00 00 B3 03")) }
        #expect(short?.field == "Carbohydrate" && short?.offset == 5)
    }

    /// Nordic RACP callback tests: responses, unknown codes kept raw. Nordic accepts 1- and 4-byte counts;
    /// the Glucose Service defines the count as a uint16, so those are wrong-length errors here.
    @Test func nordicRACP() throws {
        #expect(try RACPResponse(bytes: [6, 0, 1, 1]) == .response(requestOpCode: .reportStoredRecords, code: .success))
        #expect(try RACPResponse(bytes: [6, 0, 12, 2]) == .response(requestOpCode: RACPOpCode(rawValue: 12), code: .opCodeNotSupported))
        #expect(try RACPResponse(bytes: [6, 0, 3, 7]) == .response(requestOpCode: .abortOperation, code: .abortUnsuccessful))
        #expect(try RACPResponse(bytes: [6, 0, 2, 9]) == .response(requestOpCode: .deleteStoredRecords, code: .operandNotSupported))
        #expect(try RACPResponse(bytes: [5, 0, 2, 1]) == .numberOfRecords(258))
        for bytes: [UInt8] in [[5, 0, 1], [5, 0, 4, 3, 2, 1], [5, 0, 3, 2, 1]] {
            let error = decodingError { () throws(GlucoseDecodingError) in try RACPResponse(bytes: bytes) }
            #expect(error?.kind == .wrongLength)
        }
        let request = decodingError { () throws(GlucoseDecodingError) in try RACPResponse(bytes: [1, 3, 1, 2, 0]) }
        #expect(request?.kind == .unknownOpCode)
    }

    /// PureSwift SFLOAT tests and the specification's special values.
    @Test func pureSwiftSFloat() {
        #expect(SFloat(bits: 0xFF5E).doubleValue == -16.2)
        #expect(SFloat(bits: 0x2024).doubleValue == 3600)
        #expect(SFloat(bits: 0x07FF) == .nan && SFloat(bits: 0x0800) == .nres)
        #expect(SFloat(bits: 0x07FE) == .positiveInfinity && SFloat(bits: 0x0802) == .negativeInfinity)
        #expect(SFloat(bits: 0x0801) == .reserved)
    }

    /// Cordio's glucose server: time filter operands are 7 bytes, sequence filter operands 2. Spezi models the
    /// time filter as an int16, which the specification does not allow.
    @Test func filterOperandSizes() throws {
        let time = try RACPRequest(bytes: hex("01 02 02 E8 07 03 05 0E 1E 00"))
        #expect(time.operand == .userFacingTime(min: nil, max: date(2024, 3, 5, 14, 30)))
        let short = decodingError { () throws(GlucoseDecodingError) in try RACPRequest(bytes: hex("01 02 02 E8 07")) }
        #expect(short?.kind == .truncated && short?.field == "Operand maximum user facing time")
    }
}
