import Gateway
import GatewayCore
import Meters
import SQLiteStore
import Support

enum MetersCommand: GatewayCommand {
    static let name = "meters"
    static let abstract = "List paired meters"
    static let help = """
    usage: glucose-gateway meters [--all] [--json]
           glucose-gateway meters set-clock ADDRESS [--wait SECONDS] [--adapter hciN]

    Lists the paired meters: address, model, serial, time zone, readings stored, last sync and the meter
    clock's skew at that sync; a meter that lost its bond is named below the table as "re-pair needed"
    ("state" in the JSON: ok or re-pair-needed).
      --all    also meters that were unpaired (their readings are kept)
      --json   one JSON array instead of a table

    \(MeterSetClockCommand.help)
    """
    static let options = OptionTable(values: ["--wait", "--adapter"], flags: ["--all", "--json"])

    /// The camelCase keys `--json` printed before its keys became snake_case (see `DeprecatedJSONKeys`).
    static let deprecatedKeys: KeyValuePairs<String, String> = [
        "time_zone": "timeZone", "paired_at": "pairedAt", "unpaired_at": "unpairedAt",
        "highest_sequence": "highestSequence", "last_sync": "lastSync", "clock_skew_seconds": "clockSkewSeconds",
    ]

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        if let action = arguments.positional() {
            guard action == "set-clock" else {
                throw GatewayFailure(.usage, "unknown action '\(TerminalText.escaped(String(action.prefix(40))))' (\(MeterSetClockCommand.usage))")
            }
            return try await MeterSetClockCommand.run(&arguments, context: context)
        }
        let all = arguments.flag("--all")
        let json = arguments.flag("--json")
        try arguments.finish()
        let config = try context.loadConfig(forMeterCommand: name)
        let (meters, counts, clocks) = try await MeterCommandSupport.withStore(config, readingOnly: "meters") { store in
            let meters = try await store.meters(includingUnpaired: all)
            var counts: [String: Int] = [:]
            var clocks: [String: [ClockSync]] = [:]
            for m in meters {
                counts[m.info.address] = try await store.readingCount(meterAddress: m.info.address)
                clocks[m.info.address] = try await store.clockHistory(m.info.address)
            }
            return (meters, counts, clocks)
        }
        if json {
            let items: [JSONValue] = meters.map { m in
                var o = JSONObjectBuilder()
                o.add("address", m.info.address)
                o.add("name", m.info.name)
                o.add("manufacturer", m.info.manufacturer)
                o.add("model", m.info.model)
                o.add("serial", m.info.serial)
                o.add("firmware", m.info.firmware)
                o.add("time_zone", m.info.timeZone)
                o.add("features", m.info.features)
                o.add("paired_at", m.info.pairedAt.map(MeterCommandSupport.isoUTC))
                o.add("unpaired_at", m.unpairedAt.map(MeterCommandSupport.isoUTC))
                o.add("highest_sequence", m.info.highestSequence)
                o.add("last_sync", m.info.lastSync.map(MeterCommandSupport.isoUTC))
                o.add("clock_skew_seconds", m.info.lastClockSkewSeconds)
                o.add("readings", counts[m.info.address] ?? 0)
                o.add("clock_history", ReadingClocks.historyJSON(clocks[m.info.address] ?? []))
                o.add("handling", .array(m.info.handling.kinds.map { .string($0.rawValue) }))
                o.add("state", m.info.bondLostAt == nil ? "ok" : "re-pair-needed")
                return DeprecatedJSONKeys.adding(deprecatedKeys, to: o.value)
            }
            StandardStream.writeOutput(JSONValue.array(items).prettyText + "\n")
            return .ok
        }
        if meters.isEmpty {
            StandardStream.writeOutput("no paired meters (pair one with: glucose-gateway pair ADDRESS --pin PIN)\n")
            return .ok
        }
        let rows = meters.map { m -> [String] in
            // One typed row, then the state: Swift 6.0 gives up type-checking it as one expression.
            let row: [String] = [
                m.info.address,
                m.info.model ?? m.info.name ?? "-",
                m.info.serial ?? "-",
                m.info.timeZone,
                String(counts[m.info.address] ?? 0),
                m.info.lastSync.map(MeterCommandSupport.isoUTC) ?? "never",
                m.info.lastClockSkewSeconds.map { "\($0) s" } ?? "-",
                m.info.handling.isEmpty ? "-" : m.info.handling.kinds.map(\.rawValue).joined(separator: ","),
            ]
            return all ? row + [m.unpairedAt == nil ? "paired" : "unpaired"] : row
        }
        let header = ["ADDRESS", "MODEL", "SERIAL", "TIME ZONE", "READINGS", "LAST SYNC", "CLOCK SKEW", "HANDLING"] + (all ? ["STATE"] : [])
        StandardStream.writeOutput(MeterCommandSupport.table(header, rows))
        for m in meters { StandardStream.writeOutput(ReadingClocks.historyText(m.info.address, clocks[m.info.address] ?? [])) }
        for m in meters where m.unpairedAt == nil && m.info.bondLostAt != nil {
            StandardStream.writeOutput("\(m.info.address): re-pair needed (the meter lost its bond); run: glucose-gateway pair \(m.info.address) --pin PIN\n")
        }
        return .ok
    }
}
