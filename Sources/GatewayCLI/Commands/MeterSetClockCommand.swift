import BlueZ
import Gateway
import GatewayCore
import Meters
import SQLiteStore
import Support

/// `glucose-gateway meters set-clock ADDRESS [--wait SECONDS] [--adapter hciN]`: sets one meter's clock once
/// (see `MeterClockSession`). Reached through `meters`, whose option table carries `--wait` and `--adapter`.
enum MeterSetClockCommand {
    static let usage = "usage: glucose-gateway meters set-clock ADDRESS [--wait SECONDS] [--adapter hciN]"
    static let help = """
    \(usage)

    Sets the meter's clock once to the gateway's time, as the local time of the meter's time zone (so the
    meter follows daylight saving time), through Current Time 0x2A2B where the meter takes it, else Date Time
    0x2A08, else the i-SENS vendor clock. Holds the meter's session lock as sync does, reads the clock first
    (nothing is written when its value is not a usable date), writes, reads it back where the meter allows,
    logs the old and the new time and records a clock-set event. Downloads nothing; past readings keep their
    times, and the clock as read and as written join the meter's clock history, so the next sync places the
    readings taken before the write on the old clock (where their order cannot tell, time-uncertain). A
    daemon can do this by itself: [gateway] set_meter_clock = true.
      --wait SECONDS   how long to wait for the meter to start advertising (default 0: connect at once)
      --adapter hciN   the Bluetooth adapter (default: [gateway] adapter, else the first powered one)
    Exit status: 0 set; 1 not a paired meter, or the meter refused the write; 64 bad arguments; 65 the
    meter's clock value is not a usable date; 69 not reachable, no adapter, or no clock the gateway can
    reach; 75 another glucose-gateway process is using the meter; 78 configuration error or the meter's
    time zone cannot be loaded.
    """

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let addressText = arguments.positional()
        let wait = try arguments.secondsOption("--wait", max: 3600) ?? 0
        let adapterOption = try arguments.option("--adapter")
        try arguments.finish()
        let address = try MeterCommandSupport.address(addressText, command: "meters set-clock")
        let config = try context.loadConfig(forMeterCommand: "meters")
        let logger = context.logger.with(label: "set-clock")
        let store = try MeterCommandSupport.openStore(config)
        let meter: MeterInfo?
        do {
            meter = try await store.meters().map(\.info).first { $0.address == address }
        } catch {
            await store.close()
            throw MeterCommandSupport.storeFailure(error, config: config)
        }
        guard let meter else {
            await store.close()
            throw GatewayFailure(.failure, "\(address) is not a paired meter (pair it first: glucose-gateway pair \(address) --pin PIN)")
        }
        let radio: BlueZMeterRadio
        do {
            radio = try await BlueZMeterRadio.open(waitingForAdapter: adapterOption ?? config.gateway.adapter, logger: logger)
        } catch {
            await store.close()
            throw GatewayFailure(.unavailable, error.message)
        }
        let session = MeterClockSession(radio: radio, store: store, logger: logger, lockDatabase: config.gateway.database)
        let outcome = await session.run(meter, wait: .milliseconds(Int(wait * 1000)))
        await radio.close()
        await store.close()
        switch outcome {
        case .set(let written, let skew, let after):
            var line = "\(address): clock set through \(written.access): was \(written.old), now \(written.new) (\(meter.timeZone)); it was off by \(skew) s"
            if let after { line += "; the meter now shows \(after)" }
            StandardStream.writeOutput(TerminalText.escaped(line) + "\n")
            return .ok
        case .busy:
            throw GatewayFailure(.tempFail, "\(address): another glucose-gateway process is using the meter; try again")
        case .lockFailed(let message):
            throw GatewayFailure(.failure, "\(address): \(message)")
        case .unreachable(let why):
            throw GatewayFailure(.unavailable, "\(address): not reachable (\(why))")
        case .noClock:
            throw GatewayFailure(.unavailable, "\(address): the meter has no clock the gateway can set (no Current Time, Date Time or vendor clock)")
        case .unusableClock:
            throw GatewayFailure(.dataError, "\(address): the meter's clock value is not a usable date; nothing was written (set it on the meter)")
        case .zoneUnknown(let zone):
            throw GatewayFailure(.config, "\(address): the meter's time zone '\(zone)' cannot be loaded; nothing was written")
        case .refused(let message):
            throw GatewayFailure(.failure, "\(address): the meter refused to set its clock: \(message)")
        }
    }
}
