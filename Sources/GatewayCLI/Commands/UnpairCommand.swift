import BlueZ
import Gateway
import GatewayCore
import Support

enum UnpairCommand: GatewayCommand {
    static let name = "unpair"
    static let abstract = "Forget a meter (its readings are kept)"
    static let help = """
    usage: glucose-gateway unpair ADDRESS [--adapter hciN]

    Forgets a paired meter: the gateway stops downloading from it and removes its Bluetooth bond. Its
    readings stay in the database (see `readings --meter ADDRESS`) and are still uploaded if pending.
    Exit status: 0 unpaired; 1 no such paired meter; 64 bad arguments.
    """
    static let options = OptionTable(values: ["--adapter"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let addressText = arguments.positional()
        let adapterOption = try arguments.option("--adapter")
        try arguments.finish()
        let address = try MeterCommandSupport.address(addressText, command: "unpair")
        let config = try context.loadConfig(forMeterCommand: name)
        let now = SystemClock.now()
        let removed = try await MeterCommandSupport.withStore(config) { store in
            let removed = try await store.unpair(address, at: now)
            if removed {
                try await store.log(GatewayEvent(at: now, kind: .unpaired, meterAddress: address, message: "unpaired; readings kept"))
            }
            return removed
        }
        // The bond lives in bluetoothd; without it the meter is forgotten here all the same.
        var bondRemoved = false
        do {
            let radio = try await BlueZMeterRadio.open(waitingForAdapter: adapterOption ?? config.gateway.adapter, logger: context.logger)
            do {
                bondRemoved = try await radio.forget(address: address)
            } catch {
                StandardStream.writeError("glucose-gateway unpair: warning: could not remove the Bluetooth bond: \(TerminalText.escaped(error.message))\n")
            }
            await radio.close()
        } catch {
            if removed {
                StandardStream.writeError("glucose-gateway unpair: warning: Bluetooth bond not removed: \(TerminalText.escaped(error.message))\n")
            }
        }
        guard removed || bondRemoved else {
            throw GatewayFailure(.failure, "no paired meter \(address) (see glucose-gateway meters)")
        }
        StandardStream.writeOutput("unpaired \(address); its readings are kept\n")
        return .ok
    }
}
