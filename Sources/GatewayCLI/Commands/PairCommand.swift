import BlueZ
import Gateway
import GatewayCore
import Meters
import Support

enum PairCommand: GatewayCommand {
    static let name = "pair"
    static let abstract = "Pair a meter (with its PIN if it shows one) and remember it"
    static let help = """
    usage: glucose-gateway pair ADDRESS [--pin PIN] [--confirm] [--timezone Area/City] [--adapter hciN] [--wait SECONDS]

    Pairs this gateway with a glucose meter and remembers it. Put the meter in pairing mode (usually: hold
    its Bluetooth button), then run this. The command waits for the meter to advertise, pairs by the
    method the meter uses, trusts it, checks that it is a glucose meter, reads its identity and stores it.
    It says which method was used.

    Pairing methods:
      passkey entry        the meter shows six digits (its PIN): give them with --pin. Without --pin the
                           command stops (exit 64) and never guesses a PIN.
      numeric comparison   the meter and the gateway show the same six digits: on a terminal the command
                           shows them and asks whether the meter shows the same; confirm on the meter too.
                           Without a terminal it stops (exit 64) unless --confirm is given.
      Just Works           the meter asks for nothing (no display, or no PIN): it pairs without --pin. The
                           link is encrypted, but nothing proved that the device is your meter: check the
                           serial number printed.
      passkey on the meter a meter with a keypad: on a terminal the command shows six digits to type on
                           the meter; without one it stops (exit 64).
    A meter that starts the pairing itself (right after connecting) is answered the same way. With --pin
    the gateway pairs as a keyboard: a meter with a display then always shows a passkey to type (one with
    a yes/no button too); without --pin it pairs as a phone does (keyboard and display).

    Options:
      --pin PIN            the six digits the meter shows
      --confirm            numeric comparison without a terminal: print the six digits and accept them;
                           the person at the meter confirms there only if they match
      --timezone Area/City the zone the meter's clock is set in (default: [gateway] time_zone, else the
                           system zone); reading times are read in this zone and stored as UTC
      --adapter hciN       the Bluetooth adapter (default: [gateway] adapter, else the first powered one)
      --wait SECONDS       how long to wait for the meter to advertise (default 60)
    Meters that keep a single bond forget the user's phone when the gateway pairs: a warning says so.
    A meter bonded already keeps its bond (shown to work by an encrypted read); the PIN is then not
    checked: unpair first to pair anew.
    Exit status: 0 paired, or bonded already and the bond kept; 1 wrong PIN, numbers that did not match or
    were refused on the meter, the meter refused to pair, a bond that no longer works, or not a meter;
    64 bad arguments, or a PIN or a person needed that was not there; 69 meter not seen, did not answer in
    time, or no adapter.
    """
    static let options = OptionTable(values: ["--pin", "--timezone", "--adapter", "--wait"], flags: ["--confirm"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let addressText = arguments.positional()
        let pinText = try arguments.option("--pin")
        let confirm = arguments.flag("--confirm")
        let zoneOption = try arguments.option("--timezone")
        let adapterOption = try arguments.option("--adapter")
        let wait = try arguments.secondsOption("--wait", max: 600) ?? 60
        try arguments.finish()
        let address = try MeterCommandSupport.address(addressText, command: "pair")
        var passkey: UInt32?
        if let pinText {
            guard let pin = MeterPairing.passkey(pinText) else { throw GatewayFailure(.usage, "the PIN must be exactly 6 digits") }
            passkey = pin
        }
        let input = PairingQuestions.input(passkey: passkey, confirm: confirm, terminal: PairingQuestions.atTerminal)
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
            result = try await pairing.run(address: address, input: input, timeZone: zone)
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
            let unchecked = passkey == nil ? "" : "; the PIN was not checked"
            StandardStream.writeOutput("\(address) (\(TerminalText.escaped(what))) was paired already: kept the existing bond, time zone \(TerminalText.escaped(zone))\(unchecked) (to pair anew: glucose-gateway unpair \(address), then pair)\n")
        } else {
            let method = result.method ?? .justWorks
            StandardStream.writeOutput("paired \(address) (\(TerminalText.escaped(what))) by \(method.rawValue), time zone \(TerminalText.escaped(zone))\n")
            if method == .justWorks {
                let unused = passkey == nil ? "" : "; the PIN given was not used"
                StandardStream.writeError("note: the meter paired by Just Works (it asked for no PIN)\(unused): the link is encrypted, but nothing proved that the device is your meter; check the serial number above\n")
            }
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
