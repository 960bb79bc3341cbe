import Foundation
import GatewayCore
import Support
import Testing
@testable import GatewayCLI

/// The `decode` command's parsing and JSON, in process. End-to-end runs of the binary (exit statuses,
/// one-line stderr) are in SystemTests/test_decode.py.
@Suite("decode command")
struct DecodeCommandTests {
    func json(_ characteristic: String, _ hex: String) throws -> String {
        let uuid = try DecodeCommand.parseCharacteristic(characteristic)
        return try DecodeCommand.render(uuid, DecodeCommand.parseHex(hex)).compactText
    }

    func failure(_ characteristic: String, _ hex: String) -> GatewayFailure? {
        do {
            _ = try json(characteristic, hex)
            return nil
        } catch let failure as GatewayFailure {
            return failure
        } catch {
            return nil
        }
    }

    @Test func characteristicForms() throws {
        for form in ["2a18", "2A18", "0x2a18", "0X2A18", "00002a18-0000-1000-8000-00805f9b34fb", "00002A18-0000-1000-8000-00805F9B34FB"] {
            #expect(try DecodeCommand.parseCharacteristic(form) == .glucoseMeasurement, "\(form)")
        }
        #expect(try DecodeCommand.parseCharacteristic("2a52") == .recordAccessControlPoint)
        for bad in ["2a19", "180a", "glucose", "", "0x", "00002a18-0000-1000-8000-00805f9b34fc", "12345"] {
            #expect(throws: GatewayFailure.self) { try DecodeCommand.parseCharacteristic(bad) }
            #expect(failureStatus { try DecodeCommand.parseCharacteristic(bad) } == .usage, "\(bad)")
        }
    }

    func failureStatus(_ body: () throws -> Any) -> Support.ExitStatus? {
        do {
            _ = try body()
            return nil
        } catch let failure as GatewayFailure {
            return failure.status
        } catch {
            return nil
        }
    }

    @Test func hexForms() throws {
        let expected: [UInt8] = [0x1B, 0x34, 0x12]
        for form in ["1b3412", "1B 34 12", "1b:34:12", "(0x) 1B-34-12", "0x1b3412", "0x1B 0x34 0x12", " 1b\t34 12\n", "1b,34,12"] {
            #expect(try DecodeCommand.parseHex(form) == expected, "\(form)")
        }
        #expect(try DecodeCommand.parseHex("") == [])
        let odd = failure("2a18", "1b3")
        #expect(odd?.status == .dataError)
        #expect(odd?.message.contains("odd number") == true)
        let bad = failure("2a18", "1b 3z")
        #expect(bad?.status == .dataError)
        #expect(bad?.message.contains("'z' at position 5") == true)
        let control = failure("2a18", "1b\u{1}")
        #expect(control?.message.contains("U+0001") == true)
    }

    @Test func measurementWithEveryField() throws {
        #expect(try json("2a18", "1B 34 12 E8 07 03 05 0E 1E 0F 3C 00 6F B0 11 01 00") == """
            {"sequence":4660,"base_time":"2024-03-05T14:30:15","user_facing_time":"2024-03-05T15:30:15",\
            "time_offset_minutes":60,"unit":"kg/L","concentration":0.00111,"mg_dl":111.0,"mmol_l":6.16,\
            "type":1,"type_name":"capillary_whole_blood","sample_location":1,"sample_location_name":"finger",\
            "sensor_status_raw":1,"sensor_status":["battery_low"],"context_follows":true}
            """)
    }

    @Test func minimalMeasurementLeavesAbsentFieldsOut() throws {
        #expect(try json("2a18", "00 2A 00 E8 07 03 05 0E 1E 00") == """
            {"sequence":42,"base_time":"2024-03-05T14:30:00","user_facing_time":"2024-03-05T14:30:00","context_follows":false}
            """)
    }

    @Test func hiAndLo() throws {
        let hi = try json("2a18", "0B 05 00 E8 07 03 05 0E 1E 00 00 00 FE 07 F8 20 00")
        #expect(hi.contains(#""concentration":null,"concentration_special":"+inf","type":8"#))
        #expect(hi.contains(#""sensor_status_raw":32,"sensor_status":["result_too_high"]"#))
        #expect(!hi.contains("mg_dl") && !hi.contains("mmol_l"))
        let lo = try json("2a18", "0B 06 00 E5 07 0B 0E 0A 14 1E 3C 00 02 08 F8 40 00")
        #expect(lo.contains(#""concentration":null,"concentration_special":"-inf""#))
        #expect(lo.contains(#""sensor_status":["result_too_low"]"#))
        for (bits, name) in [("FF 07", "nan"), ("00 08", "nres"), ("01 08", "reserved")] {
            let text = try json("2a18", "02 01 00 E8 07 03 05 0E 1E 00 \(bits) 11")
            #expect(text.contains(#""concentration":null,"concentration_special":"\#(name)""#))
        }
    }

    @Test func molePerLitreAndNegativeOffset() throws {
        #expect(try json("2a18", "07 01 00 E8 07 01 01 03 00 00 5C FE 37 C0 12") == """
            {"sequence":1,"base_time":"2024-01-01T03:00:00","user_facing_time":"2023-12-31T20:00:00",\
            "time_offset_minutes":-420,"unit":"mol/L","concentration":0.0055,"mg_dl":99.1,"mmol_l":5.50,\
            "type":2,"type_name":"capillary_plasma","sample_location":1,"sample_location_name":"finger","context_follows":false}
            """)
    }

    @Test func context() throws {
        #expect(try json("2a34", "FF 00 00 B3 03 5A D0 04 12 3C 00 32 04 D2 F4 59 F1") == """
            {"sequence":0,"extended_flags":179,"carbohydrate_id":3,"carbohydrate_kg":0.09,"meal":4,"tester":2,"health":1,\
            "exercise_duration_s":60,"exercise_intensity_pct":50,"medication_id":4,"medication_l":123.4,"hba1c_pct":34.5}
            """)
        #expect(try json("2a34", "10 01 00 01 05 A0") == #"{"sequence":1,"medication_id":1,"medication_kg":0.000005}"#)
        #expect(try json("2a34", "02 2D 00 02") == #"{"sequence":45,"meal":2}"#)
        #expect(try json("2a34", "40 01 00 FF 07") == #"{"sequence":1,"hba1c_pct":null,"hba1c_pct_special":"nan"}"#)
    }

    @Test func features() throws {
        #expect(try json("2a51", "00 04") == #"{"features_raw":1024,"features":["multiple_bond"]}"#)
        #expect(try json("2a51", "00 00") == #"{"features_raw":0,"features":[]}"#)
    }

    @Test func racp() throws {
        #expect(try json("2a52", "01 01") == #"{"opcode":1,"opcode_name":"report_stored_records","operator":1,"operator_name":"all_records"}"#)
        #expect(try json("2a52", "04 03 01 2D 01") == """
            {"opcode":4,"opcode_name":"report_number_of_stored_records","operator":3,"operator_name":"greater_than_or_equal",\
            "filter_type":1,"operand_min":301}
            """)
        #expect(try json("2a52", "02 02 01 07 00") == """
            {"opcode":2,"opcode_name":"delete_stored_records","operator":2,"operator_name":"less_than_or_equal","filter_type":1,"operand_max":7}
            """)
        #expect(try json("2a52", "01 04 02 E8 07 03 05 00 00 00 E8 07 03 06 00 00 00") == """
            {"opcode":1,"opcode_name":"report_stored_records","operator":4,"operator_name":"within_range","filter_type":2,\
            "operand_min":"2024-03-05T00:00:00","operand_max":"2024-03-06T00:00:00"}
            """)
        #expect(try json("2a52", "03 00") == #"{"opcode":3,"opcode_name":"abort_operation","operator":0,"operator_name":"null"}"#)
        #expect(try json("2a52", "01 05") == #"{"opcode":1,"opcode_name":"report_stored_records","operator":5,"operator_name":"first_record"}"#)
        #expect(try json("2a52", "01 06") == #"{"opcode":1,"opcode_name":"report_stored_records","operator":6,"operator_name":"last_record"}"#)
        #expect(try json("2a52", "05 00 0A 00") == """
            {"opcode":5,"opcode_name":"number_of_stored_records_response","operator":0,"operator_name":"null","number_of_records":10}
            """)
        #expect(try json("2a52", "06 00 01 06") == """
            {"opcode":6,"opcode_name":"response_code","operator":0,"operator_name":"null","request_opcode":1,"response_code":6,"response_name":"no_records_found"}
            """)
        #expect(try json("2a52", "06 00 01 0B").contains(#""response_code":11,"response_name":"reserved""#))
        #expect(try json("2a52", "01 03 09 AA BB").contains(#""filter_type":9,"operand_bytes":"aa bb""#))
        #expect(try json("2a52", "01 07").contains(#""operator":7,"operator_name":"reserved""#))
    }

    @Test func malformedValuesNameCharacteristicAndField() {
        let cases: [(String, String, String)] = [
            ("2a18", "", "0x2a18 Flags: value too short at byte 0"),
            ("2a18", "01 01 00 E8 07 03 05 0E 1E 00 3C", "0x2a18 Time Offset: value too short at byte 10"),
            ("2a18", "00 01 00 E8 07 0D 05 0E 1E 00", "0x2a18 Base Time month: invalid value at byte 5 (13 is outside 1...12)"),
            ("2a18", "00 01 00 E8 07 02 1E 0E 1E 00", "0x2a18 Base Time day: invalid value at byte 6"),
            ("2a34", "01 01 00 01 5A", "0x2a34 Carbohydrate: value too short at byte 4"),
            ("2a51", "79", "0x2a51 Glucose Feature: value too short at byte 0"),
            ("2a52", "05 00 01", "0x2a52 Number of Stored Records: wrong length at byte 2"),
            ("2a52", "07 00", "0x2a52 Op Code: unknown op code at byte 0"),
            ("2a52", "00", "0x2a52 Op Code: unknown op code at byte 0"),
            ("2a52", "01", "0x2a52 Operator: value too short at byte 1"),
            ("2a52", "06 00 01", "0x2a52 Response Code Value: value too short at byte 3"),
        ]
        for (characteristic, hex, prefix) in cases {
            let f = failure(characteristic, hex)
            #expect(f?.status == .dataError, "\(hex)")
            #expect(f?.message.hasPrefix(prefix) == true, "\(hex): \(f?.message ?? "no failure")")
            #expect(f?.message.contains("\n") == false)
        }
    }
}
