import GatewayCore
import Support
import SyncEngine
import Testing
@testable import Gateway

/// `[nightscout] treatments`, `units` and `out_of_range_notes`.
@Suite("Treatment settings")
struct TreatmentConfigTests {
    static func evaluate(_ text: String) -> (config: GatewayConfig, problems: [ConfigProblem]) {
        ConfigLoader.evaluate(bytes: Array(text.utf8), path: "/nonexistent-dir/gw.toml")
    }

    @Test func offByDefault() {
        let n = NightscoutSection()
        #expect(!n.treatments)
        #expect(n.units == .mgdl)
        #expect(!n.outOfRangeNotes)
    }

    @Test func keysAreReadAndShown() {
        let (config, problems) = Self.evaluate("[nightscout]\ntreatments = true\nunits = \"mmol\"\nout_of_range_notes = true\n")
        #expect(problems.isEmpty)
        #expect(config.nightscout.treatments)
        #expect(config.nightscout.units == .mmol)
        #expect(config.nightscout.outOfRangeNotes)
        let lines = config.summaryLines()
        #expect(lines.contains("treatments: true"))
        #expect(lines.contains("units: mmol"))
        #expect(lines.contains("out_of_range_notes: true"))
    }

    @Test(arguments: ["\"mg/dL\"", "\"mmol/l\"", "\"\"", "18"])
    func otherUnitsAreRefusedWithTheLine(_ value: String) {
        let (config, problems) = Self.evaluate("[nightscout]\n\nunits = \(value)\n")
        #expect(problems.count == 1)
        #expect(problems.first?.line == 3)
        #expect(problems.first?.message.contains("units") == true)
        #expect(config.nightscout.units == .mgdl)
    }

    @Test func treatmentsMustBeABoolean() {
        let (_, problems) = Self.evaluate("[nightscout]\ntreatments = \"yes\"\n")
        #expect(problems.count == 1)
        #expect(problems.first?.message.contains("treatments") == true)
    }
}
