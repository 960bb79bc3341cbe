import Testing
@testable import GlucoseProfile

@Suite("Glucose Measurement Context 0x2A34")
struct GlucoseMeasurementContextTests {
    @Test func everyFieldInWireOrder() throws {
        // flags 0xFF; seq 0; extended flags 0xB3 (first after seq); carbohydrate dinner 100 x 10^-3 kg;
        // meal casual; tester 2 (health care professional, low nibble) + health 1 (minor issues, high);
        // exercise 60 s at 50 %; medication 4 (long-acting) 1234 x 10^-1 L (flag bit 5); HbA1c 34.5 %.
        let bytes = hex("FF 00 00 B3 03 64 D0 04 12 3C 00 32 04 D2 F4 59 F1")
        let c = try GlucoseMeasurementContext(bytes: bytes)
        #expect(c.sequenceNumber == 0)
        #expect(c.extendedFlags == 0xB3)
        #expect(c.carbohydrateID == 3)
        #expect(c.carbohydrateKg == .value(mantissa: 100, exponent: -3))
        #expect(c.meal == 4)
        #expect(c.tester == 2)
        #expect(c.health == 1)
        #expect(c.exerciseDurationSeconds == 60)
        #expect(c.exerciseIntensityPercent == 50)
        #expect(c.medicationID == 4)
        #expect(c.medication == .value(mantissa: 1234, exponent: -1))
        #expect(c.medicationUnit == .litres)
        #expect(c.hba1cPercent?.doubleValue == 34.5)
        #expect(c.encoded() == bytes)
    }

    @Test func medicationInKilograms() throws {
        // 5 x 10^-6 kg = 5 mg of rapid-acting insulin; flag bit 5 clear.
        let c = try GlucoseMeasurementContext(bytes: hex("10 07 00 01 05 A0"))
        #expect(c.medicationID == 1)
        #expect(c.medication == .value(mantissa: 5, exponent: -6))
        #expect(c.medicationUnit == .kilograms)
    }

    @Test func mealOnlyAsContourAndAccuChekSendIt() throws {
        let c = try GlucoseMeasurementContext(bytes: hex("02 04 00 01"))
        #expect(c.sequenceNumber == 4 && c.meal == 1)
        #expect(c.carbohydrateID == nil && c.tester == nil && c.hba1cPercent == nil)
        // i-SENS marks ketone readings with meal 6, a reserved value: kept raw.
        #expect(try GlucoseMeasurementContext(bytes: hex("02 10 00 06")).meal == 6)
    }

    @Test func carbohydrateTakesThreeBytesBeforeMeal() throws {
        // 90 g = 90 x 10^-3 kg (5A D0), then meal 2. A two-byte carbohydrate reading would misplace the meal.
        let c = try GlucoseMeasurementContext(bytes: hex("03 01 00 01 5A D0 02"))
        #expect(c.carbohydrateID == 1)
        #expect(c.carbohydrateKg?.doubleValue == 0.09)
        #expect(c.meal == 2)
    }

    @Test func truncatedFieldsAreNamed() {
        let cases: [(String, String, Int)] = [
            ("", "Flags", 0),
            ("FF 00", "Sequence Number", 1),
            ("FF 00 00", "Extended Flags", 3),
            ("FF 00 00 B3 03", "Carbohydrate", 5),
            ("01 00 00", "Carbohydrate ID", 3),
            ("02 00 00", "Meal", 3),
            ("04 00 00", "Tester-Health", 3),
            ("08 00 00 3C", "Exercise Duration", 3),
            ("08 00 00 3C 00", "Exercise Intensity", 5),
            ("10 00 00", "Medication ID", 3),
            ("10 00 00 01 05", "Medication", 4),
            ("40 00 00 59", "HbA1c", 3),
        ]
        for (bytes, field, offset) in cases {
            let error = decodingError { () throws(GlucoseDecodingError) in try GlucoseMeasurementContext(bytes: hex(bytes)) }
            #expect(error?.kind == .truncated, "\(bytes)")
            #expect(error?.field == field, "\(bytes)")
            #expect(error?.offset == offset, "\(bytes)")
        }
    }

    @Test func trailingBytesIgnored() throws {
        let c = try GlucoseMeasurementContext(bytes: hex("02 04 00 01 FF FF"))
        #expect(c.encoded() == hex("02 04 00 01"))
    }
}

@Suite("Glucose Feature 0x2A51")
struct GlucoseFeatureTests {
    @Test func everyBitHasItsName() throws {
        let all = try GlucoseFeatures(bytes: hex("FF FF"))
        #expect(all.names == GlucoseFeatures.bitNames + ["reserved_11", "reserved_12", "reserved_13", "reserved_14", "reserved_15"])
        #expect(GlucoseFeatures.bitNames.count == 11)
        #expect(GlucoseFeatures.bitNames[10] == "multiple_bond")
    }

    @Test func multipleBondIsBit10() throws {
        let f = try GlucoseFeatures(bytes: hex("00 04"))
        #expect(f == .multipleBond)
        #expect(f.names == ["multiple_bond"])
        #expect(f.encoded() == hex("00 04"))
    }

    @Test func typicalMeter() throws {
        // Low battery, strip insertion, strip type, high-low, temperature, general fault: 0x0179.
        let f = try GlucoseFeatures(bytes: hex("79 01"))
        #expect(f.contains(.lowBatteryDetection) && f.contains(.sensorResultHighLowDetection))
        #expect(f.contains(.generalDeviceFault) && !f.contains(.multipleBond))
        #expect(f.names == ["low_battery_detection", "sensor_strip_insertion_error_detection", "sensor_strip_type_error_detection",
                            "sensor_result_high_low_detection", "sensor_temperature_high_low_detection", "general_device_fault"])
    }

    @Test func shortValueIsTruncatedLongerIsRead() throws {
        for bytes in ["", "79"] {
            let error = decodingError { () throws(GlucoseDecodingError) in try GlucoseFeatures(bytes: hex(bytes)) }
            #expect(error?.kind == .truncated)
            #expect(error?.field == "Glucose Feature")
        }
        #expect(try GlucoseFeatures(bytes: hex("79 01 00")).rawValue == 0x0179)
    }
}

@Suite("Sensor Status Annunciation")
struct SensorStatusTests {
    @Test func bitsAreNamedPerSpecification() {
        #expect(SensorStatus.resultTooHigh.rawValue == 0x0020)
        #expect(SensorStatus.resultTooLow.rawValue == 0x0040)
        #expect(SensorStatus(rawValue: 0x0020).names == ["result_too_high"])
        #expect(SensorStatus(rawValue: 0x0040).names == ["result_too_low"])
        #expect(SensorStatus(rawValue: 0x0004).names == ["sample_size_insufficient"])
        #expect(SensorStatus(rawValue: 0xFFFF).names.count == 16)
        #expect(SensorStatus(rawValue: 0x1000).names == ["reserved_12"])
        #expect(SensorStatus.measurementFaults.names.count == 10)
        #expect(!SensorStatus.measurementFaults.contains(.batteryLow) && !SensorStatus.measurementFaults.contains(.timeFault))
    }
}
