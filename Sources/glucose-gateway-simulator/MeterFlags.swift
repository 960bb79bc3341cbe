import GatewayCore
import GlucoseProfile
import MeterSimulator
import Support

/// The meter described by command-line flags instead of a meter file.
extension SimulatorCommand {
    /// A meter described by flags, and which of the identity flags were given.
    struct FlaggedMeter {
        var meter: MeterDescription
        var addressGiven: Bool
        var nameGiven: Bool
        var passkeyGiven: Bool
    }

    static func defaultName(_ address: String) -> String { "meter+" + address.filter { $0 != ":" }.suffix(8) }

    /// The meter described by flags, or nil when no meter flag is given. Without `requireAddress` (real
    /// BlueZ, where the adapter's address is used) a missing --address is filled in later.
    static func meterFromFlags(_ a: inout Arguments, requireAddress: Bool = true) throws -> FlaggedMeter? {
        func usage(_ f: MeterFileError) -> GatewayFailure { GatewayFailure(.usage, f.description) }
        let profileName = try a.option("--profile")
        var profile: MeterDescription?
        if let profileName {
            guard let p = MeterProfile.named(profileName) else {
                throw GatewayFailure(.usage, "--profile must be one of \(MeterProfile.names.joined(separator: ", ")); got '\(profileName.prefix(40))'")
            }
            profile = p.meter
        }
        let address = try a.option("--address")
        let name = try a.option("--name")
        let pin = try a.option("--pin")
        let noBonding = a.flag("--no-bonding")
        let count = try a.intOption("--records", in: 0...65536)
        let first = try a.intOption("--first-sequence", in: 0...65535)
        let start = try a.option("--start")
        let interval = try a.intOption("--interval-minutes", in: 1...100_000)
        let offset = try a.intOption("--time-offset", in: -32768...32767)
        let unitText = try a.option("--unit")
        let withContext = a.flag("--with-context")
        let noContextChar = a.flag("--no-context-characteristic")
        let controls = try a.options("--control-at")
        let highs = try a.options("--high-at")
        let lows = try a.options("--low-at")
        let newEvery = try a.secondsOption("--new-record-every")
        let advertise = try a.option("--advertise")
        let dropAfter = try a.intOption("--drop-after", in: 0...65536)
        let dropTimes = try a.intOption("--drop-times", in: 1...1_000_000)
        let failAfter = try a.intOption("--fail-after", in: 0...65536)
        let delayMs = try a.intOption("--notify-delay-ms", in: 0...60_000)
        let contextBefore = a.flag("--context-before")
        let malformed = try a.options("--malformed-at")
        let zeroCount = a.flag("--zero-count-as-no-records")
        let clockKind = try a.option("--clock"), clockSkew = try a.option("--clock-skew")
        let clockReadOnly = a.flag("--clock-read-only"), clockOffset = try a.option("--clock-utc-offset")

        let anyFlag = address != nil || name != nil || pin != nil || count != nil || first != nil || start != nil
            || interval != nil || offset != nil || unitText != nil || withContext || noContextChar || noBonding
            || !controls.isEmpty || !highs.isEmpty || !lows.isEmpty || newEvery != nil || advertise != nil
            || dropAfter != nil || dropTimes != nil || failAfter != nil || delayMs != nil || contextBefore
            || !malformed.isEmpty || zeroCount || clockKind != nil || clockSkew != nil || clockReadOnly || clockOffset != nil || profile != nil
        guard anyFlag else { return nil }

        let normalized: String
        if let addressText = address {
            guard let n = MeterDescription.normalizedAddress(addressText) else {
                throw GatewayFailure(.usage, "--address must look like AA:BB:CC:DD:EE:FF, got '\(addressText.prefix(40))'")
            }
            normalized = n
        } else if let profile {
            normalized = profile.address
        } else {
            guard !requireAddress else {
                throw GatewayFailure(.usage, "--address AA:BB:CC:DD:EE:FF is required for a meter described by flags")
            }
            normalized = "00:00:00:00:00:00"
        }
        let passkey: UInt32
        do {
            passkey = try pin.map { (p) throws(MeterFileError) in try MeterFile.parsePIN(p, field: "--pin") } ?? profile?.passkey ?? 123456
        } catch { throw usage(error) }
        var unit = profile?.records.last?.unit ?? ConcentrationUnit.kilogramPerLitre
        if let unitText { do { unit = try MeterFile.parseUnit(unitText, field: "--unit") } catch { throw usage(error) } }
        var startTime: GlucoseDateTime?
        if let start { do { startTime = try MeterFile.parseTime(start, field: "--start") } catch { throw usage(error) } }
        var records: [MeterRecord]
        let seriesGiven = count != nil || first != nil || start != nil || interval != nil || offset != nil
            || unitText != nil || withContext
        if let profile, !seriesGiven {
            records = profile.records
        } else {
            records = MeterSeries.records(count: count ?? 10, firstSequence: UInt16(first ?? 1), start: startTime,
                                          intervalMinutes: interval ?? 240, timeOffset: offset.map { Int16($0) },
                                          unit: unit, withContext: withContext)
            if let profile, profile.quirks.numbering == .newestFirst, first == nil {
                records = MeterProfile.renumbered(records, .newestFirst)
            }
        }
        func sequences(_ list: [String], _ flag: String) throws -> [UInt16] {
            try list.map { text in
                guard let v = UInt16(text) else { throw GatewayFailure(.usage, "\(flag) needs a sequence number, got '\(text)'") }
                return v
            }
        }
        for s in try sequences(controls, "--control-at") {
            if let i = records.firstIndex(where: { $0.sequenceNumber == s }) { records[i].type = 10; records[i].sampleLocation = 4 }
        }
        for s in try sequences(highs, "--high-at") {
            if let i = records.firstIndex(where: { $0.sequenceNumber == s }) { records[i].result = .high }
        }
        for s in try sequences(lows, "--low-at") {
            if let i = records.firstIndex(where: { $0.sequenceNumber == s }) { records[i].result = .low }
        }
        var faults = profile?.faults ?? MeterFaults()
        if let dropAfter { faults.dropLinkAfter = dropAfter }
        if let dropTimes { faults.dropLinkTimes = dropTimes }
        if let failAfter { faults.failProcedureAfter = failAfter }
        if let delayMs { faults.notificationDelay = Double(delayMs) / 1000 }
        if contextBefore { faults.contextOrder = .before }
        if zeroCount { faults.zeroCountAsNoRecords = true }
        for item in malformed {
            let parts = item.split(separator: ":", maxSplits: 1).map(String.init)
            guard let first = parts.first, let seq = UInt16(first) else {
                throw GatewayFailure(.usage, "--malformed-at needs SEQ[:KIND], got '\(item)'")
            }
            let kindText = parts.count > 1 ? parts[1] : "truncated"
            guard let kind = MeterFaults.MalformedKind(rawValue: kindText) else {
                throw GatewayFailure(.usage, "--malformed-at kind must be truncated, invalid-time, stray-context or garbage-context")
            }
            faults.malformed[seq] = kind
        }
        var advertising = profile?.advertising ?? AdvertisingPlan.always
        if let advertise {
            switch advertise {
            case "always": advertising = .always
            case "off": advertising = .off
            default:
                let parts = advertise.split(separator: "/").map { Double($0) }
                guard parts.count == 2, let on = parts[0], let off = parts[1], on > 0, off >= 0 else {
                    throw GatewayFailure(.usage, "--advertise must be always, off or ON/OFF seconds, got '\(advertise)'")
                }
                advertising = .bursts(onSeconds: on, offSeconds: off)
            }
        }
        let clock: MeterClock
        let clockFlags = clockKind != nil || clockSkew != nil || clockReadOnly || clockOffset != nil
        if let profile, !clockFlags {
            clock = profile.clock
        } else {
            // With a profile, --clock-skew, --clock-utc-offset or --clock-read-only alone change the profile's clock.
            let kind = clockKind ?? profile?.clock.kind.rawValue
            do { clock = try MeterFile.clock(kind: kind, skew: clockSkew, readOnly: clockReadOnly, utcOffset: clockOffset) }
            catch { throw usage(error) }
        }
        var described = profile ?? MeterDescription(address: normalized, name: defaultName(normalized), passkey: passkey)
        described.address = normalized
        if let name { described.name = name } else if profile == nil { described.name = defaultName(normalized) }
        described.passkey = passkey
        if noBonding { described.requiresBonding = false }
        if noContextChar { described.hasContextCharacteristic = false }
        described.records = records.sorted { $0.sequenceNumber < $1.sequenceNumber }
        if let newEvery { described.newRecords = NewRecordPlan(intervalSeconds: newEvery) }
        described.advertising = advertising
        described.faults = faults
        described.clock = clock
        return FlaggedMeter(meter: described, addressGiven: address != nil, nameGiven: name != nil || profile != nil,
                            passkeyGiven: pin != nil)
    }
}
