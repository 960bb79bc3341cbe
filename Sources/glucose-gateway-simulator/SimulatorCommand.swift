import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import DBusKit
import GatewayCore
import GlucoseProfile
import MeterCapture
import MeterSimulator
import Support

enum SimulatorCommand {
    static let help = """
    usage: glucose-gateway-simulator --list-profiles
           glucose-gateway-simulator --standin [--bus ADDRESS] (--meter FILE ... | METER FLAGS) [OPTIONS]
           glucose-gateway-simulator --bluez [--adapter hciN] [--bus ADDRESS] (--meter FILE | METER FLAGS) [OPTIONS]

    Plays a Bluetooth LE glucose meter (Glucose Service 0x1808: 0x2A18, 0x2A34, 0x2A51, 0x2A52 with the
    Record Access Control Point, and Device Information 0x180A) behind one of two front ends:

      --standin   a BlueZ stand-in for machines without Bluetooth: owns org.bluez on the bus and presents
                  adapter hci0 (powered), one device per meter and their GATT objects as a central sees them
                  on BlueZ 5.66+: ObjectManager, PropertiesChanged, discovery sessions with the UUID filter and
                  device expiry, Connect replying before ServicesResolved, Pair calling the caller's agent
                  (RequestPasskey; wrong PIN: AuthenticationFailed), GLS refusing access before bonding,
                  notify sessions per sender, disconnect signals in BlueZ's order, RemoveDevice.
                  Several meters: repeat --meter. Prints "ready <unique-name>" on stdout each time it owns
                  org.bluez (again after RestartBluetoothd).
      --bluez     a peripheral on real BlueZ: GattManager1.RegisterApplication and
                  LEAdvertisingManager1.RegisterAdvertisement on --adapter (default hci0), so a second
                  adapter or a second Pi plays a meter next to a real gateway. Prints "ready" once registered.
                  The meter has its adapter's address (--address is not needed). Pairing uses the meter's
                  PIN (--pin, or "pin" in the meter file; default 123456): a KeyboardOnly agent, registered
                  as the default agent of this bluetoothd, answers RequestPasskey with it, so a gateway
                  given another PIN fails. With --display-passkey the kernel chooses the passkey instead
                  and a DisplayOnly agent prints it as a stdout line "display passkey NNNNNN for DEVICE".

    Options:
      --bus ADDRESS           D-Bus address (default: DBUS_SYSTEM_BUS_ADDRESS, else the system bus)
      --meter FILE            JSON meter file (see below), or a capture of `glucose-gateway capture`
                              (docs/captures.md), replayed; repeatable with --standin
      --time-scale X          run simulated time X times faster (delays, new records, bursts, expiry)
      --state FILE            (--standin) keep bonds in FILE (mode 0600) across processes
      --temporary-timeout S   (--standin) seconds before an unpaired, unconnected device expires (30)
      --no-acquire-notify     (--standin) do not offer AcquireNotify on notify characteristics (BlueZ does,
                              and so does the stand-in by default; --acquire-notify is accepted as well)
      --no-disconnected-signal  (--standin) no Device1.Disconnected signal when a link ends, as BlueZ
                              5.66 and 5.82 (Raspberry Pi OS bookworm and trixie); 5.83+ sends one
      --deferred-removal      (--standin) after a link the meter ended by refusing the stored key,
                              RemoveDevice answers but the device, its bond and key stay until its next
                              link ends, as BlueZ 5.82 (trixie); by default removed at once, as 5.66
      --adapter hciN          (--bluez) adapter to register on; (--standin) name of the simulated adapter
      --display-passkey       (--bluez) show a kernel-chosen passkey instead of imposing the meter's PIN
      --adapter-address A     (--standin) address of the simulated adapter

    Meter flags (instead of --meter):
      --profile NAME   a built-in meter (see --list-profiles); the other meter flags change it
      --address AA:BB:CC:DD:EE:FF   --name NAME   --pin 123456   --no-bonding
      --records N   --first-sequence S   --start 2024-03-05T07:30:00   --interval-minutes M
      --time-offset MIN   --unit kg/L|mol/L   --with-context   --no-context-characteristic
      --control-at SEQ   --high-at SEQ   --low-at SEQ   (repeatable)
      --new-record-every S   --advertise always|off|ON/OFF (seconds on/off bursts)
      Faults: --drop-after N   --drop-times K   --fail-after N   --notify-delay-ms MS   --context-before
              --malformed-at SEQ[:truncated|invalid-time|stray-context|garbage-context]
              --zero-count-as-no-records
      Clock: --clock cts|gls-date-time|vendor|vendor-v1.5|none (default none)
             --clock-skew S (meter minus true time)
             --clock-read-only   --clock-utc-offset MIN (the meter's zone, no DST; default 0)

    Meter file (JSON; unknown keys are errors):
      {"profile": "accu-chek-guide" (optional: the keys below then change the profile; records as a whole),
       "address": "C0:26:DA:01:02:03", "name": "meter+06543210", "pin": "123456",
       "bonding": true, "unit": "kg/L", "rssi": -60, "contextCharacteristic": true, "timeFilter": true,
       "deviceInformation": {"manufacturer": "...", "model": "...", "serial": "...", "firmware": "..."},
       "features": ["highLow", "multipleBond"],
       "records": [{"sequence": 4, "time": "2024-03-05T07:30:00", "timeOffset": 60, "mgdl": 111,
                    "type": 1, "location": 1, "status": ["batteryLow"], "context": {"meal": 1}},
                   {"sequence": 5, "time": "...", "mmol": 5.5, "unit": "mol/L"},
                   {"sequence": 6, "time": "...", "result": "low"}, {"sequence": 7, ..., "control": true}],
       "generate": {"count": 20, "firstSequence": 100, "start": "...", "intervalMinutes": 240},
       "newRecords": {"everySeconds": 30, "limit": 5, "mgdl": 120},
       "advertising": "always" | "off" | {"onSeconds": 5, "offSeconds": 25},
       "faults": {"dropLinkAfter": 3, "dropLinkTimes": 1, "failProcedureAfter": 5, "notificationDelayMs": 50,
                  "contextOrder": "before", "malformed": [{"sequence": 7, "kind": "truncated"}],
                  "zeroCountAsNoRecords": false},
       "clock": {"kind": "cts" | "gls-date-time" | "vendor" | "vendor-v1.5" | "none", "writable": true,
                 "skewSeconds": -300, "utcOffsetMinutes": 60, "driftSecondsPerDay": 2},
       "pairing": "passkey-entry" (default: LE Secure Connections, the meter shows its PIN)
                  | "legacy-passkey-entry" | "just-works" | "numeric-comparison" (the PIN is the six
                  digits both screens show), or {"method": ..., "startsPairing": true (SMP Security
                  Request after connecting), "answer": "completes" | "cancels" | "never-answers"}}

    Control interface (--standin): object \(controlPath) on the stand-in's connection (destination
    org.bluez), interface org.glucosegateway.Simulator1:
    \(controlSummary)
    Stops on SIGINT or SIGTERM (exit 0), or when the bus goes away (exit 69).
    """
    static let options = OptionTable(
        values: [
            "--bus", "--time-scale", "--state", "--temporary-timeout", "--adapter", "--adapter-address",
            "--address", "--name", "--pin", "--records", "--first-sequence", "--start", "--interval-minutes",
            "--time-offset", "--unit", "--new-record-every", "--advertise", "--drop-after", "--drop-times",
            "--fail-after", "--notify-delay-ms", "--clock", "--clock-skew", "--clock-utc-offset", "--profile",
        ],
        flags: [
            "--standin", "--bluez", "--acquire-notify", "--no-acquire-notify", "--no-disconnected-signal", "--deferred-removal", "--display-passkey", "--no-bonding", "--with-context",
            "--no-context-characteristic", "--context-before", "--zero-count-as-no-records", "--clock-read-only", "--list-profiles",
        ],
        repeatable: ["--meter", "--control-at", "--high-at", "--low-at", "--malformed-at"]
    )

    static var controlPath: String { StandInDocs.controlPath }
    static var controlSummary: String { StandInDocs.controlSummary }

    static func run(_ arguments: inout Arguments, environment: [String: String], logger: Logger) async throws -> ExitStatus {
        if arguments.flag("--list-profiles") {
            try arguments.finish()
            StandardStream.writeOutput(profileList())
            return .ok
        }
        let standin = arguments.flag("--standin")
        let bluez = arguments.flag("--bluez")
        guard standin != bluez else {
            throw GatewayFailure(.usage, "choose one front end: --standin or --bluez")
        }
        let bus = try arguments.option("--bus") ?? environment["DBUS_SYSTEM_BUS_ADDRESS"]
            ?? "unix:path=/var/run/dbus/system_bus_socket"
        let scale = try timeScale(&arguments)
        let files = try arguments.options("--meter")
        let statePath = try arguments.option("--state")
        let temporaryTimeout = try arguments.secondsOption("--temporary-timeout")
        let adapter = try arguments.option("--adapter")
        let adapterAddress = try arguments.option("--adapter-address")
        let offersAcquire = arguments.flag("--acquire-notify")
        let acquireNotify = offersAcquire || !arguments.flag("--no-acquire-notify")
        let disconnectedSignal = !arguments.flag("--no-disconnected-signal")
        let deferredRemoval = arguments.flag("--deferred-removal")
        let displayPasskey = arguments.flag("--display-passkey")
        var meters: [MeterDescription] = []
        for path in files { meters.append(try loadMeter(path)) }
        let flagged = try meterFromFlags(&arguments, requireAddress: !bluez)
        try arguments.finish()
        if let flagged {
            guard meters.isEmpty else { throw GatewayFailure(.usage, "use either --meter files or meter flags, not both") }
            meters.append(flagged.meter)
        }
        guard !meters.isEmpty else { throw GatewayFailure(.usage, "describe a meter with --meter FILE or --address/--pin flags") }
        var seen = Set<String>()
        for m in meters where !seen.insert(m.address).inserted {
            throw GatewayFailure(.usage, "two meters have the address \(m.address)")
        }
        let clock = SimulationClock(scale: scale)
        let signals = ProcessSignals([SIGINT, SIGTERM])

        if standin {
            var options = StandInOptions(busAddress: bus)
            options.clock = clock
            options.statePath = statePath
            options.offerAcquireNotify = acquireNotify
            options.disconnectedSignal = disconnectedSignal
            options.removalWaitsForNextLinkAfterAuthenticationFailure = deferredRemoval
            if let t = temporaryTimeout { options.temporaryTimeout = t }
            if let adapter { options.adapterName = adapter }
            if let a = adapterAddress {
                guard let n = MeterDescription.normalizedAddress(a) else {
                    throw GatewayFailure(.usage, "--adapter-address must look like AA:BB:CC:DD:EE:FF")
                }
                options.adapterAddress = n
            }
            let standIn = BlueZStandIn(meters: meters, options: options, logger: logger) { unique in
                StandardStream.writeOutput("ready \(unique)\n")
            }
            do {
                try await standIn.start()
            } catch {
                await standIn.stop()
                throw GatewayFailure(.unavailable, "cannot own org.bluez on \(bus): \(error)")
            }
            let lost = await signals.wait(orUntil: { await standIn.waitUntilBusLost() })
            await standIn.stop()
            return lost ? .unavailable : .ok
        }

        guard meters.count == 1, var meter = meters.first else {
            throw GatewayFailure(.usage, "--bluez plays one meter")
        }
        if displayPasskey, flagged?.passkeyGiven == true {
            throw GatewayFailure(.usage, "--display-passkey shows a kernel-chosen passkey; it does not go with --pin")
        }
        // On real BlueZ the meter is its adapter: it has the adapter's address, whatever --address says.
        let adapterName = adapter ?? "hci0"
        let own: String
        do {
            own = try await BlueZPeripheralFrontEnd.adapterAddress(busAddress: bus, adapterName: adapterName)
        } catch {
            throw GatewayFailure(.unavailable, "cannot read the address of adapter \(adapterName) on \(bus): \(error)")
        }
        if flagged?.addressGiven == true || !files.isEmpty, meter.address != own {
            logger.notice("the meter has the address of \(adapterName), \(own), not \(meter.address)")
        }
        if flagged?.nameGiven == false { meter.name = defaultName(own) }
        meter.address = own
        let frontEnd = BlueZPeripheralFrontEnd(
            meter: meter,
            options: .init(busAddress: bus, adapterName: adapterName, clock: clock,
                           passkey: displayPasskey ? .display : .fixed(meter.passkey),
                           display: { text in StandardStream.writeOutput("display \(text)\n") }),
            logger: logger)
        do {
            try await frontEnd.start()
        } catch {
            await frontEnd.stop()
            throw GatewayFailure(.unavailable, "cannot register the meter with BlueZ on \(bus): \(error)")
        }
        StandardStream.writeOutput("ready\n")
        let lost = await signals.wait(orUntil: { await frontEnd.waitUntilBusLost() })
        await frontEnd.stop()
        return lost ? .unavailable : .ok
    }

    /// One line per built-in profile: its name and what it reproduces.
    static func profileList() -> String {
        let width = (MeterProfile.names.map(\.count).max() ?? 0) + 2
        return MeterProfile.all.map { p in
            p.name + String(repeating: " ", count: max(1, width - p.name.count)) + p.summary + "\n"
        }.joined()
    }

    static func timeScale(_ arguments: inout Arguments) throws(GatewayFailure) -> Double {
        guard let text = try arguments.option("--time-scale") else { return 1 }
        guard let v = Double(text), v >= 0.001, v <= 100_000 else {
            throw GatewayFailure(.usage, "--time-scale must be a number in 0.001...100000, got '\(text)'")
        }
        return v
    }

    static func loadMeter(_ path: String) throws -> MeterDescription {
        guard let data = FileContents.read(path) else {
            throw GatewayFailure(.dataError, "cannot read meter file \(path)")
        }
        // A capture (docs/captures.md) has a "format" member, which no meter file has.
        if let json = try? JSONValue.parse(data), Capture.isCapture(json) {
            do {
                return try MeterDescription(replaying: Capture.parse(json))
            } catch {
                throw GatewayFailure(.dataError, "capture \(path): \(error.description)")
            }
        }
        do {
            return try MeterFile.parse(data)
        } catch {
            throw GatewayFailure(.dataError, "meter file \(path): \(error.description)")
        }
    }
}
