import BlueZ
import Gateway
import GatewayCore
import Support

enum ScanCommand: GatewayCommand {
    static let name = "scan"
    static let abstract = "List nearby meters advertising the Glucose Service"
    static let help = """
    usage: glucose-gateway scan [--timeout SECONDS] [--adapter hciN] [--json]

    Scans for Bluetooth LE devices advertising the Glucose Service (0x1808) and lists them: address, name,
    signal strength (RSSI, dBm) and whether this gateway is paired with them. Most meters advertise only
    for a short while after a measurement or a press of their Bluetooth button.
      --timeout SECONDS  how long to scan (default 10)
      --adapter hciN     the Bluetooth adapter (default: [gateway] adapter, else the first powered one)
      --json             a JSON array instead of a table
    Exit status: 0 (also when nothing was found), 69 no Bluetooth adapter or bluetoothd.
    """
    static let options = OptionTable(values: ["--timeout", "--adapter"], flags: ["--json"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let timeout = try arguments.secondsOption("--timeout", max: 600) ?? 10
        let adapterOption = try arguments.option("--adapter")
        let json = arguments.flag("--json")
        try arguments.finish()
        let config = try context.loadConfig(forMeterCommand: name)
        let radio = try await BlueZMeterRadio.open(waitingForAdapter: adapterOption ?? config.gateway.adapter, logger: context.logger)
        let found: [NearbyMeter]
        do {
            found = try await radio.scan(timeout: .milliseconds(Int(timeout * 1000)))
        } catch {
            await radio.close()
            throw GatewayFailure(.unavailable, "scan failed: \(error.message)")
        }
        await radio.close()
        if json {
            let items = found.map { m -> JSONValue in
                var o = JSONObjectBuilder()
                o.add("address", m.address)
                o.add("name", m.name)
                o.add("rssi", m.rssi)
                o.add("paired", m.paired)
                return o.value
            }
            StandardStream.writeOutput(JSONValue.array(items).prettyText + "\n")
            return .ok
        }
        if found.isEmpty {
            StandardStream.writeOutput("no meter found (press the meter's Bluetooth button and scan again)\n")
            return .ok
        }
        let rows = found.map { m in
            [m.address, m.name.map { TerminalText.escaped($0, limit: 40) } ?? "-", m.rssi.map { "\($0) dBm" } ?? "-", m.paired ? "yes" : "no"]
        }
        StandardStream.writeOutput(MeterCommandSupport.table(["ADDRESS", "NAME", "RSSI", "PAIRED"], rows))
        return .ok
    }
}
