import BlueZ
import Gateway
import GatewayCore
import Support

enum PairCommand: GatewayCommand {
    static let name = "pair"
    static let abstract = "Pair a meter with its PIN and remember it"
    static let help = """
    usage: glucose-gateway pair ADDRESS --pin PIN [--timezone Area/City] [--adapter hciN] [--wait SECONDS]

    Pairs this gateway with a glucose meter and remembers it. Put the meter in pairing mode (usually: hold
    its Bluetooth button until the PIN shows), then run this with the six-digit PIN on its display. The
    command waits for the meter to advertise, pairs through the gateway's passkey agent, trusts it, checks
    that it is a glucose meter, reads its identity and stores it.
      --pin PIN            the six digits the meter shows
      --timezone Area/City the zone the meter's clock is set in (default: [gateway] time_zone, else the
                           system zone); reading times are read in this zone and stored as UTC
      --adapter hciN       the Bluetooth adapter (default: [gateway] adapter, else the first powered one)
      --wait SECONDS       how long to wait for the meter to advertise (default 60)
    Meters that keep a single bond forget the user's phone when the gateway pairs: a warning says so.
    A meter bonded already keeps its bond (shown to work by an encrypted read); the PIN is then not
    checked: unpair first to pair anew.
    Exit status: 0 paired, or bonded already and the bond kept; 1 wrong PIN, a bond that no longer works,
    or not a meter; 64 bad arguments; 69 meter not seen, did not answer in time, or no adapter.
    """
    static let options = OptionTable(values: ["--pin", "--timezone", "--adapter", "--wait"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let addressText = arguments.positional()
        let pinText = try arguments.option("--pin")
        let zoneOption = try arguments.option("--timezone")
        let adapterOption = try arguments.option("--adapter")
        let wait = try arguments.secondsOption("--wait", max: 600) ?? 60
        try arguments.finish()
        let address = try MeterCommandSupport.address(addressText, command: "pair")
        guard let pinText else { throw GatewayFailure(.usage, "pair needs --pin with the six digits the meter shows") }
        guard let passkey = MeterPairing.passkey(pinText) else {
            throw GatewayFailure(.usage, "the PIN must be exactly 6 digits")
        }
        let config = try context.loadConfig(forMeterCommand: name)
        let zone = zoneOption ?? config.gateway.timeZone ?? MeterTimeZone.systemIdentifier(environment: context.environment)
        guard MeterTimeZone(identifier: zone, environment: context.environment) != nil else {
            throw GatewayFailure(.usage, "--timezone: '\(zone.prefix(60))' is not a known time zone (Area/City, e.g. Europe/Berlin)")
        }
        // Open the database first: a pairing that cannot be stored is not worth doing.
        let store = try MeterCommandSupport.openStore(config)
        let radio: BlueZMeterRadio
        do {
            radio = try await BlueZMeterRadio.open(waitingForAdapter: adapterOption ?? config.gateway.adapter, logger: context.logger)
        } catch {
            await store.close()
            throw error
        }
        StandardStream.writeError("waiting for \(address) to advertise (press the meter's Bluetooth button)...\n")
        let pairing = MeterPairing(radio: radio, store: store, logger: context.logger,
                                   advertiseTimeout: .milliseconds(Int(wait * 1000)))
        let result: PairingResult
        do {
            result = try await pairing.run(address: address, passkey: passkey, timeZone: zone)
        } catch {
            await radio.close()
            await store.close()
            throw error
        }
        await radio.close()
        await store.close()
        let m = result.meter
        var what = [m.manufacturer, m.model].compactMap { $0 }.joined(separator: " ")
        if what.isEmpty { what = m.name ?? "meter" }
        if let serial = m.serial { what += ", serial \(serial)" }
        if result.keptExistingBond {
            StandardStream.writeOutput("\(address) (\(TerminalText.escaped(what))) was paired already: kept the existing bond, time zone \(TerminalText.escaped(zone)); the PIN was not checked (to pair anew: glucose-gateway unpair \(address), then pair)\n")
        } else {
            StandardStream.writeOutput("paired \(address) (\(TerminalText.escaped(what))), time zone \(TerminalText.escaped(zone))\n")
        }
        if result.singleBond {
            StandardStream.writeError("""
            warning: this meter keeps a single bond: pairing the gateway may have un-paired the user's phone app.
            Re-pairing the phone will in turn un-pair the gateway.

            """)
        }
        return .ok
    }
}
