import BlueZ
import Gateway
import GatewayCore
import MeterCapture
import Meters
import Support

enum CaptureCommand: GatewayCommand {
    static let name = "capture"
    static let abstract = "Record one session with a meter into a file to attach to a bug report"
    static let help = """
    usage: glucose-gateway capture ADDRESS --output FILE [--redact-values] [--wait SECONDS] [--adapter hciN]

    Connects to a paired meter and records one session into FILE (mode 0600): Device Information, the
    Glucose Feature, the clock, and a report of all the meter's records, each GATT value in order with its
    time. FILE also names the meter's model and firmware, this gateway's version and BlueZ's. It holds
    nothing that identifies the meter or its user: the address is replaced by 00:00:5E:00:53:01, and the
    serial number, System ID, name and keys are never written. Stores nothing in the database and
    changes nothing on the meter (no clock is set, no record deleted). The simulator replays FILE:
    `glucose-gateway-simulator --standin --meter FILE`. Format: docs/captures.md.
      --output FILE      where to write the capture (replaced if it exists)
      --redact-values    also take out the glucose values and times (concentrations become NaN, times
                         2000-01-01 00:00:00); the layout of every value stays
      --wait SECONDS     how long to wait for the meter to start advertising (default 0: connect at once)
      --adapter hciN     the Bluetooth adapter (default: [gateway] adapter, else the first powered one)
      --simulated-profile NAME   mark the capture as made from the simulator's profile NAME (for the
                         project's own captures of its simulator)
    Exit status: 0 written; 1 the session or the file failed; 64 bad arguments; 69 meter or adapter
    unavailable; 78 configuration error.
    """
    static let options = OptionTable(values: ["--output", "--wait", "--adapter", "--simulated-profile"], flags: ["--redact-values"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let addressText = arguments.positional()
        guard let output = try arguments.option("--output") else { throw GatewayFailure(.usage, "capture needs --output FILE") }
        let redactValues = arguments.flag("--redact-values")
        let wait = try arguments.secondsOption("--wait", max: 3600) ?? 0
        let adapterOption = try arguments.option("--adapter")
        let profile = try arguments.option("--simulated-profile")
        try arguments.finish()
        let address = try MeterCommandSupport.address(addressText, command: "capture")
        let config = try context.loadConfig(forMeterCommand: "capture")
        let logger = context.logger(for: config).with(label: "capture")

        let radio = try await BlueZMeterRadio.open(waitingForAdapter: adapterOption ?? config.gateway.adapter, logger: logger)
        // The meter's session lock, as `sync` and the daemon take it: one session with a meter at a time.
        let attempt = await MeterSessionLock.withLock(database: config.gateway.database, address: address) {
            () async -> Result<[CaptureEvent], GatewayFailure> in
            do {
                if wait > 0 { _ = try await radio.waitForMeter(address: address, timeout: .milliseconds(Int(wait * 1000))) }
                let link = try await radio.connect(address: address, timeout: .seconds(20))
                return .success(await CaptureSession.run(on: link))
            } catch let error as MeterAccessError {
                return .failure(GatewayFailure(.unavailable, "\(address): \(error)"))
            } catch let error as MeterLinkError {
                return .failure(GatewayFailure(.unavailable, "\(address): cannot connect: \(error.message)"))
            } catch {
                return .failure(GatewayFailure(.failure, "\(address): \(error)"))
            }
        }
        await radio.close()
        let events: [CaptureEvent]
        switch attempt {
        case .ran(.success(let e)): events = e
        case .ran(.failure(let failure)): throw failure
        case .held: throw GatewayFailure(.unavailable, "\(address) is in a session with another process (the service?); try again when it is done")
        case .unavailable(let error): throw GatewayFailure(.failure, "cannot take the meter's session lock: \(error)")
        }
        var redacted = ["address", "serial", "system-id", "name", "keys"]
        if redactValues { redacted.append("values") }
        let capture = Capture(origin: profile.map { .simulator(profile: $0) } ?? .meter, gatewayVersion: GatewayVersion.text,
                              // The stand-in plays BlueZ for the project's captures: no version of it to name.
                              bluezVersion: profile == nil ? BlueZVersion.installed() : nil, redacted: redacted,
                              events: redactValues ? Capture.redactingValues(events) : events)
        do {
            try AtomicFile.write(capture.text, to: output, mode: 0o600)
        } catch {
            throw GatewayFailure(.failure, "cannot write \(output): \(error)")
        }
        let values = events.filter { $0.kind == .value }.count
        StandardStream.writeOutput("wrote \(output): \(events.count) events, \(values) values from the meter\n")
        return .ok
    }
}

/// bluetoothd's version, from the package database of Debian and Raspberry Pi OS (the D-Bus API does not
/// say it); nil elsewhere.
enum BlueZVersion {
    static func installed(statusFile: String = "/var/lib/dpkg/status") -> String? {
        guard let bytes = FileContents.read(statusFile, limit: 64 << 20) else { return nil }
        return version(inDpkgStatus: String(decoding: bytes, as: UTF8.self))
    }

    static func version(inDpkgStatus text: String) -> String? {
        for stanza in text.split(separator: "\n\n", omittingEmptySubsequences: true) {
            let lines = stanza.split(separator: "\n")
            guard lines.contains("Package: bluez") else { continue }
            guard let line = lines.first(where: { $0.hasPrefix("Version: ") }) else { return nil }
            return String(line.dropFirst("Version: ".count).prefix(60))
        }
        return nil
    }
}
