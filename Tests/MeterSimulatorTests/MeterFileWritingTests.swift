import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Testing

/// `MeterFile.json` writes what `MeterFile.parse` reads: parsing the written file gives the same meter.
@Suite struct MeterFileWritingTests {
    static let full = MeterFileTests.example

    static let oddities = """
    {"address": "C0:26:DA:0A:0B:0C", "addressType": "random", "name": "CareSens 0042", "pin": "004711",
     "bonding": false, "rssi": -80, "deviceInformation": {"model": "No Maker"}, "features": 0,
     "contextCharacteristic": false, "timeFilter": false,
     "records": [
       {"sequence": 0, "time": "2037-01-01T00:00:00", "result": "high"},
       {"sequence": 1, "time": "2024-03-05T07:30:00", "sfloat": "0xB06F", "status": 8},
       {"sequence": 2, "time": "2024-03-05T07:40:00", "result": "none", "hex": "0a0200e8070305071e0000"},
       {"sequence": 3, "time": "2024-03-05T07:50:00", "mgdl": 100.5, "timeOffset": -420,
        "context": {"meal": 6, "tester": 2, "health": 3, "extendedFlags": 1, "exerciseSeconds": 600,
                    "exerciseIntensity": 70, "medicationMilligrams": 2, "hba1c": 6.5}},
       {"sequence": 4, "time": "2024-03-05T08:00:00", "mmol": 5.5, "unit": "mol/L",
        "context": {"carbohydrateGrams": 45, "carbohydrateID": 3, "medicationMillilitres": 1.5}}
     ],
     "advertising": "off",
     "clock": {"kind": "vendor", "writable": false, "skewSeconds": -300.5, "utcOffsetMinutes": 60, "driftSecondsPerDay": 2},
     "faults": {"dropLinkTimes": null, "failProcedureAfter": 3, "zeroCountAsNoRecords": true,
                "malformed": [{"sequence": 4, "kind": "truncated"}, {"sequence": 1, "kind": "stray-context"}]}}
    """

    @Test(arguments: [full, oddities])
    func parsingTheWrittenFileGivesTheSameMeter(_ text: String) throws {
        let meter = try MeterFile.parse(text)
        let written = MeterFile.json(meter).compactText
        let again = try MeterFile.parse(written)
        #expect(again == meter)
        // And writing is stable: the second file is the first.
        #expect(MeterFile.json(again).compactText == written)
    }

    @Test func absentIdentityStringsStayAbsent() throws {
        let meter = try MeterFile.parse(Self.oddities)
        #expect(meter.deviceInformation == DeviceInformation(manufacturer: nil, model: "No Maker", serial: nil,
                                                             firmware: nil, software: nil))
        let again = try MeterFile.parse(MeterFile.json(meter).compactText)
        #expect(again.deviceInformation.manufacturer == nil)
    }

    @Test func aLeadingZeroPINKeepsItsSixDigits() throws {
        let json = MeterFile.json(try MeterFile.parse(Self.oddities))
        #expect(json["pin"]?.stringValue == "004711")
    }

    @Test func recordsAreWrittenWithTheirValuesAndTimesAsGiven() throws {
        let json = MeterFile.json(try MeterFile.parse(Self.full))
        let first = try #require(json["records"]?.arrayValue?.first)
        #expect(first.compactText == #"{"sequence":4,"time":"2024-03-05T07:30:00","timeOffset":60,"mgdl":111.0,"unit":"kg/L","type":8,"location":15}"#)
    }
}
